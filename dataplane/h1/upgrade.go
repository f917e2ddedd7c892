package h1

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
)

// Upgraded is an upstream connection after 101 Switching Protocols,
// speaking the protocol it switched to: its reads begin with what the
// proxy had read past the response head.
type Upgraded struct {
	net.Conn
	r *bufio.Reader
}

func (u *Upgraded) Read(p []byte) (int, error) { return u.r.Read(p) }

// Upgrade sends req, a GET asking to switch to protocol (RFC 9110 §7.8;
// a WebSocket's opening handshake), on a new connection, never one from
// the pool, with "Connection: Upgrade" and "Upgrade: protocol" added to
// its end-to-end fields (the client's own Upgrade and Connection are
// hop-by-hop: dropped, as for any request). The response's fields are
// read into header, as RoundTrip reads them.
//
// On 101 the response has no body and the connection is returned, its
// own from then on: the caller closes it. Any other answer is returned
// with its body, which closes the connection when read or closed; the
// connection is nil. Cancelling ctx closes the connection until
// Upgrade returns.
func (p *Pool) Upgrade(ctx context.Context, req *http.Request, protocol string, header http.Header) (*http.Response, *Upgraded, error) {
	c, err := p.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.conn.Close() })
	fail := func(err error) (*http.Response, *Upgraded, error) {
		stop()
		c.conn.Close()
		clear(header)
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, nil, err
	}
	writeRequestHead(c.bw, req)
	c.bw.WriteString("Connection: Upgrade\r\nUpgrade: ")
	c.bw.WriteString(protocol)
	c.bw.WriteString("\r\n\r\n")
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	var r *upstreamResponse
	for n := 0; ; n++ {
		c.lim.n = maxResponseHeaderBytes
		if r, err = readResponse(c.br, &c.head, req.Method, header); err != nil {
			return fail(err)
		}
		if r.res.StatusCode >= 200 || r.res.StatusCode == http.StatusSwitchingProtocols || n == max1xxResponses {
			break
		}
	}
	c.lim.n = math.MaxInt64
	res := &r.res
	res.Request = req
	switch {
	case res.StatusCode == http.StatusSwitchingProtocols:
		if !stop() {
			return fail(ctx.Err()) // cancelled as it answered: closed already
		}
		res.Body = http.NoBody
		return res, &Upgraded{Conn: c.conn, r: c.br}, nil
	case res.StatusCode < 200:
		return fail(fmt.Errorf("upstream answered %d, which the proxy does not relay", res.StatusCode))
	}
	b := &r.body
	b.c, b.ended, b.reuse = c, endHook{stop: stop}, false
	res.Body = b
	return res, nil, nil
}
