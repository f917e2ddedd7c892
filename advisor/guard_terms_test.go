package advisor

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane/match"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

func ordersYAML(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../examples/orders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// guardedOrdersPolicy is examples/orders.yaml with extra lines added to
// the lookup_order rule (after its tool).
func guardedOrdersPolicy(t *testing.T, extra string) *policy.Policy {
	t.Helper()
	return mustParsePolicy(t, strings.Replace(ordersYAML(t), "              tool: lookup_order\n", "              tool: lookup_order\n"+extra, 1))
}

func findingKinds(rep *prover.Report) []string {
	var kinds []string
	for _, f := range rep.Findings {
		kinds = append(kinds, f.Kind)
	}
	return kinds
}

// The rule admitting exactly the denied arguments keeps the guard rule's
// rate_limit and definition pin: the proposal widens the arguments only
// (the prover finds arguments_widened and nothing else), and after
// approval the call passes under the rate limit and the pin.
func TestFromDenialKeepsGuardRateLimitAndPin(t *testing.T) {
	pin := "sha256:" + strings.Repeat("ab", 32)
	base := guardedOrdersPolicy(t, "              rate_limit: { requests_per_minute: 6, burst: 3 }\n              definition: "+pin+"\n")
	denied := `{"order_id":"x"}`
	p, err := FromDenial(base, schemaDenial(denied))
	if err != nil {
		t.Fatalf("FromDenial: %v", err)
	}
	rule := p.Operations[0].AddAllowRules.Rules[0].Allow
	if rule.RateLimit == nil || rule.RateLimit.RequestsPerMinute != 6 || rule.RateLimit.Burst != 3 {
		t.Errorf("proposed rule's rate_limit = %+v, want the guard's 6/min burst 3", rule.RateLimit)
	}
	if rule.Definition != pin {
		t.Errorf("proposed rule's definition = %q, want the guard's pin %s", rule.Definition, pin)
	}
	result, rep, err := Evaluate(context.Background(), base, p, prover.Options{Now: now})
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	if kinds := findingKinds(rep); len(kinds) != 1 || kinds[0] != prover.ArgumentsWidened {
		t.Errorf("findings = %v, want exactly [%s]", kinds, prover.ArgumentsWidened)
	}
	m, err := match.Compile(result)
	if err != nil {
		t.Fatal(err)
	}
	req := lookup(denied)
	req.MCP.ToolDefinition = pin
	d := m.Decide(&req)
	if !d.Allow {
		t.Fatalf("after approval the denied call is still denied: %s", d.Reason)
	}
	if m.RateLimit(&d) == nil {
		t.Errorf("after approval the call is allowed by %s.%s with no rate_limit", d.Entry, d.Rule)
	}
	req.MCP.ToolDefinition = "sha256:" + strings.Repeat("cd", 32)
	if d := m.Decide(&req); d.Allow {
		t.Errorf("after approval the call passes under another tool definition (%s.%s)", d.Entry, d.Rule)
	}
}

// Several guard rules: the proposed rule takes the strictest rate limit of
// them; guard rules pinning different definitions are refused.
func TestFromDenialGuardTermsOfSeveralRules(t *testing.T) {
	second := `          - allow:
              method: tools/call
              tool: lookup_order
              rate_limit: RL2
              PIN2arguments_schema: { type: object, required: [customer_id] }
`
	build := func(rl1, rl2, pin1, pin2 string) *policy.Policy {
		doc := strings.Replace(ordersYAML(t), "              tool: lookup_order\n", "              tool: lookup_order\n              rate_limit: "+rl1+"\n"+pin1, 1)
		s := strings.NewReplacer("RL2", rl2, "PIN2", pin2).Replace(second)
		doc = strings.Replace(doc, "        deny_rules:\n", s+"        deny_rules:\n", 1)
		return mustParsePolicy(t, doc)
	}
	denied := `{"order_id":"x"}`
	p, err := FromDenial(build("{ requests_per_minute: 6, burst: 10 }", "{ requests_per_minute: 60, burst: 3 }", "", ""), schemaDenial(denied))
	if err != nil {
		t.Fatalf("FromDenial: %v", err)
	}
	if rl := p.Operations[0].AddAllowRules.Rules[0].Allow.RateLimit; rl == nil || rl.RequestsPerMinute != 6 || rl.Burst != 3 {
		t.Errorf("rate_limit = %+v, want 6/min burst 3", rl)
	}
	pinA, pinB := "sha256:"+strings.Repeat("ab", 32), "sha256:"+strings.Repeat("cd", 32)
	_, err = FromDenial(build("{ requests_per_minute: 6 }", "{ requests_per_minute: 6 }",
		"              definition: "+pinA+"\n", "definition: "+pinB+"\n              "), schemaDenial(denied))
	r, ok := AsRefusal(err)
	if !ok || r.Rule != RuleArguments || !strings.Contains(r.Reason, "different definitions") {
		t.Errorf("guard rules with different pins: err = %v, want a %s refusal naming different definitions", err, RuleArguments)
	}
}
