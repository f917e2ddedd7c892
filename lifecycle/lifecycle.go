package lifecycle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/internal/secretbox"
	"github.com/portcullis-dev/portcullis/store"
)

// Defaults of Config.
const (
	DefaultProposalRateMax    = 20
	DefaultProposalRateWindow = 10 * time.Minute
	DefaultProposalTTL        = 24 * time.Hour
	DefaultCheckInterval      = 5 * time.Second
)

// Config configures a Lifecycle. Zero values take the defaults.
type Config struct {
	// Logger receives the lifecycle's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of proposal expiry and grant ends. Default time.Now.
	Now func() time.Time
	// ProposalRateMax proposals per ProposalRateWindow may come from one
	// sandbox (defaults 20 per 10 minutes).
	ProposalRateMax    int
	ProposalRateWindow time.Duration
	// ProposalTTL is how long a proposal stays pending. Default 24h.
	ProposalTTL time.Duration
	// CheckInterval is how often Run re-bases proposals a missed commit
	// notification left behind, reloads approval rules stored through
	// another replica, and sweeps expired proposals and grants. Default 5s.
	CheckInterval time.Duration
	// Stream is told what happened (events.ProposalPending,
	// ProposalDecided; AuditAppended and ProposalAudited by FollowAudit).
	// Default nil: nobody is told.
	Stream *events.Stream
	// DevAllowLoopback proves proposals and drafts them from denials as
	// for proxies run with --dev-allow-loopback: loopback upstreams count
	// as reachable (demos and tests only; the gateway's
	// --dev-allow-loopback). Default false: loopback is always denied.
	DevAllowLoopback bool
	// SentryEvents is the store of the Sentry events themselves (their
	// rows, the sources' sequences, their findings' flags), when they are
	// kept apart from the control plane's (gateway --sentry-database-url).
	// Default nil: the control plane's store.
	SentryEvents *store.Store
	// MaxHeldCalls bounds the calls a sandbox holds for review at once:
	// past it a call is refused at once (BusyError). Default 16.
	MaxHeldCalls int
	// HeldCallRetention is how long a decided call keeps its arguments.
	// Default 24h.
	HeldCallRetention time.Duration
	// SecretsKey seals and opens credential providers' secrets (the
	// gateway's --secrets-key-file). Default nil: provider writes and
	// credential reads fail with a PreconditionError naming the flag.
	SecretsKey *secretbox.Key
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.ProposalRateMax == 0 {
		c.ProposalRateMax = DefaultProposalRateMax
	}
	if c.ProposalRateWindow == 0 {
		c.ProposalRateWindow = DefaultProposalRateWindow
	}
	if c.ProposalTTL == 0 {
		c.ProposalTTL = DefaultProposalTTL
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = DefaultCheckInterval
	}
	if c.MaxHeldCalls == 0 {
		c.MaxHeldCalls = DefaultMaxHeldCalls
	}
	if c.HeldCallRetention == 0 {
		c.HeldCallRetention = DefaultHeldCallRetention
	}
}

// Lifecycle is a sandbox policy's life after it is stored: every version
// commit, proposal intake, review and approval, and the clocks (expiry of
// proposals and grants). It is also the one writer of its store: the rest
// of the gateway reads a store.Reader and writes through it. Create it
// with New and run its background work with Run.
type Lifecycle struct {
	cfg   Config
	log   *slog.Logger
	st    *store.Store
	rules *rules
	// events is the Sentry events' store (Config.SentryEvents, or st).
	events *store.Store

	mu sync.Mutex
	// wake holds one channel per sandbox, closed (and replaced) whenever
	// one of its proposals changes through this replica.
	wake map[string]chan struct{}
	// busy coalesces re-base runs: a sandbox being re-based gets one more
	// run after the current one, however many moves arrive meanwhile.
	busy  map[string]bool
	again map[string]bool
	// running counts re-base goroutines; Run waits for them.
	running sync.WaitGroup
	// bg is the context re-bases run in: Run's.
	bg context.Context
}

// New returns a Lifecycle over st, which it writes: whoever else holds
// st should hold it as a store.Reader.
func New(cfg Config, st *store.Store) *Lifecycle {
	cfg.setDefaults()
	events := cfg.SentryEvents
	if events == nil {
		events = st
	}
	return &Lifecycle{
		cfg: cfg, log: cfg.Logger, st: st, rules: newRules(), events: events,
		wake: map[string]chan struct{}{}, busy: map[string]bool{}, again: map[string]bool{},
		bg: context.Background(),
	}
}

// Run does the lifecycle's background work until ctx ends: it re-bases
// pending proposals when their sandbox's version moves (heard from the
// store's commit feed, from any replica), and every CheckInterval repairs
// missed notifications, reloads the approval rules and sweeps expired
// proposals and grants. It waits for every goroutine it started and
// returns nil.
func (l *Lifecycle) Run(ctx context.Context) error {
	l.mu.Lock()
	l.bg = ctx
	l.mu.Unlock()
	defer l.running.Wait()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		_ = l.st.ListenPolicyCommits(ctx, func(c store.Commit) { l.refresh(c.Sandbox) })
	})
	if err := l.rules.reload(ctx, l.st); err != nil && ctx.Err() == nil {
		l.log.Warn("could not load the approval rules", "err", err)
	}
	tick := time.NewTicker(l.cfg.CheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		l.Check(ctx)
	}
}

// Check runs the periodic work once: re-bases, rules, expiry (of
// proposals, grants and held calls).
func (l *Lifecycle) Check(ctx context.Context) {
	if err := l.checkBases(ctx); err != nil && ctx.Err() == nil {
		l.log.Warn("pending proposal check failed", "err", err)
	}
	// Rules stored through another replica.
	if err := l.rules.reload(ctx, l.st); err != nil && ctx.Err() == nil {
		l.log.Warn("could not reload the approval rules", "err", err)
	}
	if err := l.Sweep(ctx); err != nil && ctx.Err() == nil {
		l.log.Warn("expiry sweep failed", "err", err)
	}
	if err := l.SweepCalls(ctx); err != nil && ctx.Err() == nil {
		l.log.Warn("held call sweep failed", "err", err)
	}
}

// changed wakes the watchers of sandbox's proposals.
func (l *Lifecycle) changed(sandbox string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.wake[sandbox]; ok {
		close(c)
		delete(l.wake, sandbox)
	}
}

// Changed returns a channel closed at the next change of sandbox's
// proposals through this replica. Take it before reading, so that no
// change is missed.
func (l *Lifecycle) Changed(sandbox string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.wake[sandbox]
	if !ok {
		c = make(chan struct{})
		l.wake[sandbox] = c
	}
	return c
}

// decided tells the stream that p left pending.
func (l *Lifecycle) decided(p store.Proposal) {
	l.cfg.Stream.Publish(events.ProposalDecided{Proposal: p})
}
