package dataplane

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/tunnelstart"
	"github.com/portcullis-dev/portcullis/policy"
)

// dest is a destination as requested: host name (or IP literal) and port.
type dest struct {
	host string
	port int
	// ip is the host read as an IP literal, in any spelling (parseTarget);
	// invalid for a host name.
	ip netip.Addr
	// orig is, for a transparent connection, its original destination's
	// address (transparent.go): the address dialled, never resolved, and
	// one an HTTP Host may name instead of host. Invalid for a CONNECT.
	orig netip.Addr
}

func (t dest) authority() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// namedBy reports whether an HTTP authority (a Host header, a request
// target's; an omitted port is defaultPort or t's) names t, or, for a
// transparent connection, the address it was sent to.
func (t dest) namedBy(authority, defaultPort string) bool {
	port := strconv.Itoa(t.port)
	if sameAuthority(authority, t.authority(), defaultPort) || sameAuthority(authority, t.host, port) {
		return true
	}
	a, err := parseTarget(authority, port)
	return t.orig.IsValid() && err == nil && a.ip == t.orig && a.port == t.port
}

// want is what a tunnel's start must name: t.
func (t dest) want() tunnelstart.Want {
	w := tunnelstart.Want{Host: t.host, Authority: t.authority(), Names: func(a string) bool { return t.namedBy(a, "80") }, Of: "CONNECT"}
	if t.orig.IsValid() {
		w.Of = "transparent connection's"
	}
	return w
}

func parseTarget(authority, defaultPort string) (dest, error) {
	host, port, err := net.SplitHostPort(authority)
	if err != nil {
		host, port = authority, defaultPort
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || host == "" {
		return dest{}, fmt.Errorf("invalid destination %q", authority)
	}
	// Before policy and before any DNS query: a host must be an IP
	// literal or a host name. '*', NUL, '%', spaces and other bytes no
	// DNS name holds would otherwise meet the policy's wildcards (a
	// CONNECT to the literal host *.corp.example.com).
	ip, literal := policy.ParseHostIP(host)
	if !literal && !policy.ValidHostName(host) {
		return dest{}, fmt.Errorf("invalid destination host %q: not a host name or an IP address", host)
	}
	return dest{host: strings.ToLower(strings.TrimSuffix(host, ".")), port: n, ip: ip}, nil
}

// sameAuthority compares two authorities, treating an omitted port as the
// scheme's default.
func sameAuthority(a, b, defaultPort string) bool {
	ta, errA := parseTarget(a, defaultPort)
	tb, errB := parseTarget(b, defaultPort)
	return errA == nil && errB == nil && ta == tb
}

// literalDenied checks what needs no DNS: a control-plane port, and an IP
// literal host (in any spelling, read by parseTarget), which is the
// address dialled. ip is that address when the host is an allowed IP
// literal.
func literalDenied(t dest, devAllowLoopback bool) (ip netip.Addr, reason string, denied bool) {
	if policy.DeniedPort(t.port) {
		return netip.Addr{}, fmt.Sprintf("port %d is a control-plane port, always denied", t.port), true
	}
	if t.ip.IsValid() {
		if reason, denied := policy.AlwaysDenied(t.ip, devAllowLoopback); denied {
			return netip.Addr{}, fmt.Sprintf("%s resolves to %s, a %s, always denied", t.host, t.ip, reason), true
		}
		return t.ip, "", false
	}
	return netip.Addr{}, "", false
}

// resolve finds the address to dial for t: an IP literal as written (in
// any spelling), else the first resolved address the policy does not
// refuse at the address level; for a transparent connection (t.orig) its
// original destination. The proxy dials exactly this address; it never
// resolves again between check and dial.
//
// A name is decided before it is resolved: unless some endpoint could
// match it (Matcher.WantsAddress: an endpoint whose host, port and
// binaries match, or a hostless allowed_ips endpoint on the port), it is
// denied on the name alone and no DNS query is sent — otherwise a denied
// request would still carry its host name (and whatever an agent encodes
// in it) to the DNS servers. On failure the returned address is invalid
// and the decision says why.
func (p *Proxy) resolve(ctx context.Context, cur *loaded, t dest, req *policy.Request) (netip.Addr, policy.Decision) {
	deny := func(reason string) (netip.Addr, policy.Decision) {
		return netip.Addr{}, policy.Decision{Reason: reason}
	}
	ip, reason, denied := literalDenied(t, p.cfg.DevAllowLoopback)
	switch {
	case denied:
		return deny(reason)
	case ip.IsValid():
		return ip, policy.Decision{}
	case t.orig.IsValid():
		// A transparent connection's name: it goes where it was sent,
		// the address the proxy's DNS answered the name with.
		if reason, denied := policy.AlwaysDenied(t.orig, p.cfg.DevAllowLoopback); denied {
			return deny(fmt.Sprintf("%s resolves to %s, a %s, always denied", t.host, t.orig, reason))
		}
		return t.orig, policy.Decision{}
	}
	if !cur.matcher.WantsAddress(req) {
		if d := cur.matcher.Decide(req); !d.Allow {
			return netip.Addr{}, d
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := p.cfg.Resolve(ctx, t.host)
	if err != nil || len(addrs) == 0 {
		return deny(fmt.Sprintf("cannot resolve %s", t.host))
	}
	first := ""
	for _, a := range addrs {
		a = a.Unmap()
		if reason, denied := policy.AlwaysDenied(a, p.cfg.DevAllowLoopback); denied {
			if first == "" {
				first = fmt.Sprintf("%s resolves to %s, a %s, always denied", t.host, a, reason)
			}
			continue
		}
		return a, policy.Decision{}
	}
	return deny(first)
}

// baseRequest starts the request to t. The calling binary is looked up
// only when the policy names binaries (the lookup scans /proc).
func (p *Proxy) baseRequest(ctx context.Context, cur *loaded, t dest) policy.Request {
	req := policy.Request{
		Host:             t.host,
		Port:             t.port,
		Time:             p.now(),
		DevAllowLoopback: p.cfg.DevAllowLoopback,
	}
	if cur != nil && cur.matcher.NamesBinaries() {
		c := callerOf(ctx)
		req.Binary, req.Ancestors = c.Binary, c.Ancestors
	}
	return req
}
