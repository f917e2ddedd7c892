package decision

import (
	"encoding/json"
	"time"
)

// ToolDefinitionChange is one MCP tool whose definition the proxy saw
// change in a tools/list result (or saw for the first time: Before is
// ""). Like a Record it is logged, kept in a bounded ring, and shipped to
// the gateway in gateway mode.
type ToolDefinitionChange struct {
	Time time.Time
	// Host, Port and Path (canonical) name the MCP endpoint.
	Host string
	Port int
	Path string
	Tool string
	// Before and After are fingerprints ("sha256:<hex>"; "" when the
	// definition could not be canonicalised).
	Before, After string
	// Definition is the tool object as listed; nil when over
	// MaxDefinitionBytes.
	Definition json.RawMessage
}

// MaxDefinitionBytes bounds the definition bytes a change keeps (and the
// gateway accepts).
const MaxDefinitionBytes = 64 << 10
