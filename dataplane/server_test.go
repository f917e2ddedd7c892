package dataplane_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// A client that goes away while its request waits on the upstream ends
// the upstream request: the proxy does not hold the upstream connection
// (or a slow tool call) for nobody.
func TestClientGoneCancelsUpstreamRequest(t *testing.T) {
	started, cancelled := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done() // answers nothing until the proxy hangs up
		close(cancelled)
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	port, _ := strconv.Atoi(u.Port())
	_, pu := plainProxy(t, framingPolicy, port, nil)

	c, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET http://api.example.com:%d/v1/slow HTTP/1.1\r\nHost: api.example.com:%d\r\n\r\n", port, port)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	c.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the client left, but the upstream request went on")
	}
}

// A response's framing as the proxy writes it: a body with its length
// (the upstream's, or the proxy's own denial's), a streamed one chunked,
// HTTP/1.0 clients read to the close, and keep-alive across them.
func TestProxyResponseFraming(t *testing.T) {
	long := make([]byte, 64<<10)
	for i := range long {
		long[i] = 'a' + byte(i%26)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/long" {
			w.(http.Flusher).Flush() // no length: chunked from the upstream
			w.Write(long)
			return
		}
		w.Write([]byte("short"))
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	port, _ := strconv.Atoi(u.Port())
	_, pu := plainProxy(t, framingPolicy, port, nil)
	c, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	get := func(path, proto string) *http.Response {
		t.Helper()
		host := "api.example.com"
		if path == "/denied" {
			host = "other.example.com" // no policy for it: the proxy's own 403
		}
		fmt.Fprintf(c, "GET http://%s:%d%s %s\r\nHost: %s:%d\r\n\r\n", host, port, path, proto, host, port)
		res, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	read := func(res *http.Response) string {
		t.Helper()
		var b []byte
		buf := make([]byte, 4096)
		for {
			n, err := res.Body.Read(buf)
			b = append(b, buf[:n]...)
			if err != nil {
				return string(b)
			}
		}
	}
	res := get("/short", "HTTP/1.1")
	if res.ContentLength != 5 || len(res.TransferEncoding) != 0 || read(res) != "short" || res.Close {
		t.Fatalf("short: length %d, coding %v, close %v", res.ContentLength, res.TransferEncoding, res.Close)
	}
	res = get("/denied", "HTTP/1.1")
	if body := read(res); res.StatusCode != http.StatusForbidden || res.ContentLength != int64(len(body)) || len(res.TransferEncoding) != 0 || res.Close {
		t.Fatalf("denial: %d, length %d for %d bytes, coding %v, close %v", res.StatusCode, res.ContentLength, len(body), res.TransferEncoding, res.Close)
	}
	res = get("/long", "HTTP/1.1")
	if res.ContentLength != -1 || len(res.TransferEncoding) != 1 || read(res) != string(long) || res.Close {
		t.Fatalf("long: length %d, coding %v, close %v", res.ContentLength, res.TransferEncoding, res.Close)
	}
	res = get("/long", "HTTP/1.0")
	if len(res.TransferEncoding) != 0 || !res.Close || read(res) != string(long) {
		t.Fatalf("HTTP/1.0: coding %v, close %v; want the body to the close", res.TransferEncoding, res.Close)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection stayed open after a body read to its close")
	}
}
