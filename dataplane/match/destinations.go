package match

import (
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// ---------------------------------------------------------------------------
// Destinations.

// destinations appends to buf the endpoints whose host and port match r
// (policy's hostMatches and port check, before the path scope), in policy
// order: the endpoints the deny phase looks at, and the superset of the
// candidates.
func (m *Matcher) destinations(r *policy.Request, h *hostView, buf []int32) []int32 {
	out := buf
	for _, n := range h.exact {
		if slices.Contains(m.eps[n].ports, r.Port) {
			out = append(out, n)
		}
	}
	merged := false
	if !h.normIsIP {
		for _, n := range m.wild {
			e := &m.eps[n]
			if slices.Contains(e.ports, r.Port) && e.host.matchWild(h.norm) {
				out, merged = append(out, n), true
			}
		}
	}
	if len(m.hostless) > 0 {
		if addr, ok := destinationAddr(r, h); ok {
			for _, n := range m.hostless {
				e := &m.eps[n]
				if slices.Contains(e.ports, r.Port) && len(e.allowedIPs) > 0 && inPrefixes(e.allowedIPs, addr) {
					out, merged = append(out, n), true
				}
			}
		}
	}
	if merged {
		slices.Sort(out)
	}
	return out
}

// destinationAddr mirrors policy's destinationAddr: the resolved Addr, else
// an IP-literal Host.
func destinationAddr(r *policy.Request, h *hostView) (netip.Addr, bool) {
	if r.Addr.IsValid() {
		return r.Addr.Unmap().WithZone(""), true
	}
	return h.literal, h.isLiteral
}

// scopeMatches is the path-scope part of policy's destinationMatches: a
// request without a path (no L7 view) does not match a scoped endpoint.
func (e *endpoint) scopeMatches(r *policy.Request, paths *canonicalPaths) bool {
	if e.scope == nil {
		return true
	}
	if r.HTTPMethod == "" {
		return false
	}
	p, err := paths.get(r.Path, e.encodedOK)
	if err != nil {
		return false
	}
	if e.protocol == policy.ProtocolMCP && r.MCP == nil {
		if _, ok := e.mcp.OAuthPath(strings.ToUpper(r.HTTPMethod), p); ok {
			return true // mirrors policy's destinationMatches
		}
	}
	return e.scope.match(p)
}

// binaryMatches mirrors policy's binaryMatches: the binary, or one of its
// ancestors, matches one of the entry's binaries.
func (e *endpoint) binaryMatches(binary string, ancestors []string) bool {
	if e.anyBinary {
		return true
	}
	if !cleanAbsolute(binary) {
		return false
	}
	for i := range e.binaries {
		if e.binaries[i].match(binary) {
			return true
		}
		for _, a := range ancestors {
			if cleanAbsolute(a) && e.binaries[i].match(a) {
				return true
			}
		}
	}
	return false
}

func cleanAbsolute(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p
}

// ---------------------------------------------------------------------------
// 2. Deny rules.

// denial mirrors policy's denial.
type denial struct {
	e      *endpoint
	rule   string
	reason string
	hard   bool
}

func (d *denial) decision(prefix string) policy.Decision {
	dec := policy.Decision{Entry: d.e.key, Endpoint: d.e.index, Rule: d.rule, Reason: prefix + d.reason}
	if prefix != "" {
		dec.Allow, dec.Audit = true, true
	}
	return dec
}

// deny is policy's denyPhase for one endpoint whose host and port match:
// whether one of its deny rules (or its uninspected protocol) denies r.
func (e *endpoint) deny(r *policy.Request, paths *canonicalPaths) (denial, bool) {
	if !e.hasDeny && e.inspected {
		return denial{}, false
	}
	if !e.inspected && e.scope == nil {
		return e.uninspectedDenial(), true
	}
	if r.HTTPMethod == "" {
		if !e.inspected {
			return e.uninspectedDenial(), true
		}
		return denial{e: e, rule: "deny_rules", hard: true,
			reason: fmt.Sprintf("%s has deny rules, which cannot be checked without L7 inspection of the request", e.name)}, true
	}
	p, err := paths.get(r.Path, e.encodedOK)
	if err != nil {
		return denial{e: e, rule: "deny_rules", hard: true,
			reason: fmt.Sprintf("malformed request path for %s: %v", e.name, err)}, true
	}
	if e.scope != nil && !e.scope.matchDenyPath(p) {
		return denial{}, false
	}
	switch e.protocol {
	case policy.ProtocolREST:
		for i := range e.denyRules {
			dr := &e.denyRules[i]
			if !dr.nilAllow && dr.matchesREST(r, p, false) {
				return denial{e: e, rule: dr.label,
					reason: fmt.Sprintf("%s %s is denied by %s of %s", strings.ToUpper(r.HTTPMethod), p, dr.label, e.name)}, true
			}
		}
		return denial{}, false
	case policy.ProtocolMCP:
		return e.mcpDenial(r)
	default:
		return e.uninspectedDenial(), true
	}
}

func (e *endpoint) uninspectedDenial() denial {
	return denial{e: e, rule: "protocol", hard: true,
		reason: fmt.Sprintf("protocol %s is not inspected yet, so %s denies every request", e.protocol, e.name)}
}

// mcpDenial mirrors policy's mcpDenials.
func (e *endpoint) mcpDenial(r *policy.Request) (denial, bool) {
	method := strings.ToUpper(r.HTTPMethod)
	if r.MCP == nil && (method == "GET" || method == "DELETE") {
		return denial{}, false
	}
	if r.MCP != nil && r.MCP.Response {
		return denial{}, false
	}
	if r.MCP == nil {
		return denial{e: e, rule: "deny_rules", hard: true,
			reason: fmt.Sprintf("%s %s carries no MCP message, so the deny rules of %s cannot be checked", method, r.Path, e.name)}, true
	}
	if why, bad := policy.MalformedMCP(r.MCP, e.strictNames); bad {
		return denial{e: e, rule: "deny_rules", hard: true, reason: why + " (" + e.name + ")"}, true
	}
	for i := range e.denyRules {
		dr := &e.denyRules[i]
		if !dr.nilAllow && e.mcpRuleMatches(dr, r.MCP, true) {
			return denial{e: e, rule: dr.label,
				reason: fmt.Sprintf("%s is denied by %s of %s", describeMCP(r.MCP), dr.label, e.name)}, true
		}
	}
	return denial{}, false
}
