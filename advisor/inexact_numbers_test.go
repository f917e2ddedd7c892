package advisor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// A denied call with a number a float64 does not hold exactly has no
// proposal: the const of its RFC 8785 form would admit another number and
// leave the denied call denied. A number a float64 holds is fine.
func TestFromDenialRefusesInexactNumbers(t *testing.T) {
	base := ordersPolicy(t)
	for _, c := range []struct{ args, number string }{
		{`{"order_id":"A-1234","n":12345678901234567890}`, "12345678901234567890"},
		{`{"order_id":"A-1234","n":1000.00000000000000001}`, "1000.00000000000000001"},
		{`{"order_id":"A-1234","list":[1, {"n": 100.0000000000000000001}]}`, "100.0000000000000000001"},
	} {
		_, err := FromDenial(base, schemaDenial(c.args))
		r, ok := AsRefusal(err)
		if !ok || r.Rule != RuleArguments || r.Field != "arguments" || !strings.Contains(r.Reason, c.number) || !strings.Contains(r.Reason, "float64") {
			t.Errorf("%s: err = %v, want a %s refusal naming %s and float64", c.args, err, RuleArguments, c.number)
		}
	}
	exact := `{"order_id":"A-1234","n":1.0}`
	p, err := FromDenial(base, schemaDenial(exact))
	if err != nil {
		t.Fatalf("%s: FromDenial: %v", exact, err)
	}
	result, err := Apply(base, p)
	if err != nil {
		t.Fatal(err)
	}
	if d := policy.Decide(result, lookup(exact)); !d.Allow {
		t.Errorf("after approval %s is still denied: %s", exact, d.Reason)
	}
	schema, _ := json.Marshal(p.Operations[0].AddAllowRules.Rules[0].Allow.ArgumentsSchema)
	if string(schema) != `{"const":{"n":1,"order_id":"A-1234"}}` {
		t.Errorf("schema = %s", schema)
	}
}
