package dataplane

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/dataplane/identity"
	"github.com/portcullis-dev/portcullis/dataplane/match"
	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/dataplane/policylocal"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/internal/telemetry"
	"github.com/portcullis-dev/portcullis/policy"
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
	// definition the proxy sees (pins.go; the shipper to the gateway). It
	// must not block.
	OnToolDefinition func(decision.ToolDefinitionChange)
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger
	// AdaptProcs runs the proxy on one P while it serves one request at a
	// time and on Go's default GOMAXPROCS while requests overlap
	// (procs.go). It changes the whole process's GOMAXPROCS: for a process
	// that is the proxy, with no GOMAXPROCS of its own. Default false.
	AdaptProcs bool

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
	upstreams *upstreams

	fileReloads reloadStatus
	// hijacked holds what outlives the HTTP server's own bookkeeping:
	// tunnels and the inner servers of intercepted CONNECTs. serve closes
	// them when it stops.
	hijacked tracker

	// tunnels are the open L4 tunnels with the request that allowed each:
	// they are judged again when the policy changes and as time passes
	// (expires_at), and closed when no longer allowed.
	tunnelsMu sync.Mutex
	tunnels   map[*openTunnel]struct{}

	// local answers policy.local.
	local *policylocal.Server

	// limits holds the token buckets of rate_limit rules (ratelimit.go).
	limits buckets

	// defs is what the proxy knows of MCP tools' definitions (pins.go).
	defs toolDefs
	// pending are the requests servers sent clients, not yet answered
	// (replies.go).
	pending serverRequests

	// tracer makes request spans (trace.go); nil: not tracing.
	tracer trace.Tracer
	// procs scales GOMAXPROCS with overlapping requests (procs.go); nil:
	// Config.AdaptProcs is off.
	procs *procScaler

	// gatewayAhead, in gateway mode, is how far the gateway's clock is
	// ahead of cfg.Now (Subscriber.GatewayAhead); set by New, before
	// anything runs.
	gatewayAhead func() time.Duration
}

type openTunnel struct {
	req  policy.Request
	conn net.Conn
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
	p.upstreams = newUpstreams(cfg.UpstreamRoots)
	p.local = policylocal.New(policylocal.Config{Sandbox: cfg.Sandbox, State: p, Framing: framingProblem, Logger: p.log, DevAllowLoopback: cfg.DevAllowLoopback})
	p.defs.onChange = cfg.OnToolDefinition
	p.defs.log = p.log
	if cfg.Tracer != nil {
		p.tracer = cfg.Tracer.Tracer(telemetry.Scope)
	}
	if cfg.AdaptProcs && runtime.GOMAXPROCS(0) > 1 {
		p.procs = newProcScaler()
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
	p.limits.retain(m.LimitKeys())
	// Pooled upstream connections were approved under the old version.
	p.upstreams.reset()
	p.recheckTunnels()
	p.log.Info("policy version applied", "version", version)
	p.enforcingOnce.Do(func() { close(p.enforcing) })
	return nil
}

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

// SetCA replaces the CA that new intercepted connections are served with
// (the sandbox's, delivered by the gateway).
func (p *Proxy) SetCA(ca *ca.CA) { p.ca.Store(ca) }

// serve serves proxy clients on ln until ctx ends (Agent.Run).
func (p *Proxy) serve(ctx context.Context, ln net.Listener) error {
	srv := newHTTPServer(p, p.newClient, p.procs, p.log)
	bgCtx, stopBackground := context.WithCancel(context.Background())
	var background sync.WaitGroup
	if p.procs != nil {
		background.Go(func() { p.procs.run(bgCtx) })
	}
	background.Go(func() { p.decisions.Write(bgCtx) })
	background.Go(func() { onEveryTick(bgCtx, tunnelRecheck, p.recheckTunnels) })
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
	limited := newLimitListener(ln, p.cfg.MaxConnections)
	errc := make(chan error, 1)
	go func() { errc <- srv.serve(limited) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv.shutdown(shutdownCtx, limited)
	<-errc // the accept loop has returned
	p.hijacked.closeAll()
	p.upstreams.reset()
	return nil
}

// client is the proxy's view of one client connection: its calling
// binary is looked up once, on first need.
type client struct {
	conn     net.Conn
	identify func(net.Conn) (identity.Caller, error) // Config.Caller; nil: watch
	// watch is who held the client's socket at accept, looked at only
	// when the policy then named binaries (it scans /proc); nil otherwise.
	watch  *identity.Watch
	log    *slog.Logger // why a caller is unknown, at debug level
	once   sync.Once
	caller identity.Caller
}

type clientKey struct{}

// newClient starts the proxy's view of a connection just accepted, on the
// connection's goroutine. With the default identity and a policy that
// names binaries, it looks at who holds the client's socket now, to
// compare when the first request is judged. When the first request's
// head has already arrived, this look is also the one at judgement
// (identity.Follow's sent): a client that writes at once costs one pass
// over /proc, not two.
func (p *Proxy) newClient(conn net.Conn) *client {
	c := &client{conn: conn, identify: p.cfg.Caller, log: p.log}
	if c.identify == nil {
		if cur := p.current.Load(); cur != nil && cur.matcher.NamesBinaries() {
			c.watch = identity.Follow(conn, headSent(conn))
		}
	}
	return c
}

// process is the client's caller, looked up when its first request is
// judged. With the default identity, a connection accepted while the
// policy named no binaries has no look from its accept to compare with:
// its caller is unknown (a client reconnects to be named).
func (c *client) process() identity.Caller {
	c.once.Do(func() {
		var (
			caller identity.Caller
			err    error
		)
		switch {
		case c.identify != nil:
			caller, err = c.identify(c.conn)
		case c.watch != nil:
			caller, err = c.watch.Caller()
		default:
			if c.log != nil {
				c.log.Debug("caller unknown: the policy named no binaries when the connection was accepted")
			}
			return
		}
		// An unknown binary ("") matches no rule that names binaries.
		if err == nil && caller.Binary != "" {
			c.caller = caller
		} else if c.log != nil {
			c.log.Debug("caller unknown", "err", err)
		}
	})
	return c.caller
}

func callerOf(ctx context.Context) identity.Caller {
	if c, ok := ctx.Value(clientKey{}).(*client); ok {
		return c.process()
	}
	return identity.Caller{}
}

// ServeHTTP handles one proxy request: CONNECT, or an absolute-form HTTP
// request. Requests for policy.local are answered by the proxy itself,
// before any policy applies.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect && policylocal.IsHost(r.Host),
		r.URL.IsAbs() && r.URL.Scheme != "http" && policylocal.IsHost(r.URL.Host):
		policylocal.Refuse(w)
	case r.Method == http.MethodConnect:
		p.handleConnect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		// r.Host is the URI's authority; a Host header naming another
		// marks the connection (httpread.go). What is judged and
		// forwarded is the URI's authority.
		t, err := parseTarget(r.URL.Host, "80")
		if err != nil {
			p.refuse(w, r, dest{host: r.URL.Hostname()}, err.Error())
			return
		}
		if t.host == policylocal.Host {
			p.local.Serve(w, r, t.port)
			return
		}
		p.handleHTTP(w, r, "http", t, netip.Addr{})
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "not_a_proxy_request", "detail": "send absolute-form HTTP requests or CONNECT to this proxy"})
	}
}

// dest is a destination as requested: host name (or IP literal) and port.
type dest struct {
	host string
	port int
	// ip is the host read as an IP literal, in any spelling (parseTarget);
	// invalid for a host name.
	ip netip.Addr
}

func (t dest) authority() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

func parseTarget(authority, defaultPort string) (dest, error) {
	host, port, err := net.SplitHostPort(authority)
	if err != nil {
		host, port = authority, defaultPort
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || host == "" {
		return dest{}, fmt.Errorf("invalid destination %q", authority)
	}
	// Before policy and before any DNS query: a host must be an IP
	// literal or a host name. '*', NUL, '%', spaces and other bytes no
	// DNS name holds would otherwise meet the policy's wildcards (a
	// CONNECT to the literal host *.corp.example.com).
	ip, literal := policy.ParseHostIP(host)
	if !literal && !policy.ValidHostName(host) {
		return dest{}, fmt.Errorf("invalid destination host %q: not a host name or an IP address", host)
	}
	return dest{host: strings.ToLower(strings.TrimSuffix(host, ".")), port: n, ip: ip}, nil
}

// sameAuthority compares two authorities, treating an omitted port as the
// scheme's default.
func sameAuthority(a, b, defaultPort string) bool {
	ta, errA := parseTarget(a, defaultPort)
	tb, errB := parseTarget(b, defaultPort)
	return errA == nil && errB == nil && ta == tb
}

// handleConnect opens a tunnel. L4 destinations are decided here and
// relayed byte for byte; destinations that need inspection get a TLS
// terminating (or plain HTTP) inner server that judges every request.
func (p *Proxy) handleConnect(w http.ResponseWriter, r *http.Request) {
	t, err := parseTarget(r.Host, "")
	if err != nil {
		p.refuse(w, r, dest{host: r.Host}, err.Error())
		return
	}
	r, end := p.traceConnect(r, t)
	defer end()
	cur := p.current.Load()
	if cur == nil {
		p.refuse(w, r, t, "no policy is loaded")
		return
	}
	req := p.baseRequest(r.Context(), cur, t)
	if problem := framingProblem(r.Context()); problem != "" {
		w.Header().Set("Connection", "close")
		p.deny(w, r, cur, req, policy.Decision{Reason: problem}, nil)
		return
	}
	addr, d := p.resolve(r.Context(), cur, t, &req)
	if !addr.IsValid() {
		p.deny(w, r, cur, req, d, nil)
		return
	}
	req.Addr = addr
	if cur.matcher.Inspect(t.host, t.port) {
		// Every inner request goes to this address: the name is resolved
		// once per tunnel. Each has a span of its own.
		end()
		p.intercept(w, r, t, addr)
		return
	}
	if d = cur.matcher.Decide(&req); !d.Allow {
		p.deny(w, r, cur, req, d, nil)
		return
	}
	if reason, shared := p.servesInspected(r.Context(), cur, t, addr, true); shared {
		p.deny(w, r, cur, req, policy.Decision{Reason: reason}, nil)
		return
	}
	p.recordFor(r, p.newRecord(cur, req, d, nil, ""))
	p.tunnel(w, r, cur, req, addr, t)
}

// literalDenied checks what needs no DNS: a control-plane port, and an IP
// literal host (in any spelling, read by parseTarget), which is the
// address dialled. ip is that address when the host is an allowed IP
// literal.
func literalDenied(t dest, devAllowLoopback bool) (ip netip.Addr, reason string, denied bool) {
	if policy.DeniedPort(t.port) {
		return netip.Addr{}, fmt.Sprintf("port %d is a control-plane port, always denied", t.port), true
	}
	if t.ip.IsValid() {
		if reason, denied := policy.AlwaysDenied(t.ip, devAllowLoopback); denied {
			return netip.Addr{}, fmt.Sprintf("%s resolves to %s, a %s, always denied", t.host, t.ip, reason), true
		}
		return t.ip, "", false
	}
	return netip.Addr{}, "", false
}

// resolve finds the address to dial for t: an IP literal as written (in
// any spelling), else the first resolved address the policy does not
// refuse at the address level. The proxy dials exactly this address; it
// never resolves again between check and dial.
//
// A name is decided before it is resolved: unless some endpoint could
// match it (Matcher.WantsAddress: an endpoint whose host, port and
// binaries match, or a hostless allowed_ips endpoint on the port), it is
// denied on the name alone and no DNS query is sent — otherwise a denied
// request would still carry its host name (and whatever an agent encodes
// in it) to the DNS servers. On failure the returned address is invalid
// and the decision says why.
func (p *Proxy) resolve(ctx context.Context, cur *loaded, t dest, req *policy.Request) (netip.Addr, policy.Decision) {
	deny := func(reason string) (netip.Addr, policy.Decision) {
		return netip.Addr{}, policy.Decision{Reason: reason}
	}
	ip, reason, denied := literalDenied(t, p.cfg.DevAllowLoopback)
	switch {
	case denied:
		return deny(reason)
	case ip.IsValid():
		return ip, policy.Decision{}
	}
	if !cur.matcher.WantsAddress(req) {
		if d := cur.matcher.Decide(req); !d.Allow {
			return netip.Addr{}, d
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := p.cfg.Resolve(ctx, t.host)
	if err != nil || len(addrs) == 0 {
		return deny(fmt.Sprintf("cannot resolve %s", t.host))
	}
	first := ""
	for _, a := range addrs {
		a = a.Unmap()
		if reason, denied := policy.AlwaysDenied(a, p.cfg.DevAllowLoopback); denied {
			if first == "" {
				first = fmt.Sprintf("%s resolves to %s, a %s, always denied", t.host, a, reason)
			}
			continue
		}
		return a, policy.Decision{}
	}
	return deny(first)
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

// baseRequest starts the request to t. The calling binary is looked up
// only when the policy names binaries (the lookup scans /proc).
func (p *Proxy) baseRequest(ctx context.Context, cur *loaded, t dest) policy.Request {
	req := policy.Request{
		Host:             t.host,
		Port:             t.port,
		Time:             p.now(),
		DevAllowLoopback: p.cfg.DevAllowLoopback,
	}
	if cur != nil && cur.matcher.NamesBinaries() {
		c := callerOf(ctx)
		req.Binary, req.Ancestors = c.Binary, c.Ancestors
	}
	return req
}

// handleHTTP judges one HTTP request to t and forwards it when allowed.
// addr is the address a CONNECT tunnel resolved t to; when invalid (an
// absolute-form request), t is resolved here, after the checks that need
// no address.
func (p *Proxy) handleHTTP(w http.ResponseWriter, r *http.Request, scheme string, t dest, addr netip.Addr) {
	r, end := p.traceRequest(r, scheme, t)
	defer end()
	cur := p.current.Load()
	if cur == nil {
		p.refuse(w, r, t, "no policy is loaded")
		return
	}
	req := p.baseRequest(r.Context(), cur, t)
	req.HTTPMethod = r.Method
	req.Path = r.URL.EscapedPath()
	req.Query = r.URL.RawQuery
	if problem := framingProblem(r.Context()); problem != "" {
		// Before anything else, DNS included: the request is not judged.
		w.Header().Set("Connection", "close")
		p.deny(w, r, cur, req, policy.Decision{Reason: problem}, nil)
		return
	}
	if h := connectionNamesEndToEnd(r.Header); h != "" {
		// Headers named in Connection are dropped before forwarding; the
		// upstream would see a different request from the one judged.
		p.deny(w, r, cur, req, policy.Decision{Reason: "the Connection header names " + h + ", which would be removed before the upstream sees it"}, nil)
		return
	}
	if r.Header.Get("Upgrade") != "" {
		// An upgraded connection (WebSocket) would carry traffic the proxy
		// no longer inspects.
		p.deny(w, r, cur, req, policy.Decision{Reason: "protocol upgrades are not inspected yet"}, nil)
		return
	}
	if i := nonASCII(r.RequestURI); i >= 0 {
		// Go percent-encodes such a byte into the path it hands on; an
		// upstream may read the raw byte otherwise. OpenShell refuses it.
		p.deny(w, r, cur, req, policy.Decision{Reason: fmt.Sprintf("malformed request target: a raw non-ASCII byte (0x%02X) must be percent-encoded", r.RequestURI[i])}, nil)
		return
	}
	path, err := policy.CanonicalPath(req.Path, true)
	if err != nil {
		p.deny(w, r, cur, req, policy.Decision{Reason: "malformed request path: " + err.Error()}, nil)
		return
	}
	var d policy.Decision
	if !addr.IsValid() {
		if addr, d = p.resolve(r.Context(), cur, t, &req); !addr.IsValid() {
			p.deny(w, r, cur, req, d, nil)
			return
		}
	}
	req.Addr = addr

	var body []byte
	var list *toolsList
	limits, mcpEndpoint := cur.matcher.MCPLimits(t.host, t.port, r.Method, path)
	if mcpEndpoint && r.Method != http.MethodPost && (r.ContentLength != 0 || len(r.TransferEncoding) > 0) {
		// Only POST bodies are judged; any other body would pass unread.
		p.deny(w, r, cur, req, policy.Decision{Reason: r.Method + " to an MCP endpoint must not carry a body"}, nil)
		return
	}
	if mcpEndpoint && r.Method == http.MethodPost {
		key := mcpEndpointKey{host: t.host, port: t.port, path: path}
		session := sessionKey{ep: key, session: r.Header.Get(mcp.HeaderMCPSessionID)}
		answers := 0 // the larger bound, when the server waits for answers
		if p.pending.waiting(session, req.Time) {
			answers = limits.Response
		}
		mreq, raw, reason := p.readMCP(w, r, limits.Body, answers)
		if mreq == nil {
			p.deny(w, r, cur, req, policy.Decision{Reason: reason}, nil)
			return
		}
		if len(raw) > limits.Body {
			if why := p.pending.onlyAnswers(session, mreq, req.Time); why != "" {
				p.deny(w, r, cur, req, policy.Decision{Reason: fmt.Sprintf("request body over mcp.max_body_bytes (%d): %s, and only answers to the server's requests may be larger (mcp.max_response_bytes)", limits.Body, why)}, nil)
				return
			}
		}
		unknown := p.withDefinitions(key, mreq)
		var denied bool
		var limitedBuf [1]limitedCall // a request is usually one call
		var limited []limitedCall
		d, limited, denied = p.judgeMCP(cur, req, mreq, limitedBuf[:0])
		if denied && d.DefinitionRefused && unknown > 0 {
			// A pin refused a tool whose definition the proxy does not
			// know: list the server's tools, then judge again.
			if err := p.verifyTools(r, scheme, t, addr, key, path, mreq.Version); err != nil {
				p.log.Warn("could not verify MCP tool definitions", "host", t.host, "port", t.port, "path", path, "err", err)
			}
			p.withDefinitions(key, mreq)
			d, limited, denied = p.judgeMCP(cur, req, mreq, limitedBuf[:0])
		}
		if denied {
			p.deny(w, r, cur, req, d, mreq)
			return
		}
		if len(limited) > 0 {
			over, audit := p.limits.take(limited, p.cfg.Now)
			if over != nil {
				p.rateLimited(w, r, cur, req, over, mreq)
				return
			}
			if audit != nil {
				d.Audit, d.Reason = true, audit.describe()+" (enforcement: audit, forwarded)"
			}
		}
		body = raw
		p.pending.answered(session, mreq)
		p.recordFor(r, p.newRecord(cur, req, d, mreq, ""))
		list = p.toolsListFor(req, r, key, mreq)
	} else {
		if d = cur.matcher.Decide(&req); !d.Allow {
			p.deny(w, r, cur, req, d, nil)
			return
		}
		p.recordFor(r, p.newRecord(cur, req, d, nil, ""))
		if mcpEndpoint && r.Method == http.MethodGet {
			// A GET stream may replay a POST's answers (resumption).
			list = p.toolsListFor(req, r, mcpEndpointKey{host: t.host, port: t.port, path: path}, nil)
		}
	}
	canonical, err := forwardPath(cur, d, req.Path, path)
	if err != nil {
		p.deny(w, r, cur, req, policy.Decision{Reason: "malformed request path: " + err.Error()}, nil)
		return
	}
	p.forward(w, r, scheme, t, addr, canonical, body, list)
	if list != nil {
		list.release()
	}
}

// readUpTo reads r to its end, or to one byte past limit, into one
// buffer: sized first from the announced length (at most
// initialBodyBuffer) and one byte more, the room to see the end, and
// doubled only when bytes arrive to fill it.
func readUpTo(r io.Reader, announced int64, limit int) ([]byte, error) {
	size := bytes.MinRead // unannounced: a chunked body
	if announced >= 0 {
		size = int(min(announced, initialBodyBuffer)) + 1
	}
	buf := make([]byte, 0, size)
	for len(buf) <= limit {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		room := buf[len(buf):min(cap(buf), limit+1)]
		n, err := r.Read(room)
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// readMCP reads an MCP POST body, counting the bytes actually read against
// the endpoint's limit (chunked bodies included), and parses it strictly.
// answers, when larger than maxBody, is the bound for a body of answers to
// the server's requests (the caller checks it holds only those).
func (p *Proxy) readMCP(w http.ResponseWriter, r *http.Request, maxBody, answers int) (*mcp.Request, []byte, string) {
	limit, name := maxBody, "mcp.max_body_bytes"
	if answers > maxBody {
		limit, name = answers, "mcp.max_response_bytes"
	}
	// A client that announces a body and trickles it must not hold memory
	// or a goroutine for long: bound the time, and grow the buffer only as
	// bytes arrive (never from the announced length alone).
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	defer rc.SetReadDeadline(time.Time{})
	raw, err := readUpTo(r.Body, r.ContentLength, limit)
	if err != nil {
		return nil, nil, "cannot read the request body"
	}
	if len(raw) > limit {
		return nil, nil, fmt.Sprintf("request body over %s (%d)", name, limit)
	}
	mreq, err := mcp.Parse(r.Header, raw)
	if err != nil {
		return nil, nil, "malformed MCP request: " + err.Error()
	}
	return mreq, raw, ""
}

// Bounds on reading a judged body.
const (
	bodyReadTimeout   = 30 * time.Second
	initialBodyBuffer = 16 << 10
)

// judgeMCP decides every message of an MCP request. One denied message
// denies the request (and so the whole batch). It returns the deciding
// decision: the first denial, else the first message's allow; and, when
// allowed, the messages allowed by a rule with a rate_limit, appended to
// limited (the caller's buffer, empty).
func (p *Proxy) judgeMCP(cur *loaded, base policy.Request, mreq *mcp.Request, limited []limitedCall) (policy.Decision, []limitedCall, bool) {
	if mreq.Batch && !mcp.BatchAllowed(mreq.Version) {
		return policy.Decision{Reason: fmt.Sprintf("JSON-RPC batches are not part of MCP protocol version %q", versionLabel(mreq.Version))}, nil, true
	}
	var first policy.Decision
	audit := false
	for i := range mreq.Messages {
		req := base
		req.MCP = &mreq.Messages[i].Message
		d := cur.matcher.Decide(&req)
		if !d.Allow {
			return d, nil, true
		}
		if i == 0 {
			first = d
		}
		audit = audit || d.Audit
		if l := cur.matcher.RateLimit(&d); l != nil {
			limited = append(limited, limitedCall{limit: l, tool: req.MCP.Tool, d: d})
		}
	}
	first.Audit = audit
	return first, limited, false
}

func versionLabel(v string) string {
	if v == "" {
		return policy.DefaultMCPVersion + " (none given)"
	}
	return v
}

// forwardPath is the canonical path that is forwarded: canonicalised with
// the deciding endpoint's allow_encoded_slash.
// lenient is the path already canonicalised with encoded slashes allowed:
// it is the answer whenever the endpoint allows them or the path has none.
func forwardPath(cur *loaded, d policy.Decision, raw, lenient string) (string, error) {
	ep := endpointOf(cur, d)
	if ep != nil && ep.AllowEncodedSlash || !strings.Contains(lenient, "%2F") && !strings.Contains(lenient, "%5C") {
		return lenient, nil
	}
	return policy.CanonicalPath(raw, false)
}

// deny answers a denied request (403), records it, and never forwards.
func (p *Proxy) deny(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request, d policy.Decision, mreq *mcp.Request) {
	id := decision.NewDenialID()
	// The binary is looked up only when the policy names binaries: a
	// lookup scans /proc, and denials must stay cheap (an agent can cause
	// as many as it likes).
	rec := p.newRecord(cur, req, d, mreq, id)
	if mreq != nil && len(mreq.Messages) == 1 && rec.MCPMethod == "tools/call" {
		// A denial by policy (not a rate limit): the arguments stay here.
		rec.ArgumentsDigest = p.keepArguments(id, mreq.Messages[0].Message.Arguments)
	}
	p.traceDecision(r, &rec)
	p.emit(rec)
	version := ""
	if cur != nil {
		version = cur.version
	}
	if mreq != nil {
		data := map[string]any{"denial_id": id, "policy_version": version, "rule": d.Rule, "entry": d.Entry, "reason": d.Reason}
		if d.DefinitionRefused && len(mreq.Messages) > 0 {
			data["reason_code"] = policy.ToolDefinitionChanged
			data["tool_definition"] = mreq.Messages[0].Message.ToolDefinition
		}
		if rec.TraceID != "" {
			data["trace_id"] = rec.TraceID
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		w.Write(mreq.DenyBody(mcpDeniedCode, "denied by policy: "+d.Reason, data))
		return
	}
	body := map[string]any{
		"error":          "policy_denied",
		"reason":         d.Reason,
		"entry":          d.Entry,
		"rule":           d.Rule,
		"policy_version": version,
		"denial_id":      id,
		"host":           req.Host,
		"port":           req.Port,
		"method":         req.HTTPMethod,
		"path":           req.Path,
		"binary":         req.Binary,
	}
	if rec.TraceID != "" {
		body["trace_id"] = rec.TraceID
	}
	writeJSON(w, http.StatusForbidden, body)
}

// mcpDeniedCode is the JSON-RPC error code of a policy denial (the
// implementation-defined server error range is -32000 to -32099).
const mcpDeniedCode = -32001

// refuse denies a request that is malformed before any policy applies.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, t dest, reason string) {
	cur := p.current.Load()
	req := p.baseRequest(r.Context(), cur, t)
	req.HTTPMethod = r.Method
	if r.URL != nil {
		req.Path = r.URL.EscapedPath()
	}
	p.deny(w, r, cur, req, policy.Decision{Reason: reason}, nil)
}

func (p *Proxy) record(cur *loaded, req policy.Request, d policy.Decision, mreq *mcp.Request, denialID string) {
	p.emit(p.newRecord(cur, req, d, mreq, denialID))
}

// newRecord is the record of decision d on req: a denial when denialID is
// set, else an allow (audit when d.Audit).
func (p *Proxy) newRecord(cur *loaded, req policy.Request, d policy.Decision, mreq *mcp.Request, denialID string) decision.Record {
	rec := decision.Record{
		Time:       req.Time,
		Sandbox:    p.cfg.Sandbox,
		Binary:     req.Binary,
		Host:       req.Host,
		Port:       req.Port,
		HTTPMethod: req.HTTPMethod,
		Path:       req.Path,
		Decision:   decision.Allow,
		Entry:      d.Entry,
		Rule:       d.Rule,
		Reason:     d.Reason,
		DenialID:   denialID,
	}
	if req.Addr.IsValid() {
		rec.Addr = addrText(req.Host, req.Addr)
	}
	if cur != nil {
		rec.PolicyVersion = cur.version
	}
	switch {
	case denialID != "":
		rec.Decision = decision.Deny
		rec.VersionProbe = d.VersionRefused
	case d.Audit:
		rec.Decision = decision.Audit
	}
	if mreq != nil && len(mreq.Messages) > 0 {
		rec.MCPMethod = mreq.Messages[0].Message.Method
		rec.Tool = mreq.Messages[0].Message.Name()
		if denialID != "" && d.DefinitionRefused {
			rec.ReasonCode, rec.ToolDefinition = policy.ToolDefinitionChanged, mreq.Messages[0].Message.ToolDefinition
		}
	}
	return rec
}

// addrText is a.String(), without allocating when host, the request's
// host, already spells it: an IPv4 literal, which the proxy dials as
// written. netip.ParseAddr reads an IPv4 address only as four decimal
// fields without leading zeros, so a host it reads as a is a's one
// spelling.
func addrText(host string, a netip.Addr) string {
	if a.Is4() {
		if h, err := netip.ParseAddr(host); err == nil && h == a {
			return host
		}
	}
	return a.String()
}

// emit keeps rec in the decision log and hands it to the shipper, its
// long fields cut (Record.Bound); a denial past its kind's budget is
// counted into a summary instead (decision.Summarizer), which goes the
// same way when its window ends. Allowed and audited records always go.
func (p *Proxy) emit(rec decision.Record) {
	decision.Bound(&rec)
	if decision.Folds(rec.Decision) {
		keep, due := p.summaries.Admit(rec)
		for _, s := range due {
			p.keepRecord(s)
		}
		if !keep {
			return
		}
	}
	p.keepRecord(rec)
}

// emitSummaries emits the summaries whose window has ended.
func (p *Proxy) emitSummaries() {
	for _, s := range p.summaries.Due(p.now()) {
		p.keepRecord(s)
	}
}

func (p *Proxy) keepRecord(rec decision.Record) {
	p.decisions.Add(rec)
	if p.cfg.OnRecord != nil {
		p.cfg.OnRecord(rec)
	}
}

// keepArguments keeps a denied tools/call's arguments in the proxy's
// memory for policy.local (in RFC 8785 form, or as written when a number
// does not survive that form) and returns their digest for the record (""
// for arguments that are not one strict JSON object, which no proposal can
// admit exactly). Absent arguments are {}, as policy judges them.
func (p *Proxy) keepArguments(denialID string, args json.RawMessage) string {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	c, err := policy.CanonicalArguments(args)
	if err != nil {
		return ""
	}
	digest, err := policy.ArgumentsDigest(c)
	if err != nil {
		return ""
	}
	if _, _, inexact, err := policy.InexactArgumentNumber(args); err == nil && inexact {
		// A number a float64 does not hold exactly: the canonical form
		// holds another number, from which the advisor would propose a
		// call never made. Kept as written (compacted), so the advisor
		// sees the number and refuses; the digest is the same.
		var b bytes.Buffer
		if json.Compact(&b, args) == nil {
			p.arguments.Put(denialID, b.Bytes())
		}
		return digest
	}
	p.arguments.Put(denialID, c)
	return digest
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// nonASCII returns the index of the first byte of s above 0x7F, or -1.
func nonASCII(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return i
		}
	}
	return -1
}
