package distribution

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// Tool definitions travel with decision records (ShipDecisionsRequest.
// tool_definitions): every change of an MCP tool's definition a proxy saw,
// stored once per sandbox, endpoint, tool and fingerprint
// (store.RecordToolDefinitions), for SandboxService.ListTools and for the
// re-pin proposals that show the definition pinned and the one seen.

// maxDefinitionBatch bounds the tool definitions of one message.
const maxDefinitionBatch = 256

// toolDefinitionFromProto checks one reported definition strictly and
// returns it as the store keeps it, for sandbox (the caller's, whatever
// the message says) and proxyID. A definition must be one JSON object
// whose fingerprint (policy.DefinitionFingerprint, as the proxy pins it) is the one
// reported: the gateway keeps nothing it has not checked.
func toolDefinitionFromProto(r *portcullisv1.ToolDefinitionSeen, sandbox, proxyID string) (store.ToolDefinition, error) {
	switch {
	case r.GetTime() == nil:
		return store.ToolDefinition{}, invalidField("time", "is missing")
	case r.GetPort() < 1 || r.GetPort() > 65535:
		return store.ToolDefinition{}, invalidField("port", "is not a port: %d", r.GetPort())
	case r.GetHost() == "":
		return store.ToolDefinition{}, invalidField("host", "is missing")
	case r.GetTool() == "":
		return store.ToolDefinition{}, invalidField("tool", "is missing")
	case r.GetFingerprint() != "" && !policy.ValidDefinition(r.GetFingerprint()):
		return store.ToolDefinition{}, invalidField("fingerprint", "%q is not a definition fingerprint (\"sha256:\" and 64 lower-case hex digits)", truncate(r.GetFingerprint(), 80))
	case len(r.GetDefinition()) > store.MaxToolDefinitionBytes:
		return store.ToolDefinition{}, invalidField("definition", "is longer than %d bytes", store.MaxToolDefinitionBytes)
	}
	// Any name a server lists is recorded (pins need strict names, the
	// record does not), within the bounds of a decision record's fields.
	for name, v := range map[string]string{"host": r.GetHost(), "path": r.GetPath(), "tool": r.GetTool()} {
		if len(v) > maxDecisionField || !utf8.ValidString(v) {
			return store.ToolDefinition{}, invalidField(name, "is not valid UTF-8 of at most %d bytes", maxDecisionField)
		}
	}
	def := []byte(r.GetDefinition())
	switch {
	case len(def) == 0 && r.GetFingerprint() == "":
		return store.ToolDefinition{}, invalidField("definition", "is missing: a definition without a fingerprint must be shipped")
	case len(def) > 0:
		var obj map[string]json.RawMessage
		if !utf8.Valid(def) || json.Unmarshal(def, &obj) != nil || obj == nil {
			return store.ToolDefinition{}, invalidField("definition", "is not a JSON object")
		}
		fp, err := policy.DefinitionFingerprint(def)
		if err != nil {
			fp = ""
		}
		if fp != r.GetFingerprint() {
			return store.ToolDefinition{}, invalidField("fingerprint", "is %q, but the definition's is %q", r.GetFingerprint(), fp)
		}
	default:
		def = nil
	}
	at := r.GetTime().AsTime()
	return store.ToolDefinition{
		Sandbox: sandbox, ProxyID: proxyID,
		Host: r.GetHost(), Port: int(r.GetPort()), Path: r.GetPath(), Tool: r.GetTool(),
		Fingerprint: r.GetFingerprint(), Definition: def, FirstSeen: at, LastSeen: at,
	}, nil
}
