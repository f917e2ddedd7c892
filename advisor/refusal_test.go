package advisor

import (
	"context"
	"strings"
	"testing"
)

// newRule wraps one endpoint (YAML flow mapping) in an add_rule operation.
func newRule(endpoint, binaries string) string {
	return `
rationale: test
operations:
  - add_rule:
      name: fresh
      rule: { endpoints: [ ` + endpoint + ` ], binaries: ` + binaries + ` }
`
}

func restEP(host string) string {
	return `{ host: "` + host + `", port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /v1/x } } ] }`
}

func allowOn(rule string) string {
	return `
rationale: test
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ ` + rule + ` ] }
`
}

func mcpAllow(rule string) string {
	return `
rationale: test
operations:
  - add_allow_rules: { policy: orders, host: orders.example.com, port: 443, path: /mcp, rules: [ ` + rule + ` ] }
`
}

const py = `[ { path: /usr/bin/python3 } ]`

func TestRefusals(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	cases := []struct {
		name, doc, field, rule string
	}{
		{"public suffix wildcard", newRule(restEP("*.github.io"), py), "operations[0].add_rule.rule.endpoints[0].host", RulePublicSuffix},
		{"wildcard under com", newRule(restEP("*.co.uk"), py), "operations[0].add_rule.rule.endpoints[0].host", RulePublicSuffix},
		{"double star host", newRule(restEP("**.example.com"), py), "operations[0].add_rule.rule.endpoints[0].host", RuleHostWildcard},
		{"partial label glob", newRule(restEP("api-*.example.com"), py), "operations[0].add_rule.rule.endpoints[0].host", RuleHostWildcard},
		{"metadata ip", newRule(restEP("169.254.169.254"), py), "operations[0].add_rule.rule.endpoints[0].host", RuleCloudMetadata},
		{"metadata hex", newRule(restEP("0xA9FEA9FE"), py), "operations[0].add_rule.rule.endpoints[0].host", RuleCloudMetadata},
		{"metadata name trailing dot", newRule(restEP("metadata.google.internal."), py), "operations[0].add_rule.rule.endpoints[0].host", RuleCloudMetadata},
		{"metadata name case", newRule(restEP("Metadata.Azure.Internal"), py), "operations[0].add_rule.rule.endpoints[0].host", RuleCloudMetadata},
		{"loopback", newRule(restEP("127.0.0.1"), py), "operations[0].add_rule.rule.endpoints[0].host", RulePrivateAddress},
		{"localhost", newRule(restEP("localhost"), py), "operations[0].add_rule.rule.endpoints[0].host", RulePrivateAddress},
		{"private", newRule(restEP("10.1.2.3"), py), "operations[0].add_rule.rule.endpoints[0].host", RulePrivateAddress},
		{"binary glob", newRule(restEP("ship.example.com"), `[ { path: "/usr/bin/*" } ]`), "operations[0].add_rule.rule.binaries[0].path", RuleBinary},
		{"empty binaries", newRule(restEP("ship.example.com"), `[]`), "operations[0].add_rule.rule.binaries", RuleBinary},
		{"two binaries", newRule(restEP("ship.example.com"), `[ { path: /a }, { path: /b } ]`), "operations[0].add_rule.rule.binaries", RuleBinary},
		{"relative binary", newRule(restEP("ship.example.com"), `[ { path: bin/x } ]`), "operations[0].add_rule.rule.binaries[0].path", RuleBinary},
		{"unclean binary", newRule(restEP("ship.example.com"), `[ { path: /usr/bin/../bin/x } ]`), "operations[0].add_rule.rule.binaries[0].path", RuleBinary},
		{"no port", newRule(`{ host: ship.example.com, protocol: rest, rules: [ { allow: { method: GET, path: /x } } ] }`, py), "operations[0].add_rule.rule.endpoints[0].port", RulePort},
		{"control plane port", newRule(`{ host: ship.example.com, port: 6443 }`, py), "operations[0].add_rule.rule.endpoints[0].port", RulePort},
		{"access full", newRule(`{ host: ship.example.com, port: 443, protocol: rest, access: full }`, py), "operations[0].add_rule.rule.endpoints[0].access", RuleForbiddenField},
		{"access read-only", newRule(`{ host: ship.example.com, port: 443, protocol: rest, access: read-only }`, py), "operations[0].add_rule.rule.endpoints[0].access", RuleForbiddenField},
		{"allowed_ips", newRule(`{ host: ship.example.com, port: 443, allowed_ips: [ 10.0.0.0/8 ] }`, py), "operations[0].add_rule.rule.endpoints[0].allowed_ips", RuleForbiddenField},
		{"tls", newRule(`{ host: ship.example.com, port: 443, tls: skip }`, py), "operations[0].add_rule.rule.endpoints[0].tls", RuleForbiddenField},
		{"enforcement audit", newRule(`{ host: ship.example.com, port: 443, protocol: rest, enforcement: audit, rules: [ { allow: { method: GET, path: /x } } ] }`, py), "operations[0].add_rule.rule.endpoints[0].enforcement", RuleForbiddenField},
		{"credential binding", newRule(`{ host: ship.example.com, port: 443, protocol: rest, credential_binding: { provider: gh }, rules: [ { allow: { method: GET, path: /x } } ] }`, py), "operations[0].add_rule.rule.endpoints[0].credential_binding", RuleForbiddenField},
		{"credential signing", newRule(`{ host: ship.example.com, port: 443, protocol: rest, credential_signing: sigv4, rules: [ { allow: { method: GET, path: /x } } ] }`, py), "operations[0].add_rule.rule.endpoints[0].credential_signing", RuleForbiddenField},
		{"mcp options", newRule(`{ host: ship.example.com, port: 443, protocol: mcp, mcp: { allow_all_known_mcp_methods: true } }`, py), "operations[0].add_rule.rule.endpoints[0].mcp", RuleForbiddenField},
		{"graphql protocol", newRule(`{ host: ship.example.com, port: 443, protocol: graphql, rules: [ { allow: { operation_type: query } } ] }`, py), "operations[0].add_rule.rule.endpoints[0].protocol", RuleProtocol},
		{"rest without rules", newRule(`{ host: ship.example.com, port: 443, protocol: rest }`, py), "operations[0].add_rule.rule.endpoints[0].rules", RuleEmptyAllow},
		{"allow {} new", newRule(`{ host: ship.example.com, port: 443, protocol: rest, rules: [ { allow: {} } ] }`, py), "operations[0].add_rule.rule.endpoints[0].rules[0].allow", RuleEmptyAllow},
		{"entry exists", `
rationale: x
operations:
  - add_rule: { name: github, rule: { endpoints: [ ` + restEP("ship.example.com") + ` ], binaries: ` + py + ` } }
`, "operations[0].add_rule.name", RuleEntryExists},

		{"allow {}", allowOn(`{ allow: {} }`), "operations[0].add_allow_rules.rules[0].allow", RuleEmptyAllow},
		{"rule without allow", allowOn(`{}`), "operations[0].add_allow_rules.rules[0].allow", RuleEmptyAllow},
		{"method star", allowOn(`{ allow: { method: "*", path: /repos/x } }`), "operations[0].add_allow_rules.rules[0].allow.method", RuleMethod},
		{"method glob", allowOn(`{ allow: { method: "P*", path: /repos/x } }`), "operations[0].add_allow_rules.rules[0].allow.method", RuleMethod},
		{"no method", allowOn(`{ allow: { path: /repos/x } }`), "operations[0].add_allow_rules.rules[0].allow.method", RuleMethod},
		{"no path", allowOn(`{ allow: { method: POST } }`), "operations[0].add_allow_rules.rules[0].allow.path", RulePath},
		{"path two globs", allowOn(`{ allow: { method: POST, path: "/repos/*/x/*" } }`), "operations[0].add_allow_rules.rules[0].allow.path", RulePath},
		{"path ** middle", allowOn(`{ allow: { method: POST, path: "/repos/**/x" } }`), "operations[0].add_allow_rules.rules[0].allow.path", RulePath},
		{"path ** everything", allowOn(`{ allow: { method: POST, path: "/**" } }`), "operations[0].add_allow_rules.rules[0].allow.path", RulePath},
		{"path ** after glob", allowOn(`{ allow: { method: POST, path: "/repos/*/**" } }`), "operations[0].add_allow_rules.rules[0].allow.path", RulePath},
		{"tool glob", mcpAllow(`{ allow: { method: tools/call, tool: "track_*" } }`), "operations[0].add_allow_rules.rules[0].allow.tool", RuleTool},
		{"tool any glob", mcpAllow(`{ allow: { method: tools/call, tool: { any: [ a, "b?" ] } } }`), "operations[0].add_allow_rules.rules[0].allow.tool.any[1]", RuleTool},
		{"tools/call without tool", mcpAllow(`{ allow: { method: tools/call } }`), "operations[0].add_allow_rules.rules[0].allow.tool", RuleTool},
		{"mcp method glob", mcpAllow(`{ allow: { method: "tools/*" } }`), "operations[0].add_allow_rules.rules[0].allow.method", RuleMethod},
		{"params", mcpAllow(`{ allow: { method: tools/call, params: { name: x } } }`), "operations[0].add_allow_rules.rules[0].allow.params", RuleForbiddenField},
		{"review on a rest rule", allowOn(`{ allow: { method: POST, path: /repos/x, review: { required: true } } }`), "operations[0].add_allow_rules.rules[0].allow.review", RuleForbiddenField},
		{"review on a tools/call rule", mcpAllow(`{ allow: { method: tools/call, tool: track, review: { required: true, timeout: 15m } } }`), "operations[0].add_allow_rules.rules[0].allow.review", RuleForbiddenField},
		{"review not required", mcpAllow(`{ allow: { method: tools/call, tool: track, review: { required: false } } }`), "operations[0].add_allow_rules.rules[0].allow.review", RuleForbiddenField},
		{"review in a new entry", newRule(`{ host: ship.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /x, review: { required: true } } } ] }`, py),
			"operations[0].add_rule.rule.endpoints[0].rules[0].allow.review", RuleForbiddenField},
		{"unknown entry", `
rationale: x
operations:
  - add_allow_rules: { policy: nope, host: api.github.com, port: 443, rules: [ { allow: { method: GET, path: /x } } ] }
`, "operations[0].add_allow_rules.policy", RuleUnknownTarget},
		{"unknown endpoint", `
rationale: x
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 8443, rules: [ { allow: { method: GET, path: /x } } ] }
`, "operations[0].add_allow_rules.host", RuleUnknownTarget},
		{"split without path", `
rationale: x
operations:
  - add_allow_rules: { policy: shop, host: shop.example.com, port: 443, rules: [ { allow: { method: GET, path: /api/x } } ] }
`, "operations[0].add_allow_rules.path", RuleAmbiguousTarget},
		{"L4 endpoint rules", `
rationale: x
operations:
  - add_allow_rules: { policy: anyone, host: pypi.org, port: 443, rules: [ { allow: { method: GET, path: /x } } ] }
`, "operations[0].add_allow_rules.host", RuleProtocol},
		{"binary glob add", `
rationale: x
operations:
  - add_binary: { policy: github, path: "/usr/bin/**", endpoints: [ "api.github.com:443" ] }
`, "operations[0].add_binary.path", RuleBinary},
		{"binary endpoints missing", `
rationale: x
operations:
  - add_binary: { policy: shop, path: /usr/bin/node, endpoints: [ "shop.example.com:443/api/**" ] }
`, "operations[0].add_binary.endpoints", RuleEndpointsMismatch},
		{"binary endpoints extra", `
rationale: x
operations:
  - add_binary: { policy: github, path: /usr/bin/node, endpoints: [ "api.github.com:443", "evil.example.com:443" ] }
`, "operations[0].add_binary.endpoints[1]", RuleEndpointsMismatch},
		{"binary on any-binary entry", `
rationale: x
operations:
  - add_binary: { policy: anyone, path: /usr/bin/node, endpoints: [ "pypi.org:443" ] }
`, "operations[0].add_binary.policy", RuleBinary},
		{"second operation", `
rationale: x
operations:
  - add_deny_rules: { policy: github, host: api.github.com, port: 443, rules: [ { method: DELETE, path: "/**" } ] }
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: "*", path: /x } } ] }
`, "operations[1].add_allow_rules.rules[0].allow.method", RuleMethod},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustParse(t, c.doc)
			_, err := Apply(base, p)
			r, ok := AsRefusal(err)
			if !ok {
				t.Fatalf("want a refusal, got %v", err)
			}
			if r.Field != c.field || r.Rule != c.rule {
				t.Fatalf("got field %q rule %q (%v); want field %q rule %q", r.Field, r.Rule, r, c.field, c.rule)
			}
			wantOp := 0
			if strings.HasPrefix(c.field, "operations[1]") {
				wantOp = 1
			}
			if r.Op != wantOp || !strings.Contains(r.Error(), c.field) || r.Reason == "" {
				t.Fatalf("refusal does not name the operation and field: %+v", r)
			}
		})
	}
}

func TestAccepted(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	docs := map[string]string{
		"wildcard below registrable": newRule(restEP("*.example.net"), py),
		"wildcard below subdomain":   newRule(restEP("*.api.example.org"), py),
		"one-segment glob":           allowOn(`{ allow: { method: post, path: "/repos/*/issues" } }`),
		"fixed prefix tail":          allowOn(`{ allow: { method: PUT, path: "/repos/acme/app/**" } }`),
		"escaped literal":            allowOn(`{ allow: { method: PUT, path: "/repos/a\\*b/x/y" } }`),
		"L4 endpoint":                newRule(`{ host: ship.example.com, port: 22 }`, py),
		"mcp entry":                  newRule(`{ host: ship.example.com, port: 443, path: /mcp, protocol: mcp, rules: [ { allow: { method: tools/call, tool: track } } ] }`, py),
		"deny rules":                 `{"rationale": "x", "operations": [{"add_deny_rules": {"policy": "github", "host": "API.github.com", "port": 443, "rules": [{"method": "DELETE", "path": "/**"}]}}]}`,
		"split with path":            `{"rationale": "x", "operations": [{"add_allow_rules": {"policy": "shop", "host": "shop.example.com", "port": 443, "path": "/api/**", "rules": [{"allow": {"method": "POST", "path": "/api/orders"}}]}}]}`,
		"add binary":                 `{"rationale": "x", "operations": [{"add_binary": {"policy": "shop", "path": "/usr/bin/node", "endpoints": ["shop.example.com:443/admin/**", "SHOP.example.com.:443/api/**"]}}]}`,
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			p := mustParse(t, doc)
			if _, _, err := Evaluate(context.Background(), base, p, opts()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Reordering a proposal's operations and re-casing it gives the same
// resulting policy. (The order of the rules within an operation is kept:
// it is their order, and so their indices, in the resulting policy.)
func TestReorderRecase(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	a := mustParse(t, `
rationale: a
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: POST, path: /repos/a/issues } }, { allow: { method: put, path: /repos/a/b } } ] }
  - add_rule: { name: ship, rule: { endpoints: [ { host: ship.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /v1/x } } ] } ], binaries: [ { path: /usr/bin/python3 } ] } }
`)
	b := mustParse(t, `
rationale: b
operations:
  - add_rule: { name: ship, rule: { binaries: [ { path: /usr/bin/python3 } ], endpoints: [ { protocol: rest, rules: [ { allow: { path: /v1/x, method: get } } ], port: 443, host: SHIP.Example.COM. } ] } }
  - add_allow_rules: { port: 443, host: API.GITHUB.COM, policy: github, rules: [ { allow: { path: /repos/a/issues, method: post } }, { allow: { method: PUT, path: /repos/a/b } } ] }
`)
	ra, err := Apply(base, a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Apply(base, b)
	if err != nil {
		t.Fatal(err)
	}
	if ra.Hash() != rb.Hash() {
		t.Fatalf("different results:\n%s\n%s", ra.CanonicalJSON(), rb.CanonicalJSON())
	}
}

func TestParseProblems(t *testing.T) {
	cases := map[string][]string{
		`{"rationale": "x", "operations": [{"add_allow_rules": {"policy": "p", "host": "h", "port": 1, "rules": [{"allow": {"tool": 5}}]}}, {"add_allow_rules": {"policy": "p", "host": "h", "port": 1, "rules": [{"allow": {"tool": [1]}}]}}]}`: {
			"operations[0].add_allow_rules.rules[0].allow.tool", "operations[1].add_allow_rules.rules[0].allow.tool"},
		`{"rationale": "x", "rationale": "y", "operations": []}`:                                    {"rationale", "operations"},
		"operations:\n  - add_rule: { name: a, rule: { endpoints: [], binaries: [] }, extra: 1 }\n": {"rationale", "operations[0].add_rule.extra"},
		`{"rationale": "x", "operations": [{}]}`:                                                    {"operations[0]"},
		`{"rationale": "x", "base_version": -1, "operations": [{"add_binary": {"policy": "p", "path": "/x", "endpoints": []}}]}`: {
			"base_version", "operations[0].add_binary.endpoints"},
		`{"rationale": "x", "operations": [{"add_rule": {"name": "a"}, "add_binary": {"policy": "p"}}]}`: {"operations[0]"},
		`{"rationale": "x", "idempotency_key": "has space", "operations": [{"add_deny_rules": {"policy": "p", "host": "h", "port": "443", "rules": []}}]}`: {
			"idempotency_key", "operations[0].add_deny_rules.port", "operations[0].add_deny_rules.rules"},
	}
	for doc, paths := range cases {
		_, err := ParseProposal([]byte(doc))
		pe, ok := err.(*ParseError)
		if !ok {
			t.Fatalf("%s: want *ParseError, got %v", doc, err)
		}
		got := map[string]bool{}
		for _, p := range pe.Problems {
			got[p.Path] = true
		}
		for _, p := range paths {
			if !got[p] {
				t.Errorf("%s: no problem at %s; got %v", doc, p, pe)
			}
		}
	}
	if _, err := ParseProposal(make([]byte, MaxProposalBytes+1)); err == nil {
		t.Fatal("oversized proposal accepted")
	}
	if _, err := ParseProposal([]byte(`{"rationale": "` + strings.Repeat("x", MaxRationaleBytes+1) + `", "operations": [{"add_binary": {"policy": "p", "path": "/x", "endpoints": ["a:1"]}}]}`)); err == nil {
		t.Fatal("oversized rationale accepted")
	}
}

// A broad proposal is refused once, naming every violation with its field
// path, so the sandbox fixes them all in one try; a later operation that
// names an entry a refused one adds is checked against it, not refused as
// naming nothing.
func TestRefusalsAllAtOnce(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	p := mustParse(t, `
rationale: everything at once
operations:
  - add_rule:
      name: wide
      rule:
        binaries: [ { path: "/usr/bin/*" } ]
        endpoints:
          - { host: "*.github.io", port: 443, protocol: rest, access: full }
          - { host: ship.example.com, port: 6443, protocol: rest, rules: [ { allow: { method: "*", path: "/**" } } ] }
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: GET, path: /x/y } }, { allow: { method: POST, path: "/**" } } ] }
  - add_binary: { policy: wide, path: /usr/bin/curl, endpoints: [ "nowhere.example.com:443" ] }
`)
	want := []struct{ field, rule string }{
		{"operations[0].add_rule.rule.binaries[0].path", RuleBinary},
		{"operations[0].add_rule.rule.endpoints[0].host", RulePublicSuffix},
		{"operations[0].add_rule.rule.endpoints[0].access", RuleForbiddenField},
		{"operations[0].add_rule.rule.endpoints[0].rules", RuleEmptyAllow},
		{"operations[0].add_rule.rule.endpoints[1].port", RulePort},
		{"operations[0].add_rule.rule.endpoints[1].rules[0].allow.method", RuleMethod},
		{"operations[0].add_rule.rule.endpoints[1].rules[0].allow.path", RulePath},
		{"operations[1].add_allow_rules.rules[1].allow.path", RulePath},
		{"operations[2].add_binary.endpoints[0]", RuleEndpointsMismatch},
	}
	for name, run := range map[string]func() error{
		"Apply":    func() error { _, err := Apply(base, p); return err },
		"Evaluate": func() error { _, _, err := Evaluate(context.Background(), base, p, opts()); return err },
	} {
		t.Run(name, func(t *testing.T) {
			err := run()
			r, ok := AsRefusal(err)
			if !ok {
				t.Fatalf("err = %v, want a refusal", err)
			}
			all := r.All()
			if len(all) != len(want) {
				t.Errorf("%d refusals, want %d: %v", len(all), len(want), err)
			}
			for i, w := range want {
				if i >= len(all) {
					break
				}
				if all[i].Field != w.field || all[i].Rule != w.rule || all[i].Reason == "" {
					t.Errorf("refusal %d = %s (%s), want %s (%s)", i, all[i].Field, all[i].Rule, w.field, w.rule)
				}
				if !strings.Contains(err.Error(), w.field) {
					t.Errorf("the message does not name %s: %v", w.field, err)
				}
			}
			if r.Field != want[0].field {
				t.Errorf("the error itself is %s, want the first refusal %s", r.Field, want[0].field)
			}
		})
	}
}

// Operations that change nothing are refused together too.
func TestChangesNothingAllAtOnce(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	p := mustParse(t, `
rationale: nothing new
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: GET, path: /repos/a/b } } ] }
  - add_allow_rules: { policy: orders, host: orders.example.com, port: 443, path: /mcp, rules: [ { allow: { method: tools/call, tool: lookup_order } } ] }
`)
	_, _, err := Evaluate(context.Background(), base, p, opts())
	r, ok := AsRefusal(err)
	if !ok {
		t.Fatalf("err = %v, want a refusal", err)
	}
	all := r.All()
	if len(all) != 2 || all[0].Op != 0 || all[1].Op != 1 || all[0].Rule != RuleChangesNothing || all[1].Rule != RuleChangesNothing {
		t.Fatalf("refusals = %v, want operations 0 and 1 refused as changing nothing", err)
	}
}
