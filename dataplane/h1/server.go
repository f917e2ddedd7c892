package h1

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
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Server serves HTTP/1.x to the proxy's clients: the connections of its
// listener, and the inner connections of intercepted CONNECT tunnels. It
// reads requests with its own strict reader (request.go) and writes
// responses itself, without what net/http's server does around a handler
// that the proxy does not need (a context, a header map clone and a
// background read per request, content sniffing); under load that
// machinery was about a third of what the proxy cost per request.
//
// Handlers are ordinary http.Handlers. The http.ResponseWriter they get
// also flushes (http.Flusher), hijacks (http.Hijacker) and sets deadlines,
// for http.ResponseController. A request's context carries its connection
// (Problem, and the upstream exchange's cancellation) and what
// Config.ConnContext adds, and ends when the client goes away while the
// request is served (noticed once it has taken longer than watchAfter).
type Server struct {
	cfg Config

	mu       sync.Mutex
	conns    map[*serverConn]struct{}
	draining atomic.Bool    // set under mu
	served   sync.WaitGroup // connections being served, not hijacked
}

// Config configures a Server. Zero values take the documented defaults.
type Config struct {
	// Handler answers every request the server reads.
	Handler http.Handler
	// ConnContext, if set, returns the context of a connection's requests,
	// made from ctx once when the connection is served (the proxy adds
	// its view of the client). It must keep ctx's values and add no
	// cancellation of its own.
	ConnContext func(ctx context.Context, conn net.Conn) context.Context
	// SameAuthority reports whether a Host header naming host names the
	// authority of an absolute-form request's URI, uri (defaultPort is
	// the URI scheme's); when it does not, the request's connection is
	// marked (Problem). Called only when the two are spelled differently.
	// Default: nil, different spellings are different authorities.
	SameAuthority func(uri, host, defaultPort string) bool
	// Procs counts the requests being served (procs.go). Default: nil,
	// not counted.
	Procs *Procs
	// Logger hears of failed accepts and of handlers that panicked.
	// Default slog.Default().
	Logger *slog.Logger
	// IdleTimeout closes a connection idle between requests (default 2
	// minutes); HeaderTimeout bounds reading a request's head (default 30
	// seconds).
	IdleTimeout, HeaderTimeout time.Duration
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

// NewServer returns a server of cfg.Handler; it serves nothing until Serve
// or ServeConn.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = idleTimeout
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = readHeaderTimeout
	}
	return &Server{cfg: cfg, conns: make(map[*serverConn]struct{})}
}

// Serve accepts connections from ln and serves each on its own goroutine
// until ln is closed (Shutdown closes it).
func (s *Server) Serve(ln net.Listener) error {
	return Accept(ln, s.cfg.Logger, func(conn net.Conn) {
		c := s.track(conn)
		if c == nil {
			conn.Close()
			return
		}
		go s.serveConn(c)
	})
}

// Accept accepts connections from ln and hands each to serve, until ln is
// closed (nil) or accepting fails for good (its error). An accept that
// failed for a while (out of file descriptors, say) is tried again after a
// wait, as net/http does, and logged.
func Accept(ln net.Listener, log *slog.Logger, serve func(net.Conn)) error {
	var delay time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				log.Warn("accept failed; retrying", "err", err, "delay", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		serve(conn)
	}
}

// ServeConn serves one connection on the calling goroutine (an
// intercepted tunnel's), until it is done or the server shuts down.
func (s *Server) ServeConn(conn net.Conn) {
	c := s.track(conn)
	if c == nil {
		conn.Close()
		return
	}
	s.serveConn(c)
}

// track registers a new connection; nil once the server drains.
func (s *Server) track(conn net.Conn) *serverConn {
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

func (s *Server) untrack(c *serverConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops serving: ln is closed, idle connections close now and
// busy ones after their response, and whatever is still open when ctx
// ends is closed. Hijacked connections are not the server's.
func (s *Server) Shutdown(ctx context.Context, ln net.Listener) {
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
	srv    *Server
	conn   net.Conn
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
	// counted says the request being served is counted in srv.cfg.Procs,
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

// Problem returns why the connection of the request whose context is ctx
// is refused, or "": what the strict reader found that Go's server would
// quietly normalise or accept (request.go). Its requests are still read
// and handed to the handler, which is to deny them naming the problem;
// the connection closes after that answer.
func Problem(ctx context.Context) string {
	if c := connOf(ctx); c != nil {
		if p := c.problem.Load(); p != nil {
			return *p
		}
	}
	return ""
}

func (s *Server) serveConn(c *serverConn) {
	sock := RawIO(c.conn) // c.conn's reads and writes, as raw system calls
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(sock)
	c.bw = writers.Get().(*bufio.Writer)
	c.bw.Reset(sock)
	if a := c.conn.RemoteAddr(); a != nil {
		c.remote = a.String()
	}
	ctx := context.WithValue(context.Background(), connKey{}, c)
	if s.cfg.ConnContext != nil {
		ctx = s.cfg.ConnContext(ctx, c.conn)
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.template = *new(http.Request).WithContext(c.ctx)
	c.timer = time.AfterFunc(time.Hour, c.watch)
	c.timer.Stop()
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			s.cfg.Logger.Error("panic serving a proxy client", "remote", c.remote, "panic", v, "stack", string(debug.Stack()))
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
		c.extendReadDeadline(c.srv.cfg.IdleTimeout)
		_, err := c.br.Peek(1)
		c.setIdle(false)
		if err != nil {
			return false
		}
	}
	if !c.headBuffered() {
		c.setReadDeadline(time.Now().Add(c.srv.cfg.HeaderTimeout))
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
		c.srv.cfg.Procs.begin()
	}
	c.srv.cfg.Handler.ServeHTTP(w, r)
	c.uncount()
	c.unwatch()
	if c.hijacked {
		return false
	}
	w.finish()
	return !w.closeAfter && c.ctx.Err() == nil
}

// uncount ends the count of the request being served in srv.cfg.Procs.
func (c *serverConn) uncount() {
	if c.counted {
		c.counted = false
		c.srv.cfg.Procs.end()
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
	c.setReadDeadline(time.Now().Add(c.srv.cfg.HeaderTimeout))
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
