package storetest

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// sentryEvent is an event of src with sequence seq (id src-seq), about
// sandbox, received now.
func sentryEvent(src string, seq uint64, sandbox string) store.SentryEvent {
	id := fmt.Sprintf("%s-%d", src, seq)
	return store.SentryEvent{
		Source: src, ID: id, Sequence: seq, Type: "portcullis.sentry.v1.heartbeat", Subject: sandbox,
		Document: fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"source":%q,"sequence":"%d"}`, id, src, seq),
	}
}

// sentrySeqs returns events of src for each sequence, about sandbox "sb".
func sentrySeqs(src string, seqs ...uint64) []store.SentryEvent {
	out := make([]store.SentryEvent, len(seqs))
	for i, n := range seqs {
		out[i] = sentryEvent(src, n, "sb")
	}
	return out
}

func appendSentry(t *testing.T, s *store.Store, events []store.SentryEvent) store.SentryBatchResult {
	t.Helper()
	res, err := s.AppendSentryEvents(ctx(t), events)
	return must(t, res, err, "AppendSentryEvents(%d events)", len(events))
}

// wantSource checks a source's state: acked, highest and gaps.
func wantSource(t *testing.T, what string, got store.SentrySource, acked, highest uint64, gaps ...[2]uint64) {
	t.Helper()
	if got.AckedSequence != acked || got.MaxSequence != highest || !slices.Equal(got.Gaps, gaps) {
		t.Errorf("%s: source %q acked %d, max %d, gaps %v; want %d, %d, %v",
			what, got.Source, got.AckedSequence, got.MaxSequence, got.Gaps, acked, highest, gaps)
	}
}

func sentryGaps(t *testing.T, s *store.Store, source string) []store.SentrySource {
	t.Helper()
	out, err := s.SentryGaps(ctx(t), source)
	return must(t, out, err, "SentryGaps(%q)", source)
}

func sentryEvents(t *testing.T, s *store.Store, f store.SentryEventFilter) []store.SentryEvent {
	t.Helper()
	out, err := s.ListSentryEvents(ctx(t), f)
	return must(t, out, err, "ListSentryEvents(%+v)", f)
}

// testSentryDuplicates: the same batch sent three times is stored once;
// the second and third answers count every event as a duplicate, and a
// key repeated within a batch counts too.
func testSentryDuplicates(t *testing.T, s *store.Store) {
	batch := sentrySeqs("w1", 1, 2, 3)
	for i, want := range []int{3, 0, 0} {
		res := appendSentry(t, s, batch)
		if res.Stored != want || res.Duplicates != 3-want {
			t.Errorf("send %d: stored %d, duplicates %d; want %d, %d", i+1, res.Stored, res.Duplicates, want, 3-want)
		}
		wantSource(t, fmt.Sprintf("send %d", i+1), res.Source("w1"), 3, 3)
	}
	res := appendSentry(t, s, sentrySeqs("w1", 4, 4, 3))
	if res.Stored != 1 || res.Duplicates != 2 {
		t.Errorf("batch repeating a key: stored %d, duplicates %d; want 1, 2", res.Stored, res.Duplicates)
	}
	if got := sentryEvents(t, s, store.SentryEventFilter{}); len(got) != 4 {
		t.Errorf("stored %d events, want 4", len(got))
	}
	// Nothing to store is not an error.
	if res := appendSentry(t, s, nil); res.Stored != 0 || res.Duplicates != 0 || len(res.Sources) != 0 {
		t.Errorf("empty batch: %+v", res)
	}
}

// testSentryReusedID: a batch ahead of its source's stream whose event
// reuses a stored id under a new sequence stores the others and counts
// that one as a duplicate (on Postgres the COPY tried first is refused
// by the key index and the append takes the slower way).
func testSentryReusedID(t *testing.T, s *store.Store) {
	appendSentry(t, s, sentrySeqs("w1", 1, 2))
	reused := sentryEvent("w1", 3, "sb")
	reused.ID = "w1-1"
	res := appendSentry(t, s, []store.SentryEvent{reused, sentryEvent("w1", 4, "sb")})
	if res.Stored != 1 || res.Duplicates != 1 {
		t.Errorf("stored %d, duplicates %d; want 1, 1", res.Stored, res.Duplicates)
	}
	wantSource(t, "after the reused id", res.Source("w1"), 2, 4, [2]uint64{3, 3})
	var ids []string
	for _, e := range sentryEvents(t, s, store.SentryEventFilter{Source: "w1"}) {
		ids = append(ids, e.ID)
	}
	if slices.Sort(ids); !slices.Equal(ids, []string{"w1-1", "w1-2", "w1-4"}) {
		t.Errorf("stored %q, want w1-1, w1-2, w1-4", ids)
	}
}

// testSentryCancelledAppend: an append whose context ends part-way (its
// sender went away) is either whole or
// rolled back, never of unknown outcome: sent again, its events are
// counted exactly — stored once, and duplicates only for those the first
// append reported stored.
func testSentryCancelledAppend(t *testing.T, s *store.Store) {
	const n = 3000
	for i, after := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond, 60 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond, time.Second} {
		src := fmt.Sprintf("cut%d", i)
		seqs := make([]uint64, n)
		for j := range seqs {
			seqs[j] = uint64(j + 1)
		}
		batch := sentrySeqs(src, seqs...)
		c, cancel := context.WithCancel(ctx(t))
		timer := time.AfterFunc(after, cancel)
		first, err := s.AppendSentryEvents(c, batch)
		timer.Stop()
		cancel()
		stored := len(sentryEvents(t, s, store.SentryEventFilter{Source: src}))
		switch {
		case err != nil && stored != 0:
			t.Fatalf("cut after %s: the append failed (%v) but %d events were stored", after, err, stored)
		case err == nil && (first.Stored != n || stored != n):
			t.Fatalf("cut after %s: the append succeeded with %d stored, and %d are", after, first.Stored, stored)
		}
		t.Logf("cut after %s: first append stored %d, err %v", after, first.Stored, err)
		again := appendSentry(t, s, batch)
		if again.Stored != n-first.Stored || again.Duplicates != first.Stored {
			t.Fatalf("cut after %s (first: %d stored, err %v): sent again, stored %d and duplicates %d", after, first.Stored, err, again.Stored, again.Duplicates)
		}
		if got := len(sentryEvents(t, s, store.SentryEventFilter{Source: src})); got != n {
			t.Fatalf("cut after %s: %d events stored in the end, want %d", after, got, n)
		}
	}
}

// testSentryGaps: a gap (6–7 missing after 8) is reported and disappears
// when 6 and 7 arrive; unsequenced events take no part.
func testSentryGaps(t *testing.T, s *store.Store) {
	res := appendSentry(t, s, sentrySeqs("w1", 1, 2, 3, 4, 5, 8))
	wantSource(t, "1-5, 8", res.Source("w1"), 5, 8, [2]uint64{6, 7})
	wantSource(t, "SentryGaps", sentryGaps(t, s, "w1")[0], 5, 8, [2]uint64{6, 7})
	unsequenced := sentryEvent("w1", 0, "sb")
	unsequenced.ID = "no-sequence"
	res = appendSentry(t, s, append(sentrySeqs("w1", 6), unsequenced))
	wantSource(t, "6 arrives", res.Source("w1"), 6, 8, [2]uint64{7, 7})
	res = appendSentry(t, s, sentrySeqs("w1", 7))
	wantSource(t, "7 arrives", res.Source("w1"), 8, 8)
	wantSource(t, "SentryGaps after", sentryGaps(t, s, "w1")[0], 8, 8)
	// A gap at the start: the source's first event is 3.
	res = appendSentry(t, s, sentrySeqs("w2", 3, 5))
	wantSource(t, "w2", res.Source("w2"), 0, 5, [2]uint64{1, 2}, [2]uint64{4, 4})
	if got := sentryGaps(t, s, "unknown"); len(got) != 0 {
		t.Errorf("SentryGaps(unknown) = %+v, want none", got)
	}
}

// testSentryGapsBounded: a source with more gaps than an answer lists
// gets the first store.MaxSentryGaps of them and the count of the rest,
// in the append's answer and from SentryGaps alike; filling gaps, the
// first, ones past the listed, many in one batch (more than an append
// reads at once) and every other one, keeps the list and the count
// right, and a gap split in two counts twice.
func testSentryGapsBounded(t *testing.T, s *store.Store) {
	const n = store.MaxSentryGaps + 150 // gaps: 1, 3, 5, … 2n-1
	var even []uint64
	for i := 1; i <= n; i++ {
		even = append(even, uint64(2*i))
	}
	res := appendSentry(t, s, sentrySeqs("w1", even...))
	odd := func(from, count int) [][2]uint64 { // the gaps 2from-1, 2from+1, …
		var out [][2]uint64
		for i := from; i < from+count; i++ {
			out = append(out, [2]uint64{uint64(2*i - 1), uint64(2*i - 1)})
		}
		return out
	}
	check := func(what string, got store.SentrySource, acked, highest uint64, gaps [][2]uint64, more uint64) {
		t.Helper()
		wantSource(t, what, got, acked, highest, gaps...)
		if got.MoreGaps != more {
			t.Errorf("%s: %d more gaps, want %d", what, got.MoreGaps, more)
		}
		if gs := sentryGaps(t, s, got.Source); len(gs) != 1 || !reflect.DeepEqual(gs[0], got) {
			t.Errorf("%s: SentryGaps = %+v, want the append's answer %+v", what, gs, got)
		}
	}
	check("every other sequence", res.Source("w1"), 0, 2*n, odd(1, store.MaxSentryGaps), n-store.MaxSentryGaps)
	// The first gap closes: acked moves to just before the next.
	res = appendSentry(t, s, sentrySeqs("w1", 1))
	check("1 arrives", res.Source("w1"), 2, 2*n, odd(2, store.MaxSentryGaps), n-1-store.MaxSentryGaps)
	// Gaps past the listed ones close: only the count changes.
	res = appendSentry(t, s, sentrySeqs("w1", 2*n-1, 2*n-3))
	check("the last two arrive", res.Source("w1"), 2, 2*n, odd(2, store.MaxSentryGaps), n-3-store.MaxSentryGaps)
	// One batch fills gaps 3, 7, 11, … up to 2n-5: more than an append
	// reads at once, spread over every other gap.
	var spread []uint64
	for seq := uint64(3); seq <= 2*n-5; seq += 4 {
		spread = append(spread, seq)
	}
	res = appendSentry(t, s, sentrySeqs("w1", spread...))
	var left [][2]uint64 // 5, 9, 13, …
	for seq := uint64(5); seq <= 2*n-5; seq += 4 {
		left = append(left, [2]uint64{seq, seq})
	}
	check("every other gap arrives", res.Source("w1"), 4, 2*n, left[:min(len(left), store.MaxSentryGaps)], uint64(max(0, len(left)-store.MaxSentryGaps)))
	// The rest arrive, out of order, with a sequence stored twice.
	var rest []uint64
	for _, g := range slices.Backward(left) {
		rest = append(rest, g[0])
	}
	res = appendSentry(t, s, sentrySeqs("w1", append(rest, 2)...))
	check("all arrive", res.Source("w1"), 2*n, 2*n, nil, 0)

	// A gap split in two by an event inside it, then closed by a batch
	// that also moves the stream on past a new gap.
	res = appendSentry(t, s, sentrySeqs("w2", 10))
	check("10 first", res.Source("w2"), 0, 10, [][2]uint64{{1, 9}}, 0)
	res = appendSentry(t, s, sentrySeqs("w2", 5))
	check("5 inside", res.Source("w2"), 0, 10, [][2]uint64{{1, 4}, {6, 9}}, 0)
	res = appendSentry(t, s, sentrySeqs("w2", 1, 2, 3, 4, 6, 7, 8, 9, 12))
	check("all but 11", res.Source("w2"), 10, 12, [][2]uint64{{11, 11}}, 0)
}

// testSentryGapsKept: a gap is the store's record of what never arrived:
// pruning the events above it does not widen it, and an event arriving
// after the prune still closes it.
func testSentryGapsKept(t *testing.T, s *store.Store) {
	old := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -3)
	batch := sentrySeqs("w1", 1, 2, 4, 5, 6)
	for i := range batch {
		batch[i].ReceivedAt = old
	}
	appendSentry(t, s, batch)
	if n, err := s.PruneSentryEvents(ctx(t), old.AddDate(0, 0, 1)); err != nil || n != 5 {
		t.Fatalf("prune = %d, %v; want 5", n, err)
	}
	wantSource(t, "after pruning", sentryGaps(t, s, "w1")[0], 2, 6, [2]uint64{3, 3})
	res := appendSentry(t, s, sentrySeqs("w1", 3))
	wantSource(t, "3 arrives", res.Source("w1"), 6, 6)
}

// testSentryOutOfOrder: sequences arriving out of order, within a batch
// and across batches, end with the same state as in order.
func testSentryOutOfOrder(t *testing.T, s *store.Store) {
	res := appendSentry(t, s, sentrySeqs("w1", 3, 1, 2))
	wantSource(t, "3, 1, 2", res.Source("w1"), 3, 3)
	res = appendSentry(t, s, sentrySeqs("w1", 9, 7, 5))
	wantSource(t, "9, 7, 5", res.Source("w1"), 3, 9, [2]uint64{4, 4}, [2]uint64{6, 6}, [2]uint64{8, 8})
	res = appendSentry(t, s, sentrySeqs("w1", 8, 4))
	wantSource(t, "8, 4", res.Source("w1"), 5, 9, [2]uint64{6, 6})
	res = appendSentry(t, s, sentrySeqs("w1", 10, 6, 6))
	wantSource(t, "10, 6", res.Source("w1"), 10, 10)
}

// testSentryManySources: each source has its own sequence; a batch may
// name several, and SentryGaps("") lists them all by name.
func testSentryManySources(t *testing.T, s *store.Store) {
	var batch []store.SentryEvent
	for i := range 20 {
		src := fmt.Sprintf("src-%02d", 19-i)
		batch = append(batch, sentrySeqs(src, 1, 2, uint64(4+i%3))...)
	}
	res := appendSentry(t, s, batch)
	if res.Stored != 60 || len(res.Sources) != 20 {
		t.Fatalf("stored %d for %d sources; want 60 for 20", res.Stored, len(res.Sources))
	}
	all := sentryGaps(t, s, "")
	if len(all) != 20 {
		t.Fatalf("SentryGaps(\"\") = %d sources, want 20", len(all))
	}
	for i, st := range all {
		if want := fmt.Sprintf("src-%02d", i); st.Source != want || res.Sources[i].Source != want {
			t.Errorf("source %d = %q (batch result %q), want %q", i, st.Source, res.Sources[i].Source, want)
		}
		hi := uint64(4 + (19-i)%3)
		wantSource(t, "many", st, 2, hi, [2]uint64{3, hi - 1})
		if !reflect.DeepEqual(st, res.Sources[i]) {
			t.Errorf("SentryGaps %+v differs from the batch's answer %+v", st, res.Sources[i])
		}
	}
}

// testSentryFilter: every field is stored as given (the document byte for
// byte) and each filter field selects what it names; a limit keeps the
// newest events, oldest first.
func testSentryFilter(t *testing.T, s *store.Store) {
	full := store.SentryEvent{
		Source: "w1", ID: "e1", Sequence: 1, Type: "portcullis.sentry.v1.quarantine", Subject: "alpha",
		Time: usec(2030, 1).UTC(), ReceivedAt: usec(2030, 2).UTC(), Severity: "critical", Processing: "remediate",
		PolicyHash: "abc", DenialID: "d-1", TraceID: "0af7651916cd43dd8448eb211c80319c",
		Document: []byte(`{ "id": "e1",  "source":"w1", "x": [1, 2] }`), Flags: []string{"unknown_field:x"},
	}
	var batch []store.SentryEvent
	for i := range 6 {
		e := sentryEvent([]string{"w1", "w2"}[i%2], uint64(2+i/2), []string{"alpha", "beta", "gamma"}[i%3])
		e.Time = usec(2030, 10+i)
		batch = append(batch, e)
	}
	appendSentry(t, s, append([]store.SentryEvent{full}, batch...))
	got := sentryEvents(t, s, store.SentryEventFilter{Type: full.Type})
	if len(got) != 1 || !reflect.DeepEqual(got[0], full) {
		t.Fatalf("by type = %+v, want exactly %+v", got, full)
	}
	ids := func(f store.SentryEventFilter) []string {
		var out []string
		for _, e := range sentryEvents(t, s, f) {
			out = append(out, e.ID)
		}
		return out
	}
	for _, c := range []struct {
		f    store.SentryEventFilter
		want []string
	}{
		{store.SentryEventFilter{}, []string{"e1", "w1-2", "w2-2", "w1-3", "w2-3", "w1-4", "w2-4"}},
		{store.SentryEventFilter{Sandbox: "alpha"}, []string{"e1", "w1-2", "w2-3"}},
		{store.SentryEventFilter{Source: "w2"}, []string{"w2-2", "w2-3", "w2-4"}},
		{store.SentryEventFilter{Since: usec(2030, 11), Until: usec(2030, 14)}, []string{"w2-2", "w1-3", "w2-3"}},
		{store.SentryEventFilter{Limit: 2}, []string{"w1-4", "w2-4"}},
		{store.SentryEventFilter{Sandbox: "beta", Source: "w2", Limit: 5}, []string{"w2-2"}},
		{store.SentryEventFilter{Sandbox: "nobody"}, nil},
	} {
		if got := ids(c.f); !slices.Equal(got, c.want) {
			t.Errorf("ListSentryEvents(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
	// The store sets the times it was not given.
	before := time.Now().Add(-time.Second)
	appendSentry(t, s, sentrySeqs("w3", 1))
	e := sentryEvents(t, s, store.SentryEventFilter{Source: "w3"})[0]
	if e.ReceivedAt.Before(before) || e.ReceivedAt.After(time.Now().Add(time.Second)) || !e.Time.Equal(e.ReceivedAt) {
		t.Errorf("unset times stored as time %v, received %v", e.Time, e.ReceivedAt)
	}
	// Times are kept to the microsecond on both engines.
	ns := sentryEvent("w3", 2, "sb")
	ns.Time = usec(2030, 20).Add(999 * time.Nanosecond)
	appendSentry(t, s, []store.SentryEvent{ns})
	if got := sentryEvents(t, s, store.SentryEventFilter{Source: "w3"})[1].Time; !got.Equal(usec(2030, 20)) {
		t.Errorf("time %v stored as %v, want %v", ns.Time, got, usec(2030, 20))
	}
}

// testSentryRetention: PruneSentryEvents deletes the events received
// before the cutoff's UTC day and keeps the rest; a pruned key may be
// stored again; the sources keep their acked sequences.
func testSentryRetention(t *testing.T, s *store.Store) {
	// Days 0..3 are the fifth to second days before today (UTC).
	today := time.Now().UTC().Truncate(24 * time.Hour)
	day := func(d int) time.Time { return today.AddDate(0, 0, d-5).Add(12 * time.Hour) }
	var batch []store.SentryEvent
	for i := range 4 { // days 0..3, two events each
		for j := range 2 {
			e := sentryEvent("w1", uint64(1+2*i+j), "sb")
			e.ReceivedAt = day(i).Add(time.Duration(j) * time.Hour)
			batch = append(batch, e)
		}
	}
	appendSentry(t, s, batch)
	if n, err := s.PruneSentryEvents(ctx(t), day(0)); err != nil || n != 0 {
		t.Errorf("prune before day 0 = %d, %v; want 0 (the cutoff's own day is kept)", n, err)
	}
	if n, err := s.PruneSentryEvents(ctx(t), day(2).Add(3*time.Hour)); err != nil || n != 4 {
		t.Errorf("prune before day 2 = %d, %v; want 4", n, err)
	}
	var left []uint64
	for _, e := range sentryEvents(t, s, store.SentryEventFilter{}) {
		left = append(left, e.Sequence)
	}
	if !slices.Equal(left, []uint64{5, 6, 7, 8}) {
		t.Errorf("kept sequences %v, want 5..8", left)
	}
	wantSource(t, "after pruning", sentryGaps(t, s, "w1")[0], 8, 8)
	again := batch[0]
	again.ReceivedAt = time.Time{}
	if res := appendSentry(t, s, []store.SentryEvent{again}); res.Stored != 1 {
		t.Errorf("a pruned key sent again: stored %d, want 1", res.Stored)
	}
	if n, err := s.PruneSentryEvents(ctx(t), day(3).AddDate(0, 0, 1)); err != nil || n != 4 {
		t.Errorf("prune the rest = %d, %v; want 4", n, err)
	}
	if n := len(sentryEvents(t, s, store.SentryEventFilter{})); n != 1 {
		t.Errorf("%d events left, want the one received now", n)
	}
}

// testSentryConcurrent: two goroutines appending overlapping batches store
// each event once, count every other copy as a duplicate, and leave the
// sources' state as if the batches had come one after the other.
func testSentryConcurrent(t *testing.T, s *store.Store) {
	const rounds, size = 10, 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	stored, dups := 0, 0
	for g := range 2 {
		wg.Go(func() {
			for r := range rounds {
				var batch []store.SentryEvent
				for i := range size { // g 0: 1..20, 21..40…; g 1 overlaps by half
					seq := uint64(r*size + i + 1 + g*size/2)
					batch = append(batch, sentryEvent("w1", seq, "sb"), sentryEvent("w2", seq, "sb"))
				}
				res, err := s.AppendSentryEvents(ctx(t), batch)
				if err != nil {
					t.Errorf("goroutine %d round %d: %v", g, r, err)
					return
				}
				mu.Lock()
				stored, dups = stored+res.Stored, dups+res.Duplicates
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	const distinct = 2 * (rounds*size + size/2)
	if stored != distinct || dups != 2*2*rounds*size-distinct {
		t.Errorf("stored %d, duplicates %d; want %d, %d", stored, dups, distinct, 2*2*rounds*size-distinct)
	}
	if n := len(sentryEvents(t, s, store.SentryEventFilter{})); n != distinct {
		t.Errorf("%d events stored, want %d", n, distinct)
	}
	for _, st := range sentryGaps(t, s, "") {
		wantSource(t, "concurrent", st, distinct/2, distinct/2)
	}
}

// testSentryInvalid: a batch with an event without a key, with a
// sequence past int64 or with a document that is not JSON is refused
// whole, and nothing of it is stored.
func testSentryInvalid(t *testing.T, s *store.Store) {
	for _, bad := range []func(e *store.SentryEvent){
		func(e *store.SentryEvent) { e.Source = "" },
		func(e *store.SentryEvent) { e.ID = "" },
		func(e *store.SentryEvent) { e.Sequence = 1 << 63 },
		func(e *store.SentryEvent) { e.Document = []byte(`{"id":`) },
	} {
		batch := sentrySeqs("w1", 1, 2)
		bad(&batch[1])
		if res, err := s.AppendSentryEvents(ctx(t), batch); err == nil {
			t.Errorf("AppendSentryEvents(%+v) = %+v, want an error", batch[1], res)
		}
	}
	if n := len(sentryEvents(t, s, store.SentryEventFilter{})); n != 0 {
		t.Errorf("%d events stored from refused batches", n)
	}
}
