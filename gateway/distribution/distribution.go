// Package distribution owns what flows between the gateway and its
// proxies: the push hub (a versioned cache of signed versions per sandbox,
// fed by the store's commit feed and repaired by a periodic version check,
// like go-control-plane's snapshot cache with its watches), the signing
// key chain, the policy streams (StreamPolicy), the held calls' streams
// (HoldCall: filed through lifecycle, answered with their decision), the decision records
// proxies ship (ShipDecisions, stored through a Sink), each sandbox's CA,
// the per-proxy status tracker, and each sandbox's credentials, sealed to
// each proxy run that asks (credentials.go, read from a CredentialSource).
//
// The gateway root constructs one Distribution, runs it (Run) and calls
// its serving methods from its Connect handlers and grpc-go bridge, after
// authorization: a Caller says whose stream it is. It reads the store
// through a store.Reader and writes through package lifecycle, the store's
// one writer: proxies' statuses, the tool definitions they report, the
// signing key chain and each sandbox's CA. It may import store, the
// generated API (the stream's messages are the wire format), lifecycle
// (its writes and domain errors), transport (OffStack, interrupters),
// internal/signing and internal/ca; never the gateway root.
package distribution

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/internal/telemetry"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/store"
)

// Config configures a Distribution. Zero values take the documented
// defaults.
type Config struct {
	// Replica names this gateway in the proxy statuses it writes.
	Replica string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// StreamIdleTimeout ends a policy stream that sent nothing for that
	// long. Default three HeartbeatIntervals.
	StreamIdleTimeout time.Duration
	// VersionCheckInterval is how often the hub compares the versions it
	// serves with the store's (and re-reads the signing keys). Default 5s.
	VersionCheckInterval time.Duration
	// Stream is told of each ACK (events.ProxyAcked, with its lag from
	// the version's commit and whether the proxy could keep the version
	// in its data dir), each NACK (ProxyNacked, a fork marked) and each
	// valid message of decision records shipped (DecisionsShipped: by
	// decision, before the ingest limit, with what the proxy dropped).
	// Default nil: nobody is told.
	Stream *events.Stream
	// Sink stores shipped decision records (gateway/decisions).
	Sink Sink
	// Credentials, if set, is where the sandboxes' credentials are read
	// (the lifecycle): a stream whose hello gives a credential key is
	// sent its sandbox's bundle sealed to it (credentials.go). Default
	// nil: no credentials are delivered.
	Credentials CredentialSource
	// CredentialsCheckInterval is how often the credentials generation
	// of every sandbox with keyed streams here is read, to find changes
	// made on another replica. Default CredentialsCheckInterval.
	CredentialsCheckInterval time.Duration
	// Tracer, if set, traces each delivery of a version to a proxy until
	// its ACK or NACK (trace.go). Default nil: no spans.
	Tracer trace.TracerProvider
}

// Sink stores the decision records a proxy of sandbox ships, after its
// ingest limit: it returns how many were stored and how many the limit
// dropped (counted even when err is set).
type Sink interface {
	Ingest(ctx context.Context, sandbox, proxyID string, records []store.Decision) (stored, limited int, err error)
}

// Caller is the authenticated proxy on the other end of a stream. It is
// kept for the stream's life, so it holds no closure: an idle stream costs
// what it holds.
type Caller struct {
	// Sandbox is the sandbox of the caller's token: the one it may
	// stream and ship for, whatever its messages say.
	Sandbox string
	// Token names the caller's token to Auth.
	Token string
	// Auth checks, every reauthInterval, that Token is still live (an
	// error ends the stream).
	Auth Reauthenticator
}

// Reauthenticator checks that a stream's token is still live (the
// gateway root's authentication).
type Reauthenticator interface {
	Reauthenticate(ctx context.Context, token string) error
}

// Distribution serves signed policy versions to proxies and takes their
// decision records.
type Distribution struct {
	cfg     Config
	st      store.Reader
	life    *lifecycle.Lifecycle // every write
	log     *slog.Logger
	signer  *signer
	hub     *hub
	proxies *proxyTracker
	tracer  trace.Tracer // nil: no push spans
	// calls wakes the HoldCall streams of calls decided here.
	calls *callWaiters
	// creds delivers credentials to keyed streams; nil without
	// Config.Credentials.
	creds *credHub
}

// New returns a Distribution reading st and writing through life. Nothing
// runs until Run.
func New(cfg Config, st store.Reader, life *lifecycle.Lifecycle, log *slog.Logger) *Distribution {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StreamIdleTimeout == 0 {
		cfg.StreamIdleTimeout = 3 * HeartbeatInterval
	}
	if cfg.VersionCheckInterval == 0 {
		cfg.VersionCheckInterval = 5 * time.Second
	}
	if cfg.CredentialsCheckInterval == 0 {
		cfg.CredentialsCheckInterval = CredentialsCheckInterval
	}
	sg := newSigner(st, life)
	d := &Distribution{
		cfg:     cfg,
		st:      st,
		life:    life,
		log:     log,
		signer:  sg,
		hub:     newHub(st, sg),
		proxies: newProxyTracker(life, cfg.Replica, cfg.Now),
		calls:   &callWaiters{},
	}
	if cfg.Credentials != nil {
		d.creds = newCredHub(cfg.Credentials, log, cfg.CredentialsCheckInterval)
	}
	if cfg.Stream != nil {
		cfg.Stream.Subscribe(d.calls.handle)
		if d.creds != nil {
			cfg.Stream.Subscribe(d.creds.handle)
		}
	}
	if cfg.Tracer != nil {
		d.tracer = cfg.Tracer.Tracer(telemetry.Scope)
	}
	return d
}

// Run runs until ctx ends and returns after its goroutines: the proxy
// status writer, the hub's version check (which also re-reads the signing
// keys), the commit listener that offers every version committed
// (through this replica or another) to the hub, and the read of which
// held calls waited on here were decided elsewhere (pollCalls), and the
// delivery of credentials (with Config.Credentials).
func (d *Distribution) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { d.pollCalls(ctx) })
	if d.creds != nil {
		wg.Go(func() { d.creds.run(ctx) })
	}
	wg.Go(func() {
		d.proxies.run(ctx, func(err error) { d.log.Warn("could not store proxy statuses; will retry", "err", err) })
	})
	wg.Go(func() {
		tick := time.NewTicker(d.cfg.VersionCheckInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Another replica may have rotated the signing key.
			if err := d.signer.reload(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn("could not reload signing keys", "err", err)
			}
			if err := d.hub.check(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn("policy version check failed", "err", err)
			}
		}
	})
	wg.Go(func() {
		failed := func(sandbox string, version int64, err error) {
			d.log.Warn("could not load a committed version; the version check will retry", "sandbox", sandbox, "version", version, "err", err)
		}
		_ = d.st.ListenPolicyCommits(ctx, func(c store.Commit) { d.hub.committed(ctx, c, failed) })
	})
	wg.Wait()
	d.hub.loaders.Wait()
	return nil
}

// Goaway asks every stream of sandbox on this replica to reconnect (its
// token was rotated or revoked, or the sandbox deleted).
func (d *Distribution) Goaway(sandbox string) { d.hub.goaway(sandbox) }

// Drain asks every stream to reconnect, now and as it subscribes: the
// gateway is shutting down.
func (d *Distribution) Drain() { d.hub.goawayAll() }

// Connected is how many proxies stream from this replica.
func (d *Distribution) Connected() int { return d.proxies.connectedCount() }

// Behind returns how many of the proxies streaming from this replica have
// not applied the newest version of their sandbox this replica knows.
func (d *Distribution) Behind() int {
	n := 0
	for _, p := range d.proxies.applied() {
		t := d.hub.topic(p.sandbox)
		if t == nil {
			continue
		}
		if sv := t.latest.Load(); sv != nil && p.version < int64(sv.version()) {
			n++
		}
	}
	return n
}

// PublicKey loads (creating on first use) the key that signs policy
// versions and returns its public half, as `portcullis proxy
// --gateway-key` takes it.
func (d *Distribution) PublicKey(ctx context.Context) (string, error) {
	return d.signer.publicKey(ctx)
}
