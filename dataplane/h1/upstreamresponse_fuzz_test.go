package h1

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
)

// respResult is what the proxy uses of a response, its body read to the
// end, and how far into the stream the response went.
type respResult struct {
	status        int
	statusText    string
	proto         string
	major, minor  int
	header        http.Header
	contentLength int64
	close         bool
	te            []string
	trailer       http.Header
	body          string
	consumed      int
}

// maxFuzzResponses bounds the responses read from one stream.
const maxFuzzResponses = 8

func resultOf(res *http.Response, body []byte, consumed int) respResult {
	return respResult{res.StatusCode, res.Status, res.Proto, res.ProtoMajor, res.ProtoMinor, res.Header, res.ContentLength, res.Close, res.TransferEncoding, res.Trailer, string(body), consumed}
}

// proxyResponses reads the responses in stream with the proxy's reader,
// bodies read to their end, until one is refused or ends the connection.
func proxyResponses(stream []byte, method string) []respResult {
	rd := bytes.NewReader(stream)
	br := bufio.NewReaderSize(rd, 4<<10)
	var head []byte
	var out []respResult
	for len(out) < maxFuzzResponses {
		// A map holding a field already, as forward hands the client's
		// response header: the reader must empty it first.
		r, err := readResponse(br, &head, method, http.Header{"X-Left-Over": {"1"}})
		if err != nil {
			return out
		}
		body, err := io.ReadAll(&r.body.responseBody)
		if err != nil {
			return out
		}
		if r.res.ProtoMinor >= 1 && httpguts.HeaderValuesContainsToken(r.res.Header["Connection"], "close") {
			// Kept for forward (it names hop-by-hop fields); Go drops it.
			delete(r.res.Header, "Connection")
		}
		out = append(out, resultOf(&r.res, body, len(stream)-rd.Len()-br.Buffered()))
		if r.res.Close {
			return out
		}
	}
	return out
}

// goResponses reads stream as Go's client reads a connection.
func goResponses(stream []byte, method string) []respResult {
	rd := bytes.NewReader(stream)
	br := bufio.NewReaderSize(rd, 4<<10)
	var out []respResult
	for len(out) < maxFuzzResponses {
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return out
		}
		body, err := io.ReadAll(res.Body)
		if err != nil {
			return out
		}
		out = append(out, resultOf(res, body, len(stream)-rd.Len()-br.Buffered()))
		if res.Close {
			return out
		}
	}
	return out
}

var fuzzMethods = [...]string{http.MethodGet, http.MethodHead, http.MethodPost}

// FuzzResponseReader: every response the proxy's reader accepts is the
// response Go's ReadResponse reads from the same bytes — status, version,
// header fields, length, Close, transfer coding, trailer and body — and
// it ends at the same byte, so the next response on a pooled connection
// starts where Go would start it.
func FuzzResponseReader(f *testing.F) {
	for _, s := range []struct {
		stream string
		method byte
	}{
		{"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 204 No Content\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum, x-other\r\n\r\n3;x=1\r\nabc\r\n0\r\nX-Sum: 1\r\nX-Late: 2\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 2},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na", 1},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\n\r\n0\r\n\r\n", 1},
		{"HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\nTransfer-Encoding: chunked\r\n\r\nHTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n", 0},
		{"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 2},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n1\r\na\r\n0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 0},
		{"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", 0},
		{"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", 0},
		{"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nokHTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\na", 0},
		{"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nab", 0},
		{"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nto the end", 0},
		{"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n", 0},
		{"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\nHTTP/1.1   404   Not   Found\r\nContent-Length: 0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\na", 0},
		{"HTTP/1.1 +20 OK\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nX-A : a\r\nContent-Length: 0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n0\r\n\r\n", 0},
		{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 0},
	} {
		f.Add([]byte(s.stream), s.method)
	}
	f.Fuzz(func(t *testing.T, stream []byte, m byte) {
		method := fuzzMethods[int(m)%len(fuzzMethods)]
		got := proxyResponses(stream, method)
		want := goResponses(stream, method)
		if len(got) > len(want) {
			t.Fatalf("%s: the proxy read %d responses where Go reads %d:\n%+v\n%+v", method, len(got), len(want), got, want)
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.status != w.status || g.statusText != w.statusText || g.proto != w.proto || g.major != w.major || g.minor != w.minor ||
				g.contentLength != w.contentLength || g.close != w.close || !reflect.DeepEqual(g.te, w.te) ||
				!sameHeader(g.header, w.header) || !sameHeader(g.trailer, w.trailer) || g.body != w.body || g.consumed != w.consumed {
				t.Fatalf("%s: response %d: the proxy read\n%+v\nGo reads\n%+v", method, i, g, w)
			}
		}
	})
}

// Each response the reader refuses is an error, in its head or at its
// body's end, and the connection is closed, never pooled.
func TestResponseReaderRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, response, want string
		head                 bool // a HEAD request
	}{
		{"no status", "HTTP/1.1\r\n\r\n", "malformed HTTP response", false},
		{"blank status line", "\r\n\r\n", "malformed HTTP response", false},
		{"status code", "HTTP/1.1 2x0 OK\r\n\r\n", "malformed HTTP status code", false},
		{"signed status code", "HTTP/1.1 +20 OK\r\n\r\n", "malformed HTTP status code", false},
		{"status code below 100", "HTTP/1.1 099 OK\r\n\r\n", "malformed HTTP status code", false},
		{"version", "HTTP/1.x 200 OK\r\n\r\n", "malformed HTTP version", false},
		{"HTTP/2.0", "HTTP/2.0 200 OK\r\n\r\n", "unsupported HTTP version", false},
		{"control byte in status", "HTTP/1.1 200 O\x01K\r\n\r\n", "malformed HTTP status line", false},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n", "obs-fold", false},
		{"space before colon", "HTTP/1.1 200 OK\r\nX : a\r\nContent-Length: 0\r\n\r\n", "malformed MIME header line", false},
		{"no colon", "HTTP/1.1 200 OK\r\nX\r\nContent-Length: 0\r\n\r\n", "malformed MIME header line", false},
		{"control byte", "HTTP/1.1 200 OK\r\nX: a\x01b\r\nContent-Length: 0\r\n\r\n", "invalid header field value", false},
		{"bare CR", "HTTP/1.1 200 OK\r\nX: a\r\r\nContent-Length: 0\r\n\r\n", "invalid header field value", false},
		{"head cut short", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", "unexpected EOF", false},
		{"gzip coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "unsupported transfer encoding", false},
		{"two codings", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "unsupported transfer encoding", false},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "multiple Content-Length", false},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\na", "invalid Content-Length", false},
		{"empty length", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", "invalid Content-Length", false},
		{"bad length on HEAD", "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "invalid Content-Length", true},
		{"bad trailer key", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Content-Length\r\n\r\n0\r\n\r\n", "bad trailer key", false},
		{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "unexpected EOF", false},
		{"bad chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk", false},
		{"trailer bare LF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\n\r\n", "bare LF", false},
		{"trailer obs-fold", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: 1\r\n 2\r\n\r\n", "obs-fold", false},
		{"trailer line", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX 1\r\n\r\n", "malformed MIME header line", false},
		{"trailer too large", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: " + strings.Repeat("a", maxResponseTrailerBytes) + "\r\n\r\n", "too large", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closed := make(chan struct{})
			u := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				io.WriteString(c, tc.response)
				c.(*net.TCPConn).CloseWrite() // the end of what the server sends, not of the connection
				br.ReadByte()                 // blocks until the proxy closes the connection
				close(closed)
			})
			p := rawPool(t, u)
			method := http.MethodGet
			if tc.head {
				method = http.MethodHead
			}
			req := &http.Request{Method: method, URL: &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/"}, Host: u.Host, Header: http.Header{}}
			res, err := p.RoundTrip(context.Background(), req, nil, nil)
			if err == nil {
				_, err = io.ReadAll(res.Body)
				res.Body.Close()
				if err == nil {
					t.Fatalf("the response was read: status %d, header %v", res.StatusCode, res.Header)
				}
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want %q", err, tc.want)
			}
			p.mu.Lock()
			idle := len(p.idle)
			p.mu.Unlock()
			if idle != 0 {
				t.Fatal("the connection went back to the pool")
			}
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("the proxy kept the connection open")
			}
		})
	}
}

// A response with no body on the wire leaves its connection reusable
// however little of it was read; a good one read to its end too.
func TestResponseReaderReusesAfterCompleteResponses(t *testing.T) {
	for _, tc := range []struct {
		name, response, method string
		read                   bool
	}{
		{"content length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", http.MethodGet, true},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 1\r\n\r\n", http.MethodGet, true},
		{"HEAD, closed unread", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", http.MethodHead, false},
		{"204, closed unread", "HTTP/1.1 204 No Content\r\n\r\n", http.MethodGet, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := rawUpstream(t, func(c net.Conn, br *bufio.Reader) {
				io.WriteString(c, tc.response)
				br.ReadByte()
			})
			p := rawPool(t, u)
			req := &http.Request{Method: tc.method, URL: &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/"}, Host: u.Host, Header: http.Header{}}
			res, err := p.RoundTrip(context.Background(), req, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.read {
				if _, err := io.ReadAll(res.Body); err != nil {
					t.Fatal(err)
				}
			}
			res.Body.Close()
			p.mu.Lock()
			idle := len(p.idle)
			p.mu.Unlock()
			if idle != 1 {
				t.Fatalf("%d idle connections, want 1", idle)
			}
			if tc.name == "chunked with trailer" && res.Trailer.Get("X-Sum") != "1" {
				t.Fatalf("trailer %v", res.Trailer)
			}
		})
	}
}
