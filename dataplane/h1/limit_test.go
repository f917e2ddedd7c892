package h1

import (
	"errors"
	"net"
	"testing"
)

// The listener admits n connections at once: the next Accept waits until
// one is closed, and Close ends a waiting Accept. Its connections still
// half-close (CloseWrite reaches the TCP connection).
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitListener(inner, 1)
	defer l.Close()
	for range 2 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	select {
	case <-accepted:
		t.Fatal("a second connection was admitted while the first is open")
	default:
	}
	CloseWrite(first)
	if _, err := first.(*limitedConn).Conn.(*net.TCPConn).Write([]byte("x")); err == nil {
		t.Fatal("CloseWrite did not reach the TCP connection through the wrappers")
	}
	first.Close()
	second := <-accepted
	if second == nil {
		t.Fatal("the second connection was not admitted after the first closed")
	}
	second.Close()

	waiting := make(chan error)
	go func() {
		_, err := l.Accept()
		waiting <- err
	}()
	l.Close()
	if err := <-waiting; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}
