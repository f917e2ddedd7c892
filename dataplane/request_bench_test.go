package dataplane_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/policy"
)

// BenchmarkMCPRequest measures one allowed MCP tools/call through the
// proxy, as bench/proxyload sends it: read, parsed, judged by its
// arguments_schema, rate-limited, recorded in the decision log and
// forwarded on a pooled upstream connection. The client and the upstream
// speak raw HTTP/1.1 over loopback and allocate almost nothing, so
// allocs/op is, nearly all of it, the proxy's cost per request;
// cpu-ns/op is the CPU time of the whole process (client, proxy and
// upstream) per request.
//
// Run: go test ./dataplane/ -run '^$' -bench MCPRequest -benchmem
func BenchmarkMCPRequest(b *testing.B) {
	up := startRawUpstream(b)
	doc := `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: 127.0.0.1
        port: ` + strconv.Itoa(up.port) + `
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          versions: ["2025-11-25"]
          filter_tools_list: true
        rules:
          - allow: { method: initialize }
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema:
                type: object
                properties:
                  order_id: { type: string, pattern: "^[A-Z]-\\d{4}$" }
                required: [order_id]
                additionalProperties: false
              rate_limit: { requests_per_minute: ` + strconv.Itoa(policy.MaxRateLimit) + `, burst: ` + strconv.Itoa(policy.MaxRateLimit) + ` }
        deny_rules:
          - { method: tools/call, tool: refund_order }
    binaries: []
`
	cfg := dataplane.Config{DevAllowLoopback: true, DecisionLog: io.Discard}
	_, pu := startAgent(b, cfg, doc, "v1")
	conn, err := net.Dial("tcp", pu.Host)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"_meta":{"progressToken":1},"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`
	target := "http://127.0.0.1:" + strconv.Itoa(up.port) + "/mcp"
	req := []byte("POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1:" + strconv.Itoa(up.port) +
		"\r\nUser-Agent: Go-http-client/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
		"Mcp-Protocol-Version: 2025-11-25\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\nAccept-Encoding: gzip\r\n\r\n" + body)
	br := bufio.NewReader(conn)
	resBody := make([]byte, 0, 512)
	roundTrip := func() {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		status, err := br.ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		if !bytes.HasPrefix(status, []byte("HTTP/1.1 200 ")) {
			b.Fatalf("status %q", status)
		}
		n := readRawHead(b, br)
		resBody = resBody[:n]
		if _, err := io.ReadFull(br, resBody); err != nil {
			b.Fatal(err)
		}
	}
	roundTrip()
	if string(resBody) != rawUpstreamBody {
		b.Fatalf("body %q", resBody)
	}
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		roundTrip()
	}
	// The time a round trip takes is mostly the three parties waking each
	// other over loopback; the CPU they spend is what the proxy changes.
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readRawHead reads header lines up to the blank line and returns the
// Content-Length (which must be there).
func readRawHead(tb testing.TB, br *bufio.Reader) int {
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			tb.Fatal(err)
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			if n, err = strconv.Atoi(string(bytes.TrimSpace(v))); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if n < 0 {
		tb.Fatal("no Content-Length")
	}
	return n
}

const rawUpstreamBody = `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"shipped"}]}}`

// rawUpstream answers every request on a keep-alive connection with
// rawUpstreamBody; it is stopped (every goroutine ended) when the test
// ends.
type rawUpstream struct {
	port int
}

func startRawUpstream(tb testing.TB) *rawUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	res := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(rawUpstreamBody)) + "\r\n\r\n" + rawUpstreamBody)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					n := 0
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
						if k, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(k, []byte("Content-Length")) {
							n = atoi(bytes.TrimSpace(v))
						}
					}
					if _, err := br.Discard(n); err != nil {
						return
					}
					if _, err := c.Write(res); err != nil {
						return
					}
				}
			})
		}
	})
	tb.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return &rawUpstream{port: ln.Addr().(*net.TCPAddr).Port}
}

// atoi reads the digits of b (0 for none), without allocating.
func atoi(b []byte) int {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}
