package h1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
)

// The proxy reads the HTTP/1.x requests of its clients itself (server.go
// serves them). One strict reading decides both what a request is and
// where the next one starts, so what the proxy judges and how it frames
// the connection can never disagree: the request that is judged is the
// request that was read.
//
// What Go's HTTP server would refuse, this reader refuses the same way
// (a 400, 431, 501 or 505 and the connection closed, before any
// handler). What Go's server would quietly normalise or accept, where
// other servers and proxies would not, it marks as the connection's
// problem (problemError): the request is still read, so that it can be
// denied and recorded naming the problem, and the connection closes after
// that answer. The marks are:
//
//   - a line ending in a bare LF (OpenShell and many servers refuse it);
//   - a header line continuing the one before it (obs-fold, RFC 9112
//     §5.2);
//   - header bytes that are not UTF-8 (passed through as obs-text by Go;
//     a proxy and an upstream could read them differently);
//   - an HTTP/1.x version other than 1.0 and 1.1 (Go serves them as 1.1);
//   - both Content-Length and Transfer-Encoding (a smuggling attempt: Go
//     lets Transfer-Encoding win), or Transfer-Encoding in an HTTP/1.0
//     request (Go ignores it and frames by Content-Length);
//   - an absolute-form request whose Host header names another authority
//     (Go ignores that Host, as RFC 9112 tells proxies to, but an agent
//     sending it is probing for a confused upstream).
//
// A chunked body's trailer lines are checked the same way when the body
// has been read; a problem there marks the connection for the requests
// after it.

const (
	// maxHeaderBytes bounds a request line and its header fields, as the
	// proxy's http.Server did (MaxHeaderBytes, plus the 4 KiB Go's server
	// allows past it).
	maxHeaderBytes = 64<<10 + 4<<10
	// maxTrailerBytes bounds a chunked body's trailer section.
	maxTrailerBytes = 64 << 10
	// maxPooledHeader bounds the header map a connection keeps for its
	// next request: a larger one (a request with many fields) is dropped.
	maxPooledHeader = 32
)

// requestError is a request the reader refuses outright: answered with
// status and the connection closed, no handler called.
type requestError struct {
	status int
	reason string
}

func (e *requestError) Error() string { return e.reason }

func badRequest(reason string) *requestError {
	return &requestError{status: http.StatusBadRequest, reason: reason}
}

// problem marks the connection; the first mark is kept.
func (c *serverConn) mark(reason string) { c.problem.CompareAndSwap(nil, &reason) }

// readRequest reads the next request head from c.br and builds the
// request handlers see, its body reading from c.br. A nil request with a
// nil error means the client closed the connection between requests.
func (c *serverConn) readRequest() (*http.Request, error) {
	// After a POST, Go's server skips up to four CR or LF bytes a client
	// may have sent past the body (old clients did); so does this.
	for skip := c.skipCRLF; skip > 0; skip-- {
		b, err := c.br.Peek(1)
		if err != nil || b[0] != '\r' && b[0] != '\n' {
			break
		}
		c.br.Discard(1)
	}
	c.skipCRLF = 0

	head, lines, err := c.readHead()
	if err != nil {
		return nil, err
	}
	if head == "" {
		return nil, nil
	}
	// One string for the whole head: the method, target and every header
	// value are slices of it (header names too, once canonical).
	reqLine, rest, _ := strings.Cut(head, "\n")
	reqLine = strings.TrimSuffix(reqLine, "\r")
	method, rest2, ok1 := strings.Cut(reqLine, " ")
	target, proto, ok2 := strings.Cut(rest2, " ")
	if !ok1 || !ok2 {
		return nil, badRequest("malformed HTTP request")
	}
	if !validMethod(method) {
		return nil, badRequest("invalid method")
	}
	major, minor, ok := http.ParseHTTPVersion(proto)
	if !ok {
		return nil, badRequest("malformed HTTP version")
	}
	if major != 1 {
		return nil, &requestError{status: http.StatusHTTPVersionNotSupported, reason: "unsupported protocol version"}
	}
	if minor > 1 {
		c.mark("a request on this connection named an HTTP version other than 1.0 or 1.1")
	}

	// The connection's request, a copy of its template (which carries
	// its context), with its URL beside it: nothing keeps a request once
	// it is answered, so none is allocated.
	ru := &c.req
	r := &ru.req
	*r = c.template
	r.Method, r.Proto, r.ProtoMajor, r.ProtoMinor = method, proto, major, minor
	r.RequestURI, r.Header, r.RemoteAddr = target, c.requestHeader(), c.remote
	justAuthority := method == http.MethodConnect && !strings.HasPrefix(target, "/")
	switch {
	case !justAuthority && parsePlainTarget(target, &ru.url):
		r.URL = &ru.url
	default:
		rawURL := target
		if justAuthority {
			rawURL = "http://" + target
		}
		if r.URL, err = url.ParseRequestURI(rawURL); err != nil {
			return nil, badRequest("malformed request target")
		}
		if justAuthority {
			r.URL.Scheme = ""
		}
	}
	if err := c.readFields(r.Header, rest, lines); err != nil {
		return nil, err
	}

	hosts, haveHost := r.Header["Host"]
	switch {
	case len(hosts) > 1:
		return nil, badRequest("too many Host headers")
	case len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]):
		return nil, badRequest("malformed Host header")
	case !haveHost && r.ProtoAtLeast(1, 1):
		return nil, badRequest("missing required Host header")
	}
	r.Host = r.URL.Host
	if r.Host == "" {
		r.Host = r.Header.Get("Host")
	} else if haveHost && hosts[0] != r.Host && !c.sameAuthority(r.URL.Host, hosts[0], defaultPort(r.URL.Scheme)) {
		c.mark("a request on this connection named one authority in its URI and another in its Host header")
	}
	delete(r.Header, "Host")
	r.Close = closeRequested(r)

	if err := c.frameBody(r); err != nil {
		return nil, err
	}
	return r, nil
}

// sameAuthority reports whether the Host header host names uri's
// authority (Config.SameAuthority).
func (c *serverConn) sameAuthority(uri, host, defaultPort string) bool {
	return c.srv != nil && c.srv.cfg.SameAuthority != nil && c.srv.cfg.SameAuthority(uri, host, defaultPort)
}

// requestWithURL is a request and its URL, kept together.
type requestWithURL struct {
	req http.Request
	url url.URL
}

// parsePlainTarget parses the request targets proxies see most, into u
// exactly as url.ParseRequestURI would (FuzzPlainTarget): the origin
// form "/path?query" and the absolute form "http://host:port/path?query"
// (or https), written with letters, digits and "-._~/" in the path, and
// in the query those and "=&+,;:@!$'()*". It reports false for every
// other target, which url.ParseRequestURI then parses: escapes, user
// info, IPv6 literals, "*", anything unusual.
func parsePlainTarget(target string, u *url.URL) bool {
	rest := target
	var scheme, host string
	switch {
	case strings.HasPrefix(rest, "/"):
	case len(rest) > 7 && EqualFoldASCII(rest[:7], "http://"):
		scheme, rest = "http", rest[7:]
	case len(rest) > 8 && EqualFoldASCII(rest[:8], "https://"):
		scheme, rest = "https", rest[8:]
	default:
		return false
	}
	if scheme != "" {
		end := strings.IndexByte(rest, '/')
		if end <= 0 {
			return false // no path, or no host
		}
		host, rest = rest[:end], rest[end:]
		if !plainHost(host) {
			return false
		}
	}
	path, query, hasQuery := strings.Cut(rest, "?")
	if !plainChars(path, plainPath) || hasQuery && (query == "" || !plainChars(query, plainQuery)) {
		return false
	}
	*u = url.URL{Scheme: scheme, Host: host, Path: path, RawQuery: query}
	return true
}

// plainHost reports a host name or IPv4 address with an optional port
// of digits: letters, digits, '-' and '.', then ":digits".
func plainHost(h string) bool {
	name, port, hasPort := strings.Cut(h, ":")
	if name == "" || !plainChars(name, plainName) || hasPort && (port == "" || !plainChars(port, plainDigits)) {
		return false
	}
	return true
}

const (
	plainDigits = iota
	plainName
	plainPath
	plainQuery
)

// plainChars reports whether every byte of s is allowed in the class.
func plainChars(s string, class int) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case '0' <= b && b <= '9':
			continue
		case class == plainDigits:
			return false
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', b == '-', b == '.':
			continue
		case class == plainName:
			return false
		case b == '_', b == '~', b == '/':
			continue
		case class == plainPath:
			return false
		case strings.IndexByte("=&+,;:@!$'()*", b) >= 0:
			continue
		default:
			return false
		}
	}
	return true
}

// readHead reads a request line and header fields up to the blank line,
// returning them as one string and the number of field lines. Lines
// ending in a bare LF, bytes that are not UTF-8 and folded lines mark the
// connection.
func (c *serverConn) readHead() (string, int, error) {
	c.head = c.head[:0]
	lines, start := 0, 0 // field lines so far; where the current line starts
	for {
		line, err := c.br.ReadSlice('\n')
		if len(c.head)+len(line) > maxHeaderBytes {
			return "", 0, &requestError{status: http.StatusRequestHeaderFieldsTooLarge, reason: "request header fields too large"}
		}
		c.head = append(c.head, line...)
		if err == bufio.ErrBufferFull {
			continue // a line longer than the reader's buffer
		}
		if err != nil {
			if len(c.head) == 0 && (err == io.EOF || isConnGone(err)) {
				return "", 0, nil // closed between requests
			}
			return "", 0, err
		}
		full := c.head[start:]
		if len(full) < 2 || full[len(full)-2] != '\r' {
			c.mark("a request on this connection had a header line ending in a bare LF")
		}
		if len(full) == 1 || len(full) == 2 && full[0] == '\r' {
			if start == 0 {
				return "", 0, badRequest("malformed HTTP request") // no request line
			}
			break
		}
		if start > 0 {
			lines++
		}
		start = len(c.head)
	}
	if !utf8.Valid(c.head) {
		c.mark("a request on this connection had a header that is not valid UTF-8")
	}
	head := string(c.head)
	if cap(c.head) > 16<<10 {
		c.head = nil // a large head's buffer is not kept for the connection's life
	}
	return head, lines, nil
}

// requestHeader returns the connection's header map, emptied, for the
// request about to be read. A request's header is its handler's only
// while the request is served (nothing the proxy keeps refers to the map
// or its slices: what it keeps of a value is the string), so one map
// serves every request on a connection, as one map serves every
// response (response.reset). A map grown past maxPooledHeader fields is
// dropped, not kept for the connection's life.
func (c *serverConn) requestHeader() http.Header {
	if c.header == nil || len(c.header) > maxPooledHeader {
		c.header = make(http.Header, 8)
	} else {
		clear(c.header)
	}
	return c.header
}

// readFields parses the header field lines of fields (the head after its
// request line) into h, as net/textproto does: names are tokens followed
// directly by a colon, values are trimmed of spaces and tabs and hold no
// control bytes but tab. A folded line marks the connection and is
// joined to the one before, as Go joins it.
func (c *serverConn) readFields(h http.Header, fields string, lines int) error {
	// One backing array for every value, as textproto allocates it; the
	// connection's, like its header map, when it has the room (what the
	// last request left in it is cleared, not to keep its head alive).
	clear(c.values)
	if cap(c.values) < lines || cap(c.values) > 4*maxPooledHeader {
		c.values = make([]string, 0, max(lines, 8))
	}
	values := c.values[:0]
	var last string // the name of the field before, for folded lines
	for line := range headLines(fields) {
		if line[0] == ' ' || line[0] == '\t' {
			if last == "" {
				return badRequest("malformed MIME header initial line")
			}
			c.mark("a request on this connection had a folded header line (obs-fold)")
			vv := h[last]
			vv[len(vv)-1] = strings.TrimSpace(vv[len(vv)-1] + " " + textproto.TrimString(line))
			continue
		}
		name, value, err := parseField(line)
		if err != nil {
			return badRequest(err.Error())
		}
		addField(h, &values, name, value)
		last = name
	}
	c.values = values
	return nil
}

// headLines yields the lines of fields (a head after its first line),
// each without its line ending, up to the blank line ending the head.
func headLines(fields string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for fields != "" {
			var line string
			line, fields, _ = strings.Cut(fields, "\n")
			line = strings.TrimSuffix(line, "\r")
			if line == "" || !yield(line) {
				return
			}
		}
	}
}

var (
	errFieldLine  = errors.New("malformed MIME header line")
	errFieldValue = errors.New("invalid header field value")
)

// parseField splits a header field line (its line ending removed) into
// its canonical name and its value, as net/textproto reads them: the name
// a token followed directly by the colon, the value trimmed of spaces and
// tabs and holding no control byte but tab (a CR inside it neither).
// Textproto also takes a space before the colon, keeping the name as
// sent; this refuses it.
func parseField(line string) (name, value string, err error) {
	name, value, ok := strings.Cut(line, ":")
	if !ok || !httpguts.ValidHeaderFieldName(name) {
		return "", "", errFieldLine
	}
	if !httpguts.ValidHeaderFieldValue(value) {
		return "", "", errFieldValue
	}
	return canonicalName(name), textproto.TrimString(value), nil
}

// addField adds value to h under name. A name's first value is cut from
// values, one backing array for a head's values as textproto allocates it.
func addField(h http.Header, values *[]string, name, value string) {
	*values = append(*values, value)
	if vv, ok := h[name]; ok {
		h[name] = append(vv, value)
	} else {
		n := len(*values)
		h[name] = (*values)[n-1 : n : n]
	}
}

// canonicalName is textproto.CanonicalMIMEHeaderKey without an allocation
// for a name already in canonical form.
func canonicalName(name string) string {
	upper := true
	for i := 0; i < len(name); i++ {
		b := name[i]
		if upper && 'a' <= b && b <= 'z' || !upper && 'A' <= b && b <= 'Z' {
			return textproto.CanonicalMIMEHeaderKey(name)
		}
		upper = b == '-'
	}
	return name
}

// frameBody decides the request's body from Content-Length and
// Transfer-Encoding as Go's server does, and sets r.Body.
func (c *serverConn) frameBody(r *http.Request) error {
	te, chunked := r.Header["Transfer-Encoding"]
	cls, haveCL := r.Header["Content-Length"]
	if chunked {
		if haveCL {
			c.mark("a request on this connection had both Content-Length and Transfer-Encoding")
		}
		if !r.ProtoAtLeast(1, 1) {
			c.mark("a request on this connection sent Transfer-Encoding with HTTP/1.0")
		}
		// ASCII case only, as Go compares it: strings.EqualFold would
		// take "chun\u212aed" (a Kelvin sign) for chunked.
		if len(te) != 1 || !EqualFoldASCII(te[0], "chunked") {
			return &requestError{status: http.StatusNotImplemented, reason: "unsupported transfer encoding"}
		}
		delete(r.Header, "Transfer-Encoding")
		delete(r.Header, "Content-Length")
		r.TransferEncoding = []string{"chunked"}
		r.ContentLength = -1
		c.body.reset(c, -1)
	} else {
		n := int64(0)
		if haveCL {
			for _, v := range cls[1:] {
				if textproto.TrimString(v) != textproto.TrimString(cls[0]) {
					return badRequest("multiple Content-Length headers")
				}
			}
			var ok bool
			if n, ok = parseContentLength(cls[0]); !ok {
				return badRequest("invalid Content-Length")
			}
			r.Header["Content-Length"] = cls[:1]
		}
		r.ContentLength = n
		if n == 0 {
			r.Body = http.NoBody
			c.skipCRLF = skipAfter(r.Method)
			return c.expect(r)
		}
		c.body.reset(c, n)
	}
	r.Body = &c.body
	c.skipCRLF = skipAfter(r.Method)
	return c.expect(r)
}

func skipAfter(method string) int {
	if method == http.MethodPost {
		return 4
	}
	return 0
}

// expect handles Expect: 100-continue (sent when the handler first reads
// the body); any other expectation is refused, as Go's server refuses it.
func (c *serverConn) expect(r *http.Request) error {
	e, ok := r.Header["Expect"]
	if !ok {
		return nil
	}
	if len(e) == 1 && EqualFoldASCII(e[0], "100-continue") && r.ProtoAtLeast(1, 1) {
		if r.ContentLength != 0 {
			c.body.continueFirst = true
		}
		return nil
	}
	return &requestError{status: http.StatusExpectationFailed, reason: "unsupported Expect header"}
}

func parseContentLength(v string) (int64, bool) {
	v = textproto.TrimString(v)
	if v == "" {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

// closeRequested reports whether the client asked for the connection to
// close after this request: HTTP/1.0 unless it asked to keep it alive,
// HTTP/1.1 when it said close.
func closeRequested(r *http.Request) bool {
	if r.ProtoMajor == 1 && r.ProtoMinor == 0 {
		return !httpguts.HeaderValuesContainsToken(r.Header["Connection"], "keep-alive")
	}
	return httpguts.HeaderValuesContainsToken(r.Header["Connection"], "close")
}

func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		if !httpguts.IsTokenRune(rune(m[i])) {
			return false
		}
	}
	return true
}

// requestBody is a request's body, read from the connection's reader: n
// bytes, or chunks and a trailer (n < 0). One per connection, reset for
// each request.
type requestBody struct {
	c             *serverConn
	src           io.Reader // a LimitedReader or a chunked reader over c.br
	limited       io.LimitedReader
	chunked       bool
	eof           bool
	err           error
	continueFirst bool // Expect: 100-continue, not yet answered
}

func (b *requestBody) reset(c *serverConn, n int64) {
	*b = requestBody{c: c, chunked: n < 0}
	if b.chunked {
		b.src = httputil.NewChunkedReader(c.br)
	} else {
		b.limited = io.LimitedReader{R: c.br, N: n}
		b.src = &b.limited
	}
}

func (b *requestBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.eof {
		return 0, io.EOF
	}
	if b.continueFirst {
		b.continueFirst = false
		b.c.writeContinue()
	}
	n, err := b.src.Read(p)
	if err == nil && !b.chunked && b.limited.N == 0 {
		err = io.EOF // the last byte: say so now, not on the next read
	}
	switch {
	case err == io.EOF && !b.chunked && b.limited.N > 0:
		b.err = io.ErrUnexpectedEOF
		return n, b.err
	case err == io.EOF:
		if b.chunked {
			if terr := b.readTrailer(); terr != nil {
				b.err = terr
				return n, terr
			}
		}
		b.eof = true
		b.c.bodyDone()
	case err != nil:
		b.err = err
	}
	return n, err
}

// Close leaves what is unread for the server to discard or to close on.
func (b *requestBody) Close() error { return nil }

// readTrailer reads the lines after a chunked body's last chunk up to the
// blank line, checking them as header lines are checked. Go's server
// keeps trailers; the proxy does not forward them.
func (b *requestBody) readTrailer() error {
	total := 0
	for {
		line, err := b.c.br.ReadSlice('\n')
		total += len(line)
		if err != nil || total > maxTrailerBytes {
			return errors.New("malformed chunked trailer")
		}
		if len(line) < 2 || line[len(line)-2] != '\r' {
			b.c.mark("a request on this connection had a header line ending in a bare LF")
		}
		if !utf8.Valid(line) {
			b.c.mark("a request on this connection had a header that is not valid UTF-8")
		}
		if line[0] == ' ' || line[0] == '\t' {
			b.c.mark("a request on this connection had a folded header line (obs-fold)")
		}
		if len(line) == 1 || len(line) == 2 && line[0] == '\r' {
			return nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue
		}
		// A field as a header's (Go's reader refuses a control byte in
		// a trailer's value too).
		field := strings.TrimSuffix(strings.TrimSuffix(string(line), "\n"), "\r")
		if _, _, err := parseField(field); err != nil {
			return fmt.Errorf("malformed chunked trailer line")
		}
	}
}

func defaultPort(scheme string) string {
	switch scheme {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}
