package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Endpoints and destinations, for every step of Decide (decide.go): the
// endpoints of a policy in a fixed order, which of them a request is
// addressed to, and which callers an entry admits.

// endpointRef is one endpoint with the entry it belongs to.
type endpointRef struct {
	key   string // network_policies key
	entry *NetworkPolicy
	index int
	ep    *Endpoint
}

// EachEndpoint calls f for every endpoint of p (nil for none) with the
// key of its entry and its index there, skipping nil entries and
// endpoints, in no particular order: callers that show an order sort what
// they keep. Decide and the prover both walk a policy with it, so they
// cannot disagree on which endpoints it has.
func EachEndpoint(p *Policy, f func(key string, entry *NetworkPolicy, index int, ep *Endpoint)) {
	if p == nil {
		return
	}
	for k, entry := range p.NetworkPolicies {
		if entry == nil {
			continue
		}
		for i, ep := range entry.Endpoints {
			if ep != nil {
				f(k, entry, i, ep)
			}
		}
	}
}

// endpointsOf lists every endpoint of p, entries in key order and
// endpoints in document order, so decisions are deterministic.
func endpointsOf(p *Policy) []endpointRef {
	var out []endpointRef
	EachEndpoint(p, func(key string, entry *NetworkPolicy, i int, ep *Endpoint) {
		out = append(out, endpointRef{key: key, entry: entry, index: i, ep: ep})
	})
	slices.SortFunc(out, func(a, b endpointRef) int {
		return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.index, b.index))
	})
	return out
}

// name describes an endpoint in reasons: "network_policies.orders
// (orders.example.com:443/mcp)".
func (e endpointRef) name() string {
	return fmt.Sprintf("network_policies.%s (%s)", e.key, EndpointLabel(e.ep))
}

// EndpointLabel is host:ports plus the path scope; "*" for a hostless
// endpoint.
func EndpointLabel(ep *Endpoint) string {
	host := ep.Host
	if host == "" {
		host = "*"
	}
	ports := make([]string, 0, len(EndpointPorts(ep)))
	for _, p := range EndpointPorts(ep) {
		ports = append(ports, strconv.Itoa(p))
	}
	return host + ":" + strings.Join(ports, ",") + ep.Path
}

// EndpointPorts returns the ports an endpoint covers: `ports` when given,
// else `port` (OpenShell: ports wins).
func EndpointPorts(ep *Endpoint) []int {
	if len(ep.Ports) > 0 {
		return ep.Ports
	}
	if ep.Port != 0 {
		return []int{ep.Port}
	}
	return nil
}

// destinationAddr is the address the destination checks see: the resolved
// Addr, else an IP-literal Host; ok is false when neither is known.
func destinationAddr(r Request) (netip.Addr, bool) {
	if r.Addr.IsValid() {
		return r.Addr.Unmap().WithZone(""), true
	}
	return ParseHostIP(r.Host)
}

// destinationMatches reports whether r is addressed to ep: its host
// (MatchHost; a hostless endpoint matches any host whose address its
// allowed_ips cover), one of its ports, and its path scope. A path scope
// is matched on the canonical path; a request without a path (no L7 view)
// does not match a path-scoped endpoint here — the deny phase treats that
// case as unknown and fails closed.
func destinationMatches(e endpointRef, r Request) bool {
	if !hostMatches(e.ep, r) || !slices.Contains(EndpointPorts(e.ep), r.Port) {
		return false
	}
	if e.ep.Path == "" {
		return true
	}
	if r.HTTPMethod == "" {
		return false
	}
	path, err := CanonicalPath(r.Path, e.ep.AllowEncodedSlash)
	if err != nil {
		return false
	}
	if e.ep.Protocol == ProtocolMCP && r.MCP == nil {
		if _, ok := e.ep.MCP.OAuthPath(strings.ToUpper(r.HTTPMethod), path); ok {
			return true // the endpoint's OAuth paths lie beside its MCP path
		}
	}
	return MatchGlob(e.ep.Path, path)
}

func hostMatches(ep *Endpoint, r Request) bool {
	if ep.Host == "" {
		addr, ok := destinationAddr(r)
		return ok && len(ep.AllowedIPs) > 0 && addrInAllowedIPs(ep.AllowedIPs, addr)
	}
	return MatchHost(ep.Host, r.Host)
}

// addrInAllowedIPs reports whether an allowed_ips list (CIDRs or single
// addresses; invalid entries cover nothing) contains addr or the IPv4
// address a NAT64 or IPv4-compatible addr reaches (EmbeddedIPv4: the
// translations only — 6to4, Teredo and SIIT forms are judged as their IPv4
// address when denying, never when allowing).
func addrInAllowedIPs(list []string, addr netip.Addr) bool {
	for _, s := range list {
		prefix, ok := ParseAllowedIP(s)
		if !ok {
			continue
		}
		if prefix.Contains(addr) {
			return true
		}
		if v4, ok := EmbeddedIPv4(addr); ok && prefix.Contains(v4) {
			return true
		}
	}
	return false
}

// binaryMatches reports whether the caller may use entry: an empty
// binaries list means any binary (even an unknown one); otherwise the
// binary must be known, a clean absolute path, and it or one of its
// ancestors must match one of the path globs (OpenShell's binary_allowed:
// the same exact-or-glob match for the executable and each ancestor). A
// path with dot segments or doubled slashes is taken as unknown:
// `/opt/tools/../../tmp/x` must not pass as a match of `/opt/tools/**`.
func binaryMatches(entry *NetworkPolicy, r Request) bool {
	if len(entry.Binaries) == 0 {
		return true
	}
	if !cleanAbsolute(r.Binary) {
		return false
	}
	for _, b := range entry.Binaries {
		if MatchGlob(b.Path, r.Binary) {
			return true
		}
		for _, a := range r.Ancestors {
			if cleanAbsolute(a) && MatchGlob(b.Path, a) {
				return true
			}
		}
	}
	return false
}

func cleanAbsolute(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p
}
