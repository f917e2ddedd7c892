package distribution

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Enforcement: where a committed version stands with the proxies of its
// sandbox that stream from this replica. It is read off the proxy tracker
// (the ACKs and NACKs the streams receive), so it costs no store read;
// a proxy connected to another replica is not counted.

// State is a connected proxy's answer to a version.
type State string

const (
	// Acked: the proxy applied the version, or a later one.
	Acked State = "acked"
	// Nacked: the proxy refused the version (or a later one without
	// applying this one): it will not enforce it.
	Nacked State = "nacked"
	// Pending: the proxy has not answered yet.
	Pending State = "pending"
)

// Enforcement is where one version of a sandbox stands with the
// sandbox's proxies streaming from this replica.
type Enforcement struct {
	Sandbox string
	Version int64
	// Proxies are the connected proxies, by ID.
	Proxies []ProxyEnforcement
}

// ProxyEnforcement is one connected proxy's answer to a version.
type ProxyEnforcement struct {
	ProxyID        string
	State          State
	AppliedVersion int64
	// Error is the NACK's reason.
	Error string
	// Took is the time from the version's commit to the proxy's answer;
	// 0 when unknown (it held the version when it connected, or answered
	// a later one).
	Took time.Duration
	// AckedAt is when its ACK of this very version arrived (zero when it
	// did not ACK it here).
	AckedAt time.Time
}

// Count is how many connected proxies are in state s.
func (e Enforcement) Count(s State) int {
	n := 0
	for _, p := range e.Proxies {
		if p.State == s {
			n++
		}
	}
	return n
}

// Settled reports whether no connected proxy is pending.
func (e Enforcement) Settled() bool { return e.Count(Pending) == 0 }

// Took is the time from the version's commit to the last ACK of this
// very version (0 when no proxy ACKed it here).
func (e Enforcement) Took() time.Duration {
	var d time.Duration
	for _, p := range e.Proxies {
		if p.State == Acked {
			d = max(d, p.Took)
		}
	}
	return d
}

// LastAck is when the last ACK of this very version arrived (zero when no
// proxy ACKed it here).
func (e Enforcement) LastAck() time.Time {
	var t time.Time
	for _, p := range e.Proxies {
		if p.State == Acked && p.AckedAt.After(t) {
			t = p.AckedAt
		}
	}
	return t
}

// NackError is the answer of WaitApplied when a proxy refused the version:
// it names the proxies and their reasons.
type NackError struct{ Enforcement Enforcement }

func (e *NackError) Error() string {
	var refused []string
	for _, p := range e.Enforcement.Proxies {
		if p.State == Nacked {
			refused = append(refused, fmt.Sprintf("%s (%s)", p.ProxyID, p.Error))
		}
	}
	return fmt.Sprintf("proxies of sandbox %q refused version %d: %s", e.Enforcement.Sandbox, e.Enforcement.Version, strings.Join(refused, "; "))
}

// WatchEnforcement calls send with where version of sandbox stands, now
// and after every change (an ACK, a NACK, a proxy connecting or going),
// until no connected proxy is pending (with none connected: once, total
// 0), send fails (its error is returned), or ctx ends (ctx.Err()).
func (d *Distribution) WatchEnforcement(ctx context.Context, sandbox string, version int64, send func(Enforcement) error) error {
	var last Enforcement
	for first := true; ; first = false {
		e, changed := d.proxies.enforcement(sandbox, version)
		if first || !slices.Equal(e.Proxies, last.Proxies) {
			if err := send(e); err != nil {
				return err
			}
			last = e
		}
		if e.Settled() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// errStop ends a watch from its send function.
var errStop = errors.New("stop watching")

// WaitApplied waits until every proxy of sandbox streaming from this
// replica has applied version or a later one (or gone), and returns
// where it stands then. A NACK ends the wait at once with a *NackError;
// ctx ending ends it with an error saying how many are behind. Proxies of
// other replicas are not waited for.
func (d *Distribution) WaitApplied(ctx context.Context, sandbox string, version int64) (Enforcement, error) {
	var last Enforcement
	err := d.WatchEnforcement(ctx, sandbox, version, func(e Enforcement) error {
		last = e
		if e.Count(Nacked) > 0 {
			return errStop
		}
		return nil
	})
	switch {
	case errors.Is(err, errStop):
		return last, &NackError{Enforcement: last}
	case err != nil:
		return last, fmt.Errorf("%d of %d proxies of sandbox %q have not applied version %d: %w",
			last.Count(Pending), len(last.Proxies), sandbox, version, err)
	}
	return last, nil
}

// enforcement is where version of sandbox stands now, and a channel
// closed at the next change.
func (t *proxyTracker) enforcement(sandbox string, version int64) (Enforcement, <-chan struct{}) {
	e := Enforcement{Sandbox: sandbox, Version: version}
	t.mu.Lock()
	for k, entry := range t.live {
		if k.sandbox != sandbox {
			continue
		}
		s := entry.status
		p := ProxyEnforcement{ProxyID: k.proxyID, State: Pending, AppliedVersion: s.AppliedVersion}
		switch {
		case s.AppliedVersion >= version:
			p.State = Acked
			if s.AppliedVersion == version && s.LastAckAt != nil {
				p.Took = time.Duration(max(s.LagMillis, 0)) * time.Millisecond
				p.AckedAt = *s.LastAckAt
			}
		case s.LastNackVersion >= version:
			// Only the newest version is sent: a proxy that refused
			// this one, or a later one, will not enforce it.
			p.State, p.Error = Nacked, s.LastNackError
			if s.LastNackVersion == version {
				p.Took = entry.nackTook
			}
		}
		e.Proxies = append(e.Proxies, p)
	}
	changed := t.changed
	t.mu.Unlock()
	slices.SortFunc(e.Proxies, func(a, b ProxyEnforcement) int { return strings.Compare(a.ProxyID, b.ProxyID) })
	return e, changed
}
