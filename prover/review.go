package prover

import (
	"fmt"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// Reviewed allows. A request allowed only after a person's review
// (policy.Decision.Review > 0: every allow rule that admits it has
// review.required) is a verdict of its own, between denied and allowed:
// a change that lets such a request through without review is
// review_removed, one that makes an unreviewed request wait for review
// is review_added. A change of a review's timeout alone changes no
// verdict and is reported by no finding (policy diff shows it).
//
// Requests are judged without arguments (doc.go), so a new rule without
// review whose arguments_schema admits some of a reviewed rule's calls is
// found as releasing them all; its counterexample then carries arguments
// built from the schema, confirmed with policy.Decide on the whole
// policies. reviewedArguments covers the one case judging without
// arguments cannot see: the current policy already allows some of the
// tool's calls without review, by another schema.

// reviewKind names the review change from the current decision to the
// proposed one: ReviewRemoved, ReviewAdded, or "" when both deny, either
// denies, or both allow alike.
func reviewKind(cur, prop policy.Decision) string {
	switch {
	case !cur.Allow || !prop.Allow:
		return ""
	case cur.Review > 0 && prop.Review == 0:
		return ReviewRemoved
	case cur.Review == 0 && prop.Review > 0:
		return ReviewAdded
	}
	return ""
}

// classifyReview turns one request whose review changed into its finding,
// placed at the rule that decides in the proposed policy, and returns the
// bytes the finding keeps of it.
func (pr *prover) classifyReview(g *group, v verdict) int {
	g.m.charge(stageDecide, 4*g.decideCost+len(pr.prop)+len(pr.cur))
	kind := reviewKind(v.cur, v.prop)
	what := describeCall(v.r)
	detail := fmt.Sprintf("%s was held for a person's review by %s of network_policies.%s and is allowed without review", what, v.cur.Rule, v.cur.Entry)
	if kind == ReviewAdded {
		detail = fmt.Sprintf("%s was allowed without review (%s of network_policies.%s) and is held for a person's review (timeout %s)",
			what, v.cur.Rule, v.cur.Entry, policy.FormatReviewTimeout(v.prop.Review))
	}
	entry, ep, label, rule := pr.locate(g, v.prop)
	v = pr.reviewArguments(g, v, kind, ep)
	pr.add(kind, entry, label, rule, detail, v, g)
	return len(v.sig) + 32
}

// describeCall names a request in a finding's detail: "tools/call
// refund_order", "POST /v1/payouts".
func describeCall(r policy.Request) string {
	switch {
	case r.MCP != nil:
		return policy.DescribeMCP(r.MCP)
	case r.HTTPMethod != "":
		return strings.ToUpper(r.HTTPMethod) + " " + r.Path
	}
	return "the connection"
}

// reviewArguments gives a tools/call counterexample of a review change
// arguments that show it on the whole policies (schemas are dropped while
// judging): the bare call when it does, else arguments built from the
// schema of the rule that decides in the proposed policy, then in the
// current one. Unconfirmed, the bare call stays.
func (pr *prover) reviewArguments(g *group, v verdict, kind string, ep *policy.Endpoint) verdict {
	r := v.r
	if r.MCP == nil || r.MCP.Method != "tools/call" || pr.current == nil || pr.reviewChange(r) == kind {
		return v
	}
	schemas := []map[string]any{ruleSchema(ep, v.prop.Rule), ruleSchema(locateIn(pr.cur, g.curIdx, v.cur), v.cur.Rule)}
	for _, s := range schemas {
		if s == nil {
			continue
		}
		m := *r.MCP
		m.Arguments = marshalArgs(schemaInstance(normJSON(s), 0))
		r.MCP = &m
		if pr.reviewChange(r) == kind {
			v.r = r
			return v
		}
	}
	return v
}

// reviewChange is reviewKind of r on the whole current and proposed
// policies.
func (pr *prover) reviewChange(r policy.Request) string {
	pr.m.charge(stageDecide, 2*(1+len(pr.cur)+len(pr.prop)))
	return reviewKind(policy.Decide(pr.current, r), policy.Decide(pr.proposed, r))
}

// ruleSchema is the arguments_schema of the allow rule named rule
// ("rules[i]") of ep; nil when there is none.
func ruleSchema(ep *policy.Endpoint, rule string) map[string]any {
	i, ok := ruleIndex(rule)
	if ep == nil || !ok || i < 0 || i >= len(ep.Rules) || ep.Rules[i].Allow == nil {
		return nil
	}
	return ep.Rules[i].Allow.ArgumentsSchema
}

// reviewedArguments reports review_removed for each new or changed
// tools/call allow rule without review that carries an arguments_schema
// and releases from review the call built from its schema (toolCallAt):
// the current policy allows that call only after review, the proposed
// one without, by that rule (both verdicts policy.Decide's). Judging
// without arguments misses this when the current policy allows other
// calls of the tool without review, by another schema (a second call
// remembered for one tool). A finding the judging found already at that
// rule is kept as it is.
func (pr *prover) reviewedArguments() {
	if pr.current == nil {
		return
	}
	for _, p := range pr.prop {
		if !p.changed || p.ep.Protocol != policy.ProtocolMCP {
			continue
		}
		pr.m.charge(stageRules, 1+len(p.ep.Rules))
		for i, rl := range p.ep.Rules {
			a := rl.Allow
			if a == nil || a.ArgumentsSchema == nil || !callsTools(a) {
				continue
			}
			if _, reviewed := a.Reviewed(); reviewed {
				continue
			}
			label, rule := policy.EndpointLabel(p.ep), fmt.Sprintf("rules[%d]", i)
			key := fmt.Sprint(ReviewRemoved, "\x00", p.key, "\x00", label, "\x00", rule, "\x00", false)
			if pr.findings[key] != nil {
				continue
			}
			r := toolCallAt(p, a, pr.opts)
			if r == nil {
				continue
			}
			r.MCP.AnyDefinition = true // pins are judged apart (tool_definition_changed)
			if pr.reviewChange(*r) != ReviewRemoved {
				continue
			}
			if d := policy.Decide(pr.proposed, *r); d.Entry != p.key || d.Endpoint != p.index || d.Rule != rule {
				continue
			}
			cur := policy.Decide(pr.current, *r)
			pr.findings[key] = &Finding{Kind: ReviewRemoved, Counterexample: r, Entry: p.key, Endpoint: label, Rule: rule,
				Detail: fmt.Sprintf("%s with the arguments its arguments_schema admits was held for a person's review by %s of network_policies.%s and is allowed without review",
					describeCall(*r), cur.Rule, cur.Entry)}
		}
	}
}
