package h1

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"
)

// The upstream client. Judged requests go to the checked address over
// HTTP/1.1 connections this file pools itself: one goroutine writes the
// request and reads the response on the same connection, where
// http.Transport would hand each request to two more goroutines (a writer
// and a reader per connection). Under load those handoffs were a large
// part of what the proxy cost per request.

// Key names a pool of upstream connections: the host the client
// asked for and the address that was checked for it. Keying by both means
// a connection is only ever reused for the same name on the same checked
// address — never for another name that shares the address (another TLS
// name), nor for the name after it resolved elsewhere.
type Key struct {
	Host string
	Addr netip.AddrPort
	TLS  bool // https: TLS to Host, verified against the roots
}

const (
	// maxUpstreamPools bounds the pools kept; beyond it, pools are dropped
	// (their idle connections closed) until a quarter of the room is free.
	maxUpstreamPools = 1024
	// maxIdlePerPool bounds the idle connections one pool keeps.
	maxIdlePerPool = 64
	// upstreamIdleTimeout closes connections idle this long, below the
	// keep-alive timeouts common servers use (nginx 75 s, many 60 s), so
	// the proxy rarely reuses a connection the server is closing.
	upstreamIdleTimeout = 45 * time.Second
	// maxResponseHeaderBytes bounds a response's status line and headers.
	maxResponseHeaderBytes = 1 << 20
	// max1xxResponses bounds the informational responses skipped before
	// the final one.
	max1xxResponses = 8
	dialTimeout     = 10 * time.Second
)

// Upstreams holds the pools for the policy version in force. A new
// version starts with none (Reset): connections approved under the old
// version are never handed to the new one.
type Upstreams struct {
	roots *x509.CertPool

	mu    sync.Mutex
	pools map[Key]*Pool
}

// NewUpstreams returns no pools yet, their TLS connections verified
// against roots (nil: the system's).
func NewUpstreams(roots *x509.CertPool) *Upstreams {
	return &Upstreams{roots: roots, pools: make(map[Key]*Pool)}
}

// Get returns the pool for k, creating it on first use.
func (u *Upstreams) Get(k Key) *Pool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if p, ok := u.pools[k]; ok {
		return p
	}
	if len(u.pools) >= maxUpstreamPools {
		for key, p := range u.pools {
			p.close()
			delete(u.pools, key)
			if len(u.pools) <= maxUpstreamPools*3/4 {
				break
			}
		}
	}
	p := &Pool{key: k}
	if k.TLS {
		p.tls = &tls.Config{RootCAs: u.roots, ServerName: k.Host, MinVersion: tls.VersionTLS12}
	}
	u.pools[k] = p
	return p
}

// Reset drops every pool (a new policy version): idle connections close
// now, busy ones when their response ends.
func (u *Upstreams) Reset() {
	u.mu.Lock()
	old := u.pools
	u.pools = make(map[Key]*Pool)
	u.mu.Unlock()
	for _, p := range old {
		p.close()
	}
}

// Pool is the idle connections to one Key.
type Pool struct {
	key Key
	tls *tls.Config // nil for plain http

	mu     sync.Mutex
	idle   []*upstreamConn // most recently used last
	closed bool
	sweep  *time.Timer // armed while idle connections exist
}

// upstreamConn is one connection with its buffers. Its reader is limited
// while a response head is read (see readLimit).
type upstreamConn struct {
	pool      *Pool
	conn      net.Conn
	tls       bool
	lim       readLimit
	br        *bufio.Reader
	bw        *bufio.Writer
	open      *openCheck // stillOpen's peek, made once for the connection
	kill      func()     // closes conn: what cancelling an exchange does
	head      []byte     // readResponse's buffer for a response head
	idleSince time.Time
}

// readLimit lets a bounded number of bytes be read from the connection;
// n is reset before each response head and lifted for its body.
type readLimit struct {
	r io.Reader
	n int64
}

func (l *readLimit) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errResponseHeadTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// RoundTrip sends req on a pooled connection (or a new one) and returns
// the response; its body hands the connection back when read to the end,
// and closes it when closed early. The response's header fields are read
// into header, emptied first, which becomes its Header (nil: a new map);
// the proxy's forward hands it its client's response header, so that what the
// upstream sent is not copied from one map into another. On an error
// header holds nothing of any response.
//
// body is the request body when the proxy holds all of it (nil for none,
// or when req.Body streams the client's). A request that failed on a
// connection reused from the pool (the server may have closed it just
// then) is sent once more on a new connection when its body is held and
// its method is idempotent; a POST is not, as the server may have acted
// on it. Reused connections are checked for a close first (stillOpen),
// so that race is narrow.
func (p *Pool) RoundTrip(ctx context.Context, req *http.Request, body []byte, header http.Header) (*http.Response, error) {
	if body == nil && req.Body != nil {
		req.Body = &bodyErr{r: req.Body}
	}
	for attempt := 0; ; attempt++ {
		c, reused, err := p.take(ctx, attempt > 0)
		if err != nil {
			return nil, err
		}
		res, err := c.exchange(ctx, req, body, header)
		if err == nil {
			return res, nil
		}
		if !reused || attempt > 0 || req.Body != nil && body == nil || !idempotent(req) || ctx.Err() != nil {
			return nil, err
		}
	}
}

func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// take returns an idle connection that still looks open, or dials.
func (p *Pool) take(ctx context.Context, fresh bool) (*upstreamConn, bool, error) {
	if !fresh {
		for {
			p.mu.Lock()
			var c *upstreamConn
			if n := len(p.idle); n > 0 {
				c = p.idle[n-1]
				p.idle[n-1] = nil
				p.idle = p.idle[:n-1]
			}
			p.mu.Unlock()
			if c == nil {
				break
			}
			if time.Since(c.idleSince) < upstreamIdleTimeout && c.br.Buffered() == 0 && c.open.check() {
				return c, true, nil
			}
			c.conn.Close()
		}
	}
	c, err := p.dial(ctx)
	return c, false, err
}

// dial connects to exactly the checked address, whatever the URL says,
// with TLS for the pool's host name when the pool serves https.
func (p *Pool) dial(ctx context.Context) (*upstreamConn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	conn, err := d.DialContext(ctx, "tcp", p.key.Addr.String())
	if err != nil {
		return nil, err
	}
	c := &upstreamConn{pool: p, conn: conn}
	sock := RawIO(conn) // conn's reads and writes, as raw system calls
	if p.tls != nil {
		tc := tls.Client(sock, p.tls)
		hctx, cancel := context.WithTimeout(ctx, dialTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			conn.Close()
			return nil, err
		}
		c.conn, c.tls, sock = tc, true, tc
	}
	c.lim.r = sock
	c.open = newOpenCheck(c.conn)
	c.kill = func() { c.conn.Close() }
	c.br = bufio.NewReaderSize(&c.lim, 4<<10)
	c.bw = bufio.NewWriterSize(sock, 4<<10)
	return c, nil
}

// put returns c to the pool, or closes it when the pool is closed or full.
func (p *Pool) put(c *upstreamConn) {
	c.idleSince = time.Now()
	p.mu.Lock()
	if p.closed || len(p.idle) >= maxIdlePerPool {
		p.mu.Unlock()
		c.conn.Close()
		return
	}
	p.idle = append(p.idle, c)
	if p.sweep == nil {
		p.sweep = time.AfterFunc(upstreamIdleTimeout, p.sweepIdle)
	}
	p.mu.Unlock()
}

// sweepIdle closes the connections idle too long and re-arms while any
// stay idle, so a pool no longer used lets its connections go.
func (p *Pool) sweepIdle() {
	p.mu.Lock()
	keep := p.idle[:0]
	var expired []*upstreamConn
	for _, c := range p.idle {
		if time.Since(c.idleSince) >= upstreamIdleTimeout {
			expired = append(expired, c)
		} else {
			keep = append(keep, c)
		}
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	p.sweep = nil
	if len(p.idle) > 0 && !p.closed {
		p.sweep = time.AfterFunc(upstreamIdleTimeout, p.sweepIdle)
	}
	p.mu.Unlock()
	for _, c := range expired {
		c.conn.Close()
	}
}

// close closes the idle connections and makes put close the busy ones.
func (p *Pool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	if p.sweep != nil {
		p.sweep.Stop()
		p.sweep = nil
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.conn.Close()
	}
}

// exchange writes req and reads its response, its fields into header
// (see roundTrip). Cancelling ctx closes the connection, which ends a
// blocked write or read.
func (c *upstreamConn) exchange(ctx context.Context, req *http.Request, body []byte, header http.Header) (*http.Response, error) {
	ended := whenEnded(ctx, &c.kill)
	fail := func(err error) (*http.Response, error) {
		ended.stopped()
		c.conn.Close()
		clear(header) // nothing of a response that failed
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, err
	}
	werr := writeRequest(c.bw, req, body)
	if werr == nil {
		werr = c.bw.Flush()
	}
	if be, ok := req.Body.(*bodyErr); werr != nil && (ok && be.err != nil || ctx.Err() != nil) {
		// The client's body failed (or the client left): nothing to wait for.
		return fail(werr)
	}
	// Even when the write failed, the server may have answered before it
	// stopped reading (a 413, say): read what it sent.
	var r *upstreamResponse
	for n := 0; ; n++ {
		c.lim.n = maxResponseHeaderBytes
		var err error
		r, err = readResponse(c.br, &c.head, req.Method, header)
		if err != nil {
			if werr != nil {
				err = werr
			}
			return fail(err)
		}
		if r.res.StatusCode >= 200 || r.res.StatusCode == http.StatusSwitchingProtocols || n == max1xxResponses {
			break
		}
		// Informational (100 Continue, 103 Early Hints): not forwarded,
		// and without a body.
	}
	c.lim.n = math.MaxInt64
	res := &r.res
	if res.StatusCode < 200 {
		return fail(fmt.Errorf("upstream answered %d, which the proxy does not relay", res.StatusCode))
	}
	res.Request = req
	b := &r.body
	b.c, b.ended = c, ended
	// After 101 Switching Protocols the connection speaks another
	// protocol: never reused.
	b.reuse = werr == nil && !res.Close && res.StatusCode != http.StatusSwitchingProtocols
	res.Body = b
	return res, nil
}

// writeRequest writes req as HTTP/1.1 to bw: its request line (the URL's
// escaped path and query), Host, its end-to-end header fields, and its
// body — body when the proxy holds all of it, else req.Body streamed
// (ContentLength bytes, or chunked when the length is unknown). The
// fields that frame a message (Content-Length, Transfer-Encoding,
// Trailer) and Host are the proxy's own, never copied, and the
// hop-by-hop ones are left out; nothing else is added (no User-Agent).
func writeRequest(bw *bufio.Writer, req *http.Request, body []byte) error {
	writeRequestHead(bw, req)
	length := req.ContentLength
	streamed := body == nil && req.Body != nil && req.Body != http.NoBody && length != 0
	if body != nil {
		length = int64(len(body))
	}
	switch {
	case streamed && length < 0:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case length > 0 || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch:
		bw.WriteString("Content-Length: ")
		writeInt(bw, max(length, 0), 10)
		bw.WriteString("\r\n")
	}
	if _, err := bw.WriteString("\r\n"); err != nil {
		return err
	}
	switch {
	case body != nil:
		_, err := bw.Write(body)
		return err
	case !streamed:
		return nil
	case length < 0:
		cw := httputil.NewChunkedWriter(bw)
		if _, err := io.Copy(cw, req.Body); err != nil {
			return err
		}
		if err := cw.Close(); err != nil {
			return err
		}
		_, err := bw.WriteString("\r\n")
		return err
	default:
		n, err := io.CopyN(bw, req.Body, length)
		if err == io.EOF && n < length {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
}

// writeRequestHead writes req's request line, Host and end-to-end header
// fields (see writeRequest), without the blank line that ends them.
func writeRequestHead(bw *bufio.Writer, req *http.Request) {
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(req.URL.EscapedPath())
	if req.URL.RawQuery != "" {
		bw.WriteByte('?')
		bw.WriteString(req.URL.RawQuery)
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	bw.WriteString(host)
	bw.WriteString("\r\n")
	named := connectionNamed(req.Header)
	writeFields(bw, req.Header, func(name string) bool { return framingField(name) || isHopByHop(name, named) })
}

// framingField reports the fields the proxy writes itself, never copied.
func framingField(name string) bool {
	switch name {
	case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	}
	return false
}

// bodyErr wraps a streamed request body to remember an error reading it,
// telling a client failure from an upstream one.
type bodyErr struct {
	r   io.ReadCloser
	err error
}

func (b *bodyErr) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

func (b *bodyErr) Close() error { return b.r.Close() }

// upstreamBody is a response body: read to its end, it hands the
// connection back to the pool; closed early, it closes the connection.
// One is made for each response, never reused: a late Close can only ever
// reach the exchange it belongs to.
type upstreamBody struct {
	responseBody
	c     *upstreamConn
	ended endHook
	reuse bool
	done  bool
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.responseBody.Read(p)
	if err != nil {
		b.finish(err == io.EOF)
	}
	return n, err
}

// Close ends the body; one with no bytes on the wire (a HEAD response, a
// 204 or 304, a zero Content-Length) is complete however little was read.
func (b *upstreamBody) Close() error {
	if !b.done {
		b.finish(b.kind == noBody)
	}
	return nil
}

func (b *upstreamBody) finish(complete bool) {
	b.done = true
	// It fails once cancellation has closed the connection.
	open := b.ended.stopped()
	if complete && open && b.reuse && b.c.br.Buffered() == 0 {
		b.c.pool.put(b.c)
		return
	}
	b.c.conn.Close()
}
