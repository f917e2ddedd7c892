package advisor

import (
	"fmt"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// FromHeldCall builds the proposal an approval with "remember" files for
// a held call: a rule on the endpoint whose review rule held it that
// allows tools/call of the tool with exactly the call's arguments
// (arguments_schema {"const": …}) and no review, keeping the terms of the
// tool's review rules (the strictest rate_limit, their definition pin,
// the earliest expires_at), so that only those arguments skip review. An
// allow without review wins over one with it (policy.Decision.Review),
// so the exact call then passes unheld and every other still waits for a
// person. rec is the held call as a denial record would name it, with its
// Arguments. A REST call is refused (RuleNotOffered): no rule matches a
// request's body, so none admits exactly its bytes.
func FromHeldCall(base *policy.Policy, rec DenialRecord) (*Proposal, error) {
	if rec.MCPMethod != "tools/call" || rec.Tool == "" {
		return refuse("", RuleNotOffered, "only a held tools/call can be remembered: a rule matches a tool's arguments, never a REST body")
	}
	key, ep := existingEndpoint(base, rec)
	if ep == nil {
		return refuse("", RuleNotOffered, "no endpoint of the current policy admits the held call any more")
	}
	c, schema, err := exactArguments(rec)
	if err != nil {
		return nil, err
	}
	rule := &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{rec.Tool}}, ArgumentsSchema: schema}
	if rule.RateLimit, rule.Definition, rule.ExpiresAt, err = reviewTerms(ep, rec.Tool, time.Now()); err != nil {
		return refuse("arguments", RuleArguments, "tools/call %s on network_policies.%s %s: %v", rec.Tool, key, policy.EndpointLabel(ep), err)
	}
	from := rec.Binary
	if from == "" {
		from = "an unidentified binary"
	}
	p := &Proposal{
		Rationale: fmt.Sprintf("allow without review exactly the held call a person approved: tools/call %s with its arguments from %s to %s:%d", rec.Tool, from, rec.Host, rec.Port),
		Operations: []Operation{{AddAllowRules: &AddAllowRules{
			EndpointRef: EndpointRef{Policy: key, Host: ep.Host, Port: rec.Port, Path: ep.Path},
			Rules:       []policy.Rule{{Allow: rule}},
		}}},
	}
	if len(p.Rationale) > MaxRationaleBytes {
		p.Rationale = p.Rationale[:MaxRationaleBytes]
	}
	req := policy.Request{Binary: rec.Binary, Host: rec.Host, Port: rec.Port, HTTPMethod: "POST", Path: rec.Path, DevAllowLoopback: rec.DevAllowLoopback}
	req.MCP = policy.NamedMCPMessage(rec.MCPMethod, rec.Tool)
	req.MCP.Arguments = c
	req.MCP.AnyDefinition = rule.Definition != ""
	return offer(base, p, req, "no rule can allow exactly this call")
}

// reviewTerms are the terms of the allow rules of tool on ep that
// require review, as guardTerms takes a schema guard's.
func reviewTerms(ep *policy.Endpoint, tool string, now time.Time) (*policy.RateLimit, string, *time.Time, error) {
	var reviewed policy.Endpoint
	for _, r := range ep.Rules {
		if a := r.Allow; a != nil && a.Review != nil && a.Review.Required && namesTool(a, tool) {
			if a.ArgumentsSchema == nil {
				cp := *a
				cp.ArgumentsSchema = map[string]any{} // guardTerms reads schema guards
				a = &cp
			}
			reviewed.Rules = append(reviewed.Rules, policy.Rule{Allow: a})
		}
	}
	return guardTerms(&reviewed, tool, now)
}
