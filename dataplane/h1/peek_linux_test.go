//go:build linux

package h1

import (
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestHeadSent: a whole request head waiting in the socket is seen, a
// partial one is not, and peeking consumes nothing.
func TestHeadSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	limited := &limitedConn{Conn: server, release: func() {}}

	if HeadSent(limited) {
		t.Error("HeadSent before anything was written")
	}
	head := "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n"
	if _, err := io.WriteString(client, head); err != nil {
		t.Fatal(err)
	}
	waitBuffered(t, server, len(head))
	if HeadSent(limited) {
		t.Error("HeadSent with the blank line still to come")
	}
	if _, err := io.WriteString(client, "\r\n"); err != nil {
		t.Fatal(err)
	}
	waitBuffered(t, server, len(head)+2)
	if !HeadSent(limited) {
		t.Error("HeadSent false with the whole head waiting")
	}
	server.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(head)+2)
	if _, err := io.ReadFull(server, got); err != nil || string(got) != head+"\r\n" {
		t.Errorf("read %q, %v after peeking; want the whole head", got, err)
	}
}

// waitBuffered waits until n bytes wait unread in conn's socket (loopback
// delivers at once; the wait is on the kernel's count, with a deadline).
func waitBuffered(t *testing.T, conn net.Conn, n int) {
	t.Helper()
	rc, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n+1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int
		rc.Control(func(fd uintptr) {
			got, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		})
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes buffered, want %d", got, n)
		}
		runtime.Gosched()
	}
}
