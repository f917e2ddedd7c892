package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// readAll reads every request of stream with the proxy's reader, bodies
// read to their end, until the stream ends, a request is refused, or the
// connection is marked (what follows a mark is never served).
type readResult struct {
	method, uri, proto, host string
	header                   http.Header
	body                     string
}

func proxyRequests(stream []byte) (got []readResult, refused bool) {
	// Authorities are all the same here: a Host header naming another
	// marks the connection for the proxy's judging, but is read as Go
	// reads it, which is what is compared.
	srv := NewServer(Config{SameAuthority: func(string, string, string) bool { return true }})
	c := &serverConn{srv: srv, br: bufio.NewReaderSize(bytes.NewReader(stream), 4<<10)}
	for {
		r, err := c.readRequest()
		if r == nil {
			return got, err != nil
		}
		if c.problem.Load() != nil {
			return got, true
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return got, true
		}
		if c.problem.Load() != nil {
			// A trailer's problem: this request was served (as the proxy
			// read it; the upstream gets it re-framed), none after it is.
			// Go may disagree on where such a body ends: not compared.
			return got, true
		}
		// A clone: the connection's map is emptied for its next request.
		got = append(got, readResult{r.Method, r.RequestURI, r.Proto, r.Host, r.Header.Clone(), string(body)})
	}
}

// goRequests reads stream as Go's server reads a connection:
// http.ReadRequest, the Host header dropped as the server drops it, up to
// four CR or LF bytes skipped after a POST.
func goRequests(stream []byte) []readResult {
	br := bufio.NewReader(bytes.NewReader(stream))
	var out []readResult
	last := ""
	for {
		if last == http.MethodPost {
			peek, _ := br.Peek(4)
			n := 0
			for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
				n++
			}
			br.Discard(n)
		}
		r, err := http.ReadRequest(br)
		if err != nil {
			return out
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return out
		}
		h := r.Header.Clone()
		delete(h, "Host")
		out = append(out, readResult{r.Method, r.RequestURI, r.Proto, r.Host, h, string(body)})
		last = r.Method
	}
}

func sameHeader(a, b http.Header) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// FuzzRequestReader: every request the proxy's reader accepts unmarked is
// the request Go's own reader reads from the same bytes — method, target,
// version, Host, header fields and body — and it is the same sequence of
// requests, so the proxy frames a connection as Go's server would
// wherever it serves it.
func FuzzRequestReader(f *testing.F) {
	for _, s := range []string{
		"GET http://a.example.com/x HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
		"POST http://a.example.com/x HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 3\r\n\r\nabc\r\nGET /y HTTP/1.1\r\nHost: b\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\nGET /z HTTP/1.0\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2\r\nContent-Length: 0\r\n\r\n",
		"GET /x HTTP/1.1\nHost: a\n\n",
		"GET /x HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"CONNECT a.example.com:443 HTTP/1.1\r\nHost: a.example.com:443\r\n\r\n",
		"GET http://a/x HTTP/1.1\r\nHost: b\r\n\r\n",
		"GET /x HTTP/1.5\r\nHost: a\r\n\r\n",
		"GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chun\u212aed\r\n\r\n1\r\na\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		got, _ := proxyRequests(stream)
		want := goRequests(stream)
		if len(got) > len(want) {
			t.Fatalf("the proxy read %d requests where Go reads %d:\n%+v\n%+v", len(got), len(want), got, want)
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.method != w.method || g.uri != w.uri || g.proto != w.proto || g.host != w.host || g.body != w.body || !sameHeader(g.header, w.header) {
				t.Fatalf("request %d: the proxy read %+v, Go reads %+v", i, g, w)
			}
		}
	})
}

// The marks and refusals the reader gives, one case each.
func TestRequestReaderRefuses(t *testing.T) {
	for _, tc := range []struct{ name, stream, want string }{
		{"bare LF", "GET /x HTTP/1.1\nHost: a\n\n", "bare LF"},
		{"obs-fold", "GET /x HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", "obs-fold"},
		{"not UTF-8", "GET /x HTTP/1.1\r\nHost: a\r\nX: \xc0\xaf\r\n\r\n", "not valid UTF-8"},
		{"HTTP/1.5", "GET /x HTTP/1.5\r\nHost: a\r\n\r\n", "HTTP version"},
		{"CL and TE", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "both Content-Length and Transfer-Encoding"},
		{"TE in HTTP/1.0", "POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.0"},
		{"Host differs", "GET http://a/x HTTP/1.1\r\nHost: b\r\n\r\n", "another in its Host header"},
		{"no Host", "GET /x HTTP/1.1\r\n\r\n", "400: missing required Host header"},
		{"two Hosts", "GET /x HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", "400: too many Host headers"},
		{"two lengths", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "400: multiple Content-Length"},
		{"bad length", "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\na", "400: invalid Content-Length"},
		{"gzip coding", "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "501: unsupported transfer encoding"},
		{"space before colon", "GET /x HTTP/1.1\r\nHost : a\r\n\r\n", "400: malformed MIME header line"},
		{"control byte", "GET /x HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", "400: invalid header field value"},
		{"HTTP/2", "GET /x HTTP/2.0\r\nHost: a\r\n\r\n", "505: unsupported protocol version"},
		{"Expect other", "POST /x HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\na", "417: unsupported Expect header"},
		{"head too large", "GET /x HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n", "431: request header fields too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &serverConn{br: bufio.NewReader(strings.NewReader(tc.stream))}
			r, err := c.readRequest()
			var got string
			switch re, _ := err.(*requestError); {
			case re != nil:
				got = strconv.Itoa(re.status) + ": " + re.reason
			case c.problem.Load() != nil:
				if r == nil {
					t.Fatal("a marked request must still be read, to be denied naming its problem")
				}
				got = *c.problem.Load()
			default:
				t.Fatalf("read %v, %v; want %q", r, err, tc.want)
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("got %q; want %q", got, tc.want)
			}
		})
	}
}

// FuzzPlainTarget checks the request reader's fast path for common
// targets: whatever it parses, url.ParseRequestURI parses to the same
// URL.
func FuzzPlainTarget(f *testing.F) {
	for _, s := range []string{
		"/mcp", "/mcp?x=1&y=2", "http://127.0.0.1:8080/mcp", "HTTP://Api.Example.com/v1/a?b=c", "https://a.test/",
		"http://a.test", "http://a.test:/x", "http:///x", "//evil.test/x", "/a%2Fb", "/a b", "/a?", "http://[::1]:80/x",
		"http://user@a.test/x", "*", "/a#frag", "http://a.test/x?y=%41", "/~user/._-/", "https://a.test:443/x?q=(a)*,;:@!$'",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		var u url.URL
		if !parsePlainTarget(target, &u) {
			return
		}
		want, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("fast path parsed %q, url.ParseRequestURI refused it: %v", target, err)
		}
		if u != *want {
			t.Fatalf("%q: fast path %#v, url.ParseRequestURI %#v", target, u, *want)
		}
	})
}

// The fast path takes the targets proxy clients send and leaves the
// rest to url.ParseRequestURI.
func TestPlainTarget(t *testing.T) {
	for target, want := range map[string]bool{
		"/mcp": true, "/mcp?session=a-1": true, "http://127.0.0.1:8080/mcp": true, "https://api.example.com/v1/x?a=b&c=d": true,
		"/a%2Fb": false, "http://[::1]:8080/x": false, "*": false, "http://a.test": false, "/a?": false,
		"http://user@a.test/x": false, "/a#b": false, "ftp://a.test/x": false, "": false,
	} {
		var u url.URL
		if got := parsePlainTarget(target, &u); got != want {
			t.Errorf("parsePlainTarget(%q) = %v, want %v", target, got, want)
		}
	}
}
