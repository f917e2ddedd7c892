package dataplane

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// rawPair returns a raw connection and the plain TCP connection at its
// other end, both closed when the test ends.
func rawPair(t *testing.T) (*rawConn, *net.TCPConn) {
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
	dialed, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	rc, ok := withRawIO(dialed).(*rawConn)
	if !ok {
		t.Fatalf("withRawIO(%T) is not a *rawConn", dialed)
	}
	t.Cleanup(func() { rc.Close(); peer.Close() })
	return rc, peer.(*net.TCPConn)
}

// Bytes pass both ways intact, whatever the sizes: writes larger than the
// socket buffers park until the reader catches up, and small reads take
// what there is.
func TestRawConnCarriesBytesBothWays(t *testing.T) {
	rc, peer := rawPair(t)
	out := make([]byte, 8<<20)
	for i := range out {
		out[i] = byte(rand.IntN(256))
	}
	// Raw writes, the peer reading slowly in small pieces.
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 1000)
		for b.Len() < len(out) {
			n, err := peer.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		got <- b.Bytes()
	}()
	if n, err := rc.Write(out); n != len(out) || err != nil {
		t.Fatalf("Write: %d of %d, %v", n, len(out), err)
	}
	if !bytes.Equal(<-got, out) {
		t.Fatal("the peer read other bytes than were written")
	}
	// Raw reads of what the peer writes, then EOF when it closes.
	go func() {
		peer.Write(out)
		peer.CloseWrite()
	}()
	var in bytes.Buffer
	buf := make([]byte, 777)
	for {
		n, err := rc.Read(buf)
		in.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if n == 0 {
			t.Fatal("Read returned 0 bytes and no error")
		}
	}
	if !bytes.Equal(in.Bytes(), out) {
		t.Fatalf("read %d bytes, other than the %d written", in.Len(), len(out))
	}
	if n, err := rc.Read(nil); n != 0 || err != nil {
		t.Errorf("an empty Read: %d, %v; want 0, nil", n, err)
	}
}

// A read past its deadline fails as net.Conn's does, and a read parked in
// the poller ends when the connection is closed.
func TestRawConnDeadlineAndClose(t *testing.T) {
	rc, _ := rawPair(t)
	rc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := rc.Read(make([]byte, 10))
	if !isTimeout(err) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v; want a timeout", err)
	}
	rc.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := rc.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it park
	rc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed connection: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a parked Read")
	}
	if _, err := rc.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write on a closed connection: %v; want net.ErrClosed", err)
	}
}

// A peer that resets the connection is ECONNRESET to a read, and a write
// into a reset connection fails with an error (EPIPE, not a signal that
// would end the process).
func TestRawConnReset(t *testing.T) {
	rc, peer := rawPair(t)
	peer.SetLinger(0)
	peer.Close() // RST
	time.Sleep(20 * time.Millisecond)
	_, err := rc.Read(make([]byte, 10))
	if !errors.Is(err, syscall.ECONNRESET) || !isConnGone(err) {
		t.Fatalf("read after a reset: %v; want ECONNRESET", err)
	}
	var ope *net.OpError
	if !errors.As(err, &ope) || ope.Op != "read" {
		t.Errorf("read error %T %v; want a *net.OpError of op read", err, err)
	}
	var werr error
	for range 3 { // the first write may still be taken into the buffer
		if _, werr = rc.Write([]byte("after the reset")); werr != nil {
			break
		}
	}
	if !errors.Is(werr, syscall.EPIPE) && !errors.Is(werr, syscall.ECONNRESET) {
		t.Fatalf("write after a reset: %v; want EPIPE or ECONNRESET", werr)
	}
}

// Reads and writes allocate nothing; a non-TCP connection is left as it
// is.
func TestRawConnAllocatesNothing(t *testing.T) {
	rc, peer := rawPair(t)
	msg, buf := []byte("ping"), make([]byte, 4)
	allocs := testing.AllocsPerRun(200, func() {
		rc.Write(msg)
		io.ReadFull(peer, buf)
		peer.Write(msg)
		io.ReadFull(rc, buf)
	})
	if allocs > 0 {
		t.Errorf("%.1f allocations per write and read, want 0", allocs)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if got := withRawIO(a); got != a {
		t.Errorf("withRawIO(net.Pipe) = %T, want the pipe itself", got)
	}
}

// The proxy's client connections are raw (its upstream connections are
// too: dial wraps them the same way).
func TestClientConnectionsAreRaw(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(inner, 1)
	defer l.Close()
	dialed, err := net.Dial("tcp", inner.Addr().String()) // the backlog takes it
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*limitedConn).Conn.(*rawConn); !ok {
		t.Errorf("accepted %T, want a *rawConn inside", c.(*limitedConn).Conn)
	}
}
