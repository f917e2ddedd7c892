package relay

import (
	"log/slog"
	"time"
)

// Relay is what the proxy keeps of the MCP servers and sessions it relays:
// the tools' definitions it saw (pins.go) and the requests servers sent
// clients, not yet answered (replies.go). It is safe for concurrent use.
type Relay struct {
	cfg     Config
	defs    toolDefs
	pending serverRequests
}

// Config configures a Relay. Zero values take the documented defaults.
type Config struct {
	// Now is the proxy's own clock: how old a tool definition it saw is.
	// Default time.Now.
	Now func() time.Time
	// JudgedAt is the time requests are judged at (policy.Request.Time):
	// a server's request waits for its answer by this clock, as the answer
	// is judged by it. Default Now.
	JudgedAt func() time.Time
	// OnChange, if set, receives every change of a tool's definition (the
	// shipper to the gateway). It must not block.
	OnChange func(ToolDefinitionChange)
	// Logger hears of servers whose listings name a tool twice. Default
	// slog.Default().
	Logger *slog.Logger
}

// New returns a relay that knows nothing yet.
func New(cfg Config) *Relay {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.JudgedAt == nil {
		cfg.JudgedAt = cfg.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Relay{cfg: cfg, defs: toolDefs{onChange: cfg.OnChange, log: cfg.Logger}}
}
