package decisions

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/store"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func decisionRecords(verdict string, n int) []store.Decision {
	out := make([]store.Decision, n)
	for i := range out {
		out[i] = store.Decision{ProxyID: "p", Record: decision.Record{Sandbox: "s", Decision: verdict, Host: "h.example.com", DenialID: fmt.Sprint("d", i)}}
	}
	return out
}

// sumOf is d's summary; none is the zero one.
func sumOf(d store.Decision) decision.Summary {
	if d.Summary == nil {
		return decision.Summary{}
	}
	return *d.Summary
}

// TestIngestLimiter: each sandbox has a bucket for allowed records and
// one for denials; what a bucket holds back is summarised, not dropped:
// a summary a kind, stored once its window ended, counting every record.
func TestIngestLimiter(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newIngestLimiter(2, 12, clock.now)
	admit := func(sandbox string, in []store.Decision, wantKept, wantSummarised int, wantTotal uint64) []store.Decision {
		t.Helper()
		kept, due, summarised, total := l.admit(sandbox, in)
		kept = append(kept, due...)
		if len(kept) != wantKept || summarised != wantSummarised || total != wantTotal {
			t.Fatalf("admit(%s, %d records) = %d kept, %d summarised, %d in total; want %d kept, %d summarised, %d in total",
				sandbox, len(in), len(kept), summarised, total, wantKept, wantSummarised, wantTotal)
		}
		return kept
	}
	// A flood of denials takes none of the allowed records' room.
	admit("s", decisionRecords("deny", 30), 12, 18, 18)
	kept := admit("s", decisionRecords("allow", 20), 12, 8, 26)
	if kept[0].DenialID != "d0" || kept[11].DenialID != "d11" {
		t.Errorf("kept the wrong records: %v … %v", kept[0], kept[11])
	}
	// Rate-limited calls and version probes are denials too.
	probe := decisionRecords("deny", 1)
	probe[0].VersionProbe = true
	admit("s", probe, 0, 1, 27)
	// Another sandbox has its own buckets.
	admit("t", decisionRecords("deny", 12), 12, 0, 0)

	// A window later the summaries come with the next batch: one a kind,
	// with the first and last denial ids, counting every record.
	clock.advance(SummaryWindow)
	kept = admit("s", decisionRecords("allow", 1), 4, 0, 27)
	sums := map[string]store.Decision{}
	for _, d := range kept[1:] {
		sums[fmt.Sprint(d.Decision, d.VersionProbe)] = d
	}
	if d := sums["denyfalse"]; sumOf(d).Count != 18 || sumOf(d).FirstDenialID != "d12" || sumOf(d).LastDenialID != "d29" || d.Host != "h.example.com" || d.ProxyID != "p" {
		t.Errorf("denials' summary = %+v, want 18 of d12…d29", d)
	}
	if d := sums["allowfalse"]; sumOf(d).Count != 8 || d.Host != "h.example.com" {
		t.Errorf("allowed records' summary = %+v, want 8", d)
	}
	if d := sums["denytrue"]; sumOf(d).Count != 1 || sumOf(d).FirstDenialID != "d0" {
		t.Errorf("probe's summary = %+v, want 1 of d0", d)
	}
	// A summary shipped by the proxy that is held back adds its count.
	clock.advance(time.Hour)
	admit("s", decisionRecords("deny", 12), 12, 0, 27)
	in := decisionRecords("deny", 1)
	in[0].DenialID, in[0].Summary = "", &decision.Summary{Count: 50, FirstDenialID: "a", LastDenialID: "b"}
	admit("s", in, 0, 50, 77)
	got := l.due(true)
	if len(got) != 1 || sumOf(got[0]).Count != 50 || sumOf(got[0]).FirstDenialID != "a" || sumOf(got[0]).LastDenialID != "b" {
		t.Errorf("due = %+v, want the summary of 50", got)
	}
	// A summary the store did not take waits for the next try.
	l.restore(got)
	if again := l.due(true); len(again) != 1 || sumOf(again[0]).Count != 50 || sumOf(again[0]).FirstDenialID != "a" {
		t.Errorf("due after restore = %+v, want the summary of 50 again", again)
	}
	// Past SummaryKinds kinds, records share one summary per decision.
	clock.advance(time.Hour)
	admit("s", decisionRecords("deny", 12), 12, 0, 77)
	many := decisionRecords("deny", SummaryKinds+10)
	for i := range many {
		many[i].Host = fmt.Sprint("h", i)
	}
	admit("s", many, 0, SummaryKinds+10, 77+SummaryKinds+10)
	got = l.due(true)
	total, shared := int64(0), int64(0)
	for _, d := range got {
		total += sumOf(d).Count
		if d.Host == "" {
			shared += sumOf(d).Count
		}
	}
	if len(got) != SummaryKinds+1 || total != SummaryKinds+10 || shared != 10 {
		t.Errorf("%d summaries of %d records, %d of them shared; want %d of %d, 10 shared", len(got), total, shared, SummaryKinds+1, SummaryKinds+10)
	}

	// A record of 9 KiB of text costs 3 tokens.
	clock.advance(time.Hour)
	fat := decisionRecords("deny", 5)
	for i := range fat {
		fat[i].Path = strings.Repeat("x", 9<<10)
	}
	admit("s", fat, 4, 1, 77+SummaryKinds+11)

	// Full buckets without pending summaries are forgotten.
	l.forgetFull()
	if _, ok := l.sandboxes["s"]; !ok || len(l.sandboxes) != 1 {
		t.Fatalf("sandboxes = %v, want s's only (t's refilled)", l.sandboxes)
	}
	clock.advance(time.Hour)
	l.forgetFull()
	if _, ok := l.sandboxes["s"]; !ok {
		t.Fatalf("s forgotten with a summary pending")
	}
	l.due(true)
	l.forgetFull()
	if len(l.sandboxes) != 0 {
		t.Fatalf("sandboxes after an hour = %d, want 0", len(l.sandboxes))
	}

	// No limit.
	l = newIngestLimiter(0, 0, clock.now)
	admit("s", decisionRecords("allow", 5000), 5000, 0, 0)
}
