package gateway

import (
	"time"

	"github.com/portcullis-dev/portcullis/gateway/sentryintake"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/gatewayocsf"
)

// auditFollowInterval is how often the audit log is read for OCSF
// (lifecycle.FollowAudit): its entries are every replica's.
const auditFollowInterval = time.Second

// ocsfEvents is the stream's OCSF subscriber (with Config.OCSF): the audit
// log's entries as Entity Management events and the proposals they are
// about as Detection Findings, held calls and their ends (Detection
// Findings, their arguments never: only the digest), the Sentry events worth a security team's
// attention, the findings derived from them and what the gateway did
// about each quarantine (docs/ocsf.md). Each OCSF event is built on the
// emitter's goroutine, never the publisher's: the publisher pays for a
// closure and a channel send (or a counted drop) per event it tells of.
func (s *Server) ocsfEvents(e events.Event) {
	emit := s.cfg.OCSF
	switch e := e.(type) {
	case events.AuditAppended:
		emit(func() ocsf.Event { return gatewayocsf.FromAudit(e.Entry, ocsf.Gateway) })
	case events.ProposalAudited:
		emit(func() ocsf.Event { return gatewayocsf.FromProposal(e.Proposal, e.Findings, ocsf.Gateway) })
	case events.CallHeld:
		emit(func() ocsf.Event { return gatewayocsf.FromHeldCall(e.Call, ocsf.Gateway) })
	case events.CallDecided:
		emit(func() ocsf.Event { return gatewayocsf.FromHeldCall(e.Call, ocsf.Gateway) })
	case events.SentryActed:
		emit(func() ocsf.Event {
			return gatewayocsf.FromSentryAction(e.Action, sentryintake.Actor(e.Action.Source), ocsf.Gateway)
		})
	case events.SentryDecided:
		emit(func() ocsf.Event { return gatewayocsf.FromSentryAction(e.Action, e.Action.DecidedBy, ocsf.Gateway) })
	case events.SentryFinding:
		found := s.cfg.Now()
		emit(func() ocsf.Event { return gatewayocsf.FromSentryFinding(e.Kind, e.Event, e.Tool, found, ocsf.Gateway) })
	case events.SentryNotable:
		for _, ev := range e.Events {
			emit(func() ocsf.Event { return gatewayocsf.FromSentryEvent(ev, e.Received, ocsf.Gateway) })
		}
	}
}
