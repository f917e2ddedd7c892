package policy

import (
	"fmt"
	"slices"
	"strings"
)

// Step 2 of Decide (decide.go): deny rules win everywhere.

// denial is a deny rule that matched (or could not be checked).
type denial struct {
	ep     endpointRef
	rule   string
	reason string
	hard   bool // cannot be audited away
}

// denyPhase checks the deny rules of every endpoint whose destination
// (host, port, path scope) matches r, whatever its entry and binaries.
// When an endpoint has deny rules and r's path scope, protocol or message
// cannot be judged against them, that is a hard denial: a deny rule must
// never be skipped for lack of information.
//
// An endpoint whose protocol is not inspected yet denies everything sent
// to its destination, like a deny rule that matches every request: were it
// merely a candidate that allows nothing, a REST `/**` endpoint on the
// same host:port would let through what a `/graphql` endpoint guards.
func denyPhase(eps []endpointRef, r Request) []denial {
	var out []denial
	for _, e := range eps {
		if len(e.ep.DenyRules) == 0 && Inspected(e.ep.Protocol) ||
			!hostMatches(e.ep, r) || !slices.Contains(EndpointPorts(e.ep), r.Port) {
			continue
		}
		if !Inspected(e.ep.Protocol) && e.ep.Path == "" {
			out = append(out, uninspectedDenial(e))
			continue
		}
		if r.HTTPMethod == "" {
			// Without the path, the path scope cannot be checked either.
			d := denial{ep: e, rule: "deny_rules", hard: true,
				reason: fmt.Sprintf("%s has deny rules, which cannot be checked without L7 inspection of the request", e.name())}
			if !Inspected(e.ep.Protocol) {
				d = uninspectedDenial(e)
			}
			out = append(out, d)
			continue
		}
		path, err := CanonicalPath(r.Path, e.ep.AllowEncodedSlash)
		if err != nil {
			out = append(out, denial{ep: e, rule: "deny_rules", hard: true,
				reason: fmt.Sprintf("malformed request path for %s: %v", e.name(), err)})
			continue
		}
		if e.ep.Path != "" && !MatchDenyPath(e.ep.Path, path) {
			continue
		}
		out = append(out, endpointDenials(e, r, path)...)
	}
	return out
}

// endpointDenials checks one endpoint's deny rules against r.
func endpointDenials(e endpointRef, r Request, path string) []denial {
	switch e.ep.Protocol {
	case ProtocolREST:
		for i, rule := range e.ep.DenyRules {
			if rule != nil && restRuleMatches(rule, r, path, false) {
				return []denial{{ep: e, rule: fmt.Sprintf("deny_rules[%d]", i),
					reason: fmt.Sprintf("%s %s is denied by deny_rules[%d] of %s", strings.ToUpper(r.HTTPMethod), path, i, e.name())}}
			}
		}
		return nil
	case ProtocolMCP:
		return mcpDenials(e, r)
	default:
		return []denial{uninspectedDenial(e)}
	}
}

// Inspected reports whether Decide (and so the proxy) judges requests of
// this protocol: plain L4 and tcp (a connection allowed as a whole, never
// read), REST and MCP. The others deny everything until the proxy
// supports them — a divergence from OpenShell, toward safety.
func Inspected(protocol string) bool {
	switch protocol {
	case ProtocolL4, ProtocolTCP, ProtocolREST, ProtocolMCP:
		return true
	}
	return false
}

// uninspectedDenial is the hard denial of a request to an endpoint whose
// protocol is not inspected yet (or an L4 endpoint carrying deny rules,
// which no request can be checked against).
func uninspectedDenial(e endpointRef) denial {
	return denial{ep: e, rule: "protocol", hard: true,
		reason: fmt.Sprintf("protocol %s is not inspected yet, so %s denies every request", e.ep.Protocol, e.name())}
}

// mcpDenials checks an MCP endpoint's deny rules. They judge JSON-RPC
// messages: GET and DELETE without a message, and client→server responses,
// carry none. Any other request without a parsed message, or a tools/call
// whose name breaks the endpoint's strict names, cannot be checked.
func mcpDenials(e endpointRef, r Request) []denial {
	method := strings.ToUpper(r.HTTPMethod)
	if r.MCP == nil && (method == "GET" || method == "DELETE") {
		return nil
	}
	if r.MCP != nil && r.MCP.Response {
		return nil
	}
	if r.MCP == nil {
		return []denial{{ep: e, rule: "deny_rules", hard: true,
			reason: fmt.Sprintf("%s %s carries no MCP message, so the deny rules of %s cannot be checked", method, r.Path, e.name())}}
	}
	if why, bad := MalformedMCP(r.MCP, strictNames(e.ep)); bad {
		return []denial{{ep: e, rule: "deny_rules", hard: true, reason: why + " (" + e.name() + ")"}}
	}
	for i, rule := range e.ep.DenyRules {
		if rule != nil && mcpRuleMatches(e.ep, rule, r.MCP, true) {
			return []denial{{ep: e, rule: fmt.Sprintf("deny_rules[%d]", i),
				reason: fmt.Sprintf("%s is denied by deny_rules[%d] of %s", describeMCP(r.MCP), i, e.name())}}
		}
	}
	return nil
}
