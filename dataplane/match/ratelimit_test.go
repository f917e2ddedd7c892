package match

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

const limitedDoc = `
version: 1
network_policies:
  orders:
    endpoints:
      - host: orders.example.com
        port: 443
        protocol: mcp
        enforcement: ENFORCEMENT
        rules:
          - allow: { method: tools/list }
          - allow: { method: tools/call, tool: lookup_order, rate_limit: { requests_per_minute: 6 } }
          - allow:
              method: tools/call
              tool: track_shipment
              arguments_schema: { type: object, required: [id] }
              rate_limit: { requests_per_minute: 60, burst: 5 }
    binaries: [ { path: /usr/bin/python3 } ]
`

func limitedMatcher(t *testing.T, enforcement string) *Matcher {
	return mustCompile(t, parse(t, strings.ReplaceAll(limitedDoc, "ENFORCEMENT", enforcement)))
}

func mcpCall(tool, args string) policy.Request {
	return policy.Request{Binary: python, Host: "orders.example.com", Port: 443, Addr: pubIP, HTTPMethod: "POST", Path: "/", Time: when,
		MCP: &policy.MCPMessage{Method: "tools/call", Tool: tool, Arguments: []byte(args)}}
}

// RateLimit names the limit of the rule behind an allow, and nothing else.
func TestRateLimitOfDecision(t *testing.T) {
	m := limitedMatcher(t, "enforce")
	d := agree(t, m, mcpCall("lookup_order", `{}`))
	l := m.RateLimit(&d)
	if l == nil || l.RequestsPerMinute != 6 || l.Burst != 6 || l.Entry != "orders" || l.Rule != d.Rule || l.Audit ||
		!strings.Contains(l.Endpoint, "orders.example.com:443") {
		t.Fatalf("limit of lookup_order = %+v (decision %+v); want 6/min, burst 6 (the default), on the deciding rule", l, d)
	}
	list := mcpCall("", "")
	list.MCP = &policy.MCPMessage{Method: "tools/list"}
	for name, r := range map[string]policy.Request{
		"unlimited rule": list,
		"denied tool":    mcpCall("refund_order", `{}`),
		"schema refusal": mcpCall("track_shipment", `{}`),
	} {
		d := agree(t, m, r)
		if l := m.RateLimit(&d); l != nil {
			t.Errorf("%s (decision %+v): limit %+v, want none", name, d, l)
		}
	}

	// On an audit endpoint: the limit says so; a denial let through (the
	// schema refusal names its rule) takes no token.
	a := limitedMatcher(t, "audit")
	d = agree(t, a, mcpCall("track_shipment", `{"id":"x"}`))
	if l := a.RateLimit(&d); l == nil || !l.Audit || l.Burst != 5 {
		t.Errorf("audit endpoint, allowed call: limit %+v", l)
	}
	d = agree(t, a, mcpCall("track_shipment", `{}`))
	if l := a.RateLimit(&d); !d.Allow || !d.Audit || l != nil {
		t.Errorf("audit endpoint, audited schema refusal %+v: limit %+v, want none", d, l)
	}
}

// The key of a rule's bucket survives a rule moving and changes with the
// rule.
func TestRateLimitKeys(t *testing.T) {
	doc := strings.ReplaceAll(limitedDoc, "ENFORCEMENT", "enforce")
	keys := mustCompile(t, parse(t, doc)).LimitKeys()
	if len(keys) != 2 {
		t.Fatalf("keys %v, want one per limited rule", keys)
	}
	moved := strings.Replace(doc, "          - allow: { method: tools/list }\n", "          - allow: { method: ping }\n          - allow: { method: tools/list }\n", 1)
	if got := mustCompile(t, parse(t, moved)).LimitKeys(); !equalKeys(got, keys) {
		t.Errorf("keys after moving the rules:\n%v\nwant\n%v", got, keys)
	}
	changed := mustCompile(t, parse(t, strings.Replace(doc, "burst: 5", "burst: 4", 1))).LimitKeys()
	same := 0
	for k := range changed {
		if keys[k] {
			same++
		}
	}
	if same != 1 {
		t.Errorf("after changing one limit %d keys are the same, want 1", same)
	}
	if got := (*Matcher)(nil).LimitKeys(); len(got) != 0 {
		t.Errorf("nil matcher keys %v", got)
	}
}

func equalKeys(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}
