package prover

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

const docsPolicy = `
version: 1
network_policies:
  docs:
    binaries: [{path: /usr/bin/python3}]
    endpoints:
      - host: docs.example.net
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: {method: initialize}
          - allow: {method: prompts/get, prompt: summarize}
          - allow: {method: resources/read, resource: "file:///docs/readme.md"}
        deny_rules:
          - {method: resources/read, resource: "file:///docs/private/**"}
`

// prompts/get and resources/read rules that name one more prompt or URI
// are new_mcp_prompt and new_mcp_resource, with the prompt or URI as the
// counterexample; a glob the current policy does not use is also
// wildcard_widening.
func TestProvePromptsAndResources(t *testing.T) {
	cur := parse(t, docsPolicy)
	rule := func(p *policy.Policy) *policy.Endpoint { return p.NetworkPolicies["docs"].Endpoints[0] }

	t.Run("new prompt", func(t *testing.T) {
		prop := cur.Clone()
		ep := rule(prop)
		ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "prompts/get", Prompt: &policy.Matcher{Any: []string{"delete_all"}}}})
		rep := prove(t, cur, prop, Options{})
		k := kinds(rep)
		if len(rep.Findings) != 1 || len(k[NewMCPPrompt]) != 1 {
			t.Fatalf("want one new_mcp_prompt, got %s", show(rep.Findings))
		}
		f := k[NewMCPPrompt][0]
		if m := f.Counterexample.MCP; m == nil || m.Method != "prompts/get" || m.Prompt != "delete_all" {
			t.Fatalf("counterexample does not name delete_all: %s", describe(*f.Counterexample))
		}
		if f.Rule != "rules[3]" || !strings.Contains(f.Detail, "prompts/get delete_all was not allowed") {
			t.Fatalf("finding: %+v", f)
		}
	})

	t.Run("new resource glob", func(t *testing.T) {
		prop := cur.Clone()
		ep := rule(prop)
		ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "resources/read", Resource: &policy.Matcher{Any: []string{"file:///docs/**"}}}})
		rep := prove(t, cur, prop, Options{})
		k := kinds(rep)
		if len(k[NewMCPResource]) != 1 || len(k[WildcardWidening]) != 1 || len(rep.Findings) != 2 {
			t.Fatalf("want new_mcp_resource and wildcard_widening, got %s", show(rep.Findings))
		}
		f := k[NewMCPResource][0]
		uri := f.Counterexample.MCP.Resource
		if !policy.MatchResource("file:///docs/**", uri) || policy.MatchDenyResource("file:///docs/private/**", uri) || uri == "file:///docs/readme.md" {
			t.Fatalf("counterexample URI %q is not newly allowed", uri)
		}
		if !strings.Contains(k[WildcardWidening][0].Detail, "resource file:///docs/**") {
			t.Fatalf("wildcard_widening detail: %s", k[WildcardWidening][0].Detail)
		}
		// No URI the deny rule closes is covered, and no URI that is not
		// plain: the prover agrees with Decide on each.
		for _, u := range []string{"file:///docs/private/k", "file:///docs/PRIVATE/k", "file:///docs/x/../private/k", "file:///docs/%70rivate"} {
			r := *f.Counterexample
			m := *r.MCP
			m.Resource = u
			r.MCP = &m
			if f.Covers(r) {
				t.Errorf("the finding covers %q, which the proposed policy denies", u)
			}
		}
	})

	t.Run("removed resource deny rule", func(t *testing.T) {
		// The proposal drops the deny rule and allows the tree: the
		// private URIs are new as well.
		prop := cur.Clone()
		ep := rule(prop)
		ep.DenyRules = nil
		ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "resources/read", Resource: &policy.Matcher{Any: []string{"file:///docs/**"}}}})
		rep := prove(t, cur, prop, Options{})
		r := policy.Request{Binary: "/usr/bin/python3", Host: "docs.example.net", Port: 443, HTTPMethod: "POST", Path: "/mcp", Time: now,
			MCP: &policy.MCPMessage{Method: "resources/read", Resource: "file:///docs/private/key"}}
		covered := false
		for _, f := range rep.Findings {
			if f.Kind == NewMCPResource && f.Covers(r) {
				covered = true
			}
		}
		if !covered {
			t.Fatalf("no new_mcp_resource covers resources/read file:///docs/private/key; findings: %s", show(rep.Findings))
		}
	})

	t.Run("every spelling a removed deny rule closed", func(t *testing.T) {
		// What the case-folded, wide deny reading closed and the allow
		// glob admits is added when the deny rule goes: each such URI is
		// covered by a finding, and nothing else is.
		base := parse(t, strings.Replace(docsPolicy, `resource: "file:///docs/readme.md"`, `resource: "file:///docs/**"`, 1))
		prop := base.Clone()
		rule(prop).DenyRules = nil
		rep := prove(t, base, prop, Options{})
		for _, u := range []string{"file:///docs/private/k", "file:///docs/PRIVATE/k", "file:///docs/Private/a/b", "file:///docs/private",
			"file:///docs/private/", "file:///docs/x/../private/k", "file:///docs/%70rivate", "file:///docs/public", "FILE:///docs/private/k"} {
			r := policy.Request{Binary: "/usr/bin/python3", Host: "docs.example.net", Port: 443, HTTPMethod: "POST", Path: "/mcp", Time: now,
				MCP: &policy.MCPMessage{Method: "resources/read", Resource: u}}
			added := policy.Decide(prop, r).Allow && !policy.Decide(base, r).Allow
			covered := false
			for _, f := range rep.Findings {
				covered = covered || f.Counterexample != nil && f.Covers(r)
			}
			if added != covered {
				t.Errorf("%s: added %v, covered %v; findings: %s", u, added, covered, show(rep.Findings))
			}
		}
	})

	t.Run("first prompt is a new method", func(t *testing.T) {
		// Without any prompts/get allowed before, the method is what is new.
		base := cur.Clone()
		ep := rule(base)
		ep.Rules = ep.Rules[:1]
		ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "resources/read", Resource: &policy.Matcher{Any: []string{"file:///docs/readme.md"}}}})
		prop := cur.Clone()
		rep := prove(t, base, prop, Options{})
		k := kinds(rep)
		if len(rep.Findings) != 1 || len(k[NewMCPMethod]) != 1 || k[NewMCPMethod][0].Counterexample.MCP.Prompt != "summarize" {
			t.Fatalf("want one new_mcp_method for prompts/get summarize, got %s", show(rep.Findings))
		}
	})

	t.Run("narrowing adds nothing", func(t *testing.T) {
		prop := cur.Clone()
		ep := rule(prop)
		ep.DenyRules = append(ep.DenyRules, &policy.L7Rule{Method: "prompts/get", Prompt: &policy.Matcher{Any: []string{"*"}}})
		if rep := prove(t, cur, prop, Options{}); len(rep.Findings) != 0 {
			t.Fatalf("narrowing found %s", show(rep.Findings))
		}
	})
}

// plainURINFA accepts exactly the URIs policy.PlainResourceURI accepts.
func TestPlainURINFAAgreesWithPolicy(t *testing.T) {
	alphabet := []byte("af:/.%2E5C0%A;?#Z-")
	var walk func(s []byte)
	n := 0
	walk = func(s []byte) {
		n++
		if got, want := run(plainURINFA(), string(s)), policy.PlainResourceURI(string(s)) == nil; got != want {
			t.Fatalf("plainURINFA(%q) = %v, policy.PlainResourceURI = %v", s, got, want)
		}
		if len(s) == 4 {
			return
		}
		for _, c := range alphabet {
			walk(append(s, c))
		}
	}
	walk(nil)
	for _, u := range []string{"file:///docs/a.txt", "https://api.example.com/v1/x", "https://API.example.com/v1/x", "file:///a%2e", "file:///a%C3%A9", "urn:x:..", "file:///a/..;x"} {
		if got, want := run(plainURINFA(), u), policy.PlainResourceURI(u) == nil; got != want {
			t.Fatalf("plainURINFA(%q) = %v, policy.PlainResourceURI = %v", u, got, want)
		}
	}
}
