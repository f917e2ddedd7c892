package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// What the data plane's compiled matcher (dataplane/match) shares with
// Decide, exported here so the two cannot drift apart: the matcher must
// agree with Decide on every field of every decision, the reason included.

// DefaultDenyReason is the reason of a default deny of r: no endpoint
// matches its destination (entries empty), or entries (each
// "network_policies.KEY", in endpoint order, without repeats) match it but
// do not list the binary.
func DefaultDenyReason(r *Request, entries []string) string {
	who := r.Binary
	if who == "" {
		who = "an unidentified binary"
	}
	dest := fmt.Sprintf("%s:%d", r.Host, r.Port)
	if r.HTTPMethod != "" {
		dest += " (" + strings.ToUpper(r.HTTPMethod) + " " + r.Path + ")"
	}
	if len(entries) > 0 {
		return fmt.Sprintf("%s may not reach %s: %s do not list that binary", who, dest, strings.Join(entries, ", "))
	}
	return fmt.Sprintf("no network policy allows %s to reach %s (default deny)", who, dest)
}

// DescribeMCP names a message in reasons: "tools/call lookup_order",
// "prompts/get summarize", "resources/read file:///a.txt", or the method.
func DescribeMCP(m *MCPMessage) string {
	switch {
	case m.Method == "tools/call":
		return "tools/call " + m.Tool
	case m.Method == "prompts/get":
		return "prompts/get " + m.Prompt
	case IsResourceMethod(m.Method):
		return m.Method + " " + m.Resource
	}
	return m.Method
}

// Name is what the message names: the tool of tools/call, the prompt of
// prompts/get, the URI of the resources methods ("" for other methods).
// Decision records carry it as their tool (the Mcp-Name of MCP
// 2026-07-28).
func (m *MCPMessage) Name() string {
	switch {
	case m.Method == "tools/call":
		return m.Tool
	case m.Method == "prompts/get":
		return m.Prompt
	case IsResourceMethod(m.Method):
		return m.Resource
	}
	return ""
}

// NamedMCPMessage is the message of method naming name (see Name), as a
// decision record describes it.
func NamedMCPMessage(method, name string) *MCPMessage {
	m := &MCPMessage{Method: method}
	switch {
	case method == "prompts/get":
		m.Prompt = name
	case IsResourceMethod(method):
		m.Resource = name
	default:
		m.Tool = name
	}
	return m
}

// MalformedMCP reports messages no rule may judge: a request without a
// method, a tools/call without a tool name, a tool name outside
// ^[A-Za-z0-9_.-]{1,128}$ when strictNames (the endpoint's
// strict_tool_names) holds, arguments that are not JSON, a prompts/get
// without a prompt name, a resources/read, resources/subscribe or
// resources/unsubscribe without a URI. The reason is the one a decision
// carries, so Decide and the matcher share it.
func MalformedMCP(m *MCPMessage, strictNames bool) (string, bool) {
	switch {
	case m.Response:
		return "", false
	case m.Method == "":
		return "MCP message has no method", true
	case m.Method == "prompts/get" && m.Prompt == "":
		return "prompts/get names no prompt", true
	case IsResourceMethod(m.Method) && m.Resource == "":
		return m.Method + " names no resource", true
	case m.Method != "tools/call":
		return "", false
	case m.Tool == "":
		return "tools/call names no tool", true
	case strictNames && !ValidToolName(m.Tool):
		return fmt.Sprintf("tool name %q breaks strict_tool_names (^[A-Za-z0-9_.-]{1,128}$)", m.Tool), true
	case !m.ArgumentsRead && len(bytes.TrimSpace(m.Arguments)) > 0 && !json.Valid(m.Arguments):
		return fmt.Sprintf("tools/call %s has arguments that are not valid JSON", m.Tool), true
	}
	return "", false
}

// ParseAllowedIP reads one allowed_ips entry: a CIDR (masked) or a single
// address (its one-address prefix, unmapped); ok is false for an invalid
// entry, which covers nothing. Decide reads entries with it on every
// request, the matcher once per policy, the prover for its addresses, so
// the three cannot read an entry differently.
func ParseAllowedIP(s string) (netip.Prefix, bool) {
	prefix, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return netip.Prefix{}, false
		}
		prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
	}
	return prefix.Masked(), true
}

// HasOtherDenyReadings reports whether DenyReadings(s) may hold more than
// s itself: only a `%` or a segment ending in a dot gives a canonical path
// another reading. Callers skip computing the readings (and their
// allocations) when it is false.
func HasOtherDenyReadings(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '%' || s[i] == '.' && (i+1 == len(s) || s[i+1] == '/') {
			return true
		}
	}
	return false
}
