package prover

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// reviewedPolicies loads testdata/reviewed.yaml (refund_order and POST
// /v1/payouts/** held for review) and a copy changed by edit.
func reviewedPolicies(t *testing.T, edit func(p *policy.Policy)) (cur, prop *policy.Policy) {
	t.Helper()
	cur = load(t, "testdata/reviewed.yaml")
	prop = cur.Clone()
	edit(prop)
	if _, err := policy.Validate(prop); err != nil {
		t.Fatalf("proposed policy: %v", err)
	}
	return cur, prop
}

func ordersRules(p *policy.Policy) *[]policy.Rule {
	return &p.NetworkPolicies["orders"].Endpoints[0].Rules
}

func only(t *testing.T, rep *Report, kind string) Finding {
	t.Helper()
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != kind {
		t.Fatalf("want one %s, got %s", kind, show(rep.Findings))
	}
	return rep.Findings[0]
}

func sameJSON(t *testing.T, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("arguments %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("arguments = %s, want %s", got, want)
	}
}

// TestReviewRemovedByRememberedArguments is what `calls approve
// --remember` files: a rule allowing exactly one call's arguments of a
// reviewed tool, without review. The prover reports review_removed, and
// its counterexample is that call, with exactly those arguments.
func TestReviewRemovedByRememberedArguments(t *testing.T) {
	const args = `{"order_id":"A-1042","amount":12.5,"note":"refund; ticket 8812"}`
	var constArgs any
	if err := json.Unmarshal([]byte(args), &constArgs); err != nil {
		t.Fatal(err)
	}
	remember := func(p *policy.Policy, schema map[string]any) {
		rules := ordersRules(p)
		*rules = append(*rules, policy.Rule{Allow: &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{"refund_order"}}, ArgumentsSchema: schema}})
	}
	cur, prop := reviewedPolicies(t, func(p *policy.Policy) { remember(p, map[string]any{"const": constArgs}) })
	f := only(t, prove(t, cur, prop, Options{}), ReviewRemoved)
	c := f.Counterexample
	if f.Entry != "orders" || f.Rule != "rules[3]" || c == nil || c.MCP == nil || c.MCP.Tool != "refund_order" || c.Binary != "/usr/bin/python3" {
		t.Fatalf("finding %+v, counterexample %+v", f, c)
	}
	sameJSON(t, c.MCP.Arguments, args)
	if !strings.Contains(f.Detail, "held for a person's review by rules[2]") {
		t.Errorf("detail %q does not name the reviewed rule", f.Detail)
	}
	// Other arguments are still held.
	other := *c
	m := *c.MCP
	m.Arguments = json.RawMessage(`{"order_id":"A-1042","amount":900}`)
	other.MCP = &m
	if d := policy.Decide(prop, other); !d.Allow || d.Review == 0 {
		t.Errorf("other arguments under the proposed policy: %+v, want held", d)
	}

	// A second call remembered for the same tool: the current policy
	// already allows the first call's arguments without review, so
	// judging without arguments sees no change; the rule's own
	// arguments show it.
	second := `{"order_id":"B-7","amount":3}`
	var secondArgs any
	if err := json.Unmarshal([]byte(second), &secondArgs); err != nil {
		t.Fatal(err)
	}
	cur2 := prop
	prop2 := cur2.Clone()
	remember(prop2, map[string]any{"const": secondArgs})
	rep := prove(t, cur2, prop2, Options{})
	k := kinds(rep)
	if len(k[ReviewRemoved]) != 1 {
		t.Fatalf("want one review_removed, got %s", show(rep.Findings))
	}
	f = k[ReviewRemoved][0]
	if f.Rule != "rules[4]" || f.Counterexample == nil || f.Counterexample.MCP == nil {
		t.Fatalf("finding %+v", f)
	}
	sameJSON(t, f.Counterexample.MCP.Arguments, second)
	if len(k[ArgumentsWidened]) != 1 {
		t.Errorf("want the arguments_widened of the new schema too: %s", show(rep.Findings))
	}
}

func TestReviewRemovedFromRule(t *testing.T) {
	t.Run("mcp", func(t *testing.T) {
		cur, prop := reviewedPolicies(t, func(p *policy.Policy) { (*ordersRules(p))[2].Allow.Review = nil })
		f := only(t, prove(t, cur, prop, Options{}), ReviewRemoved)
		if f.Rule != "rules[2]" || f.Counterexample.MCP == nil || f.Counterexample.MCP.Tool != "refund_order" {
			t.Fatalf("finding %+v, counterexample %+v", f, f.Counterexample)
		}
	})
	t.Run("not required", func(t *testing.T) {
		cur, prop := reviewedPolicies(t, func(p *policy.Policy) { (*ordersRules(p))[2].Allow.Review.Required = false })
		only(t, prove(t, cur, prop, Options{}), ReviewRemoved)
	})
	t.Run("rest", func(t *testing.T) {
		cur, prop := reviewedPolicies(t, func(p *policy.Policy) {
			p.NetworkPolicies["payouts"].Endpoints[0].Rules[1].Allow.Review = nil
		})
		f := only(t, prove(t, cur, prop, Options{}), ReviewRemoved)
		c := f.Counterexample
		if f.Entry != "payouts" || f.Rule != "rules[1]" || c.HTTPMethod != "POST" || !strings.HasPrefix(c.Path, "/v1/payouts") {
			t.Fatalf("finding %+v, counterexample %+v", f, c)
		}
	})
	t.Run("a new entry without review", func(t *testing.T) {
		cur, prop := reviewedPolicies(t, func(p *policy.Policy) {
			p.NetworkPolicies["more"] = &policy.NetworkPolicy{Binaries: []policy.Binary{{Path: "/usr/bin/python3"}},
				Endpoints: []*policy.Endpoint{{Host: "api.example.com", Port: 443, Protocol: policy.ProtocolREST,
					Rules: []policy.Rule{{Allow: &policy.L7Rule{Method: "POST", Path: "/v1/payouts/small"}}}}}}
		})
		f := only(t, prove(t, cur, prop, Options{}), ReviewRemoved)
		if f.Entry != "more" || f.Counterexample.Path != "/v1/payouts/small" {
			t.Fatalf("finding %+v, counterexample %+v", f, f.Counterexample)
		}
	})
}

func TestReviewAdded(t *testing.T) {
	cur, prop := reviewedPolicies(t, func(p *policy.Policy) {
		(*ordersRules(p))[1].Allow.Review = &policy.Review{Required: true, Timeout: "90s"}
	})
	f := only(t, prove(t, cur, prop, Options{}), ReviewAdded)
	if f.Rule != "rules[1]" || f.Counterexample.MCP == nil || f.Counterexample.MCP.Tool != "lookup_order" || !strings.Contains(f.Detail, "timeout 1m30s") {
		t.Fatalf("finding %+v, counterexample %+v", f, f.Counterexample)
	}
	// The reverse change is review_removed.
	only(t, prove(t, prop, cur, Options{}), ReviewRemoved)
}

// TestReviewTimeoutAlone: a review's timeout is how long a call waits,
// not what is allowed: changing it alone is no finding (policy diff shows
// it).
func TestReviewTimeoutAlone(t *testing.T) {
	cur, prop := reviewedPolicies(t, func(p *policy.Policy) {
		(*ordersRules(p))[2].Allow.Review.Timeout = "15m"
		p.NetworkPolicies["payouts"].Endpoints[0].Rules[1].Allow.Review.Timeout = "10s"
	})
	if rep := prove(t, cur, prop, Options{}); len(rep.Findings) != 0 {
		t.Fatalf("timeouts alone: %s", show(rep.Findings))
	}
}

// TestNewReviewedRule: a new rule with review still adds what it allows,
// reported as always, its detail saying the calls are held.
func TestNewReviewedRule(t *testing.T) {
	cur, prop := reviewedPolicies(t, func(p *policy.Policy) {
		rules := ordersRules(p)
		*rules = append(*rules, policy.Rule{Allow: &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{"cancel_order"}},
			Review: &policy.Review{Required: true}}})
	})
	f := only(t, prove(t, cur, prop, Options{}), NewMCPTool)
	if f.Counterexample.MCP.Tool != "cancel_order" || !strings.Contains(f.Detail, "held for a person's review") {
		t.Fatalf("finding %+v", f)
	}
	if d := policy.Decide(prop, *f.Counterexample); d.Review != policy.DefaultReviewTimeout {
		t.Fatalf("counterexample decision %+v, want a reviewed allow", d)
	}
}

// TestReviewRemovedPinned: rules that pin the tool's definition (as a
// remembered call's rule keeps its guard's pin) are judged with the pin
// met, as every probe is.
func TestReviewRemovedPinned(t *testing.T) {
	const pin = "sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	rule := func(args string) policy.Rule {
		var v any
		if err := json.Unmarshal([]byte(args), &v); err != nil {
			t.Fatal(err)
		}
		return policy.Rule{Allow: &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{"refund_order"}},
			ArgumentsSchema: map[string]any{"const": v}, Definition: pin}}
	}
	cur, prop := reviewedPolicies(t, func(p *policy.Policy) {
		rules := ordersRules(p)
		(*rules)[2].Allow.Definition = pin
		*rules = append(*rules, rule(`{"order_id":"A-1"}`), rule(`{"order_id":"B-2"}`))
	})
	cur = cur.Clone()
	rules := ordersRules(cur)
	(*rules)[2].Allow.Definition = pin
	*rules = append(*rules, rule(`{"order_id":"A-1"}`))
	k := kinds(prove(t, cur, prop, Options{}))
	if len(k[ReviewRemoved]) != 1 || k[ReviewRemoved][0].Rule != "rules[4]" {
		t.Fatalf("want review_removed at rules[4]: %+v", k)
	}
	sameJSON(t, k[ReviewRemoved][0].Counterexample.MCP.Arguments, `{"order_id":"B-2"}`)
}
