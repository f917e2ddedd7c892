package dataplane

import (
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/dataplane/hold"
	"github.com/portcullis-dev/portcullis/dataplane/identity"
	"github.com/portcullis-dev/portcullis/dataplane/transparent"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"go.opentelemetry.io/otel/trace"
)

// Config configures an Agent and its proxy. Zero values take the documented
// defaults.
type Config struct {
	// Sandbox names the sandbox in decision records ("" standalone).
	Sandbox string
	// DevAllowLoopback lets policies reach loopback upstreams (tests and
	// demos only; never from a policy). Default false.
	DevAllowLoopback bool
	// UpstreamRoots verifies upstream TLS certificates. Default: the system
	// roots.
	UpstreamRoots *x509.CertPool
	// Resolve looks a host name up. Default: net.DefaultResolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Caller identifies the client of a connection: its executable and
	// its ancestors', when its first request is judged. Default:
	// CallerBinary when that is set; otherwise identity.Follow when the
	// connection is accepted and Watch.Caller when its first request is
	// judged (through /proc, the same processes holding the socket both
	// times).
	Caller func(net.Conn) (identity.Caller, error)
	// CallerBinary identifies the client's executable only (no
	// ancestors); used when Caller is nil and this is set.
	CallerBinary func(net.Conn) (string, error)
	// Now is the proxy's clock. Default time.Now. Requests are judged
	// (expires_at) and recorded at the later of it and, in gateway mode,
	// the gateway's clock as the subscription estimates it (Proxy.now).
	Now func() time.Time
	// DecisionLog receives every decision as a JSON line, written by a
	// goroutine of Agent.Run so traffic never waits for it, in batches
	// (decision.Log: at most decision.FlushInterval late). Default: none.
	DecisionLog io.Writer
	// MaxConnections bounds the client connections served at once; more
	// wait to be accepted. Default 4096.
	MaxConnections int
	// RingSize is how many recent decisions Decisions keeps. Default 1000.
	RingSize int
	// OnRecord, if set, receives every decision record (the shipper to
	// the gateway). It must not block.
	OnRecord func(decision.Record)
	// OnToolDefinition, if set, receives every change of an MCP tool's
	// definition the proxy sees (mcp/relay; the shipper to the gateway). It
	// must not block.
	OnToolDefinition func(decision.ToolDefinitionChange)
	// Names, if set, is what the proxy's DNS for the sandbox answered
	// (dataplane/sandboxdns): a transparent connection is judged by the
	// name it gave the connection's original address (transparent.go).
	// nil: none, every transparent connection is judged by its address.
	Names NameBook
	// OriginalDst returns where a transparent connection was sent before
	// the kernel redirected it to the proxy. Default: the socket's
	// SO_ORIGINAL_DST (IP6T_SO_ORIGINAL_DST for IPv6), on Linux; the
	// tests' seam.
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger
	// AdaptProcs runs the proxy on one P while it serves one request at a
	// time and on Go's default GOMAXPROCS while requests overlap
	// (h1.Procs). It changes the whole process's GOMAXPROCS: for a process
	// that is the proxy, with no GOMAXPROCS of its own. Default false.
	AdaptProcs bool

	// Hold bounds the calls held for review (dataplane/hold: 16 calls,
	// 16 MiB by default).
	Hold hold.Config

	// What the Agent assembles around the proxy (agent.go).

	// CA terminates TLS for inspected endpoints: a standalone proxy's own
	// (ca.LoadOrCreate). nil: none until the gateway delivers the
	// sandbox's with a version; until then such connections fail.
	CA *ca.CA
	// PolicyFile, if set, is the policy: New loads it (a bad file is
	// logged and every request denied), Run watches it every
	// ReloadInterval (default 1s) and swaps in each changed, valid
	// version.
	PolicyFile     string
	ReloadInterval time.Duration
	// Gateway, if set, makes this a gateway-mode proxy: New restores the
	// version kept in Gateway.DataDir, Run follows the sandbox's versions
	// from the gateway and ships decision records to it (Shipper), and
	// policy.local relays proposals on the subscription's connection.
	// Its Refuse is the test seam that makes the proxy refuse a version.
	Gateway *gatewayclient.SubscribeConfig
	// Shipper configures shipping decision records in gateway mode.
	Shipper gatewayclient.ShipperConfig
	// Tracer, if set, traces every HTTP request judged (trace.go) and, in
	// gateway mode, each version applied (Gateway.Tracer when unset).
	// Default nil: no tracing, and no cost per request.
	Tracer trace.TracerProvider
	// DataDir, OCSF and TrimMemory are what a proxy process adds
	// (process.go); their zero values add nothing.
	Process
}

func (c *Config) setDefaults() {
	if c.Resolve == nil {
		c.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	switch {
	case c.Caller != nil:
	case c.CallerBinary != nil:
		binary := c.CallerBinary
		c.Caller = func(conn net.Conn) (identity.Caller, error) {
			b, err := binary(conn)
			return identity.Caller{Binary: b}, err
		}
	default: // nil: identity.Follow (client.process)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.OriginalDst == nil {
		c.OriginalDst = transparent.OriginalDst
	}
	if c.RingSize <= 0 {
		c.RingSize = 1000
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = 4096
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}
