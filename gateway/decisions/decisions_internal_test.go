package decisions

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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

func decisionRecords(decision string, n int) []store.Decision {
	out := make([]store.Decision, n)
	for i := range out {
		out[i] = store.Decision{Sandbox: "s", ProxyID: "p", Decision: decision, Host: "h.example.com", DenialID: fmt.Sprint("d", i)}
	}
	return out
}

// TestIngestLimiter: the bucket lets through its burst, then its rate,
// drops (and counts) the rest, keeps a reserve that only denials reach,
// charges large records more, and each sandbox has its own.
func TestIngestLimiter(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	l := newIngestLimiter(2, 12, clock.now) // reserve 3
	admit := func(sandbox string, in []store.Decision, wantKept int, wantTotal uint64) []store.Decision {
		t.Helper()
		kept, dropped, total := l.admit(sandbox, in)
		if len(kept) != wantKept || dropped != len(in)-wantKept || total != wantTotal {
			t.Fatalf("admit(%s, %d records) = %d kept, %d dropped, %d in total; want %d kept, %d dropped, %d in total",
				sandbox, len(in), len(kept), dropped, total, wantKept, len(in)-wantKept, wantTotal)
		}
		return kept
	}
	// Allow records stop at the reserve (12 - 3 = 9 of them); denials
	// still get the reserve's 3; then nothing.
	kept := admit("s", decisionRecords("allow", 20), 9, 11)
	if kept[0].DenialID != "d0" || kept[8].DenialID != "d8" {
		t.Errorf("kept the wrong records: %v … %v", kept[0], kept[8])
	}
	admit("s", decisionRecords("deny", 5), 3, 13)
	admit("s", decisionRecords("deny", 1), 0, 14)
	// Version probes are denials the advisor never offers: like allows.
	clock.advance(2 * time.Second) // +4 tokens: 4 < reserve + 1 for a probe
	probe := decisionRecords("deny", 1)
	probe[0].VersionProbe = true
	admit("s", probe, 1, 14)
	admit("s", probe, 0, 15)
	// Another sandbox has its own bucket.
	admit("t", decisionRecords("deny", 12), 12, 0)
	// A refill of 1 token a half-second, never above the burst.
	clock.advance(time.Hour)
	admit("s", decisionRecords("deny", 13), 12, 16)
	clock.advance(500 * time.Millisecond)
	admit("s", decisionRecords("deny", 2), 1, 17)
	// A record of 9 KiB of text costs 3 tokens.
	clock.advance(time.Hour)
	fat := decisionRecords("deny", 5)
	for i := range fat {
		fat[i].Path = strings.Repeat("x", 9<<10)
	}
	admit("s", fat, 4, 18)

	// Full buckets are forgotten; a refilled one starts full again.
	l.forgetFull()
	if _, ok := l.buckets["s"]; !ok || len(l.buckets) != 1 {
		t.Fatalf("buckets = %v, want s's only (t's refilled)", l.buckets)
	}
	clock.advance(time.Hour)
	l.forgetFull()
	if len(l.buckets) != 0 {
		t.Fatalf("buckets after an hour = %d, want 0", len(l.buckets))
	}
	admit("s", decisionRecords("deny", 13), 12, 1)

	// No limit.
	l = newIngestLimiter(0, 0, clock.now)
	admit("s", decisionRecords("allow", 5000), 5000, 0)
}
