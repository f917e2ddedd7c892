package h1

import (
	"net"
	"sync"
)

// limitListener admits at most n client connections at once, as
// x/net/netutil.LimitListener does, but its connections keep what the
// TCP connection can do: an L4 tunnel half-closes the client's side when
// the upstream has finished sending (CloseWrite), and a wrapper that hid
// CloseWrite would leave the client waiting for an end that never comes.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// LimitListener returns l admitting at most n connections at once.
func LimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept waits for a free place, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitedConn gives its place back when closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// NetConn returns the connection underneath (as tls.Conn's does).
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes c, looking through the wrappers of the proxy's
// connections (each has NetConn, as tls.Conn does) for the connection
// that can: an L4 tunnel tells each side the other has finished sending.
func CloseWrite(c net.Conn) {
	for c != nil {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
			return
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return
		}
		c = u.NetConn()
	}
}
