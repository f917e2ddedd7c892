package store_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
)

// BenchmarkSentryGap measures the per-batch time of AppendSentryEvents
// once a source has 100,000 events stored, for a source whose stream is
// whole ("steady") beside one whose sequence 1 never arrives ("holed": a
// permanent gap, every event above it) and one that skips every other
// sequence ("sparse": a gap per event), on each engine; and the size of
// the holed and sparse sources' states as JSON (what an answer carries).
// Issue 34: the gaps were computed from every event above the hole, so
// the holed source's batches slowed with its history; kept gaps make
// both cost the same. Each iteration appends one batch of 1,000 events to
// each source; the ratio is holed/steady.
//
//	go test -run '^$' -bench SentryGap -benchtime 20x ./store/
func BenchmarkSentryGap(b *testing.B) {
	const (
		batchSize = 1000
		history   = 100_000
	)
	ctx := b.Context()
	pg, lite := openEngines(b, pgtest.Database(b))
	if err := pg.EnsureSentryPartitions(ctx, time.Now(), 2); err != nil {
		b.Fatal(err)
	}
	engines := []struct {
		name   string
		append func([]store.SentryEvent) (store.SentryBatchResult, error)
	}{
		{"pg", func(evs []store.SentryEvent) (store.SentryBatchResult, error) { return pg.AppendSentryEvents(ctx, evs) }},
		{"sqlite", func(evs []store.SentryEvent) (store.SentryBatchResult, error) {
			return lite.AppendSentryEvents(ctx, evs)
		}},
	}
	// step: the sparse source skips every other sequence.
	step := map[string]uint64{"steady": 1, "holed": 1, "sparse": 2}
	sources := []string{"steady", "holed", "sparse"}
	// batch is a batch of source: sequences from first on.
	batch := func(source string, first uint64) []store.SentryEvent {
		out := make([]store.SentryEvent, batchSize)
		now := time.Now().UTC().Truncate(time.Microsecond)
		for i := range out {
			seq := first + uint64(i)*step[source]
			id := fmt.Sprintf("%s-%d", source, seq)
			out[i] = store.SentryEvent{
				Source: source, ID: id, Sequence: seq, Type: "portcullis.sentry.v1.tool_access",
				Subject: fmt.Sprintf("sb-%d", i%50), Time: now, ReceivedAt: now, Severity: "info", Processing: "store_only",
				Document: fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"source":%q,"sequence":"%d","type":"portcullis.sentry.v1.tool_access"}`, id, source, seq),
			}
		}
		return out
	}
	// next[engine][source]: the next sequence to send.
	next := map[string]map[string]uint64{}
	for _, e := range engines {
		next[e.name] = map[string]uint64{"steady": 1, "holed": 2, "sparse": 2}
		for _, src := range sources {
			for range history / batchSize {
				if _, err := e.append(batch(src, next[e.name][src])); err != nil {
					b.Fatal(err)
				}
				next[e.name][src] += batchSize * step[src]
			}
		}
	}
	took := map[string]time.Duration{}
	answer := map[string]int{}
	b.ResetTimer()
	for b.Loop() {
		for _, e := range engines {
			for _, src := range sources {
				evs := batch(src, next[e.name][src])
				start := time.Now()
				res, err := e.append(evs)
				took[e.name+"-"+src] += time.Since(start)
				if err != nil || res.Stored != batchSize {
					b.Fatalf("%s %s: append = %+v, %v", e.name, src, res, err)
				}
				next[e.name][src] += batchSize * step[src]
				j, _ := json.Marshal(res.Source(src))
				answer[e.name+"-"+src] = len(j)
			}
		}
	}
	for _, e := range engines {
		steady, holed, sparse := took[e.name+"-steady"], took[e.name+"-holed"], took[e.name+"-sparse"]
		b.ReportMetric(steady.Seconds()*1000/float64(b.N), e.name+"-steady-ms/batch")
		b.ReportMetric(holed.Seconds()*1000/float64(b.N), e.name+"-holed-ms/batch")
		b.ReportMetric(sparse.Seconds()*1000/float64(b.N), e.name+"-sparse-ms/batch")
		b.ReportMetric(holed.Seconds()/steady.Seconds(), e.name+"-holed/steady")
		b.ReportMetric(sparse.Seconds()/steady.Seconds(), e.name+"-sparse/steady")
		b.ReportMetric(float64(answer[e.name+"-holed"]), e.name+"-holed-answer-bytes")
		b.ReportMetric(float64(answer[e.name+"-sparse"]), e.name+"-sparse-answer-bytes")
	}
}
