package gateway

import (
	"time"

	"github.com/portcullis-dev/portcullis/gateway/sentryintake"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
)

// The Sentry intake's hooks: metrics, and OCSF events when Config.OCSF is
// set. Each OCSF event is built on the emitter's goroutine, never on the
// request: the intake pays for a closure and a channel send (or a counted
// drop) per event it hears of.

// sentryActed counts what the intake did about a remediating event and
// emits it as a Remediation Activity.
func (s *Server) sentryActed(a store.SentryAction) {
	s.metrics.sentryActions.WithLabelValues(a.Status).Inc()
	if s.cfg.OCSF != nil {
		s.cfg.OCSF(func() ocsf.Event { return ocsf.FromSentryAction(a, sentryintake.Actor(a.Source), ocsf.Gateway) })
	}
}

// sentryDecided emits an operator's answer to a held action.
func (s *Server) sentryDecided(a store.SentryAction) {
	if s.cfg.OCSF != nil {
		s.cfg.OCSF(func() ocsf.Event { return ocsf.FromSentryAction(a, a.DecidedBy, ocsf.Gateway) })
	}
}

// sentryFound counts a derived finding and emits it as a Detection
// Finding.
func (s *Server) sentryFound(kind string, ev store.SentryEvent, tool string) {
	s.metrics.sentryFound.WithLabelValues(kind).Inc()
	if s.cfg.OCSF != nil {
		found := s.cfg.Now()
		s.cfg.OCSF(func() ocsf.Event { return ocsf.FromSentryFinding(kind, ev, tool, found, ocsf.Gateway) })
	}
}

// sentryNotable returns the hook that emits the stored events a security
// team should see as Detection Findings; nil without OCSF, so that the
// bulk lane does not even look for them.
func (s *Server) sentryNotable() func([]sentry.Event, time.Time) {
	if s.cfg.OCSF == nil {
		return nil
	}
	return func(evs []sentry.Event, received time.Time) {
		for _, ev := range evs {
			s.cfg.OCSF(func() ocsf.Event { return ocsf.FromSentryEvent(ev, received, ocsf.Gateway) })
		}
	}
}
