package dataplane

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/transparent"
	"github.com/portcullis-dev/portcullis/dataplane/tunnelstart"
	"github.com/portcullis-dev/portcullis/policy"
)

// Transparent connections: TCP the kernel redirected to the proxy (NAT,
// to Listeners.Transparent) from a sandbox whose only way out is the
// proxy. Each is judged exactly as a CONNECT to where it was sent
// (connect), what a CONNECT says taken from elsewhere:
//
//   - the port, and the address dialled, are the original destination's
//     (Config.OriginalDst: SO_ORIGINAL_DST), never resolved again, with
//     the address checks of any destination; a connection sent to the
//     listener itself (not redirected) is refused;
//   - the host is the name the proxy's DNS answered for that address
//     (Config.Names). When it answered several, the one the client's first
//     bytes ask for (a TLS server name, an HTTP Host: tunnelstart), or the
//     most recent when they ask for none or for the address; a name it
//     never answered for the address is denied. When it answered none,
//     the host is the address itself, which only endpoints naming
//     addresses (allowed_ips, IP hosts) allow: a name-based endpoint is
//     never reached by dialling its address;
//   - the client's first bytes must name that host (an HTTP Host may name
//     the address instead): at an L4 tunnel's start (tunnelstart), in the
//     TLS handshake and each request's Host when inspected (intercept);
//   - there is no CONNECT to answer: a tunnel takes the connection as it
//     came (takeConn), and a denial is answered (its 403) only when the
//     client speaks plain HTTP; otherwise the connection is closed.
//
// The caller is looked for in the client's own network namespace
// (identity.FollowRedirected). Decision records are a CONNECT's.

// NameBook is what the proxy's DNS for the sandbox answered
// (dataplane/sandboxdns): the names it gave an address, most recent first.
type NameBook interface{ Names(netip.Addr) []string }

// namePickWait bounds the wait for a transparent connection's first bytes
// when they are to pick its name among several: a client whose server
// speaks first says nothing, and is judged by the most recent name.
const namePickWait = 2 * time.Second

// serveTransparent accepts redirected connections from ln until it is
// closed, and judges each on a goroutine of conns, in ctx (which ends
// when the proxy stops).
func (p *Proxy) serveTransparent(ctx context.Context, ln net.Listener, conns *sync.WaitGroup) error {
	return h1.Accept(ln, p.log, func(conn net.Conn) {
		conns.Go(func() { p.handleTransparent(ctx, conn) })
	})
}

// handleTransparent judges one redirected connection and serves it as its
// judging says (connect), or answers its denial (transparent.Writer).
func (p *Proxy) handleTransparent(ctx context.Context, conn net.Conn) {
	defer p.hijacked.Add(conn)()
	defer conn.Close()
	orig, err := p.cfg.OriginalDst(conn)
	if err != nil {
		// No destination to judge, nor to record.
		p.log.Warn("a transparent connection without its original destination; closing", "client", conn.RemoteAddr().String(), "err", err)
		return
	}
	orig = netip.AddrPortFrom(orig.Addr().Unmap().WithZone(""), orig.Port())
	ctx = context.WithValue(ctx, clientKey{}, p.newClient(conn, orig))
	w := transparent.NewWriter(conn)
	t := dest{host: orig.Addr().String(), port: int(orig.Port()), ip: orig.Addr(), orig: orig.Addr()}
	reason := ""
	if local, ok := conn.LocalAddr().(*net.TCPAddr); ok && local.AddrPort().Addr().Unmap() == orig.Addr() && local.AddrPort().Port() == orig.Port() {
		reason = "the connection was not redirected: it was sent to the transparent listener itself"
	} else {
		t, reason = p.transparentHost(w, t)
	}
	authority := t.authority()
	r := (&http.Request{Method: http.MethodConnect, Host: authority, RequestURI: authority, URL: &url.URL{Host: authority},
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}}).WithContext(ctx)
	if reason != "" {
		cur := p.current.Load()
		req := p.baseRequest(ctx, cur, t)
		req.Addr = t.orig
		p.deny(w, r, cur, req, policy.Decision{Reason: reason}, nil)
	} else {
		p.connect(w, r, t)
	}
	w.Answer(t.want())
}

// transparentHost returns the destination a connection sent to t (its
// original address, as an IP literal) is judged as: named by the proxy's
// DNS, or not (t itself); and why it is denied, when the name its client
// asks for was never answered for the address.
func (p *Proxy) transparentHost(w *transparent.Writer, t dest) (dest, string) {
	var names []dest
	if p.cfg.Names != nil {
		for _, n := range p.cfg.Names.Names(t.orig) {
			if d, err := parseTarget(net.JoinHostPort(n, strconv.Itoa(t.port)), ""); err == nil && !d.ip.IsValid() {
				d.orig = t.orig
				names = append(names, d)
			}
		}
	}
	switch len(names) {
	case 0:
		return t, ""
	case 1:
		return names[0], ""
	}
	asked := w.ReadStart(names[0].want(), namePickWait).Name
	if asked == "" {
		return names[0], ""
	}
	a, err := parseTarget(asked, strconv.Itoa(t.port))
	if err != nil {
		return names[0], "" // judged at the start, which names[0] it does not name
	}
	if a.ip == t.orig {
		return names[0], ""
	}
	for _, n := range names {
		if tunnelstart.SameHost(a.host, n.host) {
			return n, ""
		}
	}
	a.port, a.orig = t.port, t.orig
	return a, fmt.Sprintf("server name %q was not answered for %s by the proxy's DNS", asked, t.orig)
}
