package advisor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

// Complexity bounds at intake. The prover's work grows exponentially with
// the number of globs whose matches can combine freely (n globs like
// `/v1/*a*b*c*` realise 2^n combinations), so a proposal may use only a
// few, simple ones; the prover's own budget (prover.DefaultBudget) then
// bounds what is left, and a proof that would exceed it is refused as
// RuleTooComplex too.
const (
	// MaxGlobWildcards is the most wildcards (`*` runs, `?`, `[…]`) one
	// glob of a proposal may hold, not counting a trailing `/**`.
	MaxGlobWildcards = 2
	// MaxGlobs is the most globs (patterns holding a wildcard other than
	// a trailing `/**`) a proposal may hold in all.
	MaxGlobs = 16
)

// globField is one glob of a proposal and where it is.
type globField struct {
	op          int
	field, glob string
}

// proposalGlobs lists every glob-valued field of p: endpoint path scopes,
// rule paths, methods, tools and query matchers.
func proposalGlobs(p *Proposal) []globField {
	var out []globField
	rule := func(op int, fp string, r *policy.L7Rule) {
		if r == nil {
			return
		}
		if r.Path != "" {
			out = append(out, globField{op, keyPath(fp, "path"), r.Path})
		}
		if r.Method != "" {
			out = append(out, globField{op, keyPath(fp, "method"), r.Method})
		}
		for _, m := range []struct {
			field string
			m     *policy.Matcher
		}{{"tool", r.Tool}, {"prompt", r.Prompt}, {"resource", r.Resource}} {
			if m.m != nil {
				for i, t := range m.m.Any {
					out = append(out, globField{op, indexPath(keyPath(fp, m.field), i), t})
				}
			}
		}
		for _, m := range []map[string]*policy.Matcher{r.Query, r.Params} {
			names := make([]string, 0, len(m))
			for name := range m {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				if m[name] == nil {
					continue
				}
				for i, g := range m[name].Any {
					out = append(out, globField{op, indexPath(keyPath(fp, name), i), g})
				}
			}
		}
	}
	for i, op := range p.Operations {
		fp := keyPath(indexPath("operations", i), op.Kind())
		switch {
		case op.AddRule != nil && op.AddRule.Rule != nil:
			for j, ep := range op.AddRule.Rule.Endpoints {
				if ep == nil {
					continue
				}
				efp := indexPath(keyPath(keyPath(fp, "rule"), "endpoints"), j)
				if ep.Path != "" {
					out = append(out, globField{i, keyPath(efp, "path"), ep.Path})
				}
				for k, r := range ep.Rules {
					rule(i, keyPath(indexPath(keyPath(efp, "rules"), k), "allow"), r.Allow)
				}
				for k, r := range ep.DenyRules {
					rule(i, indexPath(keyPath(efp, "deny_rules"), k), r)
				}
			}
		case op.AddAllowRules != nil:
			for k, r := range op.AddAllowRules.Rules {
				rule(i, keyPath(indexPath(keyPath(fp, "rules"), k), "allow"), r.Allow)
			}
		case op.AddDenyRules != nil:
			for k, r := range op.AddDenyRules.Rules {
				rule(i, indexPath(keyPath(fp, "rules"), k), r)
			}
		}
	}
	return out
}

// wildcards counts the wildcards of a glob: `*` runs, `?` and bracket
// classes, not escaped, and not a trailing `/**` segment.
func wildcards(g string) int {
	g = strings.TrimSuffix(g, "/**")
	n := 0
	for i := 0; i < len(g); i++ {
		switch g[i] {
		case '\\':
			i++
		case '*':
			n++
			for i+1 < len(g) && g[i+1] == '*' {
				i++
			}
		case '?':
			n++
		case '[':
			n++
			if j := strings.IndexByte(g[i+1:], ']'); j >= 0 {
				i += j + 1
			}
		}
	}
	return n
}

// checkComplexity refuses a proposal whose globs are beyond the intake
// bounds (RuleTooComplex).
func checkComplexity(p *Proposal) error {
	globs := 0
	for _, g := range proposalGlobs(p) {
		n := wildcards(g.glob)
		if n == 0 {
			continue
		}
		if n > MaxGlobWildcards {
			return &RefusalError{Op: g.op, Field: g.field, Rule: RuleTooComplex,
				Reason: fmt.Sprintf("%q has %d wildcards; a proposal's globs may hold at most %d (besides a trailing /**)", g.glob, n, MaxGlobWildcards)}
		}
		if globs++; globs > MaxGlobs {
			return &RefusalError{Op: g.op, Field: g.field, Rule: RuleTooComplex,
				Reason: fmt.Sprintf("a proposal may hold at most %d globs; name paths and tools exactly, or split the proposal", MaxGlobs)}
		}
	}
	return nil
}

// proofBudget spends one budget over the several proofs of one Evaluate.
type proofBudget struct{ total, left int64 }

func newProofBudget(opts prover.Options) *proofBudget {
	b := opts.Budget
	if b <= 0 {
		b = prover.DefaultBudget
	}
	return &proofBudget{total: b, left: b}
}

// prove runs one proof with what is left of the budget; a proof over it
// is refused as RuleTooComplex (op -1: the proposal as a whole).
func (b *proofBudget) prove(ctx context.Context, op int, field string, cur, next *policy.Policy, opts prover.Options) (*prover.Report, error) {
	opts.Budget = b.left
	rep, err := prover.Prove(ctx, cur, next, opts)
	var tc *prover.TooComplexError
	if errors.As(err, &tc) {
		return nil, &RefusalError{Op: op, Field: field, Rule: RuleTooComplex,
			Reason: fmt.Sprintf("the prover cannot prove what this proposal adds within its budget (%d work units for the whole proposal, spent in the %s); use fewer or simpler globs, or split the proposal", b.total, tc.Stage)}
	}
	if err != nil {
		return nil, err
	}
	b.left -= rep.Work
	if b.left <= 0 {
		b.left = 1
	}
	return rep, nil
}
