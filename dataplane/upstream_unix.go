//go:build unix

package dataplane

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// stillOpen reports whether an idle connection can be reused: the server
// has not closed it, and (without TLS, whose records may legitimately
// arrive unasked, such as session tickets) has sent nothing unasked. It
// peeks without blocking, one system call.
func stillOpen(conn net.Conn) bool {
	unasked := false
	if tc, ok := conn.(*tls.Conn); ok {
		conn, unasked = tc.NetConn(), true
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := true
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK):
			// Nothing pending: open and quiet.
		case err != nil || n == 0:
			open = false // an error, or the server closed it
		default:
			open = unasked
		}
		return true
	})
	return err == nil && open
}
