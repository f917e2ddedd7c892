package dataplane_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// framingPolicy lets every method through to api.example.com (plain) and
// orders.example.com (TLS, inspected), so only the request reader's marks can deny.
const framingPolicy = `
version: 1
network_policies:
  api:
    endpoints:
      - { host: api.example.com, port: PORT, protocol: rest, enforcement: enforce, access: full }
      - { host: orders.example.com, port: PORT, protocol: rest, enforcement: enforce, access: full }
    binaries: []
`

// exchange writes stream, n requests, on one connection (every request at
// once, so they are pipelined) and returns the status of every response
// read before the connection ends or n have come.
func exchange(t *testing.T, c net.Conn, br *bufio.Reader, stream string, n int) []int {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second)) // fail rather than hang
	go io.WriteString(c, stream)                    // may block until the proxy reads; ends when c closes
	var statuses []int
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("after %v: %v", statuses, err)
			}
			return statuses
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		statuses = append(statuses, res.StatusCode)
		if res.Close || len(statuses) == n {
			return statuses
		}
	}
}

type framingCase struct {
	name, stream string
	n            int // requests
}

// framingCases are streams of requests whose last one, for /v1/smuggled,
// the guard must deny. AUTH is the authority, SCHEME the absolute-form
// scheme ("" for origin-form inside a tunnel).
var framingCases = []framingCase{
	{"Host differs after a large body without a newline",
		"POST SCHEME/v1/big HTTP/1.1\r\nHost: AUTH\r\nContent-Length: 102400\r\n\r\n" + strings.Repeat("a", 100<<10) +
			"GET SCHEME/v1/smuggled HTTP/1.1\r\nHost: evil.example.com\r\n\r\n", 2},
	{"Content-Length with Transfer-Encoding after a large body",
		"POST SCHEME/v1/big HTTP/1.1\r\nHost: AUTH\r\nContent-Length: 102400\r\n\r\n" + strings.Repeat("a", 100<<10) +
			"GET SCHEME/v1/smuggled HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\nHost: AUTH\r\n\r\n0\r\n\r\n", 2},
	{"Host differs after a large chunked body",
		"POST SCHEME/v1/big HTTP/1.1\r\nHost: AUTH\r\nTransfer-Encoding: chunked\r\n\r\n19000\r\n" + strings.Repeat("a", 100<<10) + "\r\n0\r\nX-Trailer: 1\r\n\r\n" +
			"GET SCHEME/v1/smuggled HTTP/1.1\r\nHost: evil.example.com\r\n\r\n", 2},
	{"Content-Length with Transfer-Encoding pipelined",
		"GET SCHEME/v1/ok HTTP/1.1\r\nHost: AUTH\r\n\r\n" +
			"POST SCHEME/v1/smuggled HTTP/1.1\r\nHost: AUTH\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 2},
	{"Host differs pipelined",
		"GET SCHEME/v1/ok HTTP/1.1\r\nHost: AUTH\r\n\r\nGET SCHEME/v1/smuggled HTTP/1.1\r\nHost: evil.example.com\r\n\r\n", 2},
	{"header lines ending in a bare LF",
		"GET SCHEME/v1/smuggled HTTP/1.1\nHost: AUTH\n\n", 1},
	{"one header line ending in a bare LF",
		"GET SCHEME/v1/smuggled HTTP/1.1\r\nHost: AUTH\nAccept: */*\r\n\r\n", 1},
	// A trailer is read after its request is judged (bodies stream): the
	// requests after it are denied.
	{"a trailer line ending in a bare LF",
		"POST SCHEME/v1/a HTTP/1.1\r\nHost: AUTH\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\n\r\n" +
			"GET SCHEME/v1/smuggled HTTP/1.1\r\nHost: AUTH\r\n\r\n", 2},
	// Header bytes OpenShell refuses and Go's server accepts.
	{"a header value that is not UTF-8",
		"GET SCHEME/v1/smuggled HTTP/1.1\r\nHost: AUTH\r\nX-Bad: \xc0\xaf\r\n\r\n", 1},
	{"a request target that is not UTF-8",
		"GET SCHEME/v1/smuggled\xff HTTP/1.1\r\nHost: AUTH\r\n\r\n", 1},
	{"a header line folded with a space",
		"GET SCHEME/v1/smuggled HTTP/1.1\r\nX-Test: first\r\n continued\r\nHost: AUTH\r\n\r\n", 1},
	{"a header line folded with a tab",
		"GET SCHEME/v1/smuggled HTTP/1.1\r\nHost: AUTH\r\nX-Test: first\r\n\tcontinued\r\n\r\n", 1},
	{"a folded header line pipelined",
		"GET SCHEME/v1/ok HTTP/1.1\r\nHost: AUTH\r\n\r\n" +
			"GET SCHEME/v1/smuggled HTTP/1.1\r\nHost: AUTH\r\nX-Test: first\r\n continued\r\n\r\n", 2},
	{"a folded trailer line",
		"POST SCHEME/v1/a HTTP/1.1\r\nHost: AUTH\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\r\n folded\r\n\r\n" +
			"GET SCHEME/v1/smuggled HTTP/1.1\r\nHost: AUTH\r\n\r\n", 2},
	{"a trailer that is not UTF-8",
		"POST SCHEME/v1/a HTTP/1.1\r\nHost: AUTH\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: \xc0\xaf\r\n\r\n" +
			"GET SCHEME/v1/smuggled HTTP/1.1\r\nHost: AUTH\r\n\r\n", 2},
	{"HTTP/1.5",
		"GET SCHEME/v1/smuggled HTTP/1.5\r\nHost: AUTH\r\n\r\n", 1},
	// Not framing, but refused before policy all the same: a raw
	// non-ASCII byte in the target (Go would percent-encode it).
	{"a raw non-ASCII byte in the path",
		"GET SCHEME/v1/smuggled/caf\u00e9 HTTP/1.1\r\nHost: AUTH\r\n\r\n", 1},
	{"a raw non-ASCII byte in the query",
		"GET SCHEME/v1/smuggled?name=caf\u00e9 HTTP/1.1\r\nHost: AUTH\r\n\r\n", 1},
}

// headerLike is a body that looks like a smuggled header block.
const headerLike = "x\r\nGET http://a.example.com/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\nHost: evil.example.com\r\n\r\n"

// framingAllowed are streams the guard must let through whole.
var framingAllowed = []struct {
	name   string
	stream string
	n      int // requests
}{
	{"a body holding a header block is not one",
		fmt.Sprintf("POST SCHEME/v1/a HTTP/1.1\r\nHost: AUTH\r\nContent-Length: %d\r\n\r\n%s", len(headerLike), headerLike) +
			"GET SCHEME/v1/b HTTP/1.1\r\nHost: AUTH\r\n\r\n", 2},
	{"a chunked body holding a header block is not one",
		fmt.Sprintf("POST SCHEME/v1/a HTTP/1.1\r\nHost: AUTH\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(headerLike), headerLike) +
			"GET SCHEME/v1/b HTTP/1.1\r\nHost: AUTH\r\n\r\n", 2},
	{"UTF-8 and tabs in header values",
		"GET SCHEME/v1/a HTTP/1.1\r\nHost: AUTH\r\nX-Name: Zo\u00eb\tM\u00fcller \u2713\r\n\r\n", 1},
	{"a percent-encoded non-ASCII path",
		"GET SCHEME/v1/caf%C3%A9?name=caf%C3%A9 HTTP/1.1\r\nHost: AUTH\r\n\r\n", 1},
	{"HTTP/1.0",
		"GET SCHEME/v1/a HTTP/1.0\r\nHost: AUTH\r\n\r\n", 1},
	{"CRLF after a POST, as Go's server tolerates",
		"POST SCHEME/v1/a HTTP/1.1\r\nHost: AUTH\r\nContent-Length: 1\r\n\r\nx\r\n" +
			"GET SCHEME/v1/b HTTP/1.1\r\nHost: AUTH\r\n\r\n", 2},
	{"large bodies, kept alive",
		"POST SCHEME/v1/a HTTP/1.1\r\nHost: AUTH\r\nContent-Length: 102400\r\n\r\n" + strings.Repeat("a", 100<<10) +
			"POST SCHEME/v1/b HTTP/1.1\r\nHost: AUTH\r\nTransfer-Encoding: chunked\r\n\r\n19000;ext=1\r\n" + strings.Repeat("b", 100<<10) + "\r\n0\r\n\r\n" +
			"GET SCHEME/v1/c HTTP/1.1\r\nHost: AUTH\r\n\r\n", 3},
}

func fill(stream, scheme, auth string) string {
	return strings.NewReplacer("SCHEME", scheme, "AUTH", auth).Replace(stream)
}

// Every request on a connection is checked, whatever came before it.
func TestFramingGuardOnEveryRequest(t *testing.T) {
	up := startPlainUpstream(t)
	_, pu := plainProxy(t, framingPolicy, up.port, nil)
	auth := fmt.Sprintf("api.example.com:%d", up.port)
	dial := func(t *testing.T) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", pu.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	count := func() int {
		n := 0
		for _, l := range up.seen() {
			if strings.Contains(l, "/v1/smuggled") {
				n++
			}
		}
		return n
	}
	seenBefore := 0
	smuggled := func() bool { return count() > seenBefore } // since the subtest began
	for _, tc := range framingCases {
		t.Run(tc.name, func(t *testing.T) {
			seenBefore = count()
			c, br := dial(t)
			st := exchange(t, c, br, fill(tc.stream, "http://"+auth, auth), tc.n)
			if len(st) == 0 || st[len(st)-1] != http.StatusForbidden || smuggled() {
				t.Fatalf("statuses %v, upstream saw %q; want the last one denied, nothing smuggled", st, up.seen())
			}
		})
	}
	t.Run("upper-case scheme", func(t *testing.T) {
		seenBefore = count()
		c, br := dial(t)
		st := exchange(t, c, br, fmt.Sprintf("GET HTTP://%s/v1/smuggled HTTP/1.1\r\nHost: evil.example.com\r\n\r\n", auth), 1)
		if len(st) != 1 || st[0] != http.StatusForbidden || smuggled() {
			t.Fatalf("statuses %v, upstream saw %q; want denied", st, up.seen())
		}
	})
	t.Run("CONNECT with Content-Length and Transfer-Encoding", func(t *testing.T) {
		c, br := dial(t)
		st := exchange(t, c, br, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", auth, auth), 1)
		if len(st) != 1 || st[0] != http.StatusForbidden {
			t.Fatalf("statuses %v; want no tunnel", st)
		}
	})
	for _, tc := range framingAllowed {
		t.Run(tc.name, func(t *testing.T) {
			before := len(up.seen())
			c, br := dial(t)
			st := exchange(t, c, br, fill(tc.stream, "http://"+auth, auth), tc.n)
			if len(st) != tc.n || len(up.seen()) != before+tc.n {
				t.Fatalf("statuses %v, upstream saw %q; want %d requests through", st, up.seen()[before:], tc.n)
			}
			for _, s := range st {
				if s != http.StatusOK {
					t.Fatalf("statuses %v; want all 200", st)
				}
			}
		})
	}
}

// The same holds inside a CONNECT tunnel whose TLS the proxy terminates.
func TestFramingGuardInsideTunnel(t *testing.T) {
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	tp := startProxy(t, strings.Replace(framingPolicy, "binaries: []", "binaries: [{path: /usr/bin/python3}]", 1), up)
	auth := fmt.Sprintf("orders.example.com:%d", up.port)
	open := func(t *testing.T) (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", tp.url.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", auth, auth)
		if res, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT = %v, %v", res, err)
		}
		tc := tls.Client(conn, &tls.Config{RootCAs: tp.roots, ServerName: "orders.example.com"})
		return tc, bufio.NewReader(tc)
	}
	cases := append([]framingCase{}, framingCases...)
	cases = append(cases, framingCase{"Host differs from an absolute URI after a large body",
		"POST /v1/big HTTP/1.1\r\nHost: AUTH\r\nContent-Length: 102400\r\n\r\n" + strings.Repeat("a", 100<<10) +
			"GET https://AUTH/v1/smuggled HTTP/1.1\r\nHost: evil.example.com\r\n\r\n", 2})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, br := open(t)
			before := up.count()
			st := exchange(t, c, br, fill(tc.stream, "", auth), tc.n)
			if len(st) == 0 || st[len(st)-1] != http.StatusForbidden || up.count() > before+len(st)-1 {
				t.Fatalf("statuses %v, upstream saw %d; want the last one denied, nothing smuggled", st, up.count()-before)
			}
		})
	}
	for _, tc := range framingAllowed {
		t.Run(tc.name, func(t *testing.T) {
			before := up.count()
			c, br := open(t)
			st := exchange(t, c, br, fill(tc.stream, "", auth), tc.n)
			if len(st) != tc.n || up.count() != before+tc.n {
				t.Fatalf("statuses %v, upstream saw %d; want %d requests through", st, up.count()-before, tc.n)
			}
			for _, s := range st {
				if s != http.StatusOK {
					t.Fatalf("statuses %v; want all 200", st)
				}
			}
		})
	}
}

// Header bytes OpenShell refuses are recorded as denials naming the
// problem, before policy and DNS, and nothing reaches the upstream.
func TestHeaderHygieneRecorded(t *testing.T) {
	up := startPlainUpstream(t)
	p, pu := plainProxy(t, framingPolicy, up.port, nil)
	auth := fmt.Sprintf("api.example.com:%d", up.port)
	for _, tc := range []struct{ name, raw, reason string }{
		{"obs-fold", "GET http://AUTH/v1/x HTTP/1.1\r\nX-Test: first\r\n continued\r\nHost: AUTH\r\n\r\n", "folded header line"},
		{"not UTF-8", "GET http://AUTH/v1/x HTTP/1.1\r\nHost: AUTH\r\nX-Bad: \xc0\xaf\r\n\r\n", "not valid UTF-8"},
		{"HTTP/1.2", "GET http://AUTH/v1/x HTTP/1.2\r\nHost: AUTH\r\n\r\n", "HTTP version"},
		{"raw non-ASCII target", "GET http://AUTH/v1/caf\u00e9 HTTP/1.1\r\nHost: AUTH\r\n\r\n", "non-ASCII byte (0xC3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, records := len(up.seen()), len(p.Decisions())
			c, err := net.Dial("tcp", pu.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			st := exchange(t, c, bufio.NewReader(c), strings.ReplaceAll(tc.raw, "AUTH", auth), 1)
			if len(st) != 1 || st[0] != http.StatusForbidden || len(up.seen()) != before {
				t.Fatalf("statuses %v, upstream saw %q; want 403 and nothing forwarded", st, up.seen()[before:])
			}
			recs := p.Decisions()
			if len(recs) != records+1 || recs[len(recs)-1].Decision != "deny" || !strings.Contains(recs[len(recs)-1].Reason, tc.reason) {
				t.Fatalf("records %+v; want one denial naming %q", recs[records:], tc.reason)
			}
		})
	}
}
