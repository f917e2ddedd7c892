package advisor

import (
	"context"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

var (
	pinA = "sha256:" + strings.Repeat("a", 64)
	pinB = "sha256:" + strings.Repeat("b", 64)
)

// pinnedPolicy pins lookup_order (the orders example, with its schema)
// to pinA; track_shipment is allowed unpinned.
func pinnedPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p := ordersPolicy(t)
	ep := p.NetworkPolicies["orders"].Endpoints[0]
	for _, r := range ep.Rules {
		if r.Allow != nil && r.Allow.Method == "tools/call" {
			r.Allow.Definition = pinA
		}
	}
	ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{"track_shipment"}}}})
	return p.Canonical()
}

func definitionDenial(seen string) DenialRecord {
	rec := schemaDenial(`{"order_id":"A-1234"}`)
	rec.ReasonCode, rec.ToolDefinition = policy.ToolDefinitionChanged, seen
	return rec
}

// A call denied because lookup_order's definition changed becomes a
// repin: only the pinned rule's definition changes, to the one the proxy
// saw. Evaluate takes it (the change is not "changes nothing"), the
// prover reports tool_definition_changed and nothing else, and the result
// allows the call with the new definition, no longer with the old one.
func TestFromDenialRepin(t *testing.T) {
	base := pinnedPolicy(t)
	rec := definitionDenial(pinB)
	call := lookup(`{"order_id":"A-1234"}`)
	call.MCP.ToolDefinition = pinB
	if policy.Decide(base, call).Allow {
		t.Fatal("the pinned policy allows lookup_order with another definition")
	}
	p, err := FromDenial(base, rec)
	if err != nil {
		t.Fatalf("FromDenial: %v", err)
	}
	want := Repin{EndpointRef: EndpointRef{Policy: "orders", Host: "demo-mcp", Port: 8081, Path: "/mcp"}, Tool: "lookup_order", From: pinA, To: pinB}
	if len(p.Operations) != 1 || p.Operations[0].Repin == nil || *p.Operations[0].Repin != want {
		t.Fatalf("operations = %+v; want one repin %+v", p.Operations, want)
	}
	if !strings.Contains(p.Rationale, "re-pin tools/call lookup_order") {
		t.Errorf("rationale = %q", p.Rationale)
	}
	result, rep, err := Evaluate(context.Background(), base, p, prover.Options{})
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != prover.ToolDefinitionChanged {
		t.Fatalf("findings = %+v; want tool_definition_changed alone", rep.Findings)
	}
	changes := policy.Diff(base, result)
	if len(changes) != 1 || !strings.Contains(changes[0].Summary, pinA+" → "+pinB) {
		t.Errorf("diff = %+v; want the definition alone changed", changes)
	}
	if d := policy.Decide(result, call); !d.Allow {
		t.Errorf("the re-pinned policy denies the call: %s", d.Reason)
	}
	call.MCP.ToolDefinition = pinA
	if policy.Decide(result, call).Allow {
		t.Error("the re-pinned policy still allows the old definition")
	}
	// The same proposal, through the strict reader (the wire form).
	doc, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseProposal(doc)
	if err != nil || *again.Operations[0].Repin != want {
		t.Errorf("ParseProposal(Encode) = %+v, %v", again, err)
	}
}

// What FromDenial refuses to re-pin, with the rule and why.
func TestFromDenialRepinRefused(t *testing.T) {
	base := pinnedPolicy(t)
	for _, tc := range []struct {
		name       string
		base       *policy.Policy
		rec        DenialRecord
		rule, want string
	}{
		{"no definition verified", base, definitionDenial(""), RuleDefinition, "could not verify"},
		{"not a fingerprint", base, definitionDenial("sha256:xyz"), RuleDefinition, "not a definition fingerprint"},
		{"the pin is the definition seen", base, definitionDenial(pinA), RuleNotOffered, "does not refuse it for its definition"},
		{"an unpinned tool", base, func() DenialRecord { r := definitionDenial(pinB); r.Tool = "track_shipment"; return r }(), RuleNotOffered, "does not refuse it"},
		{"no such endpoint", base, func() DenialRecord { r := definitionDenial(pinB); r.Port = 9999; return r }(), RuleUnknownTarget, "no endpoint"},
	} {
		_, err := FromDenial(tc.base, tc.rec)
		r, ok := AsRefusal(err)
		if !ok || r.Rule != tc.rule || !strings.Contains(r.Reason, tc.want) {
			t.Errorf("%s: %v; want refusal %s saying %q", tc.name, err, tc.rule, tc.want)
		}
	}
}

// A repin in a proposal file: refused with the field and rule when it
// names no pinned rule, the same definition, a fingerprint that is not
// one, a glob tool or a REST endpoint; missing fields are parse errors.
func TestRepinRefused(t *testing.T) {
	base := pinnedPolicy(t)
	rest := mustParsePolicy(t, `version: 1
network_policies:
  api:
    endpoints: [{host: api.example.com, port: 443, protocol: rest, rules: [{allow: {method: GET, path: /v1}}]}]
    binaries: [{path: /usr/bin/curl}]
`)
	op := func(change func(o *Repin)) *Proposal {
		o := Repin{EndpointRef: EndpointRef{Policy: "orders", Host: "demo-mcp", Port: 8081, Path: "/mcp"}, Tool: "lookup_order", From: pinA, To: pinB}
		change(&o)
		return &Proposal{Rationale: "r", Operations: []Operation{{Repin: &o}}}
	}
	for _, tc := range []struct {
		name        string
		base        *policy.Policy
		p           *Proposal
		field, rule string
	}{
		{"another pin", base, op(func(o *Repin) { o.From = "sha256:" + strings.Repeat("c", 64) }), "operations[0].repin.from", RuleUnknownTarget},
		{"an unpinned tool", base, op(func(o *Repin) { o.Tool = "track_shipment" }), "operations[0].repin.from", RuleUnknownTarget},
		{"the same definition", base, op(func(o *Repin) { o.To = pinA }), "operations[0].repin.to", RuleChangesNothing},
		{"upper-case hex", base, op(func(o *Repin) { o.To = strings.ToUpper(pinB) }), "operations[0].repin.to", RuleDefinition},
		{"a bad from", base, op(func(o *Repin) { o.From = "md5:abc" }), "operations[0].repin.from", RuleDefinition},
		{"a tool glob", base, op(func(o *Repin) { o.Tool = "lookup_*" }), "operations[0].repin.tool", RuleTool},
		{"no such entry", base, op(func(o *Repin) { o.Policy = "nope" }), "operations[0].repin.policy", RuleUnknownTarget},
		{"a rest endpoint", rest, op(func(o *Repin) { o.Policy, o.Host, o.Port, o.Path = "api", "api.example.com", 443, "" }), "operations[0].repin.host", RuleProtocol},
	} {
		_, err := Apply(tc.base, tc.p)
		r, ok := AsRefusal(err)
		if !ok || r.Field != tc.field || r.Rule != tc.rule {
			t.Errorf("%s: %v; want %s at %s", tc.name, err, tc.rule, tc.field)
		}
	}
	_, err := ParseProposal([]byte(`{"rationale": "r", "operations": [{"repin": {"policy": "orders", "host": "demo-mcp", "port": 8081, "tool": "lookup_order"}}]}`))
	if err == nil || !strings.Contains(err.Error(), "operations[0].repin.from: is required") || !strings.Contains(err.Error(), "operations[0].repin.to: is required") {
		t.Errorf("a repin without from and to: %v", err)
	}
	_, err = ParseProposal([]byte(`{"rationale": "r", "operations": [{"repin": {"policy": "orders", "host": "demo-mcp", "port": 8081, "tool": "t", "from": "x", "to": "y"}, "add_deny_rules": {"policy": "orders", "host": "demo-mcp", "port": 8081, "rules": [{"method": "tools/call", "tool": "t"}]}}]}`))
	if err == nil || !strings.Contains(err.Error(), "exactly one of") {
		t.Errorf("an operation with a repin and another kind: %v", err)
	}
}
