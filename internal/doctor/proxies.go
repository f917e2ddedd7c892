package doctor

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// proxies checks the sandbox's proxies as the fleet recorded them (every
// replica writes its proxies' statuses to the store): each one connected
// or seen within apiclient.FleetGrace is checked for its connection, its
// build against the gateway's, and the version it enforces.
func (r *run) proxies(statuses []*portcullisv1.ProxyStatus, gatewayBuild string) {
	sb := r.cfg.Sandbox
	list := "portcullis proxies list --sandbox " + sb
	now := r.cfg.Now()
	var recent []*portcullisv1.ProxyStatus
	for _, s := range statuses {
		if s.GetConnected() || now.Sub(s.GetLastSeenAt().AsTime()) <= apiclient.FleetGrace {
			recent = append(recent, s)
		}
	}
	if len(recent) == 0 {
		detail := "no proxy of sandbox " + sb + " has ever connected"
		if len(statuses) > 0 {
			detail = fmt.Sprintf("no proxy of sandbox %s is connected (%d seen before, the last %s ago)", sb, len(statuses), ago(now, lastSeen(statuses)))
		}
		r.fail("proxies", detail, "start one: portcullis proxy --sandbox "+sb+" --token-file "+sb+".token --gateway "+r.cfg.Gateway+"; see "+list)
		return
	}
	r.ok("proxies", fmt.Sprintf("%d %s of sandbox %s known to the fleet", len(recent), plural(len(recent), "proxy", "proxies"), sb))
	for _, p := range recent {
		name := "proxy " + p.GetProxyId()
		if p.GetConnected() {
			r.ok(name, fmt.Sprintf("connected to %s since %s ago", p.GetReplica(), ago(now, p.GetConnectedAt().AsTime())))
		} else {
			r.fail(name, fmt.Sprintf("not connected: last seen %s ago, on %s", ago(now, p.GetLastSeenAt().AsTime()), p.GetReplica()),
				"check the proxy's host and log (it says why it left); "+list)
		}
		if why := Skew(gatewayBuild, p.GetBuild()); why != "" {
			r.fail(name+" build", fmt.Sprintf("proxy %s, gateway %s: %s", p.GetBuild(), gatewayBuild, why), "upgrade the proxy to the gateway's version ("+gatewayBuild+")")
		} else {
			r.ok(name+" build", fmt.Sprintf("proxy %s, gateway %s", p.GetBuild(), gatewayBuild))
		}
		r.policy(name+" policy", p, list)
	}
}

// policy checks that p enforces its sandbox's current version.
func (r *run) policy(name string, p *portcullisv1.ProxyStatus, list string) {
	now := r.cfg.Now()
	ack := "never ACKed"
	if t := p.GetLastAckAt(); t != nil {
		ack = "last ACK " + ago(now, t.AsTime()) + " ago"
	}
	if p.GetAppliedVersion() == p.GetCurrentVersion() {
		r.ok(name, fmt.Sprintf("enforces the current version %d (%s)", p.GetCurrentVersion(), ack))
		return
	}
	detail := fmt.Sprintf("enforces version %d, the current is %d (%s)", p.GetAppliedVersion(), p.GetCurrentVersion(), ack)
	fix := "wait for the proxy to reconnect, or restart it; " + list
	if v := p.GetLastNackVersion(); v > p.GetAppliedVersion() {
		detail += fmt.Sprintf("; it refused version %d: %s", v, p.GetLastNackError())
		fix = "fix what the refusal names (an older proxy: upgrade it), then commit again: portcullis policy set " + r.cfg.Sandbox + " -f FILE --wait"
	}
	r.fail(name, detail, fix)
}

// lastSeen is the latest LastSeenAt of statuses.
func lastSeen(statuses []*portcullisv1.ProxyStatus) time.Time {
	var last time.Time
	for _, s := range statuses {
		if t := s.GetLastSeenAt().AsTime(); t.After(last) {
			last = t
		}
	}
	return last
}

// ago is now-t in whole seconds (never negative).
func ago(now, t time.Time) string {
	return max(now.Sub(t), 0).Round(time.Second).String()
}

// Skew says why builds a and b are too far apart to work together ("" when
// they are not): another major version, or minor versions more than one
// apart (the skew policy: a proxy or CLI one minor version from the
// gateway). A development build ("devel") or an unversioned one is not
// compared, nor are pseudo-versions of v0.0.0 (builds of commits between
// releases).
func Skew(a, b string) string {
	am, an, aok := majorMinor(a)
	bm, bn, bok := majorMinor(b)
	switch {
	case !aok || !bok:
		return ""
	case am != bm:
		return fmt.Sprintf("major versions differ (v%d, v%d)", am, bm)
	case an-bn > 1 || bn-an > 1:
		return fmt.Sprintf("minor versions %d apart (at most 1 is supported)", max(an-bn, bn-an))
	}
	return ""
}

// majorMinor reads "v1.4.2 (…)" or "v1.4.0-rc.1" as 1, 4; ok is false for
// "devel", an empty build and v0.0.0 pseudo-versions.
func majorMinor(build string) (major, minor int, ok bool) {
	v, _, _ := strings.Cut(build, " ")
	v, found := strings.CutPrefix(v, "v")
	if !found || strings.HasPrefix(v, "0.0.0-") {
		return 0, 0, false
	}
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}
