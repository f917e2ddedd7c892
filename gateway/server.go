// Package gateway is the Portcullis control-plane server: Connect handlers
// for every service (serving gRPC, gRPC-Web and Connect on one port),
// authentication and the authorization table, error mapping, health,
// reflection, metrics and the embedded console; and the push of signed
// policy versions to proxies (push.go: the hub; distribution.go: the
// streams; signer.go: the key chain; proxies.go: per-proxy status;
// decisions.go: the decision records proxies ship; retention.go: their
// per-sandbox ingest limit and retention sweep). The policy streams'
// connections go to a grpc-go server on the same port (router.go,
// grpc.go, with TLS or without), which costs an idle stream less memory.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/grpcreflect/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/web"
)

// Config configures a Server. Zero values take the documented defaults.
type Config struct {
	// Listen is the address of the API port. Default "127.0.0.1:7070".
	Listen string
	// TLSCertFile and TLSKeyFile serve TLS when both are set; otherwise the
	// port speaks plaintext HTTP/1.1 and h2c.
	TLSCertFile, TLSKeyFile string
	// Insecure allows plaintext on a non-loopback address. Default false:
	// bearer tokens must not cross a network in the clear by accident.
	Insecure bool
	// MetricsListen, if set, serves /metrics without a token on this
	// separate address (meant for loopback); the API port's /metrics always
	// needs a token.
	MetricsListen string
	// BootstrapToken is the first admin token when the store has no admin
	// (PORTCULLIS_BOOTSTRAP_TOKEN). Empty means generate one.
	BootstrapToken string
	// ShutdownTimeout bounds graceful shutdown. Default 10s.
	ShutdownTimeout time.Duration
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Replica names this gateway among replicas sharing a database (shown
	// in proxies list). Default: host name and listen address.
	Replica string
	// StreamIdleTimeout ends a policy stream that sent nothing for that
	// long (a proxy sends a heartbeat every HeartbeatInterval). Default
	// three heartbeats.
	StreamIdleTimeout time.Duration
	// VersionCheckInterval is how often the push hub compares the versions
	// it serves with the store's, repairing a missed notification (and
	// re-reading the signing keys). Default 5s.
	VersionCheckInterval time.Duration
	// ProposalRateMax proposals per ProposalRateWindow may come from one
	// sandbox; more are refused with ResourceExhausted and a retry hint.
	// Defaults 20 per 10 minutes.
	ProposalRateMax    int
	ProposalRateWindow time.Duration
	// ProposalTTL is how long a proposal stays pending before it expires.
	// Default 24h.
	ProposalTTL time.Duration
	// WebhookURL, if set, is called when a proposal needs a human, when
	// one is decided and when the audit head moves; WebhookSecret keys the
	// HMAC signature of each call. WebhookBackoff is the wait before the
	// first retry (doubling; default 500ms).
	WebhookURL     string
	WebhookSecret  string
	WebhookBackoff time.Duration
	// DecisionMaxAge: the retention sweep deletes decision records the
	// gateway received longer ago than this. Default 7 days; negative keeps
	// them forever.
	DecisionMaxAge time.Duration
	// DecisionMaxPerSandbox: the sweep keeps each sandbox's newest this
	// many records (typically ~1.2 KB each, at most ~26 KB). Default
	// 100,000; negative: no count bound. Denials a proposal names are kept
	// whatever their age or rank.
	DecisionMaxPerSandbox int
	// DecisionSweepInterval is how often the sweep runs (and once at
	// start). Default 5m.
	DecisionSweepInterval time.Duration
	// DecisionRate and DecisionBurst are each sandbox's ingest limit on
	// this replica: a bucket of DecisionBurst tokens refilled at
	// DecisionRate a second, one token a record (one more per 4 KiB of
	// text). Records beyond it are dropped and counted, never refused.
	// Defaults 100/s and 2,000 (at least 10); a negative rate: no limit.
	DecisionRate  float64
	DecisionBurst int
}

func (c *Config) setDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:7070"
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Replica == "" {
		host, _ := os.Hostname()
		c.Replica = host + "/" + c.Listen
	}
	if c.StreamIdleTimeout == 0 {
		c.StreamIdleTimeout = 3 * HeartbeatInterval
	}
	if c.VersionCheckInterval == 0 {
		c.VersionCheckInterval = 5 * time.Second
	}
	if c.ProposalRateMax == 0 {
		c.ProposalRateMax = lifecycle.DefaultProposalRateMax
	}
	if c.ProposalRateWindow == 0 {
		c.ProposalRateWindow = lifecycle.DefaultProposalRateWindow
	}
	if c.ProposalTTL == 0 {
		c.ProposalTTL = lifecycle.DefaultProposalTTL
	}
	if c.WebhookBackoff == 0 {
		c.WebhookBackoff = 500 * time.Millisecond
	}
	if c.DecisionMaxAge == 0 {
		c.DecisionMaxAge = defaultDecisionMaxAge
	}
	if c.DecisionMaxPerSandbox == 0 {
		c.DecisionMaxPerSandbox = defaultDecisionMaxPerSandbox
	}
	if c.DecisionSweepInterval <= 0 {
		c.DecisionSweepInterval = defaultDecisionSweepInterval
	}
	if c.DecisionRate == 0 {
		c.DecisionRate = defaultDecisionRate
	}
	if c.DecisionBurst == 0 {
		c.DecisionBurst = defaultDecisionBurst
	}
}

// check refuses settings no default can repair.
func (c *Config) check() error {
	if math.IsNaN(c.DecisionRate) || math.IsInf(c.DecisionRate, 0) {
		return fmt.Errorf("decision rate %v is not a number of records a second", c.DecisionRate)
	}
	if c.DecisionRate > 0 && c.DecisionBurst < minDecisionBurst {
		return fmt.Errorf("decision burst %d: must be at least %d", c.DecisionBurst, minDecisionBurst)
	}
	return nil
}

// Server is the gateway.
type Server struct {
	cfg     Config
	store   *store.Store
	log     *slog.Logger
	auth    *authenticator
	metrics *metrics
	handler http.Handler

	// streams ends when shutdown begins: long-lived streams (health Watch,
	// later policy push) return so graceful shutdown need not wait out
	// its timeout for them.
	streams     context.Context
	stopStreams context.CancelFunc

	metricsLn net.Listener // opened by Listen when MetricsListen is set

	signer  *signer
	hub     *hub
	proxies *proxyTracker
	life    *lifecycle.Lifecycle
	notify  *notifier // nil without a webhook
	// decisionsStored counts decision records stored through this replica;
	// decisionsLimited those its ingest limit dropped, decisionsPruned
	// those its retention sweep deleted.
	decisionsStored  atomic.Uint64
	decisionsLimited atomic.Uint64
	decisionsPruned  atomic.Uint64
	limiter          *ingestLimiter
	// swept, if set (tests), is called after each retention sweep.
	swept func(error)
}

// New builds a gateway over st. It does not listen; see Run and Handler.
func New(cfg Config, st *store.Store) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:   cfg,
		store: st,
		log:   cfg.Logger.With("component", "gateway"),
		auth:  newAuthenticator(st, cfg.Now),
	}
	s.signer = newSigner(st)
	s.hub = newHub(st, s.signer)
	s.proxies = newProxyTracker(st, cfg.Replica, cfg.Now)
	s.limiter = newIngestLimiter(cfg.DecisionRate, cfg.DecisionBurst, cfg.Now)
	s.notify = newNotifier(cfg, s.log)
	s.life = lifecycle.New(lifecycle.Config{
		Logger: s.log, Now: cfg.Now, ProposalRateMax: cfg.ProposalRateMax, ProposalRateWindow: cfg.ProposalRateWindow,
		ProposalTTL: cfg.ProposalTTL, CheckInterval: cfg.VersionCheckInterval,
		Events: lifecycle.Events{NeedsHuman: s.notifyNeedsHuman, Decided: s.notifyDecided},
	}, st)
	s.metrics = newMetrics(s)
	s.streams, s.stopStreams = context.WithCancel(context.Background())
	context.AfterFunc(s.streams, s.hub.goawayAll)

	// Interceptors, outermost first: metrics see the final code, errors are
	// mapped once, a panic becomes an Internal error, and authorization runs
	// before any handler or request decoding.
	rpc := connect.NewServer(s.metrics.intercept, s.mapErrors, recoverPanics, s.auth.authorize)
	portcullisv1connect.RegisterSandboxServiceHandler(rpc, sandboxService{s})
	portcullisv1connect.RegisterTokenServiceHandler(rpc, tokenService{s})
	portcullisv1connect.RegisterPolicyServiceHandler(rpc, policyService{s})
	portcullisv1connect.RegisterDistributionServiceHandler(rpc, distributionService{s})
	portcullisv1connect.RegisterProxyServiceHandler(rpc, proxyService{s})
	portcullisv1connect.RegisterDecisionServiceHandler(rpc, decisionService{s})
	portcullisv1connect.RegisterAdvisorServiceHandler(rpc, advisorService{s})
	portcullisv1connect.RegisterProverServiceHandler(rpc, proverService{s})
	portcullisv1connect.RegisterAuditServiceHandler(rpc, auditService{s})
	portcullisv1connect.RegisterApprovalServiceHandler(rpc, approvalService{s})
	registerHealth(rpc, st, s.streams)
	grpcreflect.Register(rpc)
	for spec := range rpc.Specs() {
		if _, ok := authzTable[spec.Procedure]; !ok {
			return nil, fmt.Errorf("procedure %s has no row in the authorization table", spec.Procedure)
		}
	}

	mux := http.NewServeMux()
	connecthttp.Mount(interruptibleStreams{mux}, rpc, connecthttp.WithReadMaxBytes(maxDocumentBytes+64<<10))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.requireToken(s.metrics.handler()))
	// "/" without a method: a method-specific catch-all would conflict with
	// the per-service routes Mount installs.
	mux.Handle("/", getOnly(consoleHeaders(web.Handler())))
	mux.Handle(SessionPath, consoleHeaders(s.consoleSession()))
	s.handler = mux
	return s, nil
}

// Handler is the gateway's HTTP handler (APIs, health, metrics, console).
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.WarnContext(ctx, "readiness check failed", "err", err)
		http.Error(w, "store unreachable", http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ready\n"))
}

// getOnly serves GET and HEAD; anything else under "/" is an RPC to a
// service that does not exist, answered 404 (which gRPC clients read as
// Unimplemented).
func getOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.NotFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// consoleHeaders keeps the console's pages from being framed, sniffed or
// made to load anything but the gateway's own assets and APIs.
func consoleHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// No inline script or style, ever: scripts, styles and fetches
		// come from the gateway itself, and nothing else is loaded.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// recoverPanics turns a handler panic into an error (logged with its stack
// by mapErrors, answered as Internal) instead of a reset connection.
func recoverPanics(next connect.ServerFunc) connect.ServerFunc {
	return func(ctx context.Context, spec connect.Spec, stream connect.ServerStream) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic in %s: %v\n%s", spec.Procedure, r, debug.Stack())
			}
		}()
		return next(ctx, spec, stream)
	}
}

// requireToken guards plain HTTP endpoints with the same bearer tokens.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.auth.authenticate(r.Context(), r.Header.Get("Authorization")); err != nil {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// mapErrors is the server interceptor that turns handler errors into what
// the client may see (see toConnectError).
func (s *Server) mapErrors(next connect.ServerFunc) connect.ServerFunc {
	return func(ctx context.Context, spec connect.Spec, stream connect.ServerStream) error {
		start := time.Now()
		err := toConnectError(ctx, s.log, spec.Procedure, next(ctx, spec, stream))
		if s.log.Enabled(ctx, slog.LevelDebug) {
			code := "ok"
			if err != nil {
				code = connect.CodeOf(err).String()
			}
			s.log.DebugContext(ctx, "rpc", "procedure", spec.Procedure, "code", code, "duration", time.Since(start))
		}
		return err
	}
}

func mustPrincipal(ctx context.Context) Principal {
	p, ok := principalFrom(ctx)
	if !ok {
		// The authorization interceptor runs before every non-public
		// handler; reaching here without a principal is a wiring bug.
		panic("gateway: handler reached without a principal")
	}
	return p
}

// MinBootstrapTokenLen is the shortest bootstrap token accepted: tokens are
// stored as a plain SHA-256, so a chosen one must be long enough that the
// hash cannot be searched.
const MinBootstrapTokenLen = 32

// Bootstrap creates the first admin token when the store has none. It
// returns the token (to print once) and whether it created one.
func (s *Server) Bootstrap(ctx context.Context) (string, bool, error) {
	n, err := s.store.CountTokens(ctx, store.RoleAdmin)
	if err != nil {
		return "", false, fmt.Errorf("count admin tokens: %w", err)
	}
	if n > 0 {
		return "", false, nil
	}
	token := s.cfg.BootstrapToken
	var hash string
	if token == "" {
		if token, hash, err = newToken(); err != nil {
			return "", false, err
		}
	} else {
		if len(token) < MinBootstrapTokenLen {
			return "", false, fmt.Errorf("PORTCULLIS_BOOTSTRAP_TOKEN must be at least %d characters", MinBootstrapTokenLen)
		}
		hash = hashToken(token)
	}
	_, err = s.store.CreateToken(ctx, store.Token{Name: "admin", Role: store.RoleAdmin, Hash: hash, CreatedBy: "bootstrap"}, "bootstrap")
	if errors.Is(err, store.ErrAlreadyExists) {
		// A revoked token named "admin" exists; keep the name unique.
		_, err = s.store.CreateToken(ctx, store.Token{Name: "admin-" + hash[:8], Role: store.RoleAdmin, Hash: hash, CreatedBy: "bootstrap"}, "bootstrap")
	}
	if err != nil {
		return "", false, fmt.Errorf("create admin token: %w", err)
	}
	s.log.InfoContext(ctx, "created the first admin token")
	return token, true, nil
}

// Listen opens the API listener (and the metrics listener, if configured),
// refusing plaintext on a non-loopback address and token-less metrics on a
// non-loopback address unless Config.Insecure.
func (s *Server) Listen() (net.Listener, error) {
	if s.cfg.TLSCertFile == "" && !s.cfg.Insecure && !isLoopback(s.cfg.Listen) {
		return nil, fmt.Errorf("refusing to serve plaintext on non-loopback address %s: give --tls-cert/--tls-key, or --insecure", s.cfg.Listen)
	}
	if s.cfg.MetricsListen != "" && !s.cfg.Insecure && !isLoopback(s.cfg.MetricsListen) {
		return nil, fmt.Errorf("refusing to serve metrics without a token on non-loopback address %s: use a loopback address, or --insecure", s.cfg.MetricsListen)
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
	}
	if s.cfg.MetricsListen != "" {
		if s.metricsLn, err = net.Listen("tcp", s.cfg.MetricsListen); err != nil {
			ln.Close()
			return nil, fmt.Errorf("listen on metrics address %s: %w", s.cfg.MetricsListen, err)
		}
	}
	return ln, nil
}

// Serve serves on ln until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:   s.handler,
		Protocols: protocols,
		HTTP2: &http.HTTP2Config{
			// A peer that stops reading (a stuck proxy) cannot hold a
			// stream's sender forever, and a silent connection is probed.
			WriteByteTimeout: 30 * time.Second,
			SendPingTimeout:  30 * time.Second,
			PingTimeout:      15 * time.Second,
		},
		ReadHeaderTimeout: 10 * time.Second,
		// Long-lived RPC streams keep their connection active; idle
		// keep-alive connections go after two minutes.
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:    func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	servers := []*http.Server{srv}
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var background sync.WaitGroup
	s.startBackground(bgCtx, &background)
	defer func() {
		// After the streams ended: their last statuses are flushed.
		stopBackground()
		background.Wait()
	}()
	errc := make(chan error, 4)
	// Policy streams get a grpc-go server of their own on the same port
	// (router.go); the router terminates TLS when the gateway serves it.
	rt := newRouter(ln, s.log, grpcRoute)
	if s.cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		if err != nil {
			ln.Close()
			return fmt.Errorf("load TLS certificate: %w", err)
		}
		rt.tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
	}
	rt.routed = func(server string) { s.metrics.conns.WithLabelValues(server).Inc() }
	gs := s.newGRPCServer()
	gsc := make(chan struct{}) // closed when gs.Serve returned
	go func() {
		if err := rt.serve(); err != nil {
			errc <- fmt.Errorf("accept: %w", err)
		}
	}()
	go func() { errc <- srv.Serve(rt.http) }()
	go func() {
		defer close(gsc)
		if err := gs.Serve(rt.grpc); err != nil {
			errc <- err
		}
	}()
	if s.metricsLn != nil {
		msrv := &http.Server{Handler: s.metrics.handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		servers = append(servers, msrv)
		go func() { errc <- msrv.Serve(s.metricsLn) }()
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.log.Info("shutting down", "grace", s.cfg.ShutdownTimeout)
	// No new connections; those still being routed are closed.
	rt.close()
	s.stopStreams()
	// Shut down with a fresh context: ctx is already done.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	grpcStopped := make(chan struct{})
	go func() {
		defer close(grpcStopped)
		graceful := make(chan struct{})
		go func() {
			gs.GracefulStop()
			close(graceful)
		}()
		select {
		case <-graceful:
		case <-shutdownCtx.Done():
			s.log.Warn("graceful shutdown of the policy streams timed out; closing their connections")
			gs.Stop()
			<-graceful
		}
	}()
	for _, hs := range servers {
		if serr := hs.Shutdown(shutdownCtx); serr != nil {
			// Past the grace period, close what is left: requests still
			// running lose their connection, nothing committed is lost.
			s.log.Warn("graceful shutdown timed out; closing remaining connections", "err", serr)
			hs.Close()
		}
	}
	<-grpcStopped
	<-gsc
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// startBackground starts what runs beside the RPCs: the proxy status
// writer, the decision retention sweep, the lifecycle's background work,
// the push hub's version check, and the commit listener that offers every
// version committed (through this replica or another) to the hub.
func (s *Server) startBackground(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { s.logAuditHead(ctx, auditHeadInterval) })
	wg.Go(func() { s.notify.run(ctx) })
	wg.Go(func() { s.runDecisionSweep(ctx) })
	wg.Go(func() { _ = s.life.Run(ctx) })
	wg.Go(func() {
		s.proxies.run(ctx, func(err error) { s.log.Warn("could not store proxy statuses; will retry", "err", err) })
	})
	wg.Go(func() {
		tick := time.NewTicker(s.cfg.VersionCheckInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Another replica may have rotated the signing key.
			if err := s.signer.reload(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("could not reload signing keys", "err", err)
			}
			if err := s.hub.check(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("policy version check failed", "err", err)
			}
		}
	})
	wg.Go(func() {
		_ = s.store.ListenPolicyCommits(ctx, func(sandbox string, version int64) {
			if err := s.hub.notify(ctx, sandbox, version); err != nil && ctx.Err() == nil {
				s.log.Warn("could not load a committed version; the version check will retry", "sandbox", sandbox, "version", version, "err", err)
			}
		})
	})
}

// SigningKey loads (creating on first use) the key that signs policy
// versions and returns its public half, as `portcullis proxy
// --gateway-key` takes it.
func (s *Server) SigningKey(ctx context.Context) (string, error) {
	return s.signer.publicKey(ctx)
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// metrics are the gateway's Prometheus metrics, in a registry of its own.
type metrics struct {
	registry  *prometheus.Registry
	rpcs      *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	pushAck   prometheus.Histogram
	pushNacks prometheus.Counter
	conns     *prometheus.CounterVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_rpc_requests_total",
			Help: "RPCs handled, by procedure and result code.",
		}, []string{"procedure", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "portcullis_rpc_duration_seconds",
			Help:    "RPC handling time, by procedure.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"procedure"}),
	}
	m.pushAck = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "portcullis_push_ack_seconds",
		Help:    "Time from a policy version's commit to a proxy's ACK of it.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	m.pushNacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "portcullis_push_nacks_total",
		Help: "Policy versions proxies refused.",
	})
	m.conns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portcullis_connections_total",
		Help: "Connections accepted on the API port, by the server that took them: grpc (policy streams) or http (everything else).",
	}, []string{"server"})
	connected := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "portcullis_proxies_connected",
		Help: "Proxies streaming policy from this replica.",
	}, func() float64 { return float64(s.proxies.connectedCount()) })
	decisions := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "portcullis_decisions_stored_total",
		Help: "Decision records stored through this replica.",
	}, func() float64 { return float64(s.decisionsStored.Load()) })
	limited := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "portcullis_decisions_rate_limited_total",
		Help: "Decision records this replica dropped because their sandbox was over its ingest rate limit.",
	}, func() float64 { return float64(s.decisionsLimited.Load()) })
	pruned := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "portcullis_decisions_pruned_total",
		Help: "Decision records this replica's retention sweep deleted.",
	}, func() float64 { return float64(s.decisionsPruned.Load()) })
	m.registry.MustRegister(m.rpcs, m.latency, m.pushAck, m.pushNacks, m.conns, connected, decisions, limited, pruned,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

func (m *metrics) intercept(next connect.ServerFunc) connect.ServerFunc {
	return func(ctx context.Context, spec connect.Spec, stream connect.ServerStream) error {
		start := time.Now()
		err := next(ctx, spec, stream)
		code := "ok"
		if err != nil {
			code = connect.CodeOf(err).String()
		}
		// Only known procedures become label values: callers choose the
		// procedure string, and labels must stay bounded.
		procedure := spec.Procedure
		if _, known := authzTable[procedure]; !known {
			procedure = "unknown"
		}
		m.rpcs.WithLabelValues(procedure, code).Inc()
		m.latency.WithLabelValues(procedure).Observe(time.Since(start).Seconds())
		return err
	}
}
