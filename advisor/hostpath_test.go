package advisor

import (
	"strings"
	"testing"
)

// Refusals for hosts and paths (issue 11 findings 6 and 12): each names
// its rule and field path.
func TestRefusalsHostsAndPaths(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	cases := []struct {
		name, doc, field, rule string
	}{
		{"middle label wildcard", newRule(restEP("*.s3.*.amazonaws.com"), py), "operations[0].add_rule.rule.endpoints[0].host", RuleHostWildcard},
		{"middle label wildcard alone", newRule(restEP("foo.*.example.com"), py), "operations[0].add_rule.rule.endpoints[0].host", RuleHostWildcard},
		{"query string in a new rule's path", newRule(`{ host: ship.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: "/repos?token=secret" } } ] }`, py),
			"operations[0].add_rule.rule.endpoints[0].rules[0].allow.path", RuleQueryInPath},
		{"query string on an existing endpoint", allowOn(`{ allow: { method: GET, path: "/repos?token=secret" } }`), "operations[0].add_allow_rules.rules[0].allow.path", RuleQueryInPath},
		{"fragment", allowOn(`{ allow: { method: GET, path: "/repos#x" } }`), "operations[0].add_allow_rules.rules[0].allow.path", RuleQueryInPath},
		{"escaped question mark", allowOn(`{ allow: { method: GET, path: "/repos\\?x" } }`), "operations[0].add_allow_rules.rules[0].allow.path", RuleQueryInPath},
		{"query in an mcp endpoint path", newRule(`{ host: ship.example.com, port: 443, path: "/mcp?x=1", protocol: mcp, rules: [ { allow: { method: tools/call, tool: track } } ] }`, py),
			"operations[0].add_rule.rule.endpoints[0].path", RuleQueryInPath},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := Apply(base, mustParse(t, c.doc))
			r, ok := AsRefusal(err)
			if !ok {
				t.Fatalf("want a refusal, got %v (result %v)", err, res != nil)
			}
			if r.Field != c.field || r.Rule != c.rule {
				t.Fatalf("got field %q rule %q (%v); want field %q rule %q", r.Field, r.Rule, r, c.field, c.rule)
			}
			if res != nil {
				t.Fatal("a refused proposal returned a policy")
			}
			if strings.Contains(r.Error(), "secret") {
				t.Fatalf("the refusal repeats the query string: %v", r)
			}
		})
	}
}

// A denial of a host holding glob characters (any agent can CONNECT to
// the literal host *.corp.internal.example.com) is not turned into a
// wildcard grant, nor is one holding any byte outside host names.
func TestFromDenialRefusesGlobHosts(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	for _, host := range []string{"*.corp.internal.example.com", "**.example.com", "a*.example.com", "a?.example.com", "[ab].example.com",
		"foo.*.example.com", "a\x00.example.com", "a b.example.com", "a/b.example.com"} {
		for _, rec := range []DenialRecord{
			{Binary: "/usr/bin/curl", Host: host, Port: 443},
			{Binary: "/usr/bin/curl", Host: host, Port: 443, HTTPMethod: "GET", Path: "/x"},
		} {
			p, err := FromDenial(base, rec)
			r, ok := AsRefusal(err)
			if !ok || r.Rule != RuleInvalidHost || r.Field != "host" {
				t.Fatalf("FromDenial(%q, %q) = %+v, %v; want an invalid_host refusal on host", host, rec.HTTPMethod, p, err)
			}
		}
	}
	// Exact names and IP literals are still offered.
	for _, host := range []string{"ship.example.net", "Ship.Example.NET.", "93.184.216.34", "[2606:4700::1111]"} {
		if _, err := FromDenial(base, DenialRecord{Binary: "/usr/bin/curl", Host: host, Port: 443}); err != nil {
			t.Errorf("FromDenial(%q): %v", host, err)
		}
	}
}
