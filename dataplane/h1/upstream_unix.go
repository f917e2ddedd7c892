//go:build unix

package h1

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// openCheck tells whether an idle connection can be reused: the server
// has not closed it, and (without TLS, whose records may legitimately
// arrive unasked, such as session tickets) has sent nothing unasked. It
// peeks without blocking, one system call. It is made once per
// connection, so that a check, made on every reuse, allocates nothing.
type openCheck struct {
	rc      syscall.RawConn // nil when the connection has none (assumed open)
	broken  bool            // its raw connection could not be had
	unasked bool            // TLS: bytes may arrive unasked
	open    bool
	b       [1]byte
	peek    func(fd uintptr)
}

func newOpenCheck(conn net.Conn) *openCheck {
	c := &openCheck{}
	if tc, ok := conn.(*tls.Conn); ok {
		conn, c.unasked = tc.NetConn(), true
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		c.broken = true
		return c
	}
	c.rc = rc
	c.peek = func(fd uintptr) {
		n, err := peekDontWait(fd, c.b[:])
		switch {
		case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK):
			c.open = true // nothing pending: open and quiet
		case err != nil || n == 0:
			c.open = false // an error, or the server closed it
		default:
			c.open = c.unasked
		}
	}
	return c
}

// check reports whether the connection can be reused now.
func (c *openCheck) check() bool {
	switch {
	case c.broken:
		return false
	case c.rc == nil:
		return true
	}
	c.open = false
	// Control, not Read: the peek never waits, so it needs neither the
	// descriptor's read lock nor its poller state reset.
	err := c.rc.Control(c.peek)
	return err == nil && c.open
}

// stillOpen is a one-off check of conn.
func stillOpen(conn net.Conn) bool { return newOpenCheck(conn).check() }
