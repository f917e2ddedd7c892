package advisor

import (
	"fmt"
	"slices"

	"github.com/portcullis-dev/portcullis/policy"
)

// Re-pinning a tool's definition. A tools/call allow rule may pin the
// tool's definition (policy.L7Rule.Definition); when the server changes
// the definition, the proxy denies the tool's calls with the reason code
// tool_definition_changed and the fingerprint it saw. The narrowest change
// that allows the call again is a repin: the rules of that endpoint that
// pin the tool's old definition pin the one seen instead — that field and
// nothing else changes. The prover reports every re-pin as
// tool_definition_changed, which always needs a human: only a person can
// judge what the server's new definition (its description, its schema)
// asks of the agent.

// Repin changes the definition an endpoint's allow rules pin for one tool:
// every tools/call allow rule of the endpoint (named as add_allow_rules
// names it) that names exactly Tool and pins From then pins To.
type Repin struct {
	EndpointRef `yaml:",inline"`
	Tool        string `json:"tool" yaml:"tool"`
	// From is the definition the rules pin now, To the one they would
	// pin ("sha256:<hex>", as portcullis mcp fingerprint prints them).
	From string `json:"from" yaml:"from"`
	To   string `json:"to" yaml:"to"`
}

// repin applies op to pol (Apply's step for a repin operation).
func (r refuser) repin(pol *policy.Policy, fp string, op *Repin) error {
	ep, err := r.target(pol, fp, op.EndpointRef)
	if err != nil {
		return err
	}
	if ep.Protocol != policy.ProtocolMCP {
		return r.at(keyPath(fp, "host"), RuleProtocol, "the endpoint's protocol is %q: only mcp endpoints pin tool definitions", ep.Protocol)
	}
	if !validName(op.Tool) {
		return r.at(keyPath(fp, "tool"), RuleTool, "%q: name a tool exactly (^[A-Za-z0-9_.-]{1,%d}$, no globs)", op.Tool, MaxNameLen)
	}
	for _, f := range []struct{ field, v string }{{"from", op.From}, {"to", op.To}} {
		if !policy.ValidDefinition(f.v) {
			return r.at(keyPath(fp, f.field), RuleDefinition, "%q is not a definition fingerprint: want \"sha256:\" and 64 lower-case hex digits", f.v)
		}
	}
	if op.From == op.To {
		return r.at(keyPath(fp, "to"), RuleChangesNothing, "the rules pin %s already", op.To)
	}
	n := 0
	for _, rule := range ep.Rules {
		if a := rule.Allow; a != nil && a.Definition == op.From && pinsOnly(a, op.Tool) {
			a.Definition = op.To
			n++
		}
	}
	if n == 0 {
		return r.at(keyPath(fp, "from"), RuleUnknownTarget, "no allow rule of network_policies.%s %s pins tools/call %s to %s",
			op.Policy, policy.EndpointLabel(ep), op.Tool, op.From)
	}
	return nil
}

// pinsOnly reports whether a pinned allow rule names exactly tool (the
// validator lets a pin name one tool only).
func pinsOnly(a *policy.L7Rule, tool string) bool {
	return a.Tool != nil && len(a.Tool.Any) == 1 && a.Tool.Any[0] == tool
}

// repinFromDenial is FromDenial for a call denied with reason code
// tool_definition_changed: one repin of the endpoint's pins of the tool to
// the definition the proxy saw. The request is judged with that
// definition (MCPMessage.ToolDefinition), so the proposal must allow it.
func repinFromDenial(base *policy.Policy, rec DenialRecord) (*Proposal, error) {
	if rec.ToolDefinition == "" {
		return refuse("tool_definition", RuleDefinition, "the proxy could not verify tools/call %s's definition (it could not list the server's tools, or the server does not list the tool): "+
			"there is no definition to pin; list the server's tools (portcullis mcp fingerprint) and ask an operator", rec.Tool)
	}
	if !policy.ValidDefinition(rec.ToolDefinition) {
		return refuse("tool_definition", RuleDefinition, "%q is not a definition fingerprint", rec.ToolDefinition)
	}
	key, ep := existingEndpoint(base, rec)
	if ep == nil {
		return refuse("", RuleUnknownTarget, "no endpoint of the current policy pins tools/call %s at %s:%d%s for %s", rec.Tool, rec.Host, rec.Port, rec.Path, rec.Binary)
	}
	var pins []string
	for _, rule := range ep.Rules {
		if a := rule.Allow; a != nil && a.Definition != "" && a.Definition != rec.ToolDefinition && pinsOnly(a, rec.Tool) && !slices.Contains(pins, a.Definition) {
			pins = append(pins, a.Definition)
		}
	}
	if len(pins) == 0 {
		return refuse("", RuleNotOffered, "no rule of network_policies.%s %s pins tools/call %s to another definition than %s: the current policy does not refuse it for its definition",
			key, policy.EndpointLabel(ep), rec.Tool, rec.ToolDefinition)
	}
	req := policy.Request{Binary: rec.Binary, Host: rec.Host, Port: rec.Port, HTTPMethod: rec.HTTPMethod, Path: rec.Path,
		MCP:              &policy.MCPMessage{Method: rec.MCPMethod, Tool: rec.Tool, ToolDefinition: rec.ToolDefinition, Arguments: rec.Arguments},
		DevAllowLoopback: rec.DevAllowLoopback}
	if d := policy.Decide(base, req); d.Allow {
		return refuse("", RuleNotOffered, "the current policy already allows this call with definition %s (%s)", rec.ToolDefinition, d.Reason)
	}
	p := &Proposal{Rationale: clip(fmt.Sprintf("re-pin tools/call %s at %s:%d%s to the definition its server now lists, %s (it pinned %s)",
		rec.Tool, rec.Host, rec.Port, rec.Path, rec.ToolDefinition, pins[0]))}
	for _, pin := range pins {
		p.Operations = append(p.Operations, Operation{Repin: &Repin{
			EndpointRef: EndpointRef{Policy: key, Host: ep.Host, Port: rec.Port, Path: ep.Path},
			Tool:        rec.Tool, From: pin, To: rec.ToolDefinition,
		}})
	}
	return offer(base, p, req, "re-pinning does not allow this call")
}

func clip(s string) string {
	if len(s) > MaxRationaleBytes {
		return s[:MaxRationaleBytes]
	}
	return s
}
