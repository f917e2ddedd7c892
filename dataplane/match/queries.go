package match

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// ---------------------------------------------------------------------------
// What the proxy asks before it reads a request.

// Inspect reports whether requests to host:port need the proxy to see them
// at L7 (terminate TLS, read the HTTP request): true when an endpoint whose
// host and port match, whatever its binaries, has a protocol other than L4
// and tcp, or has deny rules. A hostless (allowed_ips) endpoint on the port counts
// when host is a name, since its address is not known here. When false,
// Decide on a request without HTTPMethod is the whole answer.
func (m *Matcher) Inspect(host string, port int) bool {
	if m == nil {
		return false
	}
	r := policy.Request{Host: host, Port: port}
	h := m.view(host)
	var buf [16]int32
	for _, n := range m.destinations(&r, &h, buf[:0]) {
		if m.eps[n].needsL7() {
			return true
		}
	}
	if !h.isLiteral {
		for _, n := range m.hostless {
			if e := &m.eps[n]; slices.Contains(e.ports, port) && e.needsL7() {
				return true
			}
		}
	}
	return false
}

// WantsAddress reports whether the decision on r could depend on where its
// host resolves: some endpoint whose host pattern and port match r's name
// and port, and whose binaries match r.Binary, or a hostless (allowed_ips
// only) endpoint on r.Port whose binaries match, since such an endpoint
// matches by address. When false, Decide without an address is already the
// answer (a denial), and the proxy asks no DNS server about the name: a
// denied name leaks nothing through DNS.
func (m *Matcher) WantsAddress(r *policy.Request) bool {
	if m == nil {
		return false
	}
	name := *r
	name.Addr = netip.Addr{}
	h := m.view(name.Host)
	var buf [16]int32
	for _, n := range m.destinations(&name, &h, buf[:0]) {
		if m.eps[n].binaryMatches(r.Binary, r.Ancestors) {
			return true
		}
	}
	for _, n := range m.hostless {
		if e := &m.eps[n]; slices.Contains(e.ports, r.Port) && e.binaryMatches(r.Binary, r.Ancestors) {
			return true
		}
	}
	return false
}

// WantsName reports whether some request to host, on any port and from
// any binary, could be one WantsAddress wants: an endpoint whose host
// pattern matches host, or any hostless (allowed_ips only) endpoint, which
// matches whatever name resolves into its ranges. It is WantsAddress with
// the port and the binary left open, the question a DNS server in front
// of the sandbox asks before it resolves a name (dataplane/sandboxdns):
// when false, no request naming host can be allowed, and the name is
// answered NXDOMAIN without asking anyone.
func (m *Matcher) WantsName(host string) bool {
	if m == nil {
		return false
	}
	if len(m.hostless) > 0 {
		return true
	}
	h := m.view(host)
	if len(h.exact) > 0 {
		return true
	}
	if !h.normIsIP {
		for _, n := range m.wild {
			if m.eps[n].host.matchWild(h.norm) {
				return true
			}
		}
	}
	return false
}

// InspectedOn lists where the endpoints inspected at L7 on port live: the
// IP literals and the exact host names of those endpoints (wildcard and
// hostless ones cannot be listed). The proxy refuses an L4 tunnel to any of
// these addresses, which would reach the inspected server uninspected.
func (m *Matcher) InspectedOn(port int) (addrs []netip.Addr, names []string) {
	if m == nil {
		return nil, nil
	}
	for i := range m.eps {
		e := &m.eps[i]
		if !e.needsL7() || !slices.Contains(e.ports, port) {
			continue
		}
		switch e.host.kind {
		case hostIP:
			if !slices.Contains(addrs, e.host.ip) {
				addrs = append(addrs, e.host.ip)
			}
		case hostName:
			if !slices.Contains(names, e.host.name) {
				names = append(names, e.host.name)
			}
		}
	}
	return addrs, names
}

// needsL7: an endpoint is read at L7 unless it is plain L4 or tcp (both
// allow a connection as a whole) without deny rules.
func (e *endpoint) needsL7() bool {
	return e.protocol != policy.ProtocolL4 && e.protocol != policy.ProtocolTCP || e.hasDeny
}

// MCPLimits reports whether an mcp endpoint matches host:port and path —
// its path scope read widely, as its deny rules read it, so the proxy
// parses every message a deny rule may judge — and its limits. Validation
// guarantees mcp endpoints sharing a host:port agree on them. A request
// to an OAuth path the endpoint declares (mcp.oauth) is plain HTTP: not an
// MCP request.
func (m *Matcher) MCPLimits(host string, port int, method, reqPath string) (limits MCPLimits, ok bool) {
	if m == nil {
		return MCPLimits{}, false
	}
	r := policy.Request{Host: host, Port: port, HTTPMethod: "POST", Path: reqPath}
	h := m.view(host)
	var buf [16]int32
	var paths canonicalPaths
	for _, n := range m.destinations(&r, &h, buf[:0]) {
		e := &m.eps[n]
		if e.protocol != policy.ProtocolMCP {
			continue
		}
		p, err := paths.get(reqPath, e.encodedOK)
		if err == nil {
			if _, oauth := e.mcp.OAuthPath(strings.ToUpper(method), p); oauth {
				return MCPLimits{}, false
			}
		}
		if e.scope != nil && (err != nil || !e.scope.matchDenyPath(p)) {
			continue
		}
		return MCPLimits{Body: e.maxBody, Response: e.maxResponse}, true
	}
	return MCPLimits{}, false
}

// MCPLimits are an MCP endpoint's bounds on what a client sends:
// mcp.max_body_bytes, and mcp.max_response_bytes for its answers to the
// server's requests.
type MCPLimits struct{ Body, Response int }
