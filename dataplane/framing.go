package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"net/textproto"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// framingGuard watches the raw bytes of a client connection for request
// header blocks Go's HTTP server would quietly normalise or accept where
// other servers would not:
//
//   - both Content-Length and Transfer-Encoding: Go lets Transfer-Encoding
//     win and deletes Content-Length, but such a request is a smuggling
//     attempt;
//   - an absolute-form request whose Host header names another authority:
//     Go ignores that Host (as RFC 9112 tells proxies to), but an agent
//     sending it is probing for a confused upstream;
//   - a header (or trailer) line ending in a bare LF, which Go accepts and
//     OpenShell, like many servers, refuses;
//   - a header (or trailer) line continuing the one before it (obs-fold,
//     a line starting with a space or tab; RFC 9112 §5.2), which Go joins
//     to the line before and OpenShell refuses;
//   - a header block that is not valid UTF-8 (Go passes other bytes above
//     0x7F through as obs-text; OpenShell refuses them, as a proxy and an
//     upstream could read them differently);
//   - an HTTP version other than HTTP/1.0 or HTTP/1.1 (Go serves any
//     HTTP/1.x as HTTP/1.1; OpenShell refuses the rest).
//
// (Go's server itself refuses header names that are not tokens, a line
// with no colon or whitespace before it, and control bytes other than tab
// in values.)
//
// Once seen, every request on the connection is denied.
//
// The guard frames the stream as Go's server does: it reads each header
// block, parses it with Go's own parser, then skips the body that block
// declares (Content-Length bytes, or chunks and trailers, checked as Go's
// chunked reader checks them) before reading the next block, so body bytes
// are never taken for headers and headers never for body bytes, however
// large or chunked the bodies and however requests are pipelined. Anything
// it cannot frame (which Go's server refuses too) marks the connection.
//
// As a second line, every request Go hands to a handler must be the next
// block the guard framed (same method, target and protocol; see guarded):
// a request the guard did not see denies the connection rather than
// passing unchecked.
type framingGuard struct {
	net.Conn
	problem atomic.Pointer[string]
	// detached stops the scan once the connection is hijacked (a CONNECT
	// tunnel): what follows is not this server's HTTP.
	detached atomic.Bool

	mu      sync.Mutex
	pending []framedRequest // framed, not yet handed to a handler

	// Scan state, touched only by the goroutine reading the connection.
	state    scanState
	block    []byte // the header block being read, raw
	lineAt   int    // where its current line starts
	line     []byte // a chunk-size or trailer line being read
	trailers int    // bytes of trailer read so far
	remain   uint64 // body or chunk bytes still to skip
	excess   int64  // chunk overhead, counted as Go's chunked reader does
	skipCRLF int    // leading CR or LF bytes Go skips after a POST
}

// framedRequest is what the guard saw of one request line.
type framedRequest struct{ method, target, proto string }

type scanState int

const (
	scanBlock     scanState = iota // a header block
	scanBody                       // Content-Length bytes
	scanChunkLine                  // a chunk-size line
	scanChunkData                  // chunk bytes
	scanChunkEnd                   // the CRLF after chunk bytes
	scanTrailer                    // trailer lines, up to a blank one
	scanOff                        // given up: the connection is marked
)

const (
	// maxGuardBlock bounds a header block. Go's server reads at most
	// MaxHeaderBytes (64 KiB for the proxy's servers) plus 4 KiB from the
	// connection for one, plus what it had buffered (4 KiB); anything
	// longer it refuses.
	maxGuardBlock = 128 << 10
	// maxChunkLine is Go's limit on a chunk-size line.
	maxChunkLine = 4096
	// maxGuardTrailer bounds a trailer (Go's limit is its 4 KiB buffer).
	maxGuardTrailer = 64 << 10
	// maxPending bounds the requests framed ahead of the handlers. Go reads
	// ahead at most a buffer's worth of pipelined requests.
	maxPending = 1024
)

func newFramingGuard(c net.Conn) *framingGuard { return &framingGuard{Conn: c} }

func (g *framingGuard) Read(b []byte) (int, error) {
	n, err := g.Conn.Read(b)
	if !g.detached.Load() {
		g.scan(b[:n])
	}
	return n, err
}

// NetConn returns the connection underneath (closeWrite looks through).
func (g *framingGuard) NetConn() net.Conn { return g.Conn }

// detachGuard stops scanning a hijacked connection.
func detachGuard(c net.Conn) {
	if g, ok := c.(*framingGuard); ok {
		g.detached.Store(true)
	}
}

func (g *framingGuard) scan(data []byte) {
	for len(data) > 0 {
		switch g.state {
		case scanOff:
			return
		case scanBlock:
			data = g.scanBlock(data)
		case scanBody, scanChunkData:
			n := uint64(len(data))
			if n > g.remain {
				n = g.remain
			}
			g.remain -= n
			data = data[n:]
			if g.remain == 0 {
				if g.state == scanBody {
					g.state = scanBlock
				} else {
					g.state, g.line = scanChunkEnd, g.line[:0]
				}
			}
		case scanChunkEnd:
			// Go's chunked reader requires exactly CRLF after chunk data.
			g.line = append(g.line, data[0])
			data = data[1:]
			if len(g.line) == 2 {
				if string(g.line) != "\r\n" {
					g.fail("a request on this connection had malformed chunked framing")
					return
				}
				g.state, g.line = scanChunkLine, g.line[:0]
			}
		case scanChunkLine, scanTrailer:
			var line []byte
			var done bool
			line, done, data = g.takeLine(data)
			if !done {
				continue
			}
			if g.state == scanChunkLine {
				g.chunkLine(line)
			} else {
				g.trailerLine(line)
			}
		}
	}
}

// takeLine collects g.line up to and including a '\n'.
func (g *framingGuard) takeLine(data []byte) (line []byte, done bool, rest []byte) {
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		g.line = append(g.line, data...)
		if g.state == scanChunkLine && len(g.line) > maxChunkLine+2 ||
			g.state == scanTrailer && g.trailers+len(g.line) > maxGuardTrailer {
			g.fail("a request on this connection had malformed chunked framing")
		}
		return nil, false, nil
	}
	g.line = append(g.line, data[:i+1]...)
	line = g.line // valid until the next takeLine
	g.line = g.line[:0]
	return line, true, data[i+1:]
}

func (g *framingGuard) scanBlock(data []byte) []byte {
	// After a POST Go skips up to four CR or LF bytes before the next
	// request line (a tolerance for old clients).
	for g.skipCRLF > 0 && len(g.block) == 0 && len(data) > 0 && (data[0] == '\r' || data[0] == '\n') {
		g.skipCRLF--
		data = data[1:]
	}
	if len(data) > 0 {
		g.skipCRLF = 0
	}
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			g.block = append(g.block, data...)
			if len(g.block) > maxGuardBlock {
				g.fail("a request on this connection had a header block too large to read")
			}
			return nil
		}
		g.block = append(g.block, data[:i+1]...)
		data = data[i+1:]
		if len(g.block) > maxGuardBlock {
			g.fail("a request on this connection had a header block too large to read")
			return nil
		}
		line := g.block[g.lineAt:]
		g.lineAt = len(g.block)
		if !bytes.HasSuffix(line, []byte("\r\n")) {
			g.flag("a request on this connection had a header line ending in a bare LF")
		}
		// Go's line reader drops "\n" and one "\r" before it; an empty
		// line ends the block.
		if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
			g.endBlock()
			return data
		}
	}
	return nil
}

// blockReader reads a header block from memory. Pooling the readers
// keeps endBlock from allocating a 4 KiB buffer per request on the
// proxy's hot path.
type blockReader struct {
	src bytes.Reader
	buf *bufio.Reader
}

var blockReaders = sync.Pool{New: func() any {
	r := &blockReader{}
	r.buf = bufio.NewReader(&r.src)
	return r
}}

func (r *blockReader) reset(block []byte) *bufio.Reader {
	r.src.Reset(block)
	r.buf.Reset(&r.src)
	return r.buf
}

// endBlock parses the header block with Go's own parser, checks it, and
// sets up skipping its body.
func (g *framingGuard) endBlock() {
	block := g.block
	g.block, g.lineAt = g.block[:0], 0
	if cap(g.block) > 16<<10 {
		g.block = nil // a large block's buffer is not kept for the connection's life
	}
	if !utf8.Valid(block) {
		g.flag("a request on this connection had a header that is not valid UTF-8")
	}
	if _, fields, ok := bytes.Cut(block, []byte("\n")); ok && folded(fields) {
		g.flag("a request on this connection had a folded header line (obs-fold)")
	}
	br := blockReaders.Get().(*blockReader)
	defer blockReaders.Put(br)
	req, err := http.ReadRequest(br.reset(block))
	if err != nil {
		// Go's server refuses it too, and closes the connection.
		g.fail("a request on this connection could not be parsed")
		return
	}
	if req.ProtoMajor != 1 || req.ProtoMinor > 1 {
		g.flag("a request on this connection named an HTTP version other than 1.0 or 1.1")
	}
	// http.ReadRequest drops Host, and Content-Length when chunked: look at
	// the header as sent.
	raw := sentHeaders(block, func(host []byte) {
		// Go takes the URI's authority over Host. The usual Host is the
		// URI's authority, byte for byte: compared without a copy.
		if req.URL.Host != "" && len(host) > 0 && string(host) != req.URL.Host &&
			!sameAuthority(req.URL.Host, string(host), defaultPort(req.URL.Scheme)) {
			g.flag("a request on this connection named one authority in its URI and another in its Host header")
		}
	})
	if raw.contentLength && raw.transferEncoding {
		g.flag("a request on this connection had both Content-Length and Transfer-Encoding")
	}
	// Go's server answers "OPTIONS *" itself; no handler sees it.
	if req.Method != http.MethodOptions || req.RequestURI != "*" {
		g.mu.Lock()
		g.pending = append(g.pending, framedRequest{req.Method, req.RequestURI, req.Proto})
		over := len(g.pending) > maxPending
		g.mu.Unlock()
		if over {
			g.fail("too many requests on this connection were sent ahead of their answers")
			return
		}
	}
	g.skipCRLF = 0
	if req.Method == http.MethodPost {
		g.skipCRLF = 4
	}
	switch {
	case len(req.TransferEncoding) > 0: // Go reads a request's body chunked only
		g.state, g.line, g.excess = scanChunkLine, g.line[:0], 0
	case req.ContentLength > 0:
		g.state, g.remain = scanBody, uint64(req.ContentLength)
	default:
		g.state = scanBlock
	}
}

// sent is what the guard needs of a header block as sent, beyond what
// http.ReadRequest keeps: whether it named Content-Length and
// Transfer-Encoding (sentHeaders hands it the Host values).
type sent struct {
	contentLength, transferEncoding bool
}

// sentHeaders reads the header lines of a block http.ReadRequest has
// accepted, calling host with each Host value in order (valid until
// sentHeaders returns), so every field line is "name:value" with name a token and the
// first line after the request line is a field (textproto refuses a
// leading space there). It agrees with textproto.ReadMIMEHeader on the
// names (case-insensitive) and on the values (trimmed of ASCII space),
// except for values continued on folded lines (obs-fold), which it reads
// up to their first line: such a block is flagged before this is read.
// (FuzzSentHeaders.) One pass over the bytes, where a
// second textproto parse built a map and strings for every header of
// every request.
func sentHeaders(block []byte, host func([]byte)) sent {
	var s sent
	_, rest, _ := bytes.Cut(block, []byte("\n")) // the request line
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			break // the blank line ending the block
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue // a folded continuation
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			s.contentLength = true
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			s.transferEncoding = true
		case bytes.EqualFold(name, []byte("Host")):
			host(textproto.TrimBytes(value))
		}
	}
	return s
}

// chunkLine reads a chunk-size line as Go's chunked reader does
// (net/http/internal/chunked.go), failing wherever it fails.
func (g *framingGuard) chunkLine(line []byte) {
	if cr := bytes.IndexByte(line, '\r'); cr < 0 || cr != len(line)-2 {
		g.fail("a request on this connection had malformed chunked framing")
		return
	}
	line = line[:len(line)-2]
	if len(line) >= maxChunkLine {
		g.fail("a request on this connection had malformed chunked framing")
		return
	}
	g.excess += int64(len(line)) + 2
	line = bytes.TrimRight(line, " \t")
	line, _, _ = bytes.Cut(line, []byte(";"))
	n, ok := parseChunkSize(line)
	if !ok {
		g.fail("a request on this connection had malformed chunked framing")
		return
	}
	g.excess -= 16 + 2*int64(n) // wrapping as Go's does
	g.excess = max(g.excess, 0)
	if g.excess > 16<<10 {
		g.fail("a request on this connection had malformed chunked framing")
		return
	}
	if n == 0 {
		g.state, g.trailers = scanTrailer, 0
		return
	}
	g.state, g.remain = scanChunkData, n
}

func parseChunkSize(v []byte) (uint64, bool) {
	if len(v) == 0 || len(v) > 16 {
		return 0, false
	}
	var n uint64
	for _, b := range v {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b -= 'a' - 10
		case 'A' <= b && b <= 'F':
			b -= 'A' - 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(b)
	}
	return n, true
}

// trailerLine reads the trailer after the last chunk; a blank line ends
// the request.
func (g *framingGuard) trailerLine(line []byte) {
	g.trailers += len(line)
	if !bytes.HasSuffix(line, []byte("\r\n")) {
		g.flag("a request on this connection had a header line ending in a bare LF")
	}
	if !utf8.Valid(line) {
		g.flag("a request on this connection had a header that is not valid UTF-8")
	}
	if folded(line) {
		g.flag("a request on this connection had a folded header line (obs-fold)")
	}
	if len(line) == 1 || len(line) == 2 && line[0] == '\r' {
		g.state = scanBlock
	}
}

// folded reports whether any of the header lines starts with a space or a
// tab: an obs-fold continuation of the line before.
func folded(lines []byte) bool {
	for len(lines) > 0 {
		if lines[0] == ' ' || lines[0] == '\t' {
			return true
		}
		_, lines, _ = bytes.Cut(lines, []byte("\n"))
	}
	return false
}

// flag marks the connection; fail also stops scanning it.
func (g *framingGuard) flag(reason string) { g.problem.CompareAndSwap(nil, &reason) }

func (g *framingGuard) fail(reason string) {
	g.flag(reason)
	g.state, g.block, g.line = scanOff, nil, nil
}

// next matches a request Go's server parsed with the next header block the
// guard framed; a request the guard did not frame marks the connection.
func (g *framingGuard) next(r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) == 0 || g.pending[0] != (framedRequest{r.Method, r.RequestURI, r.Proto}) {
		g.flag("the proxy lost track of request boundaries on this connection")
		g.pending = nil
		return
	}
	g.pending = g.pending[1:]
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

// guardListener wraps every accepted connection in a framingGuard.
type guardListener struct{ net.Listener }

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newFramingGuard(c), nil
}

type guardKey struct{}

// guarded hands each request to h after matching it with the header block
// its connection's guard framed. Every server whose listener is a
// guardListener serves through it.
func guarded(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g, ok := r.Context().Value(guardKey{}).(*framingGuard); ok {
			g.next(r)
		}
		h.ServeHTTP(w, r)
	})
}

// framingProblem returns why the request's connection is refused, or "".
func framingProblem(ctx context.Context) string {
	if g, ok := ctx.Value(guardKey{}).(*framingGuard); ok {
		if p := g.problem.Load(); p != nil {
			return *p
		}
	}
	return ""
}
