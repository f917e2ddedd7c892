package transport

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/mem"
)

// The connection router: one port, two HTTP/2 servers.
//
// Connect on net/http serves every service on the port. net/http's HTTP/2
// server, though, runs each stream with a per-stream write buffer and
// request state that cost an idle policy stream about 20 KiB before the
// gateway adds anything (BENCHMARKS.md, bench/streamfloor); grpc-go's
// server costs about half. Proxies hold one policy stream each for hours,
// so a plaintext (h2c) connection whose first request is a gRPC call to
// DistributionService goes to a grpc-go server that serves that service
// alone (grpc.go, GRPCRoute); every other connection — HTTP/1.1, h2c for anything
// else, gRPC-Web, the Connect protocol, TLS — goes to net/http unchanged.
//
// To see the first request the router must answer the client preface: a
// gRPC client (grpc-go's among them) sends no request before the server's
// SETTINGS frame. The router sends an empty SETTINGS frame (the protocol's
// defaults, which the client assumes until then anyway), reads the
// client's frames up to its first HEADERS and the ACK of that SETTINGS,
// and hands the connection to the chosen server with every byte it read
// replayed except that ACK, so the server sees an ordinary connection. The
// server then sends its own SETTINGS; HTTP/2 allows any number. All of it
// is bounded: a connection that does not get that far within
// routeTimeout, or sends more than maxRouteBytes first, or breaks the
// framing, is closed.
//
// With TLS the router terminates it (the handshake is bounded by the same
// timeout): a connection that negotiated h2 is peeked and routed as above;
// anything else (http/1.1, no ALPN) goes to net/http without a peek. Both
// servers then read the decrypted connection, so net/http serves it as it
// would plaintext (handlers see no r.TLS; the gateway's configuration says
// whether it serves TLS).

const (
	routeTimeout  = 10 * time.Second
	maxRouteBytes = 64 << 10
)

// errRouteTooLong: the client sent more than maxRouteBytes before its
// first request was known.
var errRouteTooLong = errors.New("too many bytes before the first request")

// router accepts connections on ln and hands each to http or grpc.
type router struct {
	ln      net.Listener
	timeout time.Duration
	// toGRPC says whether a connection whose first request has these
	// :path and content-type belongs to the grpc-go server.
	toGRPC func(path, contentType string) bool
	log    *slog.Logger
	// routed counts the connections handed to each server ("grpc",
	// "http"), if not nil.
	routed func(server string)

	http, grpc *connListener
	// tlsConfig, when set, terminates TLS on every connection.
	tlsConfig *tls.Config

	mu      sync.Mutex
	closed  bool
	pending map[net.Conn]struct{} // being routed
	wg      sync.WaitGroup
	done    chan struct{}
}

func newRouter(ln net.Listener, log *slog.Logger, toGRPC func(path, contentType string) bool) *router {
	return &router{
		ln:      ln,
		timeout: routeTimeout,
		toGRPC:  toGRPC,
		log:     log,
		http:    newConnListener(ln.Addr()),
		grpc:    newConnListener(ln.Addr()),
		pending: make(map[net.Conn]struct{}),
		done:    make(chan struct{}),
	}
}

// serve accepts until the listener is closed, routing each connection on
// a goroutine of its own.
func (r *router) serve() error {
	var backoff time.Duration
	for {
		c, err := r.ln.Accept()
		if err != nil {
			select {
			case <-r.done:
				return nil
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				// Out of file descriptors and the like: wait, as
				// net/http's Serve does, and accept again.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				r.log.Warn("accept failed; retrying", "err", err, "in", backoff)
				t := time.NewTimer(backoff)
				select {
				case <-t.C:
				case <-r.done:
					t.Stop()
					return nil
				}
				continue
			}
			return err
		}
		backoff = 0
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			return nil
		}
		r.pending[c] = struct{}{}
		r.wg.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.wg.Done()
			r.route(c)
		}()
	}
}

// close stops accepting, closes the connections still being routed and
// waits for their goroutines. It leaves the two servers' listeners to the
// servers' own shutdown.
func (r *router) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.done)
		r.ln.Close()
		for c := range r.pending {
			c.Close()
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *router) route(c net.Conn) {
	c.SetDeadline(time.Now().Add(r.timeout))
	conn, replay, toGRPC, err := r.open(c)
	r.mu.Lock()
	delete(r.pending, c)
	closed := r.closed
	r.mu.Unlock()
	if err != nil || closed {
		if err != nil {
			r.log.Debug("closed a connection before its first request", "remote", c.RemoteAddr().String(), "err", err)
		}
		c.Close()
		return
	}
	conn.SetDeadline(time.Time{})
	pc := &peekedConn{Conn: conn, replay: replay}
	if tc, ok := conn.(*net.TCPConn); ok && toGRPC && rawReads {
		pc.raw, _ = tc.SyscallConn()
	}
	target, name := r.http, "http"
	if toGRPC {
		target, name = r.grpc, "grpc"
	}
	if r.routed != nil {
		r.routed(name)
	}
	select {
	case target.conns <- pc:
	case <-target.done:
		c.Close()
	case <-r.done:
		c.Close()
	}
}

// open terminates TLS when the router serves it, then peeks: it returns
// the connection the chosen server reads (c, or the TLS connection over
// it) and what it must read first.
func (r *router) open(c net.Conn) (conn net.Conn, replay []byte, toGRPC bool, err error) {
	if r.tlsConfig == nil {
		replay, toGRPC, err = r.peek(c)
		return c, replay, toGRPC, err
	}
	tc := tls.Server(c, r.tlsConfig)
	if err := tc.Handshake(); err != nil {
		return nil, nil, false, fmt.Errorf("TLS handshake: %w", err)
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		return tc, nil, false, nil // HTTP/1.1: net/http's
	}
	replay, toGRPC, err = r.peek(tc)
	return tc, replay, toGRPC, err
}

// peek reads the start of c and decides where it goes. It returns what
// the chosen server must read first.
func (r *router) peek(c net.Conn) (replay []byte, toGRPC bool, err error) {
	preface := []byte(http2.ClientPreface)
	var rec bytes.Buffer
	b := make([]byte, len(preface))
	for n := 0; n < len(preface); {
		m, err := c.Read(b[n:])
		rec.Write(b[n : n+m])
		if !bytes.Equal(b[n:n+m], preface[n:n+m]) {
			// Not prior-knowledge HTTP/2 (HTTP/1.1, TLS, anything else):
			// net/http's to answer.
			return rec.Bytes(), false, nil
		}
		n += m
		if err != nil && n < len(preface) {
			return nil, false, err
		}
	}

	// The server preface: an empty SETTINGS frame.
	if err := http2.NewFramer(c, nil).WriteSettings(); err != nil {
		return nil, false, err
	}
	fr := http2.NewFramer(nil, &recorder{r: c, rec: &rec, max: maxRouteBytes})
	fr.SetMaxReadFrameSize(16 << 10) // the default the SETTINGS above kept
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = maxRouteBytes
	var (
		first *http2.MetaHeadersFrame
		acked bool
	)
	for first == nil || !acked {
		start := rec.Len()
		f, err := fr.ReadFrame()
		if err != nil {
			return nil, false, err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() && !acked {
				// The ACK of the router's SETTINGS: the server must not
				// see it (net/http takes an ACK of nothing it sent as a
				// protocol error).
				rec.Truncate(start)
				acked = true
			}
		case *http2.MetaHeadersFrame:
			if first == nil {
				first = f
			}
		}
	}
	contentType := ""
	for _, hf := range first.RegularFields() {
		if hf.Name == "content-type" {
			contentType = hf.Value
			break
		}
	}
	return rec.Bytes(), r.toGRPC(first.PseudoValue("path"), contentType), nil
}

// recorder keeps what it reads, up to max bytes.
type recorder struct {
	r   io.Reader
	rec *bytes.Buffer
	max int
}

func (r *recorder) Read(p []byte) (int, error) {
	if r.rec.Len() >= r.max {
		return 0, errRouteTooLong
	}
	n, err := r.r.Read(p)
	r.rec.Write(p[:n])
	return n, err
}

// GRPCRoute says which connections go to the grpc-go server: gRPC (not
// gRPC-Web, not Connect) calls to one of procedures as the first request.
// Later requests on such a connection may only be to what the grpc-go
// server serves; anything else is Unimplemented there.
func GRPCRoute(procedures ...string) func(path, contentType string) bool {
	return func(path, contentType string) bool {
		return slices.Contains(procedures, path) && isGRPC(contentType)
	}
}

// isGRPC reports whether contentType is gRPC's (not gRPC-Web's, not
// Connect's).
func isGRPC(contentType string) bool {
	return contentType == "application/grpc" ||
		strings.HasPrefix(contentType, "application/grpc+") ||
		strings.HasPrefix(contentType, "application/grpc;")
}

// peekedConn is a connection whose first bytes were read by the router:
// reads return them first.
type peekedConn struct {
	net.Conn
	replay []byte
	raw    syscall.RawConn // of the TCP connection under Conn, where rawReads
}

// ReadOnReady is grpc-go's optional way of reading (its readyreader.Reader
// interface, which it looks for on the connection): a buffer from pool is
// taken only once data has arrived, so an idle connection pins no read
// buffer. grpc-go does that by itself on a *net.TCPConn, which a
// peekedConn hides from it.
func (c *peekedConn) ReadOnReady(bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	if len(c.replay) > 0 || c.raw == nil {
		buf := pool.Get(bufSize)
		n, err := c.Read(*buf)
		if n == 0 {
			pool.Put(buf)
			if err == nil {
				err = io.ErrNoProgress
			}
			return nil, 0, err
		}
		return buf, n, err
	}
	return readRaw(c.raw, bufSize, pool)
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if len(c.replay) > 0 {
		n := copy(p, c.replay)
		c.replay = c.replay[n:]
		if len(c.replay) == 0 {
			c.replay = nil
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// connListener is a net.Listener whose connections come from the router.
type connListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }
