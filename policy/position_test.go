package policy

import (
	"strings"
	"testing"
)

// A rule keeps its position in the user's file through parsing, the
// canonical form and a round trip of the stored JSON, so a decision names
// rules[i] as the file numbers it, not as a sorted form would.
func TestDecisionsNameTheFilesRuleIndex(t *testing.T) {
	// Sorted by their JSON, these rules would be initialize,
	// tools/call lookup_order, tools/call track, tools/list: the indices
	// below differ from that order on purpose.
	const doc = `
version: 1
network_policies:
  orders:
    binaries: [{path: /usr/bin/curl}]
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: {method: tools/list}
          - allow: {method: initialize}
          - {}
          - allow: {method: tools/call, tool: track}
          - allow: {method: tools/call, tool: lookup_order}
        deny_rules:
          - {method: tools/call, tool: refund_order}
          - {method: tools/call, tool: delete_order}
  api:
    binaries: [{path: /usr/bin/curl}]
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        rules:
          - allow: {method: POST, path: /b}
          - allow: {method: GET, path: /a}
        deny_rules:
          - {method: GET, path: /a/secret}
          - {method: GET, path: /a/admin}
`
	parsed, _, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	// What the gateway stores and a proxy reads back.
	stored, _, err := Parse(parsed.CanonicalJSON())
	if err != nil {
		t.Fatal(err)
	}
	if stored.Hash() != parsed.Hash() {
		t.Fatalf("round trip changed the hash")
	}
	cases := []struct {
		name       string
		r          Request
		allow      bool
		rule, word string
	}{
		{"allow rules[4]", req("orders.example.com", 443).mcp("tools/call", "lookup_order", ""), true, "rules[4]", "allowed by rules[4]"},
		{"allow rules[3]", req("orders.example.com", 443).mcp("tools/call", "track", ""), true, "rules[3]", "allowed by rules[3]"},
		{"allow rules[1]", req("orders.example.com", 443).mcp("initialize", "", ""), true, "rules[1]", ""},
		{"deny deny_rules[1]", req("orders.example.com", 443).mcp("tools/call", "delete_order", ""), false, "deny_rules[1]", "deny_rules[1]"},
		{"rest rules[1]", req("api.example.com", 443).http("GET", "/a"), true, "rules[1]", "allowed by rules[1]"},
		{"rest deny_rules[1]", req("api.example.com", 443).http("GET", "/a/admin"), false, "deny_rules[1]", "denied by deny_rules[1]"},
	}
	for _, tc := range cases {
		for name, p := range map[string]*Policy{"parsed": parsed, "stored": stored} {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				d := Decide(p, tc.r)
				if d.Allow != tc.allow || d.Rule != tc.rule || !strings.Contains(d.Reason, tc.word) {
					t.Errorf("Decide = %+v, want allow=%v rule %s reason containing %q", d, tc.allow, tc.rule, tc.word)
				}
			})
		}
	}
}
