package advisor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

// Evaluate applies p to base (Apply's narrowness checks), then proves each
// operation that adds access against the policy before it: an operation
// after which the prover finds no request-level finding would change
// nothing and is refused (RuleChangesNothing), with the reason when one
// can be shown (e.g. the tool is still denied by deny_rules). A changed
// arguments_schema (the rule-level finding arguments_widened) counts as a
// change: what a schema admits is not split into request classes; so does
// a re-pin (tool_definition_changed: the prover judges every pin as met). It returns
// the resulting policy and the proof of base against it under opts (the
// gateway passes the sandbox's boundary and credentialed destinations: the
// attached providers' hosts, patterns among them, and `sandbox
// credentials`), with the destinations of base's credential-bound endpoints
// credentialed too (credentials.go).
//
// What the advisor cannot prove it refuses: globs beyond MaxGlobWildcards
// and MaxGlobs, and a proposal whose proofs together would exceed one
// prover budget (opts.Budget, zero: prover.DefaultBudget), are
// RuleTooComplex. A done ctx stops the proofs with its error.
func Evaluate(ctx context.Context, base *policy.Policy, p *Proposal, opts prover.Options) (*policy.Policy, *prover.Report, error) {
	steps, result, err := applySteps(base, p)
	if err != nil {
		return nil, nil, err
	}
	if err := checkComplexity(p); err != nil {
		return nil, nil, err
	}
	budget := newProofBudget(opts)
	stepOpts := opts
	stepOpts.Boundary = nil
	stepOpts.Credentialed = nil
	prev := base.Canonical()
	var found refusals // every operation that changes nothing, in one answer
	for i, op := range p.Operations {
		if op.AddDenyRules == nil {
			field := keyPath(indexPath("operations", i), op.Kind())
			rep, err := budget.prove(ctx, i, field, prev, steps[i], stepOpts)
			if err != nil {
				return nil, nil, err
			}
			if !hasRequestFinding(rep) && !hasFinding(rep, prover.ArgumentsWidened) && !hasFinding(rep, prover.ToolDefinitionChanged) {
				found.add(&RefusalError{Op: i, Field: field, Rule: RuleChangesNothing,
					Reason: "would change nothing: " + explain(prev, steps[i], op)})
			}
		}
		prev = steps[i]
	}
	if err := found.err(); err != nil {
		return nil, nil, err
	}
	opts.Credentialed = boundDestinations(opts.Credentialed, base)
	rep, err := budget.prove(ctx, -1, "", base, result, opts)
	if err != nil {
		return nil, nil, err
	}
	return result, rep, nil
}

func hasFinding(rep *prover.Report, kind string) bool {
	for _, f := range rep.Findings {
		if f.Kind == kind {
			return true
		}
	}
	return false
}

func hasRequestFinding(rep *prover.Report) bool {
	for _, f := range rep.Findings {
		if f.Counterexample != nil {
			return true
		}
	}
	return false
}

// explain says why an operation adds nothing, for the requests its rules
// name exactly.
func explain(before, after *policy.Policy, op Operation) string {
	const generic = "the resulting policy allows no request the current one denies"
	o := op.AddAllowRules
	if o == nil {
		return generic
	}
	entry := after.NetworkPolicies[o.Policy]
	if entry == nil {
		return generic
	}
	binary := ""
	if len(entry.Binaries) > 0 {
		binary = entry.Binaries[0].Path
		if hasMeta(binary) {
			return generic
		}
	}
	var ep *policy.Endpoint
	for _, e := range entry.Endpoints {
		if canonicalHost(e.Host) == canonicalHost(o.Host) && (o.Path == "" || e.Path == o.Path) {
			ep = e
			break
		}
	}
	if ep == nil || strings.Contains(ep.Host, "*") {
		return generic
	}
	var reasons []string
	for _, rule := range o.Rules {
		r, ok := sampleRequest(binary, ep, o.Port, rule.Allow)
		if !ok {
			continue
		}
		what := describeRequest(r)
		if d := policy.Decide(before, r); d.Allow {
			reasons = append(reasons, fmt.Sprintf("%s is already allowed (%s)", what, d.Reason))
		} else if d := policy.Decide(after, r); !d.Allow {
			reasons = append(reasons, fmt.Sprintf("%s is still denied: %s", what, d.Reason))
		}
	}
	if len(reasons) == 0 {
		return generic
	}
	return strings.Join(reasons, "; ")
}

// sampleRequest builds the request an exact allow rule names.
func sampleRequest(binary string, ep *policy.Endpoint, port int, a *policy.L7Rule) (policy.Request, bool) {
	r := policy.Request{Binary: binary, Host: ep.Host, Port: port}
	if ep.Path != "" && policy.HasWildcard(ep.Path) {
		return r, false
	}
	switch ep.Protocol {
	case policy.ProtocolREST:
		if a == nil || policy.HasWildcard(a.Path) || a.Query != nil {
			return r, false
		}
		r.HTTPMethod, r.Path = strings.ToUpper(a.Method), policy.UnescapeGlob(a.Path)
	case policy.ProtocolMCP:
		if a == nil || a.Method == "" {
			return r, false
		}
		r.HTTPMethod, r.Path = "POST", "/"
		if ep.Path != "" {
			r.Path = policy.UnescapeGlob(ep.Path)
		}
		m := &policy.MCPMessage{Method: a.Method}
		if a.Tool != nil && len(a.Tool.Any) > 0 {
			m.Tool = a.Tool.Any[0]
		}
		for _, n := range []struct {
			matcher *policy.Matcher
			name    *string
		}{{a.Prompt, &m.Prompt}, {a.Resource, &m.Resource}} {
			if n.matcher == nil || len(n.matcher.Any) == 0 {
				continue
			}
			if policy.HasWildcard(n.matcher.Any[0]) {
				return r, false
			}
			*n.name = policy.UnescapeGlob(n.matcher.Any[0])
		}
		if c, ok := a.ArgumentsSchema["const"]; ok {
			// The arguments a const schema names exactly.
			if raw, err := json.Marshal(c); err == nil {
				m.Arguments = raw
			}
		}
		r.MCP = m
	default:
		return r, false
	}
	return r, true
}

func describeRequest(r policy.Request) string {
	if r.MCP != nil {
		return policy.DescribeMCP(r.MCP)
	}
	return r.HTTPMethod + " " + r.Path
}
