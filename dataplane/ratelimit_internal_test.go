package dataplane

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/match"
	"github.com/portcullis-dev/portcullis/policy"
)

// fixed is a clock for buckets.take that reads t.
func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

// A request with more calls on a rule than its burst can never pass: it
// is refused with no retry_after (an obedient agent would loop forever),
// and its reason says it asks for more than the burst allows.
func TestRateLimitOverBurstHasNoRetryAfter(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	var b buckets
	l := &match.Limit{Key: "k", Rule: "rules[0]", Endpoint: "api.example.com:443", RequestsPerMinute: 6, Burst: 3}
	four := []limitedCall{{limit: l, tool: "t"}, {limit: l, tool: "t"}, {limit: l, tool: "t"}, {limit: l, tool: "t"}}
	for _, at := range []time.Duration{0, time.Minute, time.Hour} {
		o, _ := b.take(four, fixed(t0.Add(at)))
		if o == nil {
			t.Fatalf("4 calls against burst 3 passed at +%v", at)
		}
		if o.retryAfter != 0 {
			t.Errorf("4 calls against burst 3 at +%v: retry after %d s; no wait makes them pass", at, o.retryAfter)
		}
		if d := o.describe(); !strings.Contains(d, "more than its burst") || strings.Contains(d, "retry after") {
			t.Errorf("reason %q, want one saying the request exceeds the burst, with no retry after", d)
		}
	}
	// The burst itself still passes, and a call over an empty bucket gets
	// a retry_after.
	if o, _ := b.take(four[:3], fixed(t0.Add(time.Hour))); o != nil {
		t.Fatalf("3 calls against a full burst 3: %s", o.describe())
	}
	if o, _ := b.take(four[:1], fixed(t0.Add(time.Hour))); o == nil || o.retryAfter != 10 {
		t.Fatalf("a call on an empty 6/min bucket: %+v, want retry after 10 s", o)
	}
}

// The buckets never run back: a charge at a time before the latest one
// does not refill the bucket twice.
func TestRateLimitBucketClockNeverRunsBack(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	l := &match.Limit{Key: "k", RequestsPerMinute: 2, Burst: 2}
	one := []limitedCall{{limit: l}}
	passes := func(b *buckets, at time.Time) bool {
		o, _ := b.take(one, fixed(at))
		return o == nil
	}

	t.Run("stale time after a later one", func(t *testing.T) {
		var b buckets
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
		var b buckets
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

// The buckets are charged at the proxy's own clock, not at the gateway's
// estimate: when the estimate of how far the gateway is ahead shrinks by
// an hour (a heartbeat's round trip, another replica), requests are
// judged an hour earlier, yet the bucket refills by the time that passes
// and a call retried after retry_after_seconds passes.
func TestRateLimitIgnoresGatewayClockStepBack(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	doc := fmt.Sprintf(`
version: 1
network_policies:
  orders:
    endpoints:
      - host: api.example.com
        port: %d
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: tools/call, tool: lookup_order, rate_limit: { requests_per_minute: 2, burst: 2 } }
    binaries: []
`, port)
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	local := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	advance := func(d time.Duration) { mu.Lock(); local = local.Add(d); mu.Unlock() }
	var ahead atomic.Int64
	ahead.Store(int64(time.Hour))
	p := newProxy(Config{
		DevAllowLoopback: true,
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		Now:    func() time.Time { mu.Lock(); defer mu.Unlock(); return local },
		Logger: slog.New(slog.DiscardHandler),
	})
	p.gatewayAhead = func() time.Duration { return time.Duration(ahead.Load()) }
	if err := p.SetPolicy(pol, "1"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	proxyURL, _ := url.Parse(srv.URL)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	defer client.CloseIdleConnections()
	call := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://api.example.com:%d/mcp", port),
			strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, res.Header.Get("Retry-After")
	}

	for i := range 2 {
		if s, _ := call(); s != http.StatusOK {
			t.Fatalf("call %d of the burst: %d", i, s)
		}
	}
	ahead.Store(0) // the gateway's clock is judged an hour less ahead
	s, retry := call()
	if s != http.StatusTooManyRequests || retry != "30" {
		t.Fatalf("a call on the drained bucket: %d, Retry-After %q; want 429 after 30 s", s, retry)
	}
	advance(30 * time.Second)
	if s, _ := call(); s != http.StatusOK {
		t.Fatalf("retried after the 30 s Retry-After said: %d", s)
	}
	if s, _ := call(); s != http.StatusTooManyRequests {
		t.Fatalf("a second call 30 s after draining: %d, want 429", s)
	}
	advance(time.Minute)
	if s1, _ := call(); s1 != http.StatusOK {
		t.Fatalf("a minute later: %d; 2/min refills a token in 30 s", s1)
	}
}

// Retrying exactly retry_after_seconds later passes, whatever the rate.
func TestRateLimitRetryAfterIsEnough(t *testing.T) {
	t0 := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	for rpm := 1; rpm <= 400; rpm += 3 {
		for _, burst := range []int{1, 2, 3, 7} {
			for step := time.Duration(0); step < 3*time.Second; step += 97 * time.Millisecond {
				var b buckets
				l := &match.Limit{Key: "k", RequestsPerMinute: rpm, Burst: burst}
				c := []limitedCall{{limit: l}}
				for range burst {
					if o, _ := b.take(c, fixed(t0)); o != nil {
						t.Fatal("the burst was refused")
					}
				}
				now := t0.Add(step)
				o, _ := b.take(c, fixed(now))
				if o == nil {
					continue
				}
				if o2, _ := b.take(c, fixed(now.Add(time.Duration(o.retryAfter)*time.Second))); o2 != nil {
					t.Fatalf("rpm %d burst %d: refused at +%v with retry after %d s, and refused again then", rpm, burst, step, o.retryAfter)
				}
			}
		}
	}
}
