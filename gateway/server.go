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
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/grpcreflect/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis-dev/portcullis/gateway/decisions"
	"github.com/portcullis-dev/portcullis/gateway/distribution"
	"github.com/portcullis-dev/portcullis/gateway/notify"
	"github.com/portcullis-dev/portcullis/gateway/sentryintake"
	"github.com/portcullis-dev/portcullis/gateway/transport"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/secretbox"
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
	// DevAllowLoopback proves proposals and drafts them from denials as
	// for proxies run with --dev-allow-loopback, so a demo upstream on
	// this machine can be proposed for (demos and tests only). Default
	// false: loopback is always denied, and proposals for it change
	// nothing.
	DevAllowLoopback bool
	// WebhookURL, if set, is called when a proposal needs a human, when
	// one is decided and when a quarantine is held; each message links to
	// the console at ExternalURL. AuditWebhookURL, if set, is called when
	// the audit head moves (at every change: an archive, not a chat
	// channel). WebhookSecret keys the HMAC signature of each call to
	// either. WebhookBackoff is the wait before the first retry
	// (doubling; default 500ms).
	WebhookURL      string
	AuditWebhookURL string
	WebhookSecret   string
	WebhookBackoff  time.Duration
	// ExternalURL is the gateway's address as people reach it
	// ("https://portcullis.example.com"), for the console links in webhook
	// messages. Default: http(s)://Listen, when Listen names a host.
	ExternalURL string
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
	// DecisionRate and DecisionBurst are each sandbox's ingest limits on
	// this replica: two buckets (allowed records, denials) of
	// DecisionBurst tokens refilled at DecisionRate a second, one token a
	// record (one more per 4 KiB of text). Records beyond them are
	// summarised and counted, never refused (gateway/decisions).
	// Defaults 100/s and 2,000 (at least 10); a negative rate: no limit.
	DecisionRate  float64
	DecisionBurst int
	// SentryDryRun records what Sentry quarantines would have frozen and
	// freezes nothing.
	SentryDryRun bool
	// SentryMaxAge: a remediating Sentry event whose own time is older
	// than this when it arrives (or more than a minute ahead) is stored,
	// flagged stale and not acted on. Default 10 minutes; negative: no
	// check of the event's time.
	SentryMaxAge time.Duration
	// QuarantineBudget sandboxes per five minutes may be frozen by Sentry
	// events; past it quarantines are held for an operator. Default 10;
	// negative: no budget.
	QuarantineBudget int
	// QuarantineBudgetPerSource sandboxes per five minutes may be frozen
	// by one source's events; past it that source's quarantines are held
	// and the other sources' still freeze. Default 3; negative: no budget
	// per source.
	QuarantineBudgetPerSource int
	// SentryRetention: Sentry events received longer ago are deleted (by
	// whole days). Default 30 days; negative keeps them forever.
	SentryRetention time.Duration
	// SentrySettle is how long after ingest an event is checked for
	// derived findings (drift, unmediated calls). Default 2s.
	SentrySettle time.Duration
	// SentryWindow is how far apart a watchdog's event and what the data
	// plane did may be and still agree: a tool call and its decision
	// record, a policy hash and the time its version was current. Default
	// 30s.
	SentryWindow time.Duration
	// SentryStore, if set, keeps the Sentry events themselves (their rows,
	// sources, gaps and findings' flags) apart from the control plane's
	// store, so that bulk ingest shares neither its connections nor its
	// write-ahead log with freezes, commits and audit entries. The
	// quarantine actions, sources' keys and everything else stay in the
	// control plane's store. Default nil: one store for all.
	SentryStore *store.Store
	// SentryBatchBodies bounds the batches (HTTP batch bodies up to 16
	// MiB, RPC messages up to 4 MiB) the intake parses and stores at once;
	// a batch takes its place once its body is read, and further batches
	// wait. Default 8.
	SentryBatchBodies int
	// SentryBatchesPerSource bounds the batches one source (one sentry
	// token) has in flight, from the first byte of the body to the
	// answer; its further batches wait for their turn, unread. Default a
	// quarter of SentryBatchBodies, at least 1.
	SentryBatchesPerSource int
	// SentryBodyTimeout bounds the time a request to the HTTP intake may
	// take to send its whole body, from its arrival (waiting for its
	// source's turn included); past it the request is answered 408.
	// Default 30s.
	SentryBodyTimeout time.Duration
	// OCSFDropped, if set, counts the OCSF events the sinks (Run's)
	// dropped: exported as portcullis_ocsf_dropped_total. Default nil: no
	// such metric (no sink).
	OCSFDropped func() uint64
	// OCSF, if set, queues an OCSF event built later (ocsf.Emitters.Emit:
	// it never blocks): the gateway emits every audit entry committed
	// after it started (through any replica: it follows the audit log)
	// and the proposals they are about, the Sentry events worth a
	// security team's attention, the findings derived from them and what
	// it did about each quarantine (docs/ocsf.md). Default nil: none.
	OCSF func(build func() ocsf.Event)
	// PendingMetricsTTL is how long /metrics reuses its count of pending
	// proposals (one store query) before asking again. Default 10s.
	PendingMetricsTTL time.Duration
	// MaxHeldCalls bounds the calls a sandbox holds for review at once
	// (--max-held-calls): past it a proxy's call is refused at once,
	// review_busy. Default 16.
	MaxHeldCalls int
	// HeldCallRetention is how long a decided held call keeps its
	// arguments (--held-call-retention); the digest stays. Default 24h.
	HeldCallRetention time.Duration
	// SecretsKey seals credential providers' secrets at rest
	// (--secrets-key-file; Run makes one beside an SQLite database).
	// Default nil: ProviderService's writes, attaching providers and
	// sending credentials to proxies fail with FailedPrecondition.
	SecretsKey *secretbox.Key
	// TracerProvider, if set, traces every RPC (Connect and grpc-go),
	// approvals, commits and each commit's push to each proxy until its
	// ACK (internal/telemetry/otlp makes one). Default nil: no spans at all.
	TracerProvider trace.TracerProvider
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
	if c.PendingMetricsTTL == 0 {
		c.PendingMetricsTTL = 10 * time.Second
	}
	if c.WebhookBackoff == 0 {
		c.WebhookBackoff = 500 * time.Millisecond
	}
	if c.ExternalURL == "" {
		if host, _, err := net.SplitHostPort(c.Listen); err == nil && host != "" && !net.ParseIP(host).IsUnspecified() {
			scheme := "http"
			if c.TLSCertFile != "" {
				scheme = "https"
			}
			c.ExternalURL = scheme + "://" + c.Listen
		}
	}
	if c.DecisionMaxAge == 0 {
		c.DecisionMaxAge = decisions.DefaultMaxAge
	}
	if c.DecisionMaxPerSandbox == 0 {
		c.DecisionMaxPerSandbox = decisions.DefaultMaxPerSandbox
	}
	if c.DecisionSweepInterval <= 0 {
		c.DecisionSweepInterval = decisions.DefaultSweepInterval
	}
	if c.DecisionRate == 0 {
		c.DecisionRate = decisions.DefaultRate
	}
	if c.DecisionBurst == 0 {
		c.DecisionBurst = decisions.DefaultBurst
	}
	if c.SentryBatchBodies <= 0 {
		c.SentryBatchBodies = 8
	}
	if c.SentryBatchesPerSource <= 0 {
		c.SentryBatchesPerSource = max(1, c.SentryBatchBodies/4)
	}
	if c.SentryBodyTimeout <= 0 {
		c.SentryBodyTimeout = 30 * time.Second
	}
}

// check refuses settings no default can repair.
func (c *Config) check() error {
	if math.IsNaN(c.DecisionRate) || math.IsInf(c.DecisionRate, 0) {
		return fmt.Errorf("decision rate %v is not a number of records a second", c.DecisionRate)
	}
	if c.DecisionRate > 0 && c.DecisionBurst < decisions.MinBurst {
		return fmt.Errorf("decision burst %d: must be at least %d", c.DecisionBurst, decisions.MinBurst)
	}
	return nil
}

// Server is the gateway.
type Server struct {
	cfg Config
	// store is read-only: every write goes through life, the store's one
	// writer.
	store   store.Reader
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

	dist      *distribution.Distribution
	decisions *decisions.Decisions
	life      *lifecycle.Lifecycle
	sentry    *sentryintake.Intake
	// stream is what happened here, told once (internal/events).
	stream *events.Stream
	// batchBodies holds a place for each batch the intake parses and
	// stores, and bounds each source's batches in flight.
	batchBodies *places
	// receiving counts the HTTP batches whose body is awaited (being
	// received, or waiting for their source's turn).
	receiving   atomic.Int64
	notify      *notify.Notifier // nil without a webhook
	auditNotify *notify.Notifier // nil without an audit webhook
	// calls is what the Connect and grpc-go interceptors share.
	calls transport.Calls
	// callFeed wakes the WatchCalls streams.
	callFeed *callFeed
	// swept, if set (tests), is called after each retention sweep.
	swept func(error)
}

// New builds a gateway over st. It does not listen; see Run and Handler.
// The lifecycle it builds over st is st's one writer; the rest of the
// gateway holds st as a store.Reader.
func New(cfg Config, st *store.Store) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:   cfg,
		store: st,
		log:   cfg.Logger.With("component", "gateway"),
	}
	// What happened, told once (internal/events): metrics, OCSF and the
	// webhook subscribe below.
	s.stream = events.New()
	s.notify = notify.New(notify.Config{URL: cfg.WebhookURL, ConsoleURL: cfg.ExternalURL, Secret: cfg.WebhookSecret, Backoff: cfg.WebhookBackoff, Now: cfg.Now}, s.log)
	s.auditNotify = notify.New(notify.Config{URL: cfg.AuditWebhookURL, ConsoleURL: cfg.ExternalURL, Secret: cfg.WebhookSecret, Backoff: cfg.WebhookBackoff, Now: cfg.Now}, s.log)
	s.life = lifecycle.New(lifecycle.Config{
		Logger: s.log, Now: cfg.Now, ProposalRateMax: cfg.ProposalRateMax, ProposalRateWindow: cfg.ProposalRateWindow,
		ProposalTTL: cfg.ProposalTTL, CheckInterval: cfg.VersionCheckInterval, DevAllowLoopback: cfg.DevAllowLoopback,
		Stream: s.stream, SentryEvents: cfg.SentryStore, MaxHeldCalls: cfg.MaxHeldCalls, HeldCallRetention: cfg.HeldCallRetention,
		SecretsKey: cfg.SecretsKey,
	}, st)
	s.auth = newAuthenticator(st, s.life, cfg.Now)
	s.decisions = decisions.New(decisions.Config{
		MaxAge: cfg.DecisionMaxAge, MaxPerSandbox: cfg.DecisionMaxPerSandbox, SweepInterval: cfg.DecisionSweepInterval,
		Rate: cfg.DecisionRate, Burst: cfg.DecisionBurst, Now: cfg.Now,
		Swept: func(err error) {
			if s.swept != nil {
				s.swept(err)
			}
		},
	}, s.life, s.log)
	s.metrics = newMetrics(s)
	s.stream.Subscribe(s.metrics.observe)
	if cfg.OCSF != nil {
		s.stream.Subscribe(s.ocsfEvents)
	}
	s.stream.Subscribe(s.notify.Handle)
	s.callFeed = &callFeed{}
	s.stream.Subscribe(s.callFeed.handle)
	s.dist = distribution.New(distribution.Config{
		Replica: cfg.Replica, Now: cfg.Now, StreamIdleTimeout: cfg.StreamIdleTimeout, VersionCheckInterval: cfg.VersionCheckInterval,
		Stream:      s.stream,
		Sink:        s.decisions,
		Tracer:      cfg.TracerProvider,
		Credentials: s.life,
	}, st, s.life, s.log)
	s.batchBodies = newPlaces(cfg.SentryBatchBodies, cfg.SentryBatchesPerSource)
	s.sentry = sentryintake.New(sentryintake.Config{
		Now: cfg.Now, DryRun: cfg.SentryDryRun, MaxAge: cfg.SentryMaxAge, QuarantineBudget: cfg.QuarantineBudget, QuarantineBudgetPerSource: cfg.QuarantineBudgetPerSource, Retention: cfg.SentryRetention, Settle: cfg.SentrySettle, Window: cfg.SentryWindow,
		WaitApplied: func(ctx context.Context, sandbox string, version int64) (int, time.Time, error) {
			e, err := s.dist.WaitApplied(ctx, sandbox, version)
			return e.Count(distribution.Acked), e.LastAck(), err
		},
		Stream: s.stream,
	}, st, s.life, s.log)
	s.calls = transport.Calls{Log: s.log, Metrics: s.metrics.rpc, MapError: func(ctx context.Context, procedure string, err error) error {
		return toConnectError(ctx, s.log, procedure, err)
	}}
	s.streams, s.stopStreams = context.WithCancel(context.Background())
	context.AfterFunc(s.streams, s.dist.Drain)

	// Interceptors, outermost first: metrics see the final code, errors are
	// mapped once, a panic becomes an Internal error, and authorization runs
	// before any handler or request decoding; the Sentry ingest RPCs then
	// wait for the intake's places before their messages are read.
	interceptors := []connect.ServerInterceptor{s.metrics.rpc.Intercept, s.calls.MapErrors, transport.RecoverPanics, s.auth.authorize, s.admitSentry}
	if cfg.TracerProvider != nil {
		// Outermost: the span holds the whole call, its code the final one.
		interceptors = append([]connect.ServerInterceptor{transport.TraceRPCs(cfg.TracerProvider)}, interceptors...)
	}
	rpc := connect.NewServer(interceptors...)
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
	portcullisv1connect.RegisterSentryServiceHandler(rpc, sentryService{s})
	portcullisv1connect.RegisterCallServiceHandler(rpc, callService{s})
	portcullisv1connect.RegisterProviderServiceHandler(rpc, providerService{s})
	transport.RegisterHealth(rpc, st.Ping, s.streams)
	grpcreflect.Register(rpc)
	for spec := range rpc.Specs() {
		if _, ok := authzTable[spec.Procedure]; !ok {
			return nil, fmt.Errorf("procedure %s has no row in the authorization table", spec.Procedure)
		}
	}

	mux := http.NewServeMux()
	connecthttp.Mount(transport.InterruptibleMux{ServeMux: mux, Procedure: portcullisv1connect.DistributionServiceStreamPolicyProcedure}, rpc, connecthttp.WithReadMaxBytes(maxDocumentBytes+64<<10), sentryCodecs())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("POST "+SentryEventsPath, s.sentryEvents)
	mux.Handle("GET /metrics", s.requireToken(s.metrics.handler()))
	// "/" without a method: a method-specific catch-all would conflict with
	// the per-service routes Mount installs.
	mux.Handle("/", getOnly(consoleHeaders(web.Handler())))
	mux.Handle(SessionPath, consoleHeaders(s.consoleSession()))
	s.handler = s.publishDeadline(mux)
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
	if s.cfg.SentryStore != nil {
		if err := s.cfg.SentryStore.Ping(ctx); err != nil {
			s.log.WarnContext(ctx, "readiness check failed: the Sentry event store", "err", err)
			http.Error(w, "sentry event store unreachable", http.StatusServiceUnavailable)
			return
		}
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

// requireToken guards plain HTTP endpoints with the same bearer tokens. A
// sentry token reads nothing (it only writes its own source's events), so
// it is refused here as it is by every RPC.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := s.auth.authenticate(r.Context(), r.Header.Get("Authorization"))
		if err != nil {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
			return
		}
		if p.Role == store.RoleSentry {
			http.Error(w, "a sentry token may not read this endpoint", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
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
		if s.cfg.BootstrapToken != "" {
			s.log.WarnContext(ctx, "PORTCULLIS_BOOTSTRAP_TOKEN ignored: the store already has an admin token (it makes the first one only); "+
				"to mint an admin token without one, run against the gateway's store: "+BreakGlassCommand, "admin_tokens", n)
		}
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
	_, err = s.life.CreateToken(ctx, store.Token{Name: "admin", Role: store.RoleAdmin, Hash: hash, CreatedBy: "bootstrap"}, "bootstrap")
	if errors.Is(err, store.ErrAlreadyExists) {
		// A revoked token named "admin" exists; keep the name unique.
		_, err = s.life.CreateToken(ctx, store.Token{Name: "admin-" + hash[:8], Role: store.RoleAdmin, Hash: hash, CreatedBy: "bootstrap"}, "bootstrap")
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

// Serve serves on ln until ctx ends, then shuts down gracefully, and
// returns after everything it started beside the RPCs.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var background sync.WaitGroup
	s.startBackground(bgCtx, &background)
	defer func() {
		// After the streams ended: their last statuses are flushed.
		stopBackground()
		background.Wait()
	}()
	srv := &transport.Server{
		Handler:         s.handler,
		GRPC:            s.newGRPCServer(),
		Route:           grpcRoute,
		Routed:          func(server string) { s.metrics.conns.WithLabelValues(server).Inc() },
		Draining:        s.stopStreams,
		ShutdownTimeout: s.cfg.ShutdownTimeout,
		Log:             s.log,
	}
	if s.cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		if err != nil {
			ln.Close()
			return fmt.Errorf("load TLS certificate: %w", err)
		}
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
	}
	if s.metricsLn != nil {
		srv.Metrics, srv.MetricsListener = s.metrics.handler(), s.metricsLn
	}
	return srv.Serve(ctx, ln)
}

// startBackground starts what runs beside the RPCs: the webhook and the
// audit head logger, the decision retention sweep, the lifecycle's
// background work, distribution's (the proxy status writer, the push
// hub's version check and the commit listener), the Sentry intake's, and
// with OCSF the audit log's follower.
func (s *Server) startBackground(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { notify.LogAuditHead(ctx, s.store, s.log, s.auditNotify, auditHeadInterval) })
	wg.Go(func() { s.notify.Run(ctx) })
	wg.Go(func() { s.auditNotify.Run(ctx) })
	wg.Go(func() { s.decisions.Run(ctx) })
	wg.Go(func() { _ = s.life.Run(ctx) })
	wg.Go(func() { _ = s.dist.Run(ctx) })
	wg.Go(func() { s.sentry.Run(ctx) })
	if s.cfg.OCSF != nil {
		wg.Go(func() { s.life.FollowAudit(ctx, auditFollowInterval) })
	}
}

// SigningKey loads (creating on first use) the key that signs policy
// versions and returns its public half, as `portcullis proxy
// --gateway-key` takes it.
func (s *Server) SigningKey(ctx context.Context) (string, error) {
	return s.dist.PublicKey(ctx)
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
