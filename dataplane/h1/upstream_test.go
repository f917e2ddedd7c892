package h1

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Connections are pooled per (host, checked address, TLS) and per policy
// version, never across them.
func TestUpstreamPoolsAreKeyedByHostAndAddress(t *testing.T) {
	u := NewUpstreams(nil)
	a := netip.MustParseAddrPort("192.0.2.1:443")
	b := netip.MustParseAddrPort("192.0.2.2:443")
	orders := u.Get(Key{Host: "orders.example.com", Addr: a, TLS: true})
	if u.Get(Key{Host: "orders.example.com", Addr: a, TLS: true}) != orders {
		t.Fatal("the same host and address did not share a pool")
	}
	if u.Get(Key{Host: "billing.example.com", Addr: a, TLS: true}) == orders {
		t.Fatal("another host on the same address shared the pool (and its TLS name)")
	}
	if u.Get(Key{Host: "orders.example.com", Addr: b, TLS: true}) == orders {
		t.Fatal("the host resolved elsewhere reused connections to the old address")
	}
	if u.Get(Key{Host: "orders.example.com", Addr: a}) == orders {
		t.Fatal("plain http shared the pool of https")
	}
	if got := orders.tls.ServerName; got != "orders.example.com" {
		t.Fatalf("TLS name %q", got)
	}
	u.Reset()
	if u.Get(Key{Host: "orders.example.com", Addr: a, TLS: true}) == orders {
		t.Fatal("a new policy version reused the old version's pool")
	}
	for i := range maxUpstreamPools + 10 {
		u.Get(Key{Host: "h.example.com", Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), uint16(1000+i))})
	}
	if n := len(u.pools); n > maxUpstreamPools {
		t.Fatalf("%d pools kept, want at most %d", n, maxUpstreamPools)
	}
}

// countingServer is an upstream that counts the connections it accepted.
func countingServer(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func poolFor(t *testing.T, srv *httptest.Server) (*Upstreams, *Pool, *url.URL) {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ups := NewUpstreams(nil)
	t.Cleanup(ups.Reset)
	return ups, ups.Get(Key{Host: "127.0.0.1", Addr: netip.MustParseAddrPort(u.Host)}), u
}

func get(t *testing.T, p *Pool, u *url.URL, path string) (*http.Response, string) {
	t.Helper()
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: u.Scheme, Host: u.Host, Path: path}, Host: u.Host, Header: http.Header{}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	res, err := p.RoundTrip(context.Background(), req, nil, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("GET %s body: %v", path, err)
	}
	return res, string(b)
}

// A response read to its end hands the connection back; the next request
// reuses it.
func TestUpstreamReusesConnections(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.URL.Path) })
	_, p, u := poolFor(t, srv)
	for i := range 5 {
		path := fmt.Sprintf("/r%d", i)
		if _, body := get(t, p, u, path); body != path {
			t.Fatalf("body %q, want %q", body, path)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("5 sequential requests used %d connections, want 1", n)
	}
}

// A connection the server closed while idle is noticed before reuse: the
// next request (a POST, which is never retried) still succeeds.
func TestUpstreamNoticesServerClosedIdleConnection(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	_, p, u := poolFor(t, srv)
	post := func(body string) string {
		req := &http.Request{Method: http.MethodPost, URL: &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/"}, Host: u.Host, Header: http.Header{}, ContentLength: int64(len(body))}
		res, err := p.RoundTrip(context.Background(), req, []byte(body), nil)
		if err != nil {
			t.Fatalf("POST: %v", err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	if got := post("one"); got != "one" {
		t.Fatalf("got %q", got)
	}
	srv.CloseClientConnections()
	// Let the close reach the proxy's side of the socket.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		p.mu.Lock()
		idle := len(p.idle)
		var open bool
		if idle == 1 {
			open = stillOpen(p.idle[0].conn)
		}
		p.mu.Unlock()
		if idle != 1 {
			t.Fatalf("%d idle connections, want 1", idle)
		}
		if !open {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := post("two"); got != "two" {
		t.Fatalf("got %q", got)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (the closed one replaced)", n)
	}
}

// A body closed before its end, a Connection: close response, and a new
// policy version each keep the connection out of the pool.
func TestUpstreamDoesNotReuseUnfinishedConnections(t *testing.T) {
	srv, conns := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		fmt.Fprint(w, strings.Repeat("x", 64<<10))
	})
	ups, p, u := poolFor(t, srv)
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/big"}, Host: u.Host, Header: http.Header{}}
	res, err := p.RoundTrip(context.Background(), req, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Read(make([]byte, 10))
	res.Body.Close()
	get(t, p, u, "/close")
	get(t, p, u, "/after")
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
	ups.Reset()
	p2 := ups.Get(p.key)
	get(t, p2, u, "/new-version")
	if n := conns.Load(); n != 4 {
		t.Fatalf("%d connections after a new version, want 4", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) != 0 || !p.closed {
		t.Fatal("the old version's pool kept connections")
	}
}

// rawUpstream serves one connection with a scripted response.
func rawUpstream(t *testing.T, respond func(c net.Conn, br *bufio.Reader)) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				respond(c, br)
			}()
		}
	}()
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

func rawPool(t *testing.T, u *url.URL) *Pool {
	ups := NewUpstreams(nil)
	t.Cleanup(ups.Reset)
	return ups.Get(Key{Host: "127.0.0.1", Addr: netip.MustParseAddrPort(u.Host)})
}

// Informational responses are skipped; the final one is returned.
func TestUpstreamSkipsInformationalResponses(t *testing.T) {
	u := rawUpstream(t, func(c net.Conn, _ *bufio.Reader) {
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	res, body := get(t, rawPool(t, u), u, "/")
	if res.StatusCode != 200 || body != "ok" {
		t.Fatalf("status %d body %q", res.StatusCode, body)
	}
}

// A response head beyond the limit is an error, not unbounded memory.
func TestUpstreamRefusesHugeResponseHead(t *testing.T) {
	u := rawUpstream(t, func(c net.Conn, _ *bufio.Reader) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
		for range maxResponseHeaderBytes/len(line) + 2 {
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
		io.WriteString(c, "\r\n")
	})
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/"}, Host: u.Host, Header: http.Header{}}
	_, err := rawPool(t, u).RoundTrip(context.Background(), req, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("err = %v, want response head too large", err)
	}
}

// Cancelling the request (the client went away) ends a response that is
// still streaming and closes its connection.
func TestUpstreamCancelClosesConnection(t *testing.T) {
	closed := make(chan struct{})
	u := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata:1\r\n")
		br.ReadByte() // blocks until the proxy closes the connection
		close(closed)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := &http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/"}, Host: u.Host, Header: http.Header{}}
	res, err := rawPool(t, u).RoundTrip(ctx, req, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "data:1" {
		t.Fatalf("first event %q: %v", buf, err)
	}
	cancel()
	if _, err := res.Body.Read(buf); err == nil {
		t.Fatal("the body went on after cancellation")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection stayed open after cancellation")
	}
	res.Body.Close()
}

// An idempotent request that fails on a reused connection is sent again
// on a new one; a POST is not (the server may have acted on it).
func TestUpstreamRetriesOnlyIdempotentRequests(t *testing.T) {
	var served atomic.Int64
	u := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
		served.Add(1)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		// Read the next request, then drop the connection unanswered.
		http.ReadRequest(br)
	})
	p := rawPool(t, u)
	get(t, p, u, "/first")
	if _, body := get(t, p, u, "/again"); body != "ok" {
		t.Fatalf("body %q", body)
	}
	req := &http.Request{Method: http.MethodPost, URL: &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/"}, Host: u.Host, Header: http.Header{}, ContentLength: 2}
	if _, err := p.RoundTrip(context.Background(), req, []byte("{}"), nil); err == nil {
		t.Fatal("a POST that failed on a reused connection was retried")
	}
	if got := served.Load(); got != 2 {
		t.Fatalf("%d connections answered, want 2", got)
	}
}
