//go:build linux

package h1

import (
	"bytes"
	"net"
	"syscall"
)

// HeadSent reports whether conn's socket already holds a whole request
// head (up to the blank line, within its first 4 KiB), unread: peeked
// at, never consumed. A look at the client's holders made after it is
// also a look at judgement time for that request (newClient).
func HeadSent(conn net.Conn) bool {
	if lc, ok := conn.(*limitedConn); ok {
		conn = lc.Conn
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	var buf [4096]byte
	n := 0
	if err := rc.Control(func(fd uintptr) {
		n, _, err = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil || n <= 0 {
		return false
	}
	return bytes.Contains(buf[:n], []byte("\r\n\r\n"))
}
