package dataplane

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// tunnel relays bytes between the client and addr after an L4 allow.
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, req policy.Request, addr netip.Addr, t dest) {
	upstream, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(r.Context(), "tcp", netip.AddrPortFrom(addr, uint16(t.port)).String())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": "upstream_unreachable", "detail": "the upstream could not be reached"})
		return
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	detachGuard(conn) // tunnel bytes are not this server's HTTP
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		upstream.Close()
		return
	}
	defer p.hijacked.add(conn)()
	defer p.trackTunnel(req, conn)()
	relay(conn, buf.Reader, upstream)
}

// trackTunnel registers an open tunnel until the returned function runs.
func (p *Proxy) trackTunnel(req policy.Request, conn net.Conn) (untrack func()) {
	t := &openTunnel{req: req, conn: conn}
	p.tunnelsMu.Lock()
	if p.tunnels == nil {
		p.tunnels = make(map[*openTunnel]struct{})
	}
	p.tunnels[t] = struct{}{}
	p.tunnelsMu.Unlock()
	return func() {
		p.tunnelsMu.Lock()
		delete(p.tunnels, t)
		p.tunnelsMu.Unlock()
	}
}

// recheckTunnels judges every open tunnel again under the version in force
// at the current time, and closes those it no longer allows (or that now
// need inspection): an L4 grant ends when its policy or its expires_at
// says so, not when the client hangs up.
func (p *Proxy) recheckTunnels() {
	cur := p.current.Load()
	now := p.cfg.Now()
	p.tunnelsMu.Lock()
	defer p.tunnelsMu.Unlock()
	for t := range p.tunnels {
		req := t.req
		req.Time = now
		var d policy.Decision
		switch {
		case cur == nil:
			d.Reason = "no policy is loaded"
		case cur.matcher.Inspect(req.Host, req.Port):
			d.Reason = "the destination now needs L7 inspection"
		default:
			if d = cur.matcher.Decide(&req); d.Allow {
				continue
			}
		}
		d.Allow = false
		d.Reason = "open tunnel closed: " + d.Reason
		p.record(cur, req, d, nil, newDenialID())
		t.conn.Close()
		delete(p.tunnels, t)
	}
}

// relay copies both ways until either side ends.
func relay(client net.Conn, clientBuf *bufio.Reader, upstream net.Conn) {
	done := make(chan struct{}, 2)
	go func() {
		io.Copy(upstream, clientBuf)
		closeWrite(upstream)
		done <- struct{}{}
	}()
	go func() {
		io.Copy(client, upstream)
		closeWrite(client)
		done <- struct{}{}
	}()
	<-done
	<-done
	client.Close()
	upstream.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// tunnelRecheck is how often open tunnels are judged again, so grants end
// at their expires_at within this much.
const tunnelRecheck = time.Second

func (p *Proxy) recheckTunnelsEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.recheckTunnels()
		}
	}
}

// tracker is a set of closers that can all be closed at once.
type tracker struct {
	mu     sync.Mutex
	items  map[io.Closer]struct{}
	closed bool
}

// add tracks c until the returned function is called. When the tracker is
// already closed, c is closed at once.
func (t *tracker) add(c io.Closer) (remove func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.Close()
		return func() {}
	}
	if t.items == nil {
		t.items = make(map[io.Closer]struct{})
	}
	t.items[c] = struct{}{}
	return func() {
		t.mu.Lock()
		delete(t.items, c)
		t.mu.Unlock()
	}
}

func (t *tracker) closeAll() {
	t.mu.Lock()
	items := t.items
	t.items, t.closed = nil, true
	t.mu.Unlock()
	for c := range items {
		c.Close()
	}
}
