package decisions

import (
	"context"
	"log/slog"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Decision records cost storage (about 1.2 KB each): a sandbox that makes
// thousands of denied requests a second must not fill the gateway's disk.
// Two bounds hold:
//
//   - Ingest: each sandbox's records pass a token bucket (DecisionBurst
//     tokens, refilled at DecisionRate a second) on their way into the
//     store. Records beyond it are dropped and counted — in the proxy's
//     decisions_dropped (proxies list), the
//     portcullis_decisions_rate_limited_total metric and a warning — but
//     ShipDecisions still succeeds: the proxy never waits, retries or
//     loses its stream because of the limit. Denials come first: allow and
//     audit records (and version probes, which the advisor never offers)
//     may not take the last quarter of the bucket, so a flood of allowed
//     requests cannot crowd out the denials the advisor is asked about by
//     denial_id. Each replica keeps its own buckets.
//   - Retention: a sweep (every DecisionSweepInterval) deletes records
//     older than DecisionMaxAge and each sandbox's records past its newest
//     DecisionMaxPerSandbox — except denials a proposal names
//     (store.PruneDecisions).

// The defaults of the gateway's Decision* settings.
const (
	DefaultMaxAge        = 7 * 24 * time.Hour
	DefaultMaxPerSandbox = 100_000
	DefaultSweepInterval = 5 * time.Minute
	DefaultRate          = 100
	DefaultBurst         = 2000
	// recordCostBytes: a record costs one token per started 4 KiB of
	// text, so records padded to the field limits cannot store 20 times
	// the bytes of ordinary ones for the same tokens.
	recordCostBytes = 4 << 10
	// MinBurst leaves room for the costliest record above the denials'
	// reserve.
	MinBurst = 10
)

// Config configures Decisions; the gateway's Config documents each
// setting and fills in the defaults.
type Config struct {
	// MaxAge: records received longer ago are swept; 0 or negative: none
	// by age.
	MaxAge time.Duration
	// MaxPerSandbox: each sandbox keeps its newest this many; 0 or
	// negative: no count bound.
	MaxPerSandbox int
	// SweepInterval is how often the sweep runs (and once at start).
	SweepInterval time.Duration
	// Rate records a second and Burst make each sandbox's ingest bucket;
	// Rate 0 or negative: no limit.
	Rate  float64
	Burst int
	// Now is the clock.
	Now func() time.Time
	// Swept, if set (tests), is called after each sweep.
	Swept func(error)
}

// Decisions stores shipped decision records within their bounds.
type Decisions struct {
	cfg     Config
	st      *store.Store
	log     *slog.Logger
	limiter *ingestLimiter
	// stored counts the records stored through this replica; limited
	// those its ingest limit dropped, pruned those its sweep deleted.
	stored, limited, pruned atomic.Uint64
}

// New returns the decision store over st. Its sweep runs in Run.
func New(cfg Config, st *store.Store, log *slog.Logger) *Decisions {
	return &Decisions{cfg: cfg, st: st, log: log, limiter: newIngestLimiter(cfg.Rate, cfg.Burst, cfg.Now)}
}

// Stored, Limited and Pruned are this replica's counts of the records
// stored, dropped by the ingest limit and deleted by the sweep.
func (d *Decisions) Stored() uint64  { return d.stored.Load() }
func (d *Decisions) Limited() uint64 { return d.limited.Load() }
func (d *Decisions) Pruned() uint64  { return d.pruned.Load() }

// Ingest stores the records of a proxy of sandbox that its ingest limit
// lets through, and returns how many it stored and how many the limit
// dropped (a warning is logged as a sandbox's drops reach 1, 2, 4, 8, …).
func (d *Decisions) Ingest(ctx context.Context, sandbox, proxyID string, records []store.Decision) (stored, limited int, err error) {
	records, limited, total := d.limiter.admit(sandbox, records)
	if limited > 0 {
		d.limited.Add(uint64(limited))
		if prev := total - uint64(limited); bits.Len64(prev) != bits.Len64(total) { // log at 1, 2, 4, 8, …
			d.log.WarnContext(ctx, "sandbox over its decision record rate limit; records dropped", "sandbox", sandbox, "proxy", proxyID, "dropped", total)
		}
	}
	if len(records) == 0 {
		return 0, limited, nil
	}
	n, err := d.st.AppendDecisions(ctx, records)
	if err != nil {
		return 0, limited, err
	}
	d.stored.Add(uint64(n))
	return n, limited, nil
}

// ingestLimiter is the per-sandbox token bucket in front of the store.
type ingestLimiter struct {
	rate    float64 // tokens a second; 0: no limit
	burst   float64
	reserve float64 // tokens only denials may take
	now     func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens  float64
	at      time.Time
	dropped uint64 // in total, for logging
}

func newIngestLimiter(rate float64, burst int, now func() time.Time) *ingestLimiter {
	l := &ingestLimiter{now: now, buckets: make(map[string]*bucket)}
	if rate > 0 {
		l.rate, l.burst = rate, float64(burst)
		l.reserve = l.burst / 4
	}
	return l
}

// admit returns the records of sandbox the bucket lets through, in their
// order, how many it dropped, and the sandbox's drops so far.
func (l *ingestLimiter) admit(sandbox string, records []store.Decision) (kept []store.Decision, dropped int, total uint64) {
	if l.rate == 0 {
		return records, 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[sandbox]
	if b == nil {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[sandbox] = b
	}
	b.refill(now, l.rate, l.burst)
	kept = records[:0:0]
	for _, d := range records {
		cost := recordCost(d)
		floor := 0.0
		if d.Decision != "deny" || d.VersionProbe {
			floor = l.reserve
		}
		if b.tokens-cost < floor {
			dropped++
			continue
		}
		b.tokens -= cost
		kept = append(kept, d)
	}
	b.dropped += uint64(dropped)
	return kept, dropped, b.dropped
}

// forgetFull drops the buckets that are full again (a full bucket and none
// are the same), so sandboxes that went quiet or away cost no memory.
func (l *ingestLimiter) forgetFull() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for name, b := range l.buckets {
		if b.refill(now, l.rate, l.burst); b.tokens >= l.burst {
			delete(l.buckets, name)
		}
	}
}

func (b *bucket) refill(now time.Time, rate, burst float64) {
	if el := now.Sub(b.at); el > 0 {
		b.tokens = math.Min(burst, b.tokens+el.Seconds()*rate)
	}
	b.at = now
}

// recordCost is one token per started recordCostBytes of the record's text.
func recordCost(d store.Decision) float64 {
	n := len(d.Binary) + len(d.Host) + len(d.Addr) + len(d.HTTPMethod) + len(d.Path) + len(d.MCPMethod) +
		len(d.Tool) + len(d.Entry) + len(d.Rule) + len(d.Reason) + len(d.PolicyVersion) + len(d.DenialID)
	return float64(1 + n/recordCostBytes)
}

// sweep deletes the records past the retention bounds and returns how
// many went.
func (d *Decisions) sweep(ctx context.Context) (int64, error) {
	d.limiter.forgetFull()
	var r store.DecisionRetention
	if d.cfg.MaxAge > 0 {
		r.Before = d.cfg.Now().Add(-d.cfg.MaxAge)
	}
	if d.cfg.MaxPerSandbox > 0 {
		r.KeepPerSandbox = d.cfg.MaxPerSandbox
	}
	if r == (store.DecisionRetention{}) {
		return 0, nil
	}
	n, err := d.st.PruneDecisions(ctx, r)
	if n > 0 {
		d.pruned.Add(uint64(n))
		d.log.InfoContext(ctx, "pruned decision records", "deleted", n, "max_age", d.cfg.MaxAge, "max_per_sandbox", d.cfg.MaxPerSandbox)
	}
	return n, err
}

// Run sweeps at start and every SweepInterval until ctx ends.
func (d *Decisions) Run(ctx context.Context) {
	tick := time.NewTicker(d.cfg.SweepInterval)
	defer tick.Stop()
	for {
		_, err := d.sweep(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("decision retention sweep failed; will retry", "err", err)
		}
		if d.cfg.Swept != nil {
			d.cfg.Swept(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
