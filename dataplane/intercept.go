package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/policy"
)

// intercept answers the CONNECT (takeConn), then serves the tunnel's
// inner HTTP requests itself: TLS is terminated with a certificate from
// the proxy's CA when the client speaks TLS, plain HTTP is read as is.
// Every inner request goes to req.Addr, the address the CONNECT resolved.
func (p *Proxy) intercept(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request, t dest) {
	addr := req.Addr
	conn, rd, err := takeConn(w)
	if err != nil {
		return
	}
	// Reads come through rd (a CONNECT's is the server's raw reader);
	// writes are made raw here.
	inner := net.Conn(&bufferedConn{Conn: h1.RawIO(conn), r: rd})
	scheme := "http"
	// A client that opens a tunnel and says nothing is not kept forever.
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	first, err := rd.Peek(1)
	conn.SetReadDeadline(time.Time{})
	if err != nil {
		conn.Close()
		return
	}
	if first[0] == 0x16 { // a TLS handshake record
		scheme = "https"
		ca := p.ca.Load()
		if ca == nil {
			p.log.Warn("no CA to terminate TLS with yet (waiting for the gateway); closing", "host", t.host)
			conn.Close()
			return
		}
		cfg := ca.TLSConfigFor(t.host)
		tlsConn := tls.Server(inner, cfg)
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		err := tlsConn.HandshakeContext(ctx)
		cancel()
		if err != nil {
			conn.Close()
			return
		}
		// The name the client asked TLS for must be the CONNECT host.
		if sni := tlsConn.ConnectionState().ServerName; sni != "" && !h1.EqualFoldASCII(strings.TrimSuffix(sni, "."), t.host) {
			p.log.Warn("SNI differs from the CONNECT host; closing", "sni", sni, "host", t.host)
			p.record(cur, req, policy.Decision{Reason: t.want().ServerNameDiffers(sni)}, nil, decision.NewDenialID())
			tlsConn.Close()
			return
		}
		inner = tlsConn
	}
	defaultPort := "80"
	if scheme == "https" {
		defaultPort = "443"
	}
	cl, _ := r.Context().Value(clientKey{}).(*client)
	tunnelHandler := http.HandlerFunc(func(w http.ResponseWriter, ir *http.Request) {
		// Inside a tunnel, Host must be the CONNECT authority (or a
		// transparent connection's original address).
		if !t.namedBy(ir.Host, defaultPort) {
			p.refuse(w, ir, t, "the Host header differs from the "+t.want().Of+" authority")
			return
		}
		p.handleHTTP(w, ir, scheme, t, addr)
	})
	// The tunnel's requests are judged as the CONNECT's client, read by a
	// server of their own on this goroutine.
	defer p.hijacked.Add(inner)()
	connContext := func(ctx context.Context, _ net.Conn) context.Context { return context.WithValue(ctx, clientKey{}, cl) }
	h1.NewServer(h1.Config{Handler: tunnelHandler, ConnContext: connContext, SameAuthority: sameAuthority, Procs: p.procs, Logger: p.log}).ServeConn(inner)
}

// bufferedConn is a connection whose first bytes were already read into r
// (a reader of the same connection). Once r is drained, reads go to the
// connection itself (raw, when it is h1.RawIO's): the inner server's own
// reader is the only buffer, as on the main server's connections.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) {
	if c.r.Buffered() > 0 {
		return c.r.Read(b)
	}
	return c.Conn.Read(b)
}
