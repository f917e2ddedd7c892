package gatewayclient

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A token the gateway refuses (Unauthenticated: unknown, revoked, expired
// or unreadable; PermissionDenied: not a sandbox token, or another
// sandbox's) is not a network fault that retrying mends: until an
// operator gives the proxy the right token it denies everything (or keeps
// the version it holds, never receiving a newer one). So the
// Subscriber says so once, at Error, naming the fix, instead of a Warn per
// reconnection; and with ExitOnAuthFailure it gives up (Run returns
// ErrTokenRefused) once the token has been refused on every attempt for
// AuthFailureGrace, so that a supervisor or an operator sees a proxy that
// exited rather than one that looks healthy and denies.

// ErrTokenRefused is wrapped by Run's error when the gateway kept refusing
// the proxy's token for AuthFailureGrace and ExitOnAuthFailure is set.
var ErrTokenRefused = errors.New("the gateway refuses this proxy's token")

// defaultAuthFailureGrace is AuthFailureGrace's default: long enough for a
// token file rewritten after a rotation to be read again, short enough
// that a wrong token stops the proxy while someone is watching it start.
const defaultAuthFailureGrace = 10 * time.Second

// minRefusals is the least number of refused attempts before giving up,
// however long the first took.
const minRefusals = 3

// refusals is the current run of refused attempts: cleared by a stream
// that opens.
type refusals struct {
	mu    sync.Mutex
	since time.Time // the first refusal of the run; zero when none
	count int
}

// clear forgets the run: the gateway accepted the token.
func (r *refusals) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.since, r.count = time.Time{}, 0
}

// tokenRefused reports whether err is the gateway refusing the token.
func tokenRefused(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}

// refused notes a stream that ended with err. It returns false when err
// is not a refusal of the token. Otherwise the first refusal of a run is
// logged at Error (the later ones at Debug), and giveUp is an error
// wrapping ErrTokenRefused once ExitOnAuthFailure is set and the token has
// been refused minRefusals times over at least AuthFailureGrace.
func (s *Subscriber) refused(err error, gateway string) (refused bool, giveUp error) {
	if !tokenRefused(err) {
		// Any other failure ends the run: "refused on every attempt"
		// counts only refusals back to back.
		s.refusals.clear()
		return false, nil
	}
	now := time.Now()
	s.mu.Lock()
	state := "the proxy denies every request"
	if v := s.applied.GetVersion(); v > 0 {
		state = fmt.Sprintf("the proxy enforces the version it holds, %d, and receives no newer one", v)
	}
	s.mu.Unlock()
	r := &s.refusals
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count == 0 {
		r.since = now
		then := "it keeps retrying until the token is accepted (--exit-on-auth-failure=false)"
		if s.cfg.ExitOnAuthFailure {
			then = fmt.Sprintf("it exits if the token is still refused after %s (--exit-on-auth-failure)", s.cfg.AuthFailureGrace)
		}
		s.log.Error("the gateway refused this proxy's token: "+state+"; "+then+
			". Give --token-file a token of sandbox "+s.cfg.Sandbox+" (a new one: portcullis sandbox rotate-token "+s.cfg.Sandbox+")",
			"gateway", gateway, "err", status.Convert(err).Message())
	} else {
		s.log.Debug("the gateway refused this proxy's token again", "gateway", gateway, "refusals", r.count+1)
	}
	r.count++
	if s.cfg.ExitOnAuthFailure && r.count >= minRefusals && now.Sub(r.since) >= s.cfg.AuthFailureGrace {
		return true, fmt.Errorf("%w (sandbox %s): refused %d times over %s, last: %s; give --token-file a token of sandbox %s (portcullis sandbox rotate-token %s makes a new one)",
			ErrTokenRefused, s.cfg.Sandbox, r.count, now.Sub(r.since).Round(time.Second), status.Convert(err).Message(), s.cfg.Sandbox, s.cfg.Sandbox)
	}
	return true, nil
}
