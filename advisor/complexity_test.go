package advisor

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/prover"
)

// adversarialProposal is the 883-byte attack: one add_rule whose
// endpoint allows GET on n globs like `/v1/*a*b*c*` (each with letters of
// its own), or with wildcards fewer stars per glob (`/v1/*a*`). Before the
// fix 8 such rules took 7.8 s and 300 MB in the gateway, 12 ran it out of
// memory.
func adversarialProposal(n, stars int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b strings.Builder
	b.WriteString("rationale: x\noperations:\n  - add_rule:\n      name: evil\n      rule:\n        binaries: [ { path: /usr/bin/curl } ]\n        endpoints:\n          - host: evil.example.com\n            port: 443\n            protocol: rest\n            rules:\n")
	k := 0
	for range n {
		seg := "*"
		for range stars - 1 {
			seg += string(letters[k%len(letters)]) + "*"
			k++
		}
		fmt.Fprintf(&b, "              - allow: { method: GET, path: \"/v1/%s\" }\n", seg)
	}
	return b.String()
}

func TestTooComplexRefused(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	cases := []struct {
		name  string
		doc   string
		field string
	}{
		// The proposals: refused at intake, before any proof.
		{"8 rules /v1/*a*b*c*", adversarialProposal(8, 4), "operations[0].add_rule.rule.endpoints[0].rules[0].allow.path"},
		{"12 rules /v1/*a*b*c*", adversarialProposal(12, 4), "operations[0].add_rule.rule.endpoints[0].rules[0].allow.path"},
		// Globs within the per-glob bound but too many of them.
		{"17 rules /v1/*a*", adversarialProposal(17, 2), "operations[0].add_rule.rule.endpoints[0].rules[16].allow.path"},
		// Deny rules count too: their wide reading costs the same.
		{"deny rule /v1/*a*b*", `
rationale: x
operations:
  - add_deny_rules:
      policy: shop
      host: shop.example.com
      port: 443
      path: /api/**
      rules: [ { method: GET, path: "/api/*a*b*" } ]
`, "operations[0].add_deny_rules.rules[0].path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, rep, err := Evaluate(context.Background(), base, mustParse(t, c.doc), opts())
			r, ok := AsRefusal(err)
			if !ok || r.Rule != RuleTooComplex || r.Field != c.field {
				t.Fatalf("want a too_complex refusal at %s, got %v", c.field, err)
			}
			if res != nil || rep != nil {
				t.Fatal("a refused proposal returned a result")
			}
		})
	}
}

// Within the intake bounds, a proposal whose proof would exceed the
// prover's budget is refused as too_complex, not answered partially: 16
// globs `/v1/*a*` realise 2^16 combinations.
func TestTooComplexProofRefused(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	p := mustParse(t, adversarialProposal(16, 2))
	if err := checkComplexity(p); err != nil {
		t.Fatalf("within the intake bounds: %v", err)
	}
	_, rep, err := Evaluate(context.Background(), base, p, opts())
	r, ok := AsRefusal(err)
	if !ok || r.Rule != RuleTooComplex || r.Op != 0 || !strings.Contains(r.Reason, "budget") || rep != nil {
		t.Fatalf("want a too_complex refusal of operation 0, got %v", err)
	}
	// One budget for the whole proposal: a smaller one refuses sooner.
	small := opts()
	small.Budget = 1000
	_, _, err = Evaluate(context.Background(), base, mustParse(t, adversarialProposal(2, 2)), small)
	if r, ok := AsRefusal(err); !ok || r.Rule != RuleTooComplex {
		t.Fatalf("budget 1000: %v", err)
	}
	// A cancelled context stops the proof with its error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := Evaluate(ctx, base, mustParse(t, adversarialProposal(2, 2)), opts()); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("cancelled: %v", err)
	}
	// Legitimate globs still prove.
	res, rep, err := Evaluate(context.Background(), base, mustParse(t, adversarialProposal(4, 2)), opts())
	if err != nil || res == nil || len(rep.Findings) == 0 || rep.Work <= 0 || rep.Work > prover.DefaultBudget {
		t.Fatalf("4 globs: %v", err)
	}
}
