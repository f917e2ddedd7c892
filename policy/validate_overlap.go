package policy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// This file holds the checks that compare endpoints across the whole document:
// OpenShell's endpoint-ambiguity rule, mcp endpoints sharing a destination,
// and uninspected aliases of inspected endpoints. Only endpoints that can meet
// (samePortPairs) are compared.

// ambiguousEndpoints applies the part of OpenShell's endpoint-ambiguity
// rule (openshell-policy ambiguity.rs) that names a real ambiguity here:
// two endpoints whose hosts and ports can name one connection, that both
// carry request metadata (an L7 protocol, allowed_ips, tls or a
// credential_binding) and whose path scopes overlap with equal
// specificity, must agree on credential_binding's provider, since which
// credential a request carries would otherwise depend on iteration order.
// The document is refused at the later endpoint's field.
//
// They may disagree on tls and allowed_ips, as OpenShell's file loader and
// its Rego evaluation accept (opa.rs l7_overlapping_policies_*): nothing
// is chosen between them here, since each endpoint is judged with its own
// allowed_ips against the resolved address, and tls: skip never turns
// inspection off (the proxy inspects every L7 endpoint). OpenShell's
// gateway loader refuses such a document; that is a documented
// divergence. (OpenShell's other request-metadata conflicts — protocol,
// enforcement, signing, body limits — are not applied here.)
func (v *validator) ambiguousEndpoints(eps []pathedEndpoint, pairs [][2]int) {
	for _, ij := range pairs {
		a, b := eps[ij[0]], eps[ij[1]]
		if !hostsOverlap(a.ep.Host, b.ep.Host) {
			continue
		}
		where := fmt.Sprintf("%s (%s) on port %d", a.path, endpointSelector(a.ep), sharedPort(a.ep, b.ep))
		if requestMetadata(a.ep) && requestMetadata(b.ep) && pathScopesOverlap(a.ep.Path, b.ep.Path) &&
			pathSpecificity(a.ep.Path) == pathSpecificity(b.ep.Path) {
			if pa, pb := bindingProvider(a.ep), bindingProvider(b.ep); pa != pb {
				v.errorf(keyPath(b.path, "credential_binding"), "provider %q differs from provider %q of %s: endpoints that can match one request must agree on credential_binding (OpenShell refuses the document too)",
					pb, pa, where)
			}
		}
	}
}

// maxPortPairs bounds the pairs of endpoints the checks across endpoints
// compare. A document of distinct exact hosts has none; a sandbox can
// still send a 4 MB document of wildcard endpoints on one port through
// ProverService.Prove, and comparing every pair of those would take
// minutes. Beyond the bound the document is refused.
const maxPortPairs = 1 << 20

// samePortPairs lists, in document order (i < j), the pairs of endpoints
// that share a port and whose hosts might name one host or one address:
// the same exact host or address (addressKey), or either host a wildcard
// or absent (hostless). Two exact hosts with different keys never meet,
// so they are never paired, and a document of many distinct hosts costs
// what its length does. ok is false when there are more than maxPortPairs
// pairs. The checks across endpoints still judge each pair exactly.
func samePortPairs(eps []pathedEndpoint) (pairs [][2]int, ok bool) {
	type bucket struct {
		exact map[string][]int // exact host → endpoints
		loose []int            // wildcard or hostless endpoints
		all   []int
	}
	byPort := map[int]*bucket{}
	for i, e := range eps {
		for _, port := range EndpointPorts(e.ep) {
			b := byPort[port]
			if b == nil {
				b = &bucket{exact: map[string][]int{}}
				byPort[port] = b
			}
			if e.ep.Host == "" || strings.Contains(e.ep.Host, "*") {
				b.loose = append(b.loose, i)
			} else {
				h := addressKey(e.ep.Host)
				b.exact[h] = append(b.exact[h], i)
			}
			b.all = append(b.all, i)
		}
	}
	seen := map[[2]int]bool{}
	add := func(i, j int) bool {
		if i == j {
			return true
		}
		if i > j {
			i, j = j, i
		}
		if !seen[[2]int{i, j}] {
			if len(pairs) == maxPortPairs {
				return false
			}
			seen[[2]int{i, j}] = true
			pairs = append(pairs, [2]int{i, j})
		}
		return true
	}
	for _, port := range slices.Sorted(maps.Keys(byPort)) {
		b := byPort[port]
		for _, same := range b.exact {
			for x, i := range same {
				for _, j := range same[x+1:] {
					if !add(i, j) {
						return nil, false
					}
				}
			}
		}
		for _, i := range b.loose {
			for _, j := range b.all {
				if !add(i, j) {
					return nil, false
				}
			}
		}
	}
	slices.SortFunc(pairs, func(p, q [2]int) int {
		if p[0] != q[0] {
			return p[0] - q[0]
		}
		return p[1] - q[1]
	})
	return pairs, true
}

// addressKey is one spelling for exact hosts that may denote one address
// (hostsMeet): an IP literal in any spelling as its address, every
// loopback name and address as one key, other names as canonicalHost.
func addressKey(h string) string {
	if IsLoopbackName(h) {
		return "loopback"
	}
	if ip, ok := ParseHostIP(h); ok {
		if ip.IsLoopback() {
			return "loopback"
		}
		return ip.String()
	}
	return canonicalHost(h)
}

func endpointSelector(ep *Endpoint) string {
	host := canonicalHost(ep.Host)
	if host == "" {
		host = "<any host>"
	}
	return host + ep.Path
}

// requestMetadata is OpenShell's endpoint_contributes_request_pipeline_metadata.
func requestMetadata(ep *Endpoint) bool {
	return isL7(ep.Protocol) || len(ep.AllowedIPs) > 0 || ep.TLS != "" || ep.CredentialBinding != nil
}

func bindingProvider(ep *Endpoint) string {
	if ep.CredentialBinding == nil {
		return ""
	}
	return ep.CredentialBinding.Provider
}

// pathSpecificity is OpenShell's path_selector_specificity: the number of
// characters of the path scope other than `*`.
func pathSpecificity(p string) int {
	return len(strings.ReplaceAll(p, "*", ""))
}

// pathScopesOverlap reports whether two endpoint path scopes may match one
// path: an empty or `/**` scope matches every path; two literal scopes
// overlap when equal, a literal and a glob when the glob matches the
// literal; two globs overlap unless their literal heads (before the first
// metacharacter) diverge — a superset of OpenShell's exact answer, so
// every conflict OpenShell refuses is refused here too.
func pathScopesOverlap(a, b string) bool {
	all := func(p string) bool { return p == "" || p == "**" || p == "/**" }
	if all(a) || all(b) {
		return true
	}
	ga, gb := hasGlobMeta(a) || strings.Contains(a, "\\"), hasGlobMeta(b) || strings.Contains(b, "\\")
	switch {
	case !ga && !gb:
		return a == b
	case ga && !gb:
		return MatchGlob(a, b) || MatchDenyGlob(a, b)
	case !ga && gb:
		return MatchGlob(b, a) || MatchDenyGlob(b, a)
	}
	// Every path a glob matches starts with its literal head.
	ha, hb := a[:strings.IndexAny(a, "*?[\\")], b[:strings.IndexAny(b, "*?[\\")]
	return strings.HasPrefix(ha, hb) || strings.HasPrefix(hb, ha)
}

// pathedEndpoint is an endpoint with its field path, for checks that span
// entries.
type pathedEndpoint struct {
	path string
	ep   *Endpoint
}

// documentEndpoints lists every endpoint, entries in key order. A hostless
// (allowed_ips) endpoint is listed too: it matches every host whose
// address its allowed_ips cover, so it shares a host:port with any named
// endpoint on its ports.
func documentEndpoints(p *Policy) []pathedEndpoint {
	refs := endpointsOf(p)
	out := make([]pathedEndpoint, len(refs))
	for i, r := range refs {
		out[i] = pathedEndpoint{indexPath(keyPath(keyPath("network_policies", r.key), "endpoints"), r.index), r.ep}
	}
	return out
}

// hostsOverlap reports whether two host patterns can name one host
// (HostPatternsOverlap, exact for every wildcard ValidHostPattern admits).
// A hostless endpoint ("") may match any host.
func hostsOverlap(a, b string) bool {
	return a == "" || b == "" || canonicalHost(a) == canonicalHost(b) || HostPatternsOverlap(a, b)
}

// sameAddress reports whether two hosts, spelt differently, denote one
// address: IP literals in any spelling ParseHostIP reads (::ffff:a.b.c.d
// is a.b.c.d), and loopback names (localhost, *.localhost) with each other
// and with every loopback address. A DNS name may resolve anywhere; that
// is checked when the proxy connects.
func sameAddress(a, b string) bool {
	ia, okA := ParseHostIP(a)
	ib, okB := ParseHostIP(b)
	if okA && okB && ia == ib {
		return true
	}
	loopA, loopB := IsLoopbackName(a) || okA && ia.IsLoopback(), IsLoopbackName(b) || okB && ib.IsLoopback()
	return loopA && loopB && (IsLoopbackName(a) || IsLoopbackName(b))
}

// hostsMeet reports whether two host patterns can name one host, or one
// address under two spellings.
func hostsMeet(a, b string) bool { return hostsOverlap(a, b) || sameAddress(a, b) }

// sharedMCPDestinations applies OpenShell's rule that an MCP endpoint
// cannot share its host:port with a differently inspected endpoint (which
// would judge the same requests without the MCP rules — a REST `/**` with
// access: full would pass every tools/call), and that MCP endpoints on one
// host:port agree on strict_tool_names, allow_all_known_mcp_methods and
// max_body_bytes.
func (v *validator) sharedMCPDestinations(eps []pathedEndpoint, pairs [][2]int) {
	for _, ij := range pairs {
		a, b := eps[ij[0]], eps[ij[1]]
		if a.ep.Protocol != ProtocolMCP && b.ep.Protocol != ProtocolMCP || !hostsMeet(a.ep.Host, b.ep.Host) {
			continue
		}
		m, o := a, b
		if m.ep.Protocol != ProtocolMCP {
			m, o = b, a
		}
		dest := fmt.Sprintf("%s:%d", canonicalHost(m.ep.Host), sharedPort(m.ep, o.ep))
		switch {
		case o.ep.Protocol != ProtocolMCP:
			proto := o.ep.Protocol
			if proto == ProtocolL4 {
				proto = "none (L4)"
			}
			v.errorf(m.path, "shares %s with %s (protocol %s); an mcp endpoint cannot share its host:port with a differently inspected endpoint", dest, o.path, proto)
		case mcpProfile(m.ep) != mcpProfile(o.ep):
			v.errorf(m.path, "shares %s with %s; mcp endpoints on one host:port must agree on strict_tool_names, allow_all_known_mcp_methods and max_body_bytes", dest, o.path)
		}
	}
}

// uninspectedAliases refuses an L4 (or tcp) endpoint whose host is another spelling
// of the address of an endpoint inspected at L7 on the same port
// (`localhost` and `127.0.0.1`): the proxy inspects by the host a request
// names, so a tunnel to the L4 spelling would reach the inspected server
// with none of its rules. Hosts that match each other are no alias: every
// request to them is inspected. (MCP endpoints are refused by
// sharedMCPDestinations, which compares addresses the same way.)
func (v *validator) uninspectedAliases(eps []pathedEndpoint, pairs [][2]int) {
	plainL4 := func(e pathedEndpoint) bool { return !isL7(e.ep.Protocol) && len(e.ep.DenyRules) == 0 }
	reported := map[int]bool{}
	for _, ij := range pairs {
		for _, lo := range [][2]int{ij, {ij[1], ij[0]}} {
			l4, o := eps[lo[0]], eps[lo[1]]
			if reported[lo[0]] || !plainL4(l4) || plainL4(o) || o.ep.Protocol == ProtocolMCP ||
				hostsOverlap(l4.ep.Host, o.ep.Host) || !sameAddress(l4.ep.Host, o.ep.Host) {
				continue
			}
			reported[lo[0]] = true
			v.errorf(keyPath(l4.path, "host"), "%s is the address of %s (%s, protocol %s) on port %d; an L4 endpoint cannot reach an inspected endpoint under another spelling of its address — use the same host, or inspect this one too",
				canonicalHost(l4.ep.Host), canonicalHost(o.ep.Host), o.path, o.ep.Protocol, sharedPort(l4.ep, o.ep))
		}
	}
}

func sharedPort(a, b *Endpoint) int {
	for _, p := range EndpointPorts(a) {
		if slices.Contains(EndpointPorts(b), p) {
			return p
		}
	}
	return 0
}

// mcpProfile is the part of an MCP endpoint's options that endpoints on
// one host:port must share, with defaults filled.
func mcpProfile(ep *Endpoint) [4]any {
	body := DefaultMaxBodyBytes
	if ep.MCP != nil && ep.MCP.MaxBodyBytes != 0 {
		body = ep.MCP.MaxBodyBytes
	}
	return [4]any{strictNames(ep), allowAllKnown(ep), body, ep.MCP.ResponseLimit()}
}
