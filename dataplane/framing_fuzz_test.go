package dataplane

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
)

// goRequest is one request Go's HTTP/1 server would hand to a handler.
type goRequest struct {
	req        *http.Request
	headerEnd  int  // offset in the stream just past its header block
	suspicious bool // what the guard must have flagged by then
	dispatched bool // false for "OPTIONS *", which Go answers itself
}

// oneByteReader hands out one byte per Read, so a bufio.Reader over it
// never reads further than it must, and counts what it handed out.
type oneByteReader struct {
	b []byte
	n int
}

func (r *oneByteReader) Read(p []byte) (int, error) {
	if r.n == len(r.b) {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = r.b[r.n]
	r.n++
	return 1, nil
}

// goRequests frames stream as Go's server does (net/http's own parser
// and body readers, the server's POST tolerance and its refusals), and
// returns the requests it would dispatch, in order.
func goRequests(stream []byte) []goRequest {
	src := &oneByteReader{b: stream}
	br := bufio.NewReader(src)
	consumed := func() int { return src.n - br.Buffered() }
	var out []goRequest
	lastPOST := false
	for {
		if lastPOST {
			peek, _ := br.Peek(4)
			n := 0
			for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
				n++
			}
			br.Discard(n)
		}
		start := consumed()
		req, err := http.ReadRequest(br)
		if err != nil {
			return out
		}
		end := consumed()
		// http.ReadRequest drops Host (Go's server checks it first).
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(stream[start:end])))
		tp.ReadLine()
		raw, _ := tp.ReadMIMEHeader()
		if hosts, ok := raw["Host"]; ok {
			req.Header["Host"] = hosts
		}
		if !serverTakes(req) {
			return out
		}
		lastPOST = req.Method == http.MethodPost
		out = append(out, goRequest{
			req:        req,
			headerEnd:  end,
			suspicious: rawSuspicious(stream[start:end], req),
			dispatched: req.Method != http.MethodOptions || req.RequestURI != "*",
		})
		if _, err := io.Copy(io.Discard, req.Body); err != nil || req.Close {
			return out
		}
	}
}

// serverTakes mirrors the checks Go's server makes after parsing a request
// and before dispatching it (refusing means closing the connection).
func serverTakes(req *http.Request) bool {
	if req.ProtoMajor != 1 && !(req.ProtoMajor == 2 && req.ProtoMinor == 0 && req.Method == "PRI" && req.RequestURI == "*") {
		return false
	}
	hosts, haveHost := req.Header["Host"]
	h2 := req.Method == "PRI" && len(req.Header) == 0 && req.URL.Path == "*" && req.Proto == "HTTP/2.0"
	if req.ProtoAtLeast(1, 1) && (!haveHost || len(hosts) == 0) && !h2 && req.Method != http.MethodConnect {
		return false
	}
	if len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]) {
		return false
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	if e := req.Header.Get("Expect"); e != "" && !strings.EqualFold(e, "100-continue") {
		return false
	}
	return !h2 // Go closes after answering the h2 upgrade preface
}

// rawSuspicious: the raw header block has Content-Length and
// Transfer-Encoding, a Host other than the absolute URI's authority, a
// line ending in a bare LF, a folded line, bytes that are not UTF-8, or an
// HTTP version other than 1.0 and 1.1.
func rawSuspicious(block []byte, req *http.Request) bool {
	if bytes.Count(block, []byte("\n")) != bytes.Count(block, []byte("\r\n")) {
		return true
	}
	if !utf8.Valid(block) || bytes.Contains(block, []byte("\n ")) || bytes.Contains(block, []byte("\n\t")) {
		return true
	}
	if req.ProtoMajor != 1 || req.ProtoMinor > 1 {
		return true
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(block)))
	tp.ReadLine()
	raw, _ := tp.ReadMIMEHeader()
	if len(raw["Content-Length"]) > 0 && len(raw["Transfer-Encoding"]) > 0 {
		return true
	}
	host := raw.Get("Host")
	return req.URL.Host != "" && host != "" && !sameAuthority(req.Host, host, defaultPort(req.URL.Scheme))
}

// FuzzFraming: over any byte stream, read in pieces of any size, the guard
// never panics, and every request Go's server would dispatch is, by the
// time its header block has been read, either flagged (when its raw header
// block is suspicious, always) or the next request the guard framed.
func FuzzFraming(f *testing.F) {
	for _, s := range []string{
		"GET http://a.example.com/ HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
		"GET HTTP://a.example.com/ HTTP/1.1\r\nHost: b.example.com\r\n\r\n",
		"POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc\r\nGET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 30\r\n\r\nGET http://x/ HTTP/1.1\r\nHost: y\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\nGET http://a/ HTTP/1.1\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\nab",
		"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://u@a:80/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nX: \xc0\xaf\r\n\r\nGET / HTTP/1.5\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n\xff\r\n0\r\nT: 1\r\n\t2\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	} {
		f.Add([]byte(s), []byte{0})
		f.Add([]byte(s), []byte{2, 7, 0, 30})
	}
	f.Fuzz(func(t *testing.T, stream, splits []byte) {
		g := newFramingGuard(nil)
		fed := 0
		k := 0
		feed := func(to int) {
			for fed < to {
				n := to - fed
				if len(splits) > 0 {
					n = min(n, 1+int(splits[k%len(splits)]))
					k++
				}
				g.scan(stream[fed : fed+n])
				fed += n
			}
		}
		// A trailer is not checked here (it is read as part of a body):
		// a stream that could hold a trailer the guard refuses may be flagged.
		cleanLines := bytes.Count(stream, []byte("\n")) == bytes.Count(stream, []byte("\r\n")) &&
			utf8.Valid(stream) && !bytes.Contains(stream, []byte("\n ")) && !bytes.Contains(stream, []byte("\n\t"))
		anySuspicious := false
		for i, r := range goRequests(stream) {
			feed(r.headerEnd)
			anySuspicious = anySuspicious || r.suspicious
			if p := g.problem.Load(); p != nil {
				if !anySuspicious && cleanLines && !strings.Contains(*p, "too large") {
					t.Fatalf("request %d (%s %s): the guard flagged a stream Go reads cleanly: %s", i, r.req.Method, r.req.RequestURI, *p)
				}
				break // every request from here on is denied
			}
			if r.suspicious {
				t.Fatalf("request %d (%s %s): suspicious header block not flagged", i, r.req.Method, r.req.RequestURI)
			}
			if r.dispatched {
				g.next(r.req)
				if p := g.problem.Load(); p != nil {
					t.Fatalf("request %d (%s %s): %s", i, r.req.Method, r.req.RequestURI, *p)
				}
			}
		}
		feed(len(stream))
	})
}

// The reference FuzzFraming compares against sees what Go's server sees.
func TestGoRequestsReference(t *testing.T) {
	stream := "POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc\r\n" +
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n" +
		"GET HTTP://a/ HTTP/1.1\r\nHost: b\r\n\r\n" +
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n" +
		"GET / HTTP/1.1\nHost: a\n\n" +
		"GET / HTTP/1.1\r\n\r\n" // no Host: refused, the connection closed
	var got []string
	for _, r := range goRequests([]byte(stream)) {
		got = append(got, fmt.Sprintf("%s %s %v %v", r.req.Method, r.req.RequestURI, r.suspicious, r.dispatched))
	}
	want := []string{
		"POST http://a/ false true",
		"OPTIONS * false false",
		"GET HTTP://a/ true true",
		"POST / true true",
		"GET / true true",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

// sentHeaders reads what the guard needs of a header block as Go's
// textproto.ReadMIMEHeader would, for every block http.ReadRequest
// accepts that has no folded line (a folded block is flagged before).
func FuzzSentHeaders(f *testing.F) {
	for _, seed := range []string{
		"POST http://a:1/mcp HTTP/1.1\r\nHost: a:1\r\nContent-Length: 3\r\n\r\n",
		"POST http://a/ HTTP/1.1\r\nhost:  b \r\ncontent-length:0\r\nTRANSFER-ENCODING: chunked\r\n\r\n",
		"GET http://a/ HTTP/1.1\nHost: a\nHost:\t\nX: y\n\n",
		"GET / HTTP/1.1\r\nHost:\r\nX-Host: z\r\nHostile: q\r\n\r\n",
		"GET http://a/ HTTP/1.0\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\nHost: [::1]:80\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nA: b\r\n c\r\nHost: d\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, block []byte) {
		if _, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(block))); err != nil {
			return
		}
		tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(block)))
		if _, err := tp.ReadLine(); err != nil {
			return
		}
		raw, err := tp.ReadMIMEHeader()
		if err != nil {
			t.Fatalf("http.ReadRequest accepted what textproto refuses: %v", err)
		}
		// Up to the blank line: what the guard hands sentHeaders.
		end := bytes.Index(block, []byte("\n\n"))
		if i := bytes.Index(block, []byte("\n\r\n")); i >= 0 && (end < 0 || i < end) {
			end = i
		}
		if end < 0 {
			return
		}
		head := block[:end+1]
		if _, fields, ok := bytes.Cut(head, []byte("\n")); ok && folded(fields) {
			return
		}
		var hosts []string
		got := sentHeaders(block, func(h []byte) { hosts = append(hosts, string(h)) })
		want := sent{
			contentLength:    len(raw["Content-Length"]) > 0,
			transferEncoding: len(raw["Transfer-Encoding"]) > 0,
		}
		if got != want || !slices.Equal(hosts, raw["Host"]) {
			t.Fatalf("sentHeaders(%q) = %+v, Host %q; textproto says %+v, Host %q", block, got, hosts, want, raw["Host"])
		}
	})
}
