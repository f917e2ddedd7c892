package decisions

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/store"
)

// Decision records cost storage (about 1.2 KB each): a sandbox that makes
// thousands of denied requests a second must not fill the gateway's disk.
// Two bounds hold:
//
//   - Ingest: each sandbox has two token buckets (each DecisionBurst
//     tokens, refilled at DecisionRate a second) on the records' way into
//     the store: one for allowed and audited records, one for denials
//     (deny and rate_limited, version probes included). A flood of
//     denials therefore never takes the room of an allowed request, nor a
//     flood of allowed requests that of a denial. A record its bucket has
//     no token for is not dropped: it is counted into a summary record of
//     its kind (sandbox, proxy, decision, binary, host, port, methods,
//     tool, entry, rule, reason code), which is stored SummaryWindow after
//     its first record, at the sandbox's next batch or the next tick of
//     Run. The summary says how many, between which times, and the first
//     and last denial ids. At most SummaryKinds kinds a sandbox are
//     followed at once; further records share one summary per decision.
//     The records summarised are counted in the
//     portcullis_decisions_rate_limited_total metric and a warning, and
//     ShipDecisions still succeeds: the proxy never waits, retries or
//     loses its stream because of the limit. Each replica keeps its own
//     buckets and summaries (those pending are stored when Run ends).
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
	// MinBurst leaves room for the costliest record.
	MinBurst = 10
	// SummaryWindow is how long a summary gathers records before it is
	// stored.
	SummaryWindow = 10 * time.Second
	// SummaryKinds bounds the summaries a sandbox has pending at once.
	SummaryKinds = 64
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
	cfg Config
	// life stores and prunes the records: decisions reads nothing.
	life    *lifecycle.Lifecycle
	log     *slog.Logger
	limiter *ingestLimiter
	// stored counts the records stored through this replica; limited
	// those its ingest limit dropped, pruned those its sweep deleted.
	stored, limited, pruned atomic.Uint64
}

// New returns the decision store writing through life. Its sweep runs in
// Run.
func New(cfg Config, life *lifecycle.Lifecycle, log *slog.Logger) *Decisions {
	return &Decisions{cfg: cfg, life: life, log: log, limiter: newIngestLimiter(cfg.Rate, cfg.Burst, cfg.Now)}
}

// Stored, Limited and Pruned are this replica's counts of the records
// stored, dropped by the ingest limit and deleted by the sweep.
func (d *Decisions) Stored() uint64  { return d.stored.Load() }
func (d *Decisions) Limited() uint64 { return d.limited.Load() }
func (d *Decisions) Pruned() uint64  { return d.pruned.Load() }

// Ingest stores the records of a proxy of sandbox that its ingest limit
// lets through, with the summaries of that sandbox that are due, and
// returns how many it stored and how many records the limit counted into
// summaries instead (a warning is logged as a sandbox's count reaches 1,
// 2, 4, 8, …).
func (d *Decisions) Ingest(ctx context.Context, sandbox, proxyID string, records []store.Decision) (stored, limited int, err error) {
	records, due, limited, total := d.limiter.admit(sandbox, records)
	records = append(records, due...)
	if limited > 0 {
		d.limited.Add(uint64(limited))
		if prev := total - uint64(limited); bits.Len64(prev) != bits.Len64(total) { // log at 1, 2, 4, 8, …
			d.log.WarnContext(ctx, "sandbox over its decision record rate limit; records summarised", "sandbox", sandbox, "proxy", proxyID, "summarised", total)
		}
	}
	if len(records) == 0 {
		return 0, limited, nil
	}
	n, err := d.life.AppendDecisions(ctx, records)
	if err != nil {
		d.limiter.restore(due) // the proxy ships its records again; the summaries wait here
		return 0, limited, err
	}
	d.stored.Add(uint64(n))
	return n, limited, nil
}

// flushSummaries stores the summaries that are due (all pending ones when
// all is set).
func (d *Decisions) flushSummaries(ctx context.Context, all bool) error {
	due := d.limiter.due(all)
	if len(due) == 0 {
		return nil
	}
	n, err := d.life.AppendDecisions(ctx, due)
	if err != nil {
		d.limiter.restore(due)
		return fmt.Errorf("store %d decision summaries: %w", len(due), err)
	}
	d.stored.Add(uint64(n))
	return nil
}

// ingestLimiter is the per-sandbox token buckets in front of the store,
// and the summaries of what they held back.
type ingestLimiter struct {
	rate  float64 // tokens a second; 0: no limit
	burst float64
	now   func() time.Time

	mu        sync.Mutex
	sandboxes map[string]*sandboxLimit
}

type sandboxLimit struct {
	allowed, denied bucket
	summarised      uint64 // in total, for logging
	summaries       map[kind]*summary
}

type bucket struct {
	tokens float64
	at     time.Time
}

// kind is what makes records similar, so they are summarised together:
// the record's kind (decision.Kind), and the proxy that shipped it.
type kind struct {
	proxyID string
	decision.Kind
}

func kindOf(d *store.Decision) kind { return kind{d.ProxyID, decision.KindOf(&d.Record)} }

// summary is a summary record being gathered, and when it began.
type summary struct {
	rec    store.Decision
	opened time.Time
}

func newIngestLimiter(rate float64, burst int, now func() time.Time) *ingestLimiter {
	l := &ingestLimiter{now: now, sandboxes: make(map[string]*sandboxLimit)}
	if rate > 0 {
		l.rate, l.burst = rate, float64(burst)
	}
	return l
}

// admit returns the records of sandbox the buckets let through, in their
// order, the sandbox's summaries that are due, how many records it
// counted into summaries, and the sandbox's count so far.
func (l *ingestLimiter) admit(sandbox string, records []store.Decision) (kept, due []store.Decision, summarised int, total uint64) {
	if l.rate == 0 {
		return records, nil, 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	sl := l.sandboxes[sandbox]
	if sl == nil {
		sl = &sandboxLimit{allowed: bucket{l.burst, now}, denied: bucket{l.burst, now}}
		l.sandboxes[sandbox] = sl
	}
	sl.allowed.refill(now, l.rate, l.burst)
	sl.denied.refill(now, l.rate, l.burst)
	kept = records[:0:0]
	for _, d := range records {
		b := &sl.allowed
		if decision.Folds(d.Decision) {
			b = &sl.denied
		}
		if cost := recordCost(d); b.tokens >= cost {
			b.tokens -= cost
			kept = append(kept, d)
			continue
		}
		sl.fold(d, now)
		summarised += int(d.Count())
	}
	sl.summarised += uint64(summarised)
	return kept, sl.due(nil, now, false), summarised, sl.summarised
}

// restore counts summaries that could not be stored back into their
// sandboxes' pending ones, to be stored later.
func (l *ingestLimiter) restore(summaries []store.Decision) {
	if len(summaries) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, s := range summaries {
		sl := l.sandboxes[s.Sandbox]
		if sl == nil {
			sl = &sandboxLimit{allowed: bucket{l.burst, now}, denied: bucket{l.burst, now}}
			l.sandboxes[s.Sandbox] = sl
		}
		sl.fold(s, now)
	}
}

// fold counts d (itself a summary, maybe) into its kind's summary.
func (sl *sandboxLimit) fold(d store.Decision, now time.Time) {
	first, last, lastAt := d.DenialID, d.DenialID, d.Time
	if d.Summary != nil {
		first, last = d.Summary.FirstDenialID, d.Summary.LastDenialID
		if !d.Summary.Last.IsZero() {
			lastAt = d.Summary.Last
		}
	}
	k, own := kindOf(&d), true
	if sl.summaries == nil {
		sl.summaries = make(map[kind]*summary)
	}
	s := sl.summaries[k]
	if s == nil && len(sl.summaries) >= SummaryKinds {
		// One catch-all per decision, whichever proxy: keyed by the
		// proxy too, a shipper naming a new proxy id per batch would grow
		// the map without bound. The summary names the first proxy.
		k, own = kind{Kind: decision.Kind{Sandbox: d.Sandbox, Decision: d.Decision}}, false
		s = sl.summaries[k]
	}
	if s == nil {
		rec := store.Decision{ProxyID: d.ProxyID, Record: k.Of()}
		if own {
			rec.Reason = d.Reason // the first one's: what the kind was denied for
		}
		rec.Time, rec.PolicyVersion = d.Time, d.PolicyVersion
		rec.Summary = &decision.Summary{Last: lastAt, FirstDenialID: first}
		s = &summary{rec: rec, opened: now}
		sl.summaries[k] = s
	}
	sum := s.rec.Summary
	sum.Count += d.Count()
	if d.Time.Before(s.rec.Time) {
		s.rec.Time = d.Time
	}
	if lastAt.After(sum.Last) {
		sum.Last = lastAt
	}
	if last != "" {
		sum.LastDenialID = last
	}
	if sum.FirstDenialID == "" {
		sum.FirstDenialID = first
	}
}

// due appends to out the summaries opened SummaryWindow or more before now
// (all of them when all is set), oldest first, and forgets them.
func (sl *sandboxLimit) due(out []store.Decision, now time.Time, all bool) []store.Decision {
	start := len(out)
	for k, s := range sl.summaries {
		if all || now.Sub(s.opened) >= SummaryWindow {
			out = append(out, s.rec)
			delete(sl.summaries, k)
		}
	}
	slices.SortFunc(out[start:], func(a, b store.Decision) int { return a.Time.Compare(b.Time) })
	return out
}

// due returns every sandbox's summaries that are due (all pending ones
// when all is set).
func (l *ingestLimiter) due(all bool) []store.Decision {
	if l.rate == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var out []store.Decision
	for _, sl := range l.sandboxes {
		out = sl.due(out, now, all)
	}
	return out
}

// forgetFull drops the sandboxes whose buckets are full again and that
// have no summary pending (a full bucket and none are the same), so
// sandboxes that went quiet or away cost no memory.
func (l *ingestLimiter) forgetFull() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for name, sl := range l.sandboxes {
		sl.allowed.refill(now, l.rate, l.burst)
		sl.denied.refill(now, l.rate, l.burst)
		if sl.allowed.tokens >= l.burst && sl.denied.tokens >= l.burst && len(sl.summaries) == 0 {
			delete(l.sandboxes, name)
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
	n, err := d.life.PruneDecisions(ctx, r)
	if n > 0 {
		d.pruned.Add(uint64(n))
		d.log.InfoContext(ctx, "pruned decision records", "deleted", n, "max_age", d.cfg.MaxAge, "max_per_sandbox", d.cfg.MaxPerSandbox)
	}
	return n, err
}

// Run sweeps at start and every SweepInterval, and stores the summaries
// that are due every SummaryWindow, until ctx ends; then it stores the
// summaries still pending.
func (d *Decisions) Run(ctx context.Context) {
	tick := time.NewTicker(d.cfg.SweepInterval)
	defer tick.Stop()
	summaries := time.NewTicker(SummaryWindow)
	defer summaries.Stop()
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := d.flushSummaries(ctx, true); err != nil {
			d.log.Warn("decision summaries could not be stored at shutdown; their counts are lost", "err", err)
		}
	}()
	for {
		_, err := d.sweep(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("decision retention sweep failed; will retry", "err", err)
		}
		if d.cfg.Swept != nil {
			d.cfg.Swept(err)
		}
		for sweep := false; !sweep; {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				sweep = true
			case <-summaries.C:
				if err := d.flushSummaries(ctx, false); err != nil && ctx.Err() == nil {
					d.log.Warn("decision summaries could not be stored; will retry", "err", err)
				}
			}
		}
	}
}
