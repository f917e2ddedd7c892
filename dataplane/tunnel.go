package dataplane

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/tunnelstart"
	"github.com/portcullis-dev/portcullis/dataplane/wsproxy"
	"github.com/portcullis-dev/portcullis/policy"
)

// tunnel relays bytes between the client and addr after an L4 allow. The
// client's first bytes are checked before any is forwarded: they must name
// t (tunnelstart).
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request, addr netip.Addr, t dest) {
	upstream, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(r.Context(), "tcp", netip.AddrPortFrom(addr, uint16(t.port)).String())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": "upstream_unreachable", "detail": "the upstream could not be reached"})
		return
	}
	conn, rd, err := takeConn(w)
	if err != nil {
		upstream.Close()
		return
	}
	defer p.hijacked.Add(conn)()
	defer p.trackTunnel(&openTunnel{req: req, end: func(string) { conn.Close() }})()

	// The server's bytes flow at once (SSH, SMTP and Postgres servers
	// speak first); the client's wait until their start is checked.
	down := make(chan struct{})
	go func() {
		io.Copy(conn, upstream)
		h1.CloseWrite(conn)
		close(down)
	}()
	held, v := tunnelstart.Read(conn, rd, t.want())
	if v.Reason != "" {
		id := decision.NewDenialID()
		p.recordFor(r, p.newRecord(cur, req, policy.Decision{Reason: v.Reason}, nil, id))
		if v.HTTP {
			conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			tunnelstart.WriteDenial(conn, cur.version, req.Host, req.Port, v.Reason, id)
		}
		upstream.Close()
		<-down
		conn.Close()
		return
	}
	if _, err := upstream.Write(held); err == nil {
		io.Copy(upstream, rd)
	}
	h1.CloseWrite(upstream)
	<-down
	conn.Close()
	upstream.Close()
}

// servesInspected reports whether addr:port, where an L4 tunnel to t would
// go, is also where an endpoint inspected at L7 lives: an IP literal of
// such an endpoint, or an address its exact host name resolves to (a
// loopback name stands for every loopback address). A tunnel there would
// reach the inspected server with none of its rules applied, under
// another spelling of its address. Wildcard and hostless inspected
// endpoints cannot be listed; the check at the tunnel's start (checkStart)
// still holds the TLS server name and Host to the CONNECT host.
//
// With resolveNames false (the periodic recheck of open tunnels, which
// must not wait on DNS), only IP literals and loopback names are compared.
func (p *Proxy) servesInspected(ctx context.Context, cur *loaded, t dest, addr netip.Addr, resolveNames bool) (string, bool) {
	addrs, names := cur.matcher.InspectedOn(t.port)
	shared := func(what string) (string, bool) {
		return fmt.Sprintf("%s is %s, where an inspected endpoint lives; an L4 tunnel there would bypass its rules", net.JoinHostPort(addr.String(), strconv.Itoa(t.port)), what), true
	}
	for _, a := range addrs {
		if a == addr {
			return shared("the address of " + a.String())
		}
	}
	var lookup []string
	for _, name := range names {
		switch {
		case name == t.host:
			// The same name is inspected itself (Matcher.Inspect).
		case policy.IsLoopbackName(name):
			if addr.IsLoopback() {
				return shared("an address of " + name)
			}
		case resolveNames:
			lookup = append(lookup, name)
		}
	}
	if len(lookup) == 0 {
		return "", false
	}
	// These names are the policy's own, not the agent's: resolving them
	// tells a DNS server nothing it could not read in the policy. They are
	// looked up at once, and all are waited for.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	found := make(chan string, len(lookup))
	for _, name := range lookup {
		go func() {
			resolved, _ := p.cfg.Resolve(ctx, name)
			for _, a := range resolved {
				if a.Unmap().WithZone("") == addr {
					found <- name
					return
				}
			}
			found <- ""
		}()
	}
	match := ""
	for range lookup {
		if name := <-found; name != "" && match == "" {
			match = name
			cancel() // the others need not finish their lookups
		}
	}
	if match != "" {
		return shared("an address of " + match)
	}
	return "", false
}

// trackTunnel registers an open tunnel until the returned function runs.
func (p *Proxy) trackTunnel(t *openTunnel) (untrack func()) {
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
	now := p.now()
	p.tunnelsMu.Lock()
	defer p.tunnelsMu.Unlock()
	for t := range p.tunnels {
		req := t.req
		req.Time = now
		var d policy.Decision
		switch {
		case cur == nil:
			d.Reason = "no policy is loaded"
		case t.webSocket:
			if d = cur.matcher.Decide(&req); d.Allow {
				if d.Reason = wsproxy.StillCarried(endpointOf(cur, d), d.Review > 0, t.bound); d.Reason == "" {
					continue
				}
			}
		case cur.matcher.Inspect(req.Host, req.Port):
			d.Reason = "the destination now needs L7 inspection"
		default:
			if d = cur.matcher.Decide(&req); !d.Allow {
				break
			}
			reason, shared := p.servesInspected(context.Background(), cur, dest{host: req.Host, port: req.Port}, req.Addr, false)
			if !shared {
				continue
			}
			d = policy.Decision{Reason: reason}
		}
		d.Allow = false
		d.Reason = "open tunnel closed: " + d.Reason
		p.record(cur, req, d, nil, decision.NewDenialID())
		t.end(d.Reason)
		delete(p.tunnels, t)
	}
}

// tunnelRecheck is how often open tunnels (and held calls) are judged
// again, so grants end at their expires_at within this much.
const tunnelRecheck = time.Second
