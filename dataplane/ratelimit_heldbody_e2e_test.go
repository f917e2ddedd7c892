package dataplane_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// heldLimitedPolicy limits lookup_order to 2 calls a minute, 2 at once.
const heldLimitedPolicy = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: api.example.com
        port: PORT
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: tools/call, tool: lookup_order, rate_limit: { requests_per_minute: 2, burst: 2 } }
    binaries: []
`

const heldCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`

// sendHead sends a tools/call through the proxy with only the first n
// bytes of its body.
func sendHead(t *testing.T, proxy string, port, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST http://api.example.com:%d/mcp HTTP/1.1\r\nHost: api.example.com:%d\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		port, port, len(heldCall), heldCall[:n])
	return c
}

// finish sends the rest of the body and returns the answer's status.
func finish(t *testing.T, c net.Conn, n int) int {
	t.Helper()
	fmt.Fprint(c, heldCall[n:])
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// An agent that sends the heads of requests while draining the bucket,
// and their bodies a minute later, gets no more calls than the limit: a
// request is charged when its body has been read, and the bucket's clock
// never runs back (which would refill the same minute twice).
func TestRateLimitHeldBodiesDoNotRefillTwice(t *testing.T) {
	for _, held := range []int{1, 5} {
		t.Run(fmt.Sprintf("%d held", held), func(t *testing.T) {
			up := startPlainUpstream(t)
			clk := &clock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
			_, u := plainProxy(t, heldLimitedPolicy, up.port, clk)
			post := func() int { return finish(t, sendHead(t, u.Host, up.port, 0), 0) }
			for i := range 2 {
				if s := post(); s != http.StatusOK {
					t.Fatalf("call %d of the burst: %d", i, s)
				}
			}
			if s := post(); s != http.StatusTooManyRequests {
				t.Fatalf("a third call on the drained bucket: %d, want 429", s)
			}
			var conns []net.Conn
			for range held {
				conns = append(conns, sendHead(t, u.Host, up.port, 10))
			}
			time.Sleep(300 * time.Millisecond) // the proxy has read the heads
			clk.advance(time.Minute)           // two tokens come back
			passed := 0
			for _, c := range conns {
				if post() == http.StatusOK {
					passed++
				}
				if finish(t, c, 10) == http.StatusOK {
					passed++
				}
			}
			for range 3 {
				if post() == http.StatusOK {
					passed++
				}
			}
			if passed != 2 {
				t.Errorf("%d calls passed in the minute after draining a 2/min, burst 2 bucket; want 2", passed)
			}
		})
	}
}
