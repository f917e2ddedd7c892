package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// MalformedMCP reports messages no rule may judge: a request without a
// method, a tools/call without a tool name, a tool name outside
// ^[A-Za-z0-9_.-]{1,128}$ when strictNames (the endpoint's
// strict_tool_names) holds, arguments that are not JSON. The reason is
// the one a decision carries, so Decide and the matcher share it.
func MalformedMCP(m *MCPMessage, strictNames bool) (string, bool) {
	switch {
	case m.Response:
		return "", false
	case m.Method == "":
		return "MCP message has no method", true
	case m.Method != "tools/call":
		return "", false
	case m.Tool == "":
		return "tools/call names no tool", true
	case strictNames && !ValidToolName(m.Tool):
		return fmt.Sprintf("tool name %q breaks strict_tool_names (^[A-Za-z0-9_.-]{1,128}$)", m.Tool), true
	case len(bytes.TrimSpace(m.Arguments)) > 0 && !json.Valid(m.Arguments):
		return fmt.Sprintf("tools/call %s has arguments that are not valid JSON", m.Tool), true
	}
	return "", false
}
