//go:build linux && !386

package h1

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestRawIOWrapsSocketsOnly(t *testing.T) {
	c, _ := tcpPair(t)
	if _, ok := newRawConn(c).(*rawConn); !ok {
		t.Fatalf("newRawConn(%T) = %T, want *rawConn", c, newRawConn(c))
	}
	limited := &limitedConn{Conn: c, release: func() {}}
	r, ok := newRawConn(limited).(*rawConn)
	if !ok || r.Conn != limited {
		t.Fatalf("newRawConn(limitedConn) = %T, want a *rawConn over the limitedConn (its Close gives the place back)", newRawConn(limited))
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if got := newRawConn(p1); got != p1 {
		t.Fatalf("newRawConn(pipe) = %T, want the pipe itself", got)
	}
	buffered := &bufferedConn{Conn: c}
	if got := newRawConn(buffered); got != buffered {
		t.Fatalf("newRawConn(bufferedConn) = %T, want the bufferedConn itself (its Read is not the socket's)", got)
	}
	_, isRaw := RawIO(c).(*rawConn)
	if isRaw == raceEnabled {
		t.Fatalf("RawIO(%T) = %T with the race detector %v", c, RawIO(c), raceEnabled)
	}
}

// A write larger than the socket buffers waits for the reader (EAGAIN,
// then the poller) and arrives whole and in order; reads return what
// there is, then io.EOF when the writer closes.
func TestRawIOLargeWriteAndEOF(t *testing.T) {
	a, b := tcpPair(t)
	ra, rb := newRawConn(a), newRawConn(b)
	data := make([]byte, 8<<20)
	rand.Read(data)
	errc := make(chan error, 1)
	go func() {
		n, err := ra.Write(data)
		if err == nil && n != len(data) {
			err = io.ErrShortWrite
		}
		a.(*net.TCPConn).CloseWrite()
		errc <- err
	}()
	got, err := io.ReadAll(rb)
	if err != nil {
		t.Fatalf("ReadAll: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, differing from the %d written", len(got), len(data))
	}
	if n, err := rb.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the end = %d, %v; want 0, io.EOF", n, err)
	}
	if n, err := rb.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) = %d, %v; want 0, nil", n, err)
	}
}

// Deadlines, Close and a reset peer give the net package's errors.
func TestRawIOErrors(t *testing.T) {
	a, b := tcpPair(t)
	ra := newRawConn(a)

	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := ra.Read(make([]byte, 1))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline: %v; want a timeout (os.ErrDeadlineExceeded)", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("Read past its deadline: %#v; want a *net.OpError with Op read", err)
	}
	a.SetReadDeadline(time.Time{})

	// The peer resets: RST on close with unread data and SO_LINGER 0.
	b.(*net.TCPConn).SetLinger(0)
	ra.Write([]byte("unread"))
	time.Sleep(20 * time.Millisecond)
	b.Close()
	time.Sleep(20 * time.Millisecond)
	a.SetReadDeadline(time.Now().Add(10 * time.Second)) // a missed reset fails, not hangs
	_, err = ra.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) || !isConnGone(err) {
		t.Fatalf("Read from a reset connection: %v; want ECONNRESET", err)
	}
	if !errors.As(err, &oe) || oe.Op != "read" || oe.Net != "tcp" {
		t.Fatalf("Read from a reset connection: %#v; want a *net.OpError for a tcp read", err)
	}

	a.Close()
	if _, err := ra.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v; want net.ErrClosed", err)
	}
	if _, err := ra.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v; want net.ErrClosed", err)
	}
}

// A read waiting for data ends with net.ErrClosed when another goroutine
// closes the connection, as the watch for a departed client relies on.
func TestRawIOCloseWakesReader(t *testing.T) {
	a, _ := tcpPair(t)
	ra := newRawConn(a)
	errc := make(chan error, 1)
	go func() {
		_, err := ra.Read(make([]byte, 1))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	ra.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("blocked Read after Close: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a Read waiting for data did not end when the connection closed")
	}
}

// Reads and writes from several goroutines at once each get whole
// buffers through (go test -race checks the state they share).
func TestRawIOConcurrentWriters(t *testing.T) {
	a, b := tcpPair(t)
	ra, rb := newRawConn(a), newRawConn(b)
	const writers, each = 4, 2000
	done := make(chan error, writers)
	for w := range writers {
		go func() {
			msg := bytes.Repeat([]byte{byte('a' + w)}, 64)
			for range each {
				if _, err := ra.Write(msg); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	counts := make(map[byte]int)
	buf := make([]byte, 64)
	for range writers * each {
		if _, err := io.ReadFull(rb, buf); err != nil {
			t.Fatal(err)
		}
		if bytes.Count(buf, buf[:1]) != len(buf) {
			t.Fatalf("writes interleaved within one call: %q", buf)
		}
		counts[buf[0]]++
	}
	for range writers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	for w := range writers {
		if counts[byte('a'+w)] != each {
			t.Fatalf("writer %d: %d messages arrived, want %d", w, counts[byte('a'+w)], each)
		}
	}
}

func TestPeekDontWait(t *testing.T) {
	a, b := tcpPair(t)
	if !stillOpen(a) {
		t.Fatal("a quiet open connection was reported closed")
	}
	b.Write([]byte("x"))
	time.Sleep(20 * time.Millisecond)
	if stillOpen(a) {
		t.Fatal("a connection holding unasked bytes was reported reusable")
	}
	buf := make([]byte, 1)
	io.ReadFull(a, buf)
	b.Close()
	time.Sleep(20 * time.Millisecond)
	if stillOpen(a) {
		t.Fatal("a connection the peer closed was reported open")
	}
}

// A write that passes its deadline with part of the buffer sent reports
// the part, and exactly that part arrives.
func TestRawIOWriteDeadlinePartial(t *testing.T) {
	a, b := tcpPair(t)
	ra := newRawConn(a)
	data := make([]byte, 64<<20) // more than both socket buffers hold
	rand.Read(data)
	a.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := ra.Write(data)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past its deadline: %d, %v; want os.ErrDeadlineExceeded", n, err)
	}
	if n <= 0 || n >= len(data) {
		t.Fatalf("Write past its deadline reported %d of %d bytes written; want a part", n, len(data))
	}
	a.Close()
	b.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[:n]) {
		t.Fatalf("%d bytes arrived; want the %d reported written, in order", len(got), n)
	}
}

// Reads and writes of nothing behave as the net package's: 0 and no
// error on an open connection, net.ErrClosed on a closed one.
func TestRawIOZeroLengthAfterClose(t *testing.T) {
	a, _ := tcpPair(t)
	ra := newRawConn(a)
	if n, err := ra.Write(nil); n != 0 || err != nil {
		t.Fatalf("Write(nil) on an open connection = %d, %v; want 0, nil", n, err)
	}
	ra.Close()
	if _, err := ra.Read(nil); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read(nil) after Close: %v; want net.ErrClosed", err)
	}
	if _, err := ra.Write(nil); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write(nil) after Close: %v; want net.ErrClosed", err)
	}
}

// A raw system call keeps its P, so one that blocked would stop the
// garbage collector and with it the process. File makes a socket blocking
// (the descriptor it returns shares the socket's flags); a read waiting
// on such a socket must still leave the runtime free. The test runs in a
// child process, so that the failure is a child that does not answer,
// not a test binary that hangs.
func TestRawIOBlockingFDDoesNotHangRuntime(t *testing.T) {
	if os.Getenv("RAWIO_BLOCKING_CHILD") == "1" {
		blockingFDChild()
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRawIOBlockingFDDoesNotHangRuntime$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RAWIO_BLOCKING_CHILD=1", "GOMAXPROCS=2")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the child hung (a raw read on a blocking socket held its P):\n%s", out)
	}
	if err != nil || !bytes.Contains(out, []byte("blocking-fd: ok")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func blockingFDChild() {
	fail := func(f string, a ...any) {
		fmt.Printf("blocking-fd: "+f+"\n", a...)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail("%v", err)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		time.Sleep(500 * time.Millisecond) // while the reader waits, and GC runs
		c.Write([]byte("x"))
		c.Close()
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		fail("%v", err)
	}
	f, err := a.(*net.TCPConn).File()
	if err != nil {
		fail("%v", err)
	}
	f.Fd() // sets the shared file description blocking
	ra := newRawConn(a)
	read := make(chan error, 1)
	go func() {
		b := make([]byte, 1)
		_, err := ra.Read(b)
		read <- err
	}()
	time.Sleep(100 * time.Millisecond) // the reader is in its read
	runtime.GC()
	if err := <-read; err != nil {
		fail("read: %v", err)
	}
	fmt.Println("blocking-fd: ok")
}

// The liveness check of a pooled TLS connection finds its descriptor
// through tls.Conn and the raw connection under it.
func TestPeekThroughTLSOverRawIO(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.ServerName = "example.com" // httptest's certificate names it
	tc := tls.Client(newRawConn(conn), cfg)
	defer tc.Close()
	if err := tc.HandshakeContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	check := newOpenCheck(tc)
	if check.rc == nil || check.broken {
		t.Fatalf("the check found no descriptor under tls.Conn over %T", tc.NetConn())
	}
	if !check.check() {
		t.Fatal("an open, quiet TLS connection was reported closed")
	}
	// A closed connection: the check reaches the descriptor, and fails.
	// (A server's close is not seen under TLS 1.3 here: its session
	// tickets wait unread ahead of the FIN, and TLS bytes may come unasked.)
	tc.Close()
	if check.check() {
		t.Fatal("a closed TLS connection was reported open")
	}
}

// readerOf and writerOf are what a bufio.Reader or Writer reads from or
// writes to (unexported fields, read through reflect).
func readerOf(br *bufio.Reader) reflect.Type {
	return reflect.ValueOf(br).Elem().FieldByName("rd").Elem().Type()
}

func writerOf(bw *bufio.Writer) reflect.Type {
	return reflect.ValueOf(bw).Elem().FieldByName("wr").Elem().Type()
}

// wantSock is the type the proxy's buffers should read and write: the raw
// connection, except under the race detector.
func wantSock(plain reflect.Type) reflect.Type {
	if raceEnabled {
		return plain
	}
	return reflect.TypeFor[*rawConn]()
}

// The server reads requests from and writes responses to the raw socket.
func TestServerUsesRawIO(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	types := make(chan [2]reflect.Type, 1)
	srv := NewServer(Config{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := connOf(r.Context())
		types <- [2]reflect.Type{readerOf(c.br), writerOf(c.bw)}
	}), Logger: slog.New(slog.DiscardHandler)})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		srv.Shutdown(context.Background(), ln)
		<-done
	}()
	res, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	got := <-types
	want := wantSock(reflect.TypeFor[*net.TCPConn]())
	if got[0] != want || got[1] != want {
		t.Fatalf("the server reads from %v and writes to %v; want %v", got[0], got[1], want)
	}
}

// Upstream connections, plain and TLS, read and write the raw socket.
func TestUpstreamUsesRawIO(t *testing.T) {
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer plain.Close()
	_, p, _ := poolFor(t, plain)
	c, err := p.dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.conn.Close()
	want := wantSock(reflect.TypeFor[*net.TCPConn]())
	if got := reflect.TypeOf(c.lim.r); got != want {
		t.Fatalf("a plain upstream connection reads from %v; want %v", got, want)
	}
	if got := writerOf(c.bw); got != want {
		t.Fatalf("a plain upstream connection writes to %v; want %v", got, want)
	}

	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer secure.Close()
	_, p, _ = poolFor(t, secure)
	p.tls = secure.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	p.tls.ServerName = "example.com"
	c, err = p.dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.conn.Close()
	tc, ok := c.conn.(*tls.Conn)
	if !ok {
		t.Fatalf("a TLS upstream connection is a %T", c.conn)
	}
	if got := reflect.TypeOf(tc.NetConn()); got != want {
		t.Fatalf("TLS runs over %v; want %v", got, want)
	}
}

// bufferedConn is a connection whose first bytes were already read into
// r, as the proxy's intercepted tunnels are: RawIO must leave such a
// wrapper alone.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
