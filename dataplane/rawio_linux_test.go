package dataplane

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
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
	if _, ok := rawIO(c).(*rawConn); !ok {
		t.Fatalf("rawIO(%T) = %T, want *rawConn", c, rawIO(c))
	}
	limited := &limitedConn{Conn: c, release: func() {}}
	r, ok := rawIO(limited).(*rawConn)
	if !ok || r.Conn != limited {
		t.Fatalf("rawIO(limitedConn) = %T, want a *rawConn over the limitedConn (its Close gives the place back)", rawIO(limited))
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if got := rawIO(p1); got != p1 {
		t.Fatalf("rawIO(pipe) = %T, want the pipe itself", got)
	}
	buffered := &bufferedConn{Conn: c}
	if got := rawIO(buffered); got != buffered {
		t.Fatalf("rawIO(bufferedConn) = %T, want the bufferedConn itself (its Read is not the socket's)", got)
	}
}

// A write larger than the socket buffers waits for the reader (EAGAIN,
// then the poller) and arrives whole and in order; reads return what
// there is, then io.EOF when the writer closes.
func TestRawIOLargeWriteAndEOF(t *testing.T) {
	a, b := tcpPair(t)
	ra, rb := rawIO(a), rawIO(b)
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
	ra := rawIO(a)

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
	ra := rawIO(a)
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
	ra, rb := rawIO(a), rawIO(b)
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
