package apiclient

import (
	"context"
	"slices"
	"time"

	"connectrpc.com/connect/v2"
	"google.golang.org/protobuf/proto"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// The fleet's proxies in a wait: WatchEnforcement counts the proxies
// connected to the replica answering it, but a sandbox's proxies may
// stream from another replica, or be failing over from one that just
// died. Every replica writes its proxies' statuses to the store they
// share (ListProxies), so AwaitEnforcement then waits, polling those, for
// the proxies the watch did not count but the fleet knows of.

// FleetGrace is how recently a proxy the store no longer says is
// connected must have been seen to be waited for: a proxy whose replica
// went away reconnects within it (its reconnection waits are at most
// 30 s by default).
const FleetGrace = time.Minute

// fleetPoll is how often the stored statuses are read while a proxy of
// the fleet is pending (replicas write an ACK within about a second).
const fleetPoll = 250 * time.Millisecond

// awaitFleet adds to live (where version stands with this replica's
// proxies) the sandbox's other proxies the fleet knows, read from the
// store until none of them is pending, one NACKed, or ctx ends (timedOut).
func (c *Client) awaitFleet(ctx context.Context, sandbox string, version uint32, live *portcullisv1.Enforcement) (last *portcullisv1.Enforcement, timedOut bool, err error) {
	last = live
	for {
		res, err := c.Proxy.ListProxies(ctx, &portcullisv1.ListProxiesRequest{Sandbox: sandbox})
		switch code := connect.CodeOf(err); {
		case err == nil:
		case ctx.Err() != nil:
			return last, true, nil
		case code != connect.CodeUnavailable && code != connect.CodeDeadlineExceeded:
			return last, false, err
		default:
			// A replica going away (the case this wait is for) is not
			// an answer: asked again at the next poll, until ctx ends.
			if !sleep(ctx, fleetPoll) {
				return last, true, nil
			}
			continue
		}
		last = WithFleet(live, res.GetProxies(), version, time.Now())
		if last.GetNacked() > 0 || last.GetPending() == 0 {
			return last, false, nil
		}
		if !sleep(ctx, fleetPoll) {
			return last, true, nil
		}
	}
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// WithFleet returns live (nil: none) with the proxies of statuses it does
// not count added: each connected to some replica, or seen within
// FleetGrace of now, as acked (it applied version or a later one),
// nacked (its last refusal is of version) or pending, with the counts
// updated.
func WithFleet(live *portcullisv1.Enforcement, statuses []*portcullisv1.ProxyStatus, version uint32, now time.Time) *portcullisv1.Enforcement {
	e := &portcullisv1.Enforcement{Version: version}
	if live != nil {
		e = proto.CloneOf(live)
	}
	for _, s := range statuses {
		counted := slices.ContainsFunc(e.Proxies, func(p *portcullisv1.ProxyEnforcement) bool { return p.GetProxyId() == s.GetProxyId() })
		if counted || (!s.GetConnected() && now.Sub(s.GetLastSeenAt().AsTime()) > FleetGrace) {
			continue
		}
		e.Sandbox = s.GetSandbox()
		p := &portcullisv1.ProxyEnforcement{ProxyId: s.GetProxyId(), AppliedVersion: s.GetAppliedVersion(), State: "pending"}
		switch {
		case s.GetAppliedVersion() >= version:
			p.State = "acked"
			e.Acked++
		case s.GetLastNackVersion() == version:
			p.State, p.Error = "nacked", s.GetLastNackError()
			e.Nacked++
		default:
			e.Pending++
		}
		e.Proxies = append(e.Proxies, p)
		e.Total++
	}
	return e
}
