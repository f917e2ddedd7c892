package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// httpServer serves HTTP/1.x to the proxy's clients: the connections of
// its listener, and the inner connections of intercepted CONNECT tunnels.
// It reads requests with the proxy's own strict reader (httpread.go) and
// writes responses itself, without what net/http's server does around a
// handler that the proxy does not need (a context, a header map clone
// and a background read per request, content sniffing); under load that
// machinery was about a third of what the proxy cost per request.
//
// Handlers are ordinary http.Handlers. The http.ResponseWriter they get
// also flushes (http.Flusher), hijacks (http.Hijacker) and sets deadlines,
// for http.ResponseController. A request's context carries the
// connection's client and ends when the client goes away while the
// request is served (noticed once it has taken longer than watchAfter).
type httpServer struct {
	handler   http.Handler
	clientFor func(net.Conn) *client
	log       *slog.Logger
	// procs counts the requests being served (procs.go); nil: not counted.
	procs *procScaler
	// idleTimeout and headerTimeout are idleTimeout and readHeaderTimeout
	// (tests shorten them).
	idleTimeout, headerTimeout time.Duration

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	draining atomic.Bool    // set under mu
	served   sync.WaitGroup // connections being served, not hijacked
}

const (
	// readHeaderTimeout bounds reading a request's head.
	readHeaderTimeout = 30 * time.Second
	// idleTimeout closes a connection idle between requests.
	idleTimeout = 2 * time.Minute
	// watchAfter is how long a request is served before its connection
	// is watched for the client going away (a fast answer never pays for
	// the watch).
	watchAfter = 100 * time.Millisecond
	// maxDiscard is how much of an unread request body is read past to
	// keep the connection; a longer rest closes it.
	maxDiscard = 256 << 10
	// pendingBody is how much of a response without a declared length is
	// held before the head is written: a body that ends within it is sent
	// with a Content-Length, a longer one chunked.
	pendingBody = 4 << 10
)

func newHTTPServer(h http.Handler, clientFor func(net.Conn) *client, procs *procScaler, log *slog.Logger) *httpServer {
	return &httpServer{handler: h, clientFor: clientFor, procs: procs, log: log, conns: make(map[*serverConn]struct{}),
		idleTimeout: idleTimeout, headerTimeout: readHeaderTimeout}
}

// serve accepts connections from ln and serves each on its own goroutine
// until ln is closed (shutdown closes it).
func (s *httpServer) serve(ln net.Listener) error {
	var delay time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of file descriptors, say: wait, as net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "delay", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := s.track(conn)
		if c == nil {
			conn.Close()
			continue
		}
		go s.serveConn(c)
	}
}

// serveInner serves one connection on the calling goroutine (an
// intercepted tunnel's), its requests judged as client's.
func (s *httpServer) serveInner(conn net.Conn, cl *client) {
	c := s.track(conn)
	if c == nil {
		conn.Close()
		return
	}
	c.client = cl
	s.serveConn(c)
}

// track registers a new connection; nil once the server drains.
func (s *httpServer) track(conn net.Conn) *serverConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return nil
	}
	c := &serverConn{srv: s, conn: conn}
	s.conns[c] = struct{}{}
	s.served.Add(1)
	return c
}

func (s *httpServer) untrack(c *serverConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// shutdown stops serving: ln is closed, idle connections close now and
// busy ones after their response, and whatever is still open when ctx
// ends is closed. Hijacked connections are not the server's.
func (s *httpServer) shutdown(ctx context.Context, ln net.Listener) {
	s.mu.Lock()
	s.draining.Store(true)
	for c := range s.conns {
		if c.idle.Load() {
			c.conn.Close()
		}
	}
	s.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	done := make(chan struct{})
	go func() { s.served.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.conn.Close()
		}
		s.mu.Unlock()
		<-done
	}
}

// setIdle marks the connection idle between requests; false when the
// server drains and the connection should close instead. It takes no
// lock: shutdown sets draining before it looks for idle connections, and
// a connection sets idle before it looks at draining, so (the atomics
// being sequentially consistent) at least one of the two sees the other
// and the connection is closed.
func (c *serverConn) setIdle(idle bool) bool {
	c.idle.Store(idle)
	return !idle || !c.srv.draining.Load()
}

// The connection's read deadline is changed only through setReadDeadline,
// which remembers it: a deadline matters only to a read that reaches the
// connection, so when what is to be read is already buffered (a request's
// whole head, its whole body) the deadline is left as it is, and the idle
// deadline is moved only when it is a 64th of the timeout short. Each
// change is a timer update in the runtime; a request used to make five.

// setReadDeadline sets the connection's read deadline to t.
func (c *serverConn) setReadDeadline(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setReadDeadlineLocked(t)
}

func (c *serverConn) setReadDeadlineLocked(t time.Time) {
	if t.Equal(c.deadline) {
		return
	}
	c.deadline = t
	c.conn.SetReadDeadline(t)
}

// extendReadDeadline makes the read deadline d from now, give or take a
// 64th of d: a deadline already in that range (less than two seconds
// short of two minutes, say) stays.
func (c *serverConn) extendReadDeadline(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	target := time.Now().Add(d)
	if c.deadline.After(target.Add(-d/64)) && !c.deadline.After(target) {
		return
	}
	c.setReadDeadlineLocked(target)
}

// headBuffered reports whether the reader holds a whole request head
// (up to the blank line that ends it), so that reading it cannot block.
func (c *serverConn) headBuffered() bool {
	b, _ := c.br.Peek(c.br.Buffered())
	return bytes.Contains(b, []byte("\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// serverConn is one client connection and the state of the request on it.
type serverConn struct {
	srv    *httpServer
	conn   net.Conn
	client *client
	remote string
	br     *bufio.Reader
	bw     *bufio.Writer
	ctx    context.Context
	cancel context.CancelFunc
	// template is the zero request with ctx as its context: each request
	// read on the connection starts as a copy of it (readRequest).
	template http.Request

	idle    atomic.Bool
	problem atomic.Pointer[string] // why every request on it is denied
	// onEnd is what a request's upstream exchange asked to run if the
	// request's context ends (whenEnded).
	onEnd atomic.Pointer[func()]
	// bodyBuffered says the request's whole body was in the reader once
	// its head was read: reading it cannot block.
	bodyBuffered bool
	skipCRLF     int
	head         []byte
	req          requestWithURL // every request (readRequest)
	header       http.Header    // and its header (requestHeader)
	values       []string       // and the backing array of its values
	body         requestBody
	res          response
	hijacked     bool
	// counted says the request being served is counted in srv.procs,
	// until its response head is written.
	counted bool

	// The watch for the client going away (watch, unwatch).
	mu         sync.Mutex
	timer      *time.Timer
	deadline   time.Time // the read deadline last set (setReadDeadline)
	serving    bool      // a request is being served
	bodyEOF    bool      // its body has been read to the end
	watchOnEOF bool      // the timer fired before that
	watching   chan struct{}
}

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4<<10) }}
)

type connKey struct{}

// connOf returns the connection a request came on (nil for a request this
// server did not read).
func connOf(ctx context.Context) *serverConn {
	c, _ := ctx.Value(connKey{}).(*serverConn)
	return c
}

// framingProblem returns why the request's connection is refused, or "".
func framingProblem(ctx context.Context) string {
	if c := connOf(ctx); c != nil {
		if p := c.problem.Load(); p != nil {
			return *p
		}
	}
	return ""
}

func (s *httpServer) serveConn(c *serverConn) {
	sock := rawIO(c.conn) // c.conn's reads and writes, as raw system calls
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(sock)
	c.bw = writers.Get().(*bufio.Writer)
	c.bw.Reset(sock)
	if c.client == nil {
		c.client = s.clientFor(c.conn)
	}
	if a := c.conn.RemoteAddr(); a != nil {
		c.remote = a.String()
	}
	ctx := context.WithValue(context.WithValue(context.Background(), clientKey{}, c.client), connKey{}, c)
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.template = *new(http.Request).WithContext(c.ctx)
	c.timer = time.AfterFunc(time.Hour, c.watch)
	c.timer.Stop()
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			s.log.Error("panic serving a proxy client", "remote", c.remote, "panic", v, "stack", string(debug.Stack()))
		}
		c.uncount() // a handler that panicked (ErrAbortHandler too) did not
		if c.hijacked {
			c.end()
			return // the connection, its reader and writer went with it
		}
		// After a panic a watch may still read the connection: end it
		// before the reader goes back to the pool.
		c.unwatch()
		c.timer.Stop()
		c.end()
		s.untrack(c)
		s.served.Done()
		c.conn.Close()
		c.br.Reset(nil)
		readers.Put(c.br)
		c.bw.Reset(nil)
		writers.Put(c.bw)
	}()
	for c.serveOne() {
	}
}

// serveOne reads and answers one request; false when the connection is
// done (closed, hijacked, or to be closed).
func (c *serverConn) serveOne() bool {
	if c.br.Buffered() == 0 {
		// Idle until the next request's first byte.
		if !c.setIdle(true) {
			return false
		}
		c.extendReadDeadline(c.srv.idleTimeout)
		_, err := c.br.Peek(1)
		c.setIdle(false)
		if err != nil {
			return false
		}
	}
	if !c.headBuffered() {
		c.setReadDeadline(time.Now().Add(c.srv.headerTimeout))
	}
	r, err := c.readRequest()
	if r == nil {
		var re *requestError
		if errors.As(err, &re) {
			c.writeError(re)
		}
		return false
	}
	c.bodyBuffered = r.ContentLength == 0 || r.ContentLength > 0 && int64(c.br.Buffered()) >= r.ContentLength
	if !c.bodyBuffered {
		c.setReadDeadline(time.Time{}) // bodies are bounded by their readers
	}
	w := &c.res
	w.reset(c, r)

	c.mu.Lock()
	c.serving, c.bodyEOF, c.watchOnEOF = true, r.ContentLength == 0, false
	c.mu.Unlock()
	c.timer.Reset(watchAfter)
	if r.Method != http.MethodConnect { // a tunnel's requests count themselves
		c.counted = true
		c.srv.procs.begin()
	}
	c.srv.handler.ServeHTTP(w, r)
	c.uncount()
	c.unwatch()
	if c.hijacked {
		return false
	}
	w.finish()
	return !w.closeAfter && c.ctx.Err() == nil
}

// uncount ends the count of the request being served in srv.procs.
func (c *serverConn) uncount() {
	if c.counted {
		c.counted = false
		c.srv.procs.end()
	}
}

// discardBody reads past what the handler left of the request's body,
// before the response head is written, so that the connection can carry
// the next request; false when the rest is too long (or unreadable) and
// the connection must close instead.
func (c *serverConn) discardBody(r *http.Request) bool {
	switch {
	case r.ContentLength == 0 || c.body.eof:
		return true
	case c.body.err != nil:
		return false // where the body ends is not known
	case c.body.continueFirst:
		return false // the client waits to be asked for its body: never ask
	}
	c.setReadDeadline(time.Now().Add(c.srv.headerTimeout))
	defer c.setReadDeadline(time.Time{})
	n, err := io.CopyN(io.Discard, &c.body, maxDiscard+1)
	return n <= maxDiscard && err == io.EOF && c.body.eof
}

// watch runs when a request has been served for watchAfter: from then on
// a read waits for the client to go away (or send its next request),
// which cancels the request's context. It waits for the body to have been
// read, as the connection carries it until then.
func (c *serverConn) watch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.serving || c.watching != nil || c.hijacked {
		return
	}
	if !c.bodyEOF {
		c.watchOnEOF = true
		return
	}
	c.setReadDeadlineLocked(time.Time{})
	done := make(chan struct{})
	c.watching = done
	go func() {
		defer close(done)
		if _, err := c.br.Peek(1); err != nil && !isTimeout(err) {
			c.end()
		}
	}()
}

// bodyDone is called when the request's body has been read to its end.
func (c *serverConn) bodyDone() {
	c.mu.Lock()
	c.bodyEOF = true
	late := c.watchOnEOF
	c.mu.Unlock()
	if late {
		c.watch()
	}
}

// unwatch ends the watch: the request is answered, or hijacked.
func (c *serverConn) unwatch() {
	c.timer.Stop()
	c.mu.Lock()
	c.serving = false
	done := c.watching
	c.watching = nil
	if done != nil {
		c.setReadDeadlineLocked(aLongTimeAgo)
	}
	c.mu.Unlock()
	if done != nil {
		<-done
		c.setReadDeadline(time.Time{})
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// end cancels the connection's context: its client went away, or the
// connection is done. What a request asked to run then runs.
func (c *serverConn) end() {
	c.cancel()
	if f := c.onEnd.Swap(nil); f != nil {
		(*f)()
	}
}

// endHook is context.AfterFunc without its allocations, for a request this
// server read: see whenEnded.
type endHook struct {
	c    *serverConn
	f    *func()
	stop func() bool // context.AfterFunc's, for any other context
}

// whenEnded runs *f once if ctx ends before the hook's stopped, as
// context.AfterFunc(ctx, *f) does. When ctx ends exactly when the
// connection of a request this server read ends (the request's context,
// with values added but no cancellation of its own), the connection holds
// f itself, and nothing is allocated: an upstream exchange arms one per
// request. A second hook armed on the same connection while one is held
// goes to context.AfterFunc.
func whenEnded(ctx context.Context, f *func()) endHook {
	c := connOf(ctx)
	if c == nil || ctx.Done() != c.ctx.Done() || !c.onEnd.CompareAndSwap(nil, f) {
		return endHook{stop: context.AfterFunc(ctx, *f)}
	}
	if c.ctx.Err() != nil && c.onEnd.CompareAndSwap(f, nil) {
		(*f)() // ended already, as AfterFunc runs f at once
	}
	return endHook{c: c, f: f}
}

// stopped reports whether it stopped f from running (false: f has run, or
// is running).
func (h endHook) stopped() bool {
	if h.c != nil {
		return h.c.onEnd.CompareAndSwap(h.f, nil)
	}
	return h.stop()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isConnGone reports a connection the client closed or reset.
func isConnGone(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, os.ErrDeadlineExceeded)
}

// writeError answers a request the reader refused, and the connection
// closes.
func (c *serverConn) writeError(e *requestError) {
	c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	body := strconv.Itoa(e.status) + " " + http.StatusText(e.status) + ": " + e.reason
	c.bw.WriteString("HTTP/1.1 " + strconv.Itoa(e.status) + " " + http.StatusText(e.status) + "\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	c.bw.Flush()
}

// writeContinue answers Expect: 100-continue when the handler first reads
// the body.
func (c *serverConn) writeContinue() {
	if c.res.committed {
		return
	}
	c.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	c.bw.Flush()
}

// response is the http.ResponseWriter of one request.
type response struct {
	c             *serverConn
	req           *http.Request
	header        http.Header
	status        int
	wroteHeader   bool
	committed     bool // the head is written
	contentLength int64
	written       int64
	chunked       bool
	noBody        bool
	closeAfter    bool
	err           error
	pending       []byte
}

func (w *response) reset(c *serverConn, r *http.Request) {
	h, pending := w.header, w.pending[:0]
	if h == nil {
		h = make(http.Header, 8)
	} else {
		clear(h)
	}
	*w = response{c: c, req: r, header: h, contentLength: -1, pending: pending}
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader || w.c.hijacked {
		return
	}
	if code < 100 || code > 999 {
		code = http.StatusInternalServerError
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		return // informational answers are not relayed
	}
	w.wroteHeader, w.status = true, code
	w.c.uncount() // what follows is the body's relay
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	if v := w.header["Content-Length"]; len(v) > 0 {
		if n, ok := parseContentLength(v[0]); ok {
			w.contentLength = n
		} else {
			delete(w.header, "Content-Length")
		}
	}
}

func (w *response) Write(p []byte) (int, error) {
	if w.c.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		if w.req.Method == http.MethodHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		if w.contentLength < 0 && len(w.pending)+len(p) <= pendingBody {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		w.commit(false)
	}
	return len(p), w.writeBody(p)
}

// writeBody writes p as the body, in a chunk when chunked.
func (w *response) writeBody(p []byte) error {
	if len(p) == 0 || w.err != nil {
		return w.err
	}
	bw := w.c.bw
	if w.chunked {
		writeInt(bw, int64(len(p)), 16)
		bw.WriteString("\r\n")
		bw.Write(p)
		_, w.err = bw.WriteString("\r\n")
	} else {
		_, w.err = bw.Write(p)
	}
	if w.err != nil {
		w.closeAfter = true
	}
	return w.err
}

// commit writes the status line and header. final says the handler has
// returned: a body held whole goes with its length.
func (w *response) commit(final bool) {
	w.committed = true
	r, h := w.req, w.header
	_, trailers := h["Trailer"]
	switch {
	case w.noBody:
	case w.contentLength >= 0 && !trailers:
	case final && !trailers:
		w.contentLength = int64(len(w.pending))
		h["Content-Length"] = []string{strconv.Itoa(len(w.pending))}
	case r.ProtoAtLeast(1, 1):
		delete(h, "Content-Length")
		w.contentLength = -1
		w.chunked = true
		h["Transfer-Encoding"] = []string{"chunked"}
	default:
		// An HTTP/1.0 client reads to the end of the connection.
		delete(h, "Content-Length")
		w.contentLength = -1
		w.closeAfter = true
	}
	if !w.c.discardBody(r) {
		w.closeAfter = true
	}
	if r.Close || httpguts.HeaderValuesContainsToken(h["Connection"], "close") || w.c.srv.draining.Load() {
		w.closeAfter = true
	}
	if w.closeAfter {
		h["Connection"] = []string{"close"}
	} else if !r.ProtoAtLeast(1, 1) {
		h["Connection"] = []string{"keep-alive"}
	}
	_, dated := h["Date"]

	bw := w.c.bw
	bw.WriteString("HTTP/1.1 ")
	writeInt(bw, int64(w.status), 10)
	bw.WriteByte(' ')
	if text := http.StatusText(w.status); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code " + strconv.Itoa(w.status))
	}
	bw.WriteString("\r\n")
	writeFields(bw, h, nil)
	if !dated {
		// Written, not set: a header map entry would cost a slice.
		writeField(bw, "Date", httpDate())
	}
	_, w.err = bw.WriteString("\r\n")
	if w.err != nil {
		w.closeAfter = true
	}
	if len(w.pending) > 0 {
		p := w.pending
		w.pending = w.pending[:0]
		w.writeBody(p)
	}
}

// writeInt writes n in base into bw's own buffer, without allocating
// (a local array would escape through bufio.Writer.Write).
func writeInt(bw *bufio.Writer, n int64, base int) {
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), n, base))
}

// writeFields writes the fields of h whose names are tokens, except those
// skip names (nil: none).
func writeFields(bw *bufio.Writer, h http.Header, skip func(name string) bool) {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) || skip != nil && skip(k) {
			continue
		}
		for _, v := range vv {
			writeField(bw, k, v)
		}
	}
}

// writeField writes one field line, the value with any CR or LF as a
// space so that no value can end the header early.
func writeField(bw *bufio.Writer, name, value string) {
	bw.WriteString(name)
	bw.WriteString(": ")
	if strings.ContainsAny(value, "\r\n") {
		value = strings.NewReplacer("\r", " ", "\n", " ").Replace(value)
	}
	bw.WriteString(value)
	bw.WriteString("\r\n")
}

// Flush sends the head and everything written so far.
func (w *response) Flush() { w.FlushError() }

// FlushError is Flush, saying why it failed (http.ResponseController).
func (w *response) FlushError() error {
	if w.c.hijacked {
		return http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(false)
	}
	if w.err != nil {
		return w.err
	}
	if w.err = w.c.bw.Flush(); w.err != nil {
		w.closeAfter = true
	}
	return w.err
}

// finish completes the response once the handler has returned.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(true)
	}
	bw := w.c.bw
	if w.chunked && w.err == nil {
		bw.WriteString("0\r\n")
		for _, names := range w.header["Trailer"] {
			for name := range strings.SplitSeq(names, ",") {
				k := http.CanonicalHeaderKey(strings.TrimSpace(name))
				if !httpguts.ValidHeaderFieldName(k) {
					continue
				}
				for _, v := range w.header[k] {
					writeField(bw, k, v)
				}
			}
		}
		_, w.err = bw.WriteString("\r\n")
	}
	if !w.noBody && w.contentLength >= 0 && w.written < w.contentLength {
		w.closeAfter = true // the client waits for bytes that will not come
	}
	if w.err == nil {
		w.err = bw.Flush()
	}
	if w.err != nil {
		w.closeAfter = true
	}
}

// SetReadDeadline and SetWriteDeadline are for http.ResponseController.
// A read deadline is for reading the request: once its whole body is
// buffered no read reaches the connection, and the deadline is left as
// it is (the next request's reading sets its own).
func (w *response) SetReadDeadline(t time.Time) error {
	if !w.c.bodyBuffered {
		w.c.setReadDeadline(t)
	}
	return nil
}

func (w *response) SetWriteDeadline(t time.Time) error { return w.c.conn.SetWriteDeadline(t) }

// Hijack hands the connection to the handler (CONNECT tunnels), with what
// the server had read of it.
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c := w.c
	if c.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.committed {
		return nil, nil, errors.New("hijack after the response began")
	}
	c.unwatch()
	c.uncount()
	c.mu.Lock()
	c.hijacked = true
	c.mu.Unlock()
	c.conn.SetDeadline(time.Time{})
	c.srv.untrack(c)
	c.srv.served.Done() // no longer the server's to wait for
	return c.conn, bufio.NewReadWriter(c.br, c.bw), nil
}

// httpDate is the Date header value, formatted once a second.
func httpDate() string {
	now := time.Now().Unix()
	if d := cachedDate.Load(); d != nil && d.sec == now {
		return d.text
	}
	d := &dateText{sec: now, text: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	cachedDate.Store(d)
	return d.text
}

type dateText struct {
	sec  int64
	text string
}

var cachedDate atomic.Pointer[dateText]
