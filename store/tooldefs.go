package store

import (
	"fmt"
	"time"
)

// ToolDefinition is one definition of an MCP tool that a proxy of Sandbox
// saw its server list (the proxies report each change of a tool's
// definition). The store keeps each distinct definition once per sandbox,
// endpoint and tool: reporting it again moves its times and proxy.
type ToolDefinition struct {
	Sandbox string
	// Host, Port and Path name the MCP endpoint as the proxy reached it.
	Host string
	Port int
	Path string
	Tool string
	// Fingerprint is what a rule's definition pins ("sha256:<hex>"; "" for
	// a definition the proxy could not canonicalise).
	Fingerprint string
	// Definition is the tool object as listed (JSON); nil when it was
	// over MaxToolDefinitionBytes.
	Definition []byte
	// FirstSeen and LastSeen are the first and the latest time a proxy
	// reported the tool taking this definition (the proxies' clocks).
	FirstSeen, LastSeen time.Time
	// ProxyID is the proxy that reported it last.
	ProxyID string
}

// Bounds on the tool definitions a sandbox keeps: an MCP server decides
// what it lists, and one that changes its tools on every list must not
// fill the gateway's disk.
const (
	// MaxToolDefinitionBytes bounds one definition's JSON (the proxy
	// ships none larger).
	MaxToolDefinitionBytes = 64 << 10
	// MaxToolDefinitionsPerSandbox is how many definitions a sandbox
	// keeps: past it, those seen longest ago go.
	MaxToolDefinitionsPerSandbox = 1000
)

// ToolDefinitionFilter narrows ListToolDefinitions.
type ToolDefinitionFilter struct {
	// Sandbox is required.
	Sandbox string
	// Fingerprint, if set, matches that definition only.
	Fingerprint string
}

// CheckToolDefinitions reports whether defs can be stored: each names a
// sandbox, proxy, tool and port, carries both times, and a definition
// within MaxToolDefinitionBytes.
func CheckToolDefinitions(defs []ToolDefinition) error {
	for i, d := range defs {
		if err := checkReported("tool definition", i, d.Sandbox, d.ProxyID); err != nil {
			return err
		}
		switch {
		case d.Tool == "":
			return fmt.Errorf("invalid tool definition %d (sandbox %q): empty tool", i, d.Sandbox)
		case d.Port < 1 || d.Port > 65535:
			return fmt.Errorf("invalid tool definition %d (sandbox %q): port %d", i, d.Sandbox, d.Port)
		case d.FirstSeen.IsZero() || d.LastSeen.IsZero() || d.LastSeen.Before(d.FirstSeen):
			return fmt.Errorf("invalid tool definition %d (sandbox %q): first seen %v, last seen %v", i, d.Sandbox, d.FirstSeen, d.LastSeen)
		case len(d.Definition) > MaxToolDefinitionBytes:
			return fmt.Errorf("invalid tool definition %d (sandbox %q): definition of %d bytes, over %d", i, d.Sandbox, len(d.Definition), MaxToolDefinitionBytes)
		}
	}
	return nil
}
