package advisor

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

// TestProposalReleasingReviewedCall: a proposal may add a narrow rule
// without review for a reviewed tool (lookup_order here; what `calls
// approve --remember` files); it is accepted, and its proof says
// review_removed with the call's exact arguments. Setting review in it is refused, and the
// refusal says why and stores nothing.
func TestProposalReleasingReviewedCall(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	base.NetworkPolicies["orders"].Endpoints[0].Rules[2].Allow.Review = &policy.Review{Required: true} // lookup_order
	const args = `{"order_id":"A-1042","amount":12.5}`
	p := mustParse(t, mcpAllow(`{ allow: { method: tools/call, tool: lookup_order, arguments_schema: { const: `+args+` } } }`))
	result, rep, err := Evaluate(context.Background(), base, p, opts())
	if err != nil {
		t.Fatal(err)
	}
	if got := result.NetworkPolicies["orders"].Endpoints[0].Rules[3].Allow; got.Review != nil {
		t.Errorf("the added rule has review %+v", got.Review)
	}
	var found *prover.Finding
	for i, f := range rep.Findings {
		if f.Kind == prover.ReviewRemoved {
			found = &rep.Findings[i]
		}
	}
	if found == nil || found.Counterexample == nil || found.Counterexample.MCP == nil {
		t.Fatalf("want review_removed with a counterexample: %+v", rep.Findings)
	}
	var got, want any
	if err := json.Unmarshal(found.Counterexample.MCP.Arguments, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(args), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("counterexample arguments %s, want %s", found.Counterexample.MCP.Arguments, args)
	}

	// The same rule asking for review is refused: review is the
	// operator's.
	withReview := mustParse(t, mcpAllow(`{ allow: { method: tools/call, tool: track, review: { required: true } } }`))
	before := base.Hash()
	res, _, err := Evaluate(context.Background(), base, withReview, opts())
	r, ok := AsRefusal(err)
	if !ok || res != nil || r.Rule != RuleForbiddenField || r.Field != "operations[0].add_allow_rules.rules[0].allow.review" ||
		!strings.Contains(r.Reason, "operator's annotation") {
		t.Fatalf("want a forbidden_field refusal of review, got %v (%+v)", err, r)
	}
	if base.Hash() != before {
		t.Error("a refused proposal changed the base policy")
	}
}
