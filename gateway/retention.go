package gateway

import (
	"context"
	"math"
	"sync"
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

const (
	defaultDecisionMaxAge        = 7 * 24 * time.Hour
	defaultDecisionMaxPerSandbox = 100_000
	defaultDecisionSweepInterval = 5 * time.Minute
	defaultDecisionRate          = 100
	defaultDecisionBurst         = 2000
	// recordCostBytes: a record costs one token per started 4 KiB of
	// text, so records padded to the field limits cannot store 20 times
	// the bytes of ordinary ones for the same tokens.
	recordCostBytes = 4 << 10
	// minDecisionBurst leaves room for the costliest record above the
	// denials' reserve.
	minDecisionBurst = 10
)

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

// sweepDecisions deletes the records past the retention bounds and returns
// how many went.
func (s *Server) sweepDecisions(ctx context.Context) (int64, error) {
	s.limiter.forgetFull()
	var r store.DecisionRetention
	if s.cfg.DecisionMaxAge > 0 {
		r.Before = s.cfg.Now().Add(-s.cfg.DecisionMaxAge)
	}
	if s.cfg.DecisionMaxPerSandbox > 0 {
		r.KeepPerSandbox = s.cfg.DecisionMaxPerSandbox
	}
	if r == (store.DecisionRetention{}) {
		return 0, nil
	}
	n, err := s.store.PruneDecisions(ctx, r)
	if n > 0 {
		s.decisionsPruned.Add(uint64(n))
		s.log.InfoContext(ctx, "pruned decision records", "deleted", n, "max_age", s.cfg.DecisionMaxAge, "max_per_sandbox", s.cfg.DecisionMaxPerSandbox)
	}
	return n, err
}

// runDecisionSweep sweeps at start and every DecisionSweepInterval until
// ctx ends.
func (s *Server) runDecisionSweep(ctx context.Context) {
	tick := time.NewTicker(s.cfg.DecisionSweepInterval)
	defer tick.Stop()
	for {
		_, err := s.sweepDecisions(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("decision retention sweep failed; will retry", "err", err)
		}
		if s.swept != nil {
			s.swept(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
