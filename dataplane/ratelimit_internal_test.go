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

	"github.com/portcullis-dev/portcullis/policy"
)

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
