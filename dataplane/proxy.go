package dataplane

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/credentials"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/hold"
	"github.com/portcullis-dev/portcullis/dataplane/match"
	"github.com/portcullis-dev/portcullis/dataplane/mcp/relay"
	"github.com/portcullis-dev/portcullis/dataplane/policylocal"
	"github.com/portcullis-dev/portcullis/dataplane/ratelimit"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/internal/telemetry"
	"github.com/portcullis-dev/portcullis/policy"
	"go.opentelemetry.io/otel/trace"
)

// Proxy is the enforcing forward proxy. It is safe for concurrent use; a
// new policy version swaps in atomically and in-flight requests finish
// under the version they started with. It is built and run by an Agent.
type Proxy struct {
	cfg     Config
	ca      atomic.Pointer[ca.CA]
	log     *slog.Logger
	current atomic.Pointer[loaded]
	// enforcing is closed when the first policy version is applied.
	enforcing     chan struct{}
	enforcingOnce sync.Once
	decisions     *decision.Log
	summaries     *decision.Summarizer
	// arguments are the arguments of recent denied tools/calls, for
	// policy.local (records carry only their digest).
	arguments *decision.Arguments
	upstreams *h1.Upstreams

	fileReloads reloadStatus
	// hijacked holds what outlives the HTTP server's own bookkeeping:
	// tunnels and the inner servers of intercepted CONNECTs. serve closes
	// them when it stops.
	hijacked h1.Hijacked

	// tunnels are the open L4 tunnels with the request that allowed each:
	// they are judged again when the policy changes and as time passes
	// (expires_at), and closed when no longer allowed.
	tunnelsMu sync.Mutex
	tunnels   map[*openTunnel]struct{}

	// local answers policy.local.
	local *policylocal.Server

	// limits holds the token buckets of rate_limit rules (ratelimit).
	limits ratelimit.Buckets

	// relay is what the proxy keeps of the MCP answers it relays: the
	// tools' definitions it saw, and the requests servers sent clients
	// not yet answered.
	relay *relay.Relay

	// held are the calls waiting for review.
	held *hold.Registry
	// creds are the providers' credentials the gateway delivers.
	creds *credentials.Holder

	// tracer makes request spans (trace.go); nil: not tracing.
	tracer trace.Tracer
	// procs scales GOMAXPROCS with overlapping requests (h1.Procs); nil:
	// Config.AdaptProcs is off.
	procs *h1.Procs

	// gatewayAhead, in gateway mode, is how far the gateway's clock is
	// ahead of cfg.Now (Subscriber.GatewayAhead); set by New, before
	// anything runs.
	gatewayAhead func() time.Duration
}

type openTunnel struct {
	req       policy.Request
	end       func(reason string) // closes it
	webSocket bool                // an inspected WebSocket (wsproxy), not an L4 tunnel
	bound     string              // the provider its endpoint bound when it opened
}

// loaded is one compiled policy version.
type loaded struct {
	matcher *match.Matcher
	version string
}

// newProxy builds a proxy that terminates TLS for L7 endpoints with
// cfg.CA (nil: none until SetCA; until then such connections fail). It
// enforces nothing until SetPolicy: with no policy everything is denied.
func newProxy(cfg Config) *Proxy {
	cfg.setDefaults()
	p := &Proxy{cfg: cfg, log: cfg.Logger.With("component", "proxy"), enforcing: make(chan struct{})}
	if cfg.CA != nil {
		p.ca.Store(cfg.CA)
	}
	p.decisions = decision.NewLog(cfg.RingSize, cfg.DecisionLog, p.log)
	p.summaries = decision.NewSummarizer()
	p.arguments = decision.NewArguments(decision.ArgumentsEntries, decision.ArgumentsBytes, decision.ArgumentsPerEntry)
	p.upstreams = h1.NewUpstreams(cfg.UpstreamRoots)
	p.local = policylocal.New(policylocal.Config{Sandbox: cfg.Sandbox, State: p, Framing: h1.Problem, Logger: p.log, DevAllowLoopback: cfg.DevAllowLoopback})
	cfg.Hold.Logger = cmp.Or(cfg.Hold.Logger, p.log)
	p.held = hold.New(cfg.Hold)
	p.creds = credentials.New(credentials.Config{DevAllowLoopback: cfg.DevAllowLoopback, RootCAs: cfg.UpstreamRoots, Now: cfg.Now, Logger: p.log})
	p.relay = relay.New(relay.Config{Now: cfg.Now, JudgedAt: p.now, OnChange: cfg.OnToolDefinition, Logger: p.log})
	if cfg.Tracer != nil {
		p.tracer = cfg.Tracer.Tracer(telemetry.Scope)
	}
	if cfg.AdaptProcs && runtime.GOMAXPROCS(0) > 1 {
		p.procs = h1.NewProcs()
	}
	return p
}

// SetPolicy compiles pol and makes it the version every new request is
// judged by. version labels decision records and denials.
func (p *Proxy) SetPolicy(pol *policy.Policy, version string) error {
	m, err := match.Compile(pol)
	if err != nil {
		return fmt.Errorf("compile policy %s: %w", version, err)
	}
	p.current.Store(&loaded{matcher: m, version: version})
	p.limits.Retain(m.LimitKeys())
	p.held.Recheck()
	// Pooled upstream connections were approved under the old version.
	p.upstreams.Reset()
	p.recheckTunnels()
	p.log.Info("policy version applied", "version", version)
	p.enforcingOnce.Do(func() { close(p.enforcing) })
	return nil
}

// Credentials returns the holder of the credentials the proxy uses
// (a gateway-mode agent's subscription fills it).
func (p *Proxy) Credentials() *credentials.Holder { return p.creds }

// Decided returns how many decisions the proxy has recorded since it
// started: a count that moves with its traffic.
func (p *Proxy) Decided() uint64 { return p.decisions.Added() }

// Enforcing returns a channel closed once the proxy has applied its first
// policy version (at New, for a policy file or a kept version that
// loads).
func (p *Proxy) Enforcing() <-chan struct{} { return p.enforcing }

// Current returns the policy in force and its version label (nil and ""
// if none): policy.local's view of the proxy.
func (p *Proxy) Current() (*policy.Policy, string) {
	if l := p.current.Load(); l != nil {
		return l.matcher.Policy(), l.version
	}
	return nil, ""
}

// PolicyVersion returns the label of the version in force ("" if none).
func (p *Proxy) PolicyVersion() string {
	if l := p.current.Load(); l != nil {
		return l.version
	}
	return ""
}

// Decisions returns the recent decisions, oldest first.
func (p *Proxy) Decisions() []decision.Record { return p.decisions.Snapshot() }

// DeniedArguments returns the arguments (RFC 8785 form, or as written when
// a number does not survive that form: keepArguments) of a recent denied
// tools/call by its denial id, while the proxy still keeps them.
func (p *Proxy) DeniedArguments(denialID string) ([]byte, bool) { return p.arguments.Get(denialID) }

// DroppedDecisions returns how many records the decision log file missed
// because its writer fell behind (they stay in Decisions).
func (p *Proxy) DroppedDecisions() int64 { return p.decisions.Dropped() }

// CACertPEM is the certificate the sandbox must trust (nil before a CA).
func (p *Proxy) CACertPEM() []byte {
	if ca := p.ca.Load(); ca != nil {
		return ca.CertPEM()
	}
	return nil
}

// ToolDefinitions returns the last tool definition changes the proxy saw,
// oldest first, without their definitions (those go to the shipper).
func (p *Proxy) ToolDefinitions() []ToolDefinitionChange { return p.relay.Changes() }

// ToolDefinitionChange is one tool whose definition the proxy saw change
// (or saw for the first time: Before is "").
type ToolDefinitionChange = decision.ToolDefinitionChange

// SetCA replaces the CA that new intercepted connections are served with
// (the sandbox's, delivered by the gateway).
func (p *Proxy) SetCA(ca *ca.CA) { p.ca.Store(ca) }

// serve serves the listeners until ctx ends, or one fails (Agent.Serve).
func (p *Proxy) serve(ctx context.Context, l Listeners) error {
	ln := l.Proxy
	srv := h1.NewServer(h1.Config{Handler: p, ConnContext: p.connContext, SameAuthority: sameAuthority, Procs: p.procs, Logger: p.log})
	bgCtx, stopBackground := context.WithCancel(context.Background())
	var background sync.WaitGroup
	if p.procs != nil {
		background.Go(func() { p.procs.Run(bgCtx) })
	}
	background.Go(func() { p.decisions.Write(bgCtx) })
	background.Go(func() { onEveryTick(bgCtx, tunnelRecheck, func() { p.recheckTunnels(); p.held.Recheck() }) }) // grants end (expires_at)
	background.Go(func() { onEveryTick(bgCtx, time.Second, p.emitSummaries) })
	defer func() {
		// Before the log's last write; a handler still running past the
		// shutdown timeout has its denials kept one by one after this.
		for _, s := range p.summaries.Close() {
			p.keepRecord(s)
		}
		stopBackground()
		background.Wait()
	}()
	limited := h1.LimitListener(ln, p.cfg.MaxConnections)
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(limited) }()
	// The redirected connections are judged in connCtx, which ends when
	// the proxy stops, and waited for.
	var (
		transparent       net.Listener
		redirected        sync.WaitGroup
		connCtx, stopConn = context.WithCancel(context.Background())
	)
	defer stopConn()
	accepting := 1
	if l.Transparent != nil {
		transparent = h1.LimitListener(l.Transparent, p.cfg.MaxConnections)
		accepting++
		go func() { errc <- p.serveTransparent(connCtx, transparent, &redirected) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc: // one listener failed: stop serving both
		accepting--
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.held.Close(shutdownCtx) // their agents answered review_unavailable first
	srv.Shutdown(shutdownCtx, limited)
	if transparent != nil {
		transparent.Close()
	}
	for ; accepting > 0; accepting-- {
		<-errc // the accept loops have returned
	}
	p.hijacked.CloseAll()
	stopConn()
	redirected.Wait()
	p.upstreams.Reset()
	return err
}

// now is the time requests are judged at: the proxy's clock, or the
// gateway's when that is ahead, so a grant ends (expires_at) no later
// than the gateway says, whichever clock is wrong and even while the
// gateway is unreachable.
func (p *Proxy) now() time.Time {
	t := p.cfg.Now()
	if p.gatewayAhead != nil {
		t = t.Add(p.gatewayAhead())
	}
	return t
}
