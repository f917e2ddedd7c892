package dataplane

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
)

// framingGuard watches the raw bytes of a client connection for request
// header blocks Go's HTTP server would quietly normalise:
//
//   - both Content-Length and Transfer-Encoding: Go lets Transfer-Encoding
//     win and deletes Content-Length, but such a request is a smuggling
//     attempt;
//   - an absolute-form request whose Host header names another authority:
//     Go ignores that Host (as RFC 9112 tells proxies to), but an agent
//     sending it is probing for a confused upstream.
//
// Once seen, every request on the connection is denied.
//
// The scan is line-based and knows nothing of body boundaries, so body
// bytes that look like such a header block also trip it. That errs toward
// denying; a real header block is always scanned before its request is
// handled, so the guard never misses one.
type framingGuard struct {
	net.Conn
	problem atomic.Pointer[string]

	line        []byte
	lineTooLong bool
	// The header block being read.
	first       bool   // the next line is a request line
	authority   string // of an absolute-form request line
	host        string // the Host header
	sawLength   bool
	sawTransfer bool
}

// maxGuardLine bounds the partial line kept between reads. Go's server
// reads at most MaxHeaderBytes (64 KiB for the proxy's servers) plus 4 KiB
// of header block, so every header line it accepts fits; longer lines
// can only be body bytes.
const maxGuardLine = 64<<10 + 4<<10

func newFramingGuard(c net.Conn) *framingGuard { return &framingGuard{Conn: c, first: true} }

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
		// Longer than any header block Go's server reads: a body line.
	case len(line) == 0: // end of a header block (or a blank body line)
		g.endBlock()
	case g.first:
		g.authority = absoluteAuthority(line)
		g.first = false
	case hasFieldName(line, "content-length"):
		g.sawLength = true
	case hasFieldName(line, "transfer-encoding"):
		g.sawTransfer = true
	case hasFieldName(line, "host"):
		g.host = string(bytes.TrimSpace(line[len("host:"):]))
	}
	g.line = g.line[:0]
	g.lineTooLong = false
}

func (g *framingGuard) endBlock() {
	switch {
	case g.sawLength && g.sawTransfer:
		g.flag("a request on this connection had both Content-Length and Transfer-Encoding")
	case g.authority != "" && g.host != "" && !sameAuthority(g.authority, g.host, "80"):
		g.flag("a request on this connection named one authority in its URI and another in its Host header")
	}
	g.first, g.authority, g.host, g.sawLength, g.sawTransfer = true, "", "", false, false
}

func (g *framingGuard) flag(reason string) { g.problem.CompareAndSwap(nil, &reason) }

// absoluteAuthority returns the authority of an absolute-form request line
// ("GET http://host:port/path HTTP/1.1"), or "".
func absoluteAuthority(line []byte) string {
	_, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok {
		return ""
	}
	target, _, _ := bytes.Cut(rest, []byte(" "))
	after, ok := bytes.CutPrefix(target, []byte("http://"))
	if !ok {
		if after, ok = bytes.CutPrefix(target, []byte("https://")); !ok {
			return ""
		}
	}
	authority, _, _ := bytes.Cut(after, []byte("/"))
	authority, _, _ = bytes.Cut(authority, []byte("?"))
	return string(authority)
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

// framingProblem returns why the request's connection is refused, or "".
func framingProblem(ctx context.Context) string {
	if g, ok := ctx.Value(guardKey{}).(*framingGuard); ok {
		if p := g.problem.Load(); p != nil {
			return *p
		}
	}
	return ""
}
