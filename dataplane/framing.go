package dataplane

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
)

// framingGuard watches the raw bytes of a client connection for a request
// header block carrying both Content-Length and Transfer-Encoding. Go's
// HTTP server resolves that ambiguity itself (Transfer-Encoding wins) and
// hides it by deleting Content-Length, but such a request is a smuggling
// attempt the proxy must refuse: once seen, every request on the
// connection is denied.
//
// The scan is line-based and knows nothing of body boundaries, so body
// bytes that look like such a header block also trip it. That errs toward
// denying; a real header block is always scanned before its request is
// handled, so the guard never misses one.
type framingGuard struct {
	net.Conn
	ambiguous atomic.Bool

	line        []byte
	sawLength   bool
	sawTransfer bool
	lineTooLong bool
}

// maxGuardLine bounds the partial line kept between reads.
const maxGuardLine = 16 << 10

func newFramingGuard(c net.Conn) *framingGuard { return &framingGuard{Conn: c} }

func (g *framingGuard) Read(b []byte) (int, error) {
	n, err := g.Conn.Read(b)
	g.scan(b[:n])
	return n, err
}

func (g *framingGuard) scan(data []byte) {
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			g.keep(data)
			return
		}
		g.keep(data[:i])
		g.endLine()
		data = data[i+1:]
	}
}

func (g *framingGuard) keep(part []byte) {
	if len(g.line)+len(part) > maxGuardLine {
		g.lineTooLong = true
		return
	}
	g.line = append(g.line, part...)
}

func (g *framingGuard) endLine() {
	line := bytes.TrimRight(g.line, "\r")
	switch {
	case g.lineTooLong:
		// Too long to be a header Go would accept; not a header line.
	case len(line) == 0: // end of a header block (or a blank body line)
		if g.sawLength && g.sawTransfer {
			g.ambiguous.Store(true)
		}
		g.sawLength, g.sawTransfer = false, false
	case hasFieldName(line, "content-length"):
		g.sawLength = true
	case hasFieldName(line, "transfer-encoding"):
		g.sawTransfer = true
	}
	g.line = g.line[:0]
	g.lineTooLong = false
}

func hasFieldName(line []byte, name string) bool {
	return len(line) > len(name) && line[len(name)] == ':' && bytes.EqualFold(line[:len(name)], []byte(name))
}

// guardListener wraps every accepted connection in a framingGuard.
type guardListener struct{ net.Listener }

func (l guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newFramingGuard(c), nil
}

type guardKey struct{}

// ambiguousFraming reports whether the request's connection carried a
// Content-Length + Transfer-Encoding header block.
func ambiguousFraming(ctx context.Context) bool {
	g, ok := ctx.Value(guardKey{}).(*framingGuard)
	return ok && g.ambiguous.Load()
}
