package ratelimit

import (
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/match"
)

// fixed is a clock for Buckets.Take that reads t.
func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

// A request with more calls on a rule than its burst can never pass: it
// is refused with no retry_after (an obedient agent would loop forever),
// and its reason says it asks for more than the burst allows.
func TestRateLimitOverBurstHasNoRetryAfter(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	var b Buckets
	l := &match.Limit{Key: "k", Rule: "rules[0]", Endpoint: "api.example.com:443", RequestsPerMinute: 6, Burst: 3}
	four := []Call{{Limit: l, Tool: "t"}, {Limit: l, Tool: "t"}, {Limit: l, Tool: "t"}, {Limit: l, Tool: "t"}}
	for _, at := range []time.Duration{0, time.Minute, time.Hour} {
		o, _ := b.Take(four, fixed(t0.Add(at)))
		if o == nil {
			t.Fatalf("4 calls against burst 3 passed at +%v", at)
		}
		if o.RetryAfter != 0 {
			t.Errorf("4 calls against burst 3 at +%v: retry after %d s; no wait makes them pass", at, o.RetryAfter)
		}
		if d := o.Describe(); !strings.Contains(d, "more than its burst") || strings.Contains(d, "retry after") {
			t.Errorf("reason %q, want one saying the request exceeds the burst, with no retry after", d)
		}
	}
	// The burst itself still passes, and a call over an empty bucket gets
	// a retry_after.
	if o, _ := b.Take(four[:3], fixed(t0.Add(time.Hour))); o != nil {
		t.Fatalf("3 calls against a full burst 3: %s", o.Describe())
	}
	if o, _ := b.Take(four[:1], fixed(t0.Add(time.Hour))); o == nil || o.RetryAfter != 10 {
		t.Fatalf("a call on an empty 6/min bucket: %+v, want retry after 10 s", o)
	}
}

// The buckets never run back: a charge at a time before the latest one
// does not refill the bucket twice.
func TestRateLimitBucketClockNeverRunsBack(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	l := &match.Limit{Key: "k", RequestsPerMinute: 2, Burst: 2}
	one := []Call{{Limit: l}}
	passes := func(b *Buckets, at time.Time) bool {
		o, _ := b.Take(one, fixed(at))
		return o == nil
	}

	t.Run("stale time after a later one", func(t *testing.T) {
		var b Buckets
		passes(&b, t0)
		passes(&b, t0) // drained at t0
		n := 0
		for _, at := range []time.Time{t0.Add(time.Minute), t0, t0.Add(time.Minute), t0, t0.Add(time.Minute), t0.Add(time.Minute)} {
			if passes(&b, at) {
				n++
			}
		}
		if n != 2 {
			t.Errorf("%d calls passed in the minute after draining a 2/min burst 2 bucket, want 2", n)
		}
	})

	t.Run("time before the last", func(t *testing.T) {
		var b Buckets
		passes(&b, t0)
		passes(&b, t0)
		if passes(&b, t0.Add(-time.Hour)) {
			t.Fatal("a call passed on the drained bucket given an earlier time")
		}
		if !passes(&b, t0.Add(30*time.Second)) || passes(&b, t0.Add(30*time.Second)) {
			t.Fatal("30 s after draining, the bucket did not hold exactly 1 token")
		}
	})
}

// Retrying exactly retry_after_seconds later passes, whatever the rate.
func TestRateLimitRetryAfterIsEnough(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	for rpm := 1; rpm <= 400; rpm += 3 {
		for _, burst := range []int{1, 2, 3, 7} {
			for step := time.Duration(0); step < 3*time.Second; step += 97 * time.Millisecond {
				var b Buckets
				l := &match.Limit{Key: "k", RequestsPerMinute: rpm, Burst: burst}
				c := []Call{{Limit: l}}
				for range burst {
					if o, _ := b.Take(c, fixed(t0)); o != nil {
						t.Fatal("the burst was refused")
					}
				}
				now := t0.Add(step)
				o, _ := b.Take(c, fixed(now))
				if o == nil {
					continue
				}
				if o2, _ := b.Take(c, fixed(now.Add(time.Duration(o.RetryAfter)*time.Second))); o2 != nil {
					t.Fatalf("rpm %d burst %d: refused at +%v with retry after %d s, and refused again then", rpm, burst, step, o.RetryAfter)
				}
			}
		}
	}
}
