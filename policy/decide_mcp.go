package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// How an MCP (Streamable HTTP) endpoint judges a request (steps 2 and 3
// of Decide, decide.go): the known-methods profile, protocol versions,
// allow and deny rules on methods, tools, prompts and resources, pinned
// tool definitions and arguments schemas.

// IsKnownMCPMethod reports whether method is in the profile of
// allow_all_known_mcp_methods: the client→server requests and notifications
// of MCP 2025-11-25. Extension methods are not in it and need their own
// rules.
func IsKnownMCPMethod(method string) bool { return knownMCPMethods[method] }

// KnownMCPMethods lists the methods IsKnownMCPMethod accepts, sorted.
func KnownMCPMethods() []string { return sortedKeys(knownMCPMethods) }

var knownMCPMethods = setOf(
	"initialize", "ping",
	"tools/list", "tools/call",
	"resources/list", "resources/templates/list", "resources/read", "resources/subscribe", "resources/unsubscribe",
	"prompts/list", "prompts/get",
	"completion/complete", "logging/setLevel",
	"tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
	"notifications/initialized", "notifications/cancelled", "notifications/progress",
	"notifications/roots/list_changed", "notifications/tasks/status",
)

func setOf(items ...string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, it := range items {
		m[it] = true
	}
	return m
}

// ValidToolName reports whether name matches the MCP-recommended tool-name
// pattern ^[A-Za-z0-9_.-]{1,128}$, which strict_tool_names enforces.
func ValidToolName(name string) bool {
	if len(name) < 1 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func strictNames(ep *Endpoint) bool {
	return ep.MCP == nil || ep.MCP.StrictToolNames == nil || *ep.MCP.StrictToolNames
}

func allowAllKnown(ep *Endpoint) bool {
	return ep.MCP != nil && ep.MCP.AllowAllKnownMCPMethods
}

// versionListed reports whether the MCP protocol version is accepted:
// listed in mcp.versions (default [2025-11-25]). A message that names no
// version is taken to speak the default version 2025-11-25, so it passes
// only when that version is listed.
func versionListed(ep *Endpoint, version string) bool {
	if version == "" {
		version = DefaultMCPVersion
	}
	versions := []string{DefaultMCPVersion}
	if ep.MCP != nil && len(ep.MCP.Versions) > 0 {
		versions = ep.MCP.Versions
	}
	return slices.Contains(versions, version)
}

// judgeMCP judges a request on an MCP (Streamable HTTP) endpoint:
//   - GET (the SSE receive stream) and DELETE (session end) without a
//     message are allowed once the endpoint matches; other HTTP methods
//     are denied; a POST must carry a parsed message;
//   - a client→server JSON-RPC response passes;
//   - a malformed message is denied hard (MalformedMCP);
//   - otherwise the message must match an unexpired allow rule (or the
//     allow-all profile when the endpoint has no rules), and its protocol
//     version must be listed. An unlisted version denies hard; when the
//     rules would have allowed the message it is marked versionRefused.
func judgeMCP(e endpointRef, r Request) outcome {
	method := strings.ToUpper(r.HTTPMethod)
	if r.MCP == nil && method != "" {
		path, err := CanonicalPath(r.Path, e.ep.AllowEncodedSlash)
		if rule, ok := e.ep.MCP.OAuthPath(method, path); ok && err == nil {
			return outcome{ep: e, allow: true, rule: rule,
				reason: fmt.Sprintf("an OAuth path %s declares on %s", rule, e.name())}
		}
	}
	switch {
	case method == "":
		return requireL7(e)
	case (method == "GET" || method == "DELETE") && r.MCP == nil:
		return outcome{ep: e, allow: true, rule: "endpoint",
			reason: fmt.Sprintf("MCP %s is allowed once the endpoint matches (%s)", method, e.name())}
	case method != "POST":
		return outcome{ep: e, reason: fmt.Sprintf("HTTP %s is not allowed on MCP endpoint %s", method, e.name())}
	case r.MCP == nil:
		return outcome{ep: e, hard: true, reason: fmt.Sprintf("POST to MCP endpoint %s carries no MCP message", e.name())}
	case r.MCP.Response:
		return outcome{ep: e, allow: true, rule: "endpoint",
			reason: fmt.Sprintf("client JSON-RPC response passes on %s", e.name())}
	}
	if why, bad := MalformedMCP(r.MCP, strictNames(e.ep)); bad {
		return outcome{ep: e, hard: true, reason: why}
	}
	o := judgeMCPRules(e, r)
	if !versionListed(e.ep, r.MCP.ProtocolVersion) {
		o.reason = fmt.Sprintf("MCP protocol version %q is not listed in mcp.versions of %s", r.MCP.ProtocolVersion, e.name())
		o.versionRefused, o.allow, o.hard, o.rule, o.review = o.allow, false, true, "mcp.versions", 0
	}
	return o
}

// judgeMCPRules finds the allow rule (or profile) that allows the message.
func judgeMCPRules(e endpointRef, r Request) outcome {
	what := describeMCP(r.MCP)
	if len(e.ep.Rules) == 0 && allowAllKnown(e.ep) {
		if IsKnownMCPMethod(r.MCP.Method) {
			return outcome{ep: e, allow: true, rule: "allow_all_known_mcp_methods",
				reason: fmt.Sprintf("allowed by allow_all_known_mcp_methods on %s", e.name())}
		}
		return outcome{ep: e, reason: fmt.Sprintf("%s is not a known MCP method, so allow_all_known_mcp_methods on %s does not allow it", what, e.name())}
	}
	// A call a rule names but whose tool definition differs from its pin,
	// or whose arguments its schema refuses, is denied naming the first
	// such rule (the rule matched; the definition or arguments did not).
	var failure, failed string
	pinned := false
	var held *outcome
	for i, rule := range e.ep.Rules {
		if rule.Allow == nil || expired(rule.Allow, r.Time) || !mcpRuleMatches(e.ep, rule.Allow, r.MCP, false) {
			continue
		}
		if why := DefinitionMismatch(rule.Allow, r.MCP); why != "" {
			if failed == "" {
				failed, pinned = fmt.Sprintf("rules[%d]", i), true
				failure = fmt.Sprintf("; rules[%d] names it but %s", i, why)
			}
			continue
		}
		if err := argumentsValid(rule.Allow, r.MCP); err != nil {
			if failed == "" {
				failed = fmt.Sprintf("rules[%d]", i)
				failure = fmt.Sprintf("; rules[%d] names it but its arguments_schema refuses the arguments: %v", i, err)
			}
			continue
		}
		if o, done := allowedBy(e, i, rule.Allow, &held); done {
			return o
		}
	}
	if held != nil {
		return *held
	}
	return outcome{ep: e, rule: failed, definitionRefused: pinned,
		reason: fmt.Sprintf("%s is not allowed by %s: no rule matches%s", what, e.name(), failure)}
}

// DefinitionMismatch says why rule's pinned definition refuses the tool of
// m ("" when it does not): the tool's verified definition differs, or none
// was verified. The words end with the reason's code,
// tool_definition_changed.
func DefinitionMismatch(rule *L7Rule, m *MCPMessage) string {
	switch {
	case rule.Definition == "" || m.AnyDefinition || m.ToolDefinition == rule.Definition:
		return ""
	case m.ToolDefinition == "":
		return "it pins the tool's definition to " + rule.Definition + " and the proxy could not verify the tool's definition (" + ToolDefinitionChanged + ")"
	}
	return "it pins the tool's definition to " + rule.Definition + " and the server now lists " + m.ToolDefinition + " (" + ToolDefinitionChanged + ")"
}

// ToolDefinitionChanged is the reason code of a call a pinned definition
// refused.
const ToolDefinitionChanged = "tool_definition_changed"

// mcpRuleMatches reports whether an MCP rule matches the message:
//   - method: a glob on the JSON-RPC method, read narrowly in allow rules
//     and widely in deny rules (as path globs are); when absent, an allow rule
//     uses the endpoint's profile (every known method with
//     allow_all_known_mcp_methods, else nothing) and a deny rule matches
//     every method;
//   - tool (or params.name): only tools/call matches, and its name must
//     match one of the globs — as globs only with strict names, else
//     compared exactly;
//   - prompt: only prompts/get matches, and its params.name must match one
//     of the globs, read narrowly in allow rules and widely in deny rules
//     (as method globs are; strict_tool_names does not apply to prompts);
//   - resource: only resources/read, resources/subscribe and
//     resources/unsubscribe match, and params.uri must match one of the
//     globs — MatchResource in allow rules, MatchDenyResource in deny rules.
//
// A rule with several matchers needs them all (the validator allows one).
func mcpRuleMatches(ep *Endpoint, rule *L7Rule, m *MCPMessage, deny bool) bool {
	switch {
	case rule.Method != "":
		if !pathGlobMatches(rule.Method, m.Method, !deny) {
			return false
		}
	case !deny:
		if !allowAllKnown(ep) || !IsKnownMCPMethod(m.Method) {
			return false
		}
	}
	if tool := ruleTool(rule); tool != nil && !toolMatches(ep, tool, m) {
		return false
	}
	if rule.Prompt != nil && !promptMatches(rule.Prompt, m, deny) {
		return false
	}
	if rule.Resource != nil && !resourceMatches(rule.Resource, m, deny) {
		return false
	}
	return true
}

func toolMatches(ep *Endpoint, tool *Matcher, m *MCPMessage) bool {
	if m.Method != "tools/call" {
		return false
	}
	for _, g := range tool.Any {
		if strictNames(ep) && MatchGlob(g, m.Tool) || !strictNames(ep) && g == m.Tool {
			return true
		}
	}
	return false
}

func promptMatches(prompt *Matcher, m *MCPMessage, deny bool) bool {
	if m.Method != "prompts/get" {
		return false
	}
	for _, g := range prompt.Any {
		if pathGlobMatches(g, m.Prompt, !deny) {
			return true
		}
	}
	return false
}

func resourceMatches(resource *Matcher, m *MCPMessage, deny bool) bool {
	if !IsResourceMethod(m.Method) {
		return false
	}
	for _, g := range resource.Any {
		if !deny && MatchResource(g, m.Resource) || deny && MatchDenyResource(g, m.Resource) {
			return true
		}
	}
	return false
}

// argumentsValid checks params.arguments against an allow rule's
// arguments_schema (JSON Schema, draft 2020-12 unless the schema says
// otherwise; no external references are loaded) with ValidateArguments:
// bounded numbers, format asserted, and the float64 reading checked too.
// Absent arguments are checked as {}. A schema that does not compile
// refuses everything.
func argumentsValid(rule *L7Rule, m *MCPMessage) error {
	if rule.ArgumentsSchema == nil || m.AnyArguments {
		return nil
	}
	schema, err := CompileArgumentsSchema(rule.ArgumentsSchema)
	if err != nil {
		return fmt.Errorf("arguments_schema does not compile: %w", err)
	}
	args := m.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("arguments are not JSON: %w", err)
	}
	return ValidateArguments(schema, inst)
}

// describeMCP names a message in reasons: "tools/call lookup_order".
func describeMCP(m *MCPMessage) string { return DescribeMCP(m) }
