package dataplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/policy"
)

// tunnel relays bytes between the client and addr after an L4 allow. The
// client's first bytes are checked before any is forwarded (checkStart).
func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request, addr netip.Addr, t dest) {
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
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		upstream.Close()
		return
	}
	defer p.hijacked.add(conn)()
	defer p.trackTunnel(req, conn)()

	// The server's bytes flow at once (SSH, SMTP and Postgres servers
	// speak first); the client's wait until their start is checked.
	down := make(chan struct{})
	go func() {
		io.Copy(conn, upstream)
		h1.CloseWrite(conn)
		close(down)
	}()
	held, reason, plainHTTP, denied := checkStart(conn, buf.Reader, t)
	if denied {
		id := decision.NewDenialID()
		p.recordFor(r, p.newRecord(cur, req, policy.Decision{Reason: reason}, nil, id))
		if plainHTTP {
			conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			writeTunnelDenial(conn, cur, req, reason, id)
		}
		upstream.Close()
		<-down
		conn.Close()
		return
	}
	if _, err := upstream.Write(held); err == nil {
		io.Copy(upstream, buf.Reader)
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
		t.conn.Close()
		delete(p.tunnels, t)
	}
}

// tunnelRecheck is how often open tunnels are judged again, so grants end
// at their expires_at within this much.
const tunnelRecheck = time.Second

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

// The start of an L4 tunnel.
//
// An L4 grant is for the CONNECT host, but the upstream would serve
// whatever name the client asks for at that address: a TLS server name,
// or an HTTP Host, naming another (perhaps inspected) site co-hosted
// there. So the client's first bytes are read before any is forwarded:
//
//   - a TLS handshake (first byte 0x16): the ClientHello, read whole, must
//     parse, and its server name, when it has one, must be the CONNECT
//     host;
//   - an HTTP/1.x request (a request line ending in HTTP/x.y, after any
//     empty lines): its header block, read whole, must be well formed with
//     exactly one Host, and that Host (and an absolute-form or
//     authority-form target) must be the CONNECT authority (the port may
//     be omitted). HTTP/2 with prior knowledge carries no Host and is
//     refused;
//   - anything else (SSH, a Postgres startup message, SMTP's EHLO): the
//     tunnel relays as before.
//
// Waiting for the client's first byte is unbounded — the server's bytes
// flow meanwhile, so protocols where the server speaks first work — but
// once a byte has come, the rest of a ClientHello or request head must
// come within tunnelPeekTimeout and maxTunnelPeek bytes, else the tunnel
// is closed: a start that could still be TLS or HTTP is never relayed
// unchecked. Only the start is checked: later requests on a kept-alive
// tunnel, and what TLS carries, are not (an L4 grant is not inspection).
const (
	tunnelPeekTimeout = 10 * time.Second
	maxTunnelPeek     = 64 << 10
)

// checkStart reads the client's first bytes from r and returns them
// (held, to forward if the tunnel goes on), with why the tunnel must
// close, if it must. plainHTTP says the client spoke plain HTTP, so an
// HTTP answer can explain the refusal. Memory grows only with the bytes
// that arrive, up to maxTunnelPeek.
func checkStart(conn net.Conn, r io.Reader, t dest) (held []byte, reason string, plainHTTP, denied bool) {
	chunk := make([]byte, 4<<10)
	n, err := r.Read(chunk)
	if n == 0 {
		return nil, "", false, false // closed before speaking: nothing to check
	}
	held = append([]byte(nil), chunk[:n]...)
	conn.SetReadDeadline(time.Now().Add(tunnelPeekTimeout))
	defer conn.SetReadDeadline(time.Time{})
	for {
		v := startVerdict(held, t)
		switch {
		case !v.more:
			return held, v.reason, v.http, v.reason != ""
		case len(held) >= maxTunnelPeek:
			return held, fmt.Sprintf("the tunnel's first %s is over %d bytes", v.what, maxTunnelPeek), v.http, true
		case err != nil:
			return held, fmt.Sprintf("the tunnel's first %s did not arrive whole: %v", v.what, err), v.http, true
		}
		n, err = r.Read(chunk[:min(len(chunk), maxTunnelPeek-len(held))])
		held = append(held, chunk[:n]...)
	}
}

// verdict is what the bytes seen so far say about a tunnel's start.
type verdict struct {
	more   bool   // not enough bytes to tell yet
	what   string // "TLS ClientHello" or "HTTP request head"
	http   bool
	reason string // why the tunnel must close ("" relays)
}

func startVerdict(data []byte, t dest) verdict {
	if len(data) > 0 && data[0] == 0x16 {
		return helloVerdict(data, t)
	}
	return httpVerdict(data, t)
}

// helloVerdict judges a TLS start: once the whole ClientHello handshake
// message has arrived (it may span records), crypto/tls parses it.
func helloVerdict(data []byte, t dest) verdict {
	v := verdict{what: "TLS ClientHello"}
	var msg []byte
	for rest := data; ; {
		if len(rest) < 5 {
			v.more = true
			return v
		}
		if rest[0] != 0x16 {
			v.reason = "the tunnel's first bytes are a malformed TLS handshake"
			return v
		}
		n := int(rest[3])<<8 | int(rest[4])
		if len(rest) < 5+n {
			v.more = true
			return v
		}
		msg = append(msg, rest[5:5+n]...)
		rest = rest[5+n:]
		if len(msg) >= 4 {
			if msg[0] != 1 { // client_hello
				v.reason = "the tunnel's first bytes are a TLS handshake that is not a ClientHello"
				return v
			}
			if need := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])); len(msg) >= need {
				return judgeHello(data[:len(data)-len(rest)], t)
			}
		}
	}
}

// judgeHello parses a complete ClientHello with crypto/tls and compares
// its server name with the CONNECT host.
func judgeHello(records []byte, t dest) verdict {
	v := verdict{what: "TLS ClientHello"}
	var sni string
	got := false
	errEnough := fmt.Errorf("enough")
	srv := tls.Server(&replayConn{r: bytes.NewReader(records)}, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			sni, got = hello.ServerName, true
			return nil, errEnough
		},
	})
	srv.Handshake()
	switch {
	case !got:
		v.reason = "the tunnel's TLS ClientHello is malformed"
	case sni != "" && !sameHost(sni, t.host):
		v.reason = fmt.Sprintf("the TLS server name %q differs from the CONNECT host %q", sni, t.host)
	}
	return v
}

func sameHost(name, host string) bool {
	a, b := strings.ToLower(strings.TrimSuffix(name, ".")), strings.ToLower(strings.TrimSuffix(host, "."))
	if a == b {
		return true
	}
	ia, okA := policy.ParseHostIP(a)
	ib, okB := policy.ParseHostIP(b)
	return okA && okB && ia == ib
}

// httpVerdict judges a start that may be HTTP/1.x.
func httpVerdict(data []byte, t dest) verdict {
	v := verdict{what: "HTTP request head", http: true}
	// Servers skip empty lines before a request line (RFC 9112 2.2).
	rest := bytes.TrimLeft(data, "\r\n")
	if len(rest) == 0 {
		v.more = true
		return v
	}
	if !isTokenChar(rest[0]) {
		return verdict{}
	}
	eol := bytes.IndexByte(rest, '\n')
	if eol < 0 {
		// A request line in the making: printable, no control bytes.
		for _, c := range rest {
			if c < 0x20 && c != '\t' && c != '\r' || c == 0x7f {
				return verdict{}
			}
		}
		v.more = true
		return v
	}
	line := string(bytes.TrimRight(rest[:eol], "\r"))
	if !strings.Contains(strings.ToUpper(line), "HTTP/") {
		return verdict{} // not HTTP/1.x (HTTP/0.9 carries no Host)
	}
	end := bytes.Index(rest, []byte("\n\r\n"))
	if e := bytes.Index(rest, []byte("\n\n")); e >= 0 && (end < 0 || e < end) {
		end = e
	}
	if end < 0 {
		v.more = true
		return v
	}
	v.reason = checkHead(line, string(rest[eol+1:end+1]), t)
	return v
}

// checkHead checks a request head's target and Host against the CONNECT
// authority. Anything a lenient server might read differently is refused:
// folded lines, a line without a colon, more or fewer than one Host.
func checkHead(requestLine, headers string, t dest) string {
	matches := func(authority string) bool {
		return sameAuthority(authority, t.authority(), "80") || sameAuthority(authority, t.host, strconv.Itoa(t.port))
	}
	fields := strings.Fields(requestLine)
	if len(fields) != 3 {
		return fmt.Sprintf("the tunnel's first request line %q is malformed", requestLine)
	}
	if target := fields[1]; target != "*" && !strings.HasPrefix(target, "/") {
		authority := target
		if i := strings.Index(target, "://"); i >= 0 {
			u, err := url.Parse(target)
			if err != nil {
				return fmt.Sprintf("the tunnel's first request target %q is malformed", target)
			}
			authority = u.Host
		}
		if !matches(authority) {
			return fmt.Sprintf("the tunnel's first request targets %q, not the CONNECT authority %s", target, t.authority())
		}
	}
	var hosts []string
	for line := range strings.Lines(headers) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return "the tunnel's first request folds a header line"
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Sprintf("the tunnel's first request has a header line without a colon: %q", line)
		}
		if h1.EqualFoldASCII(strings.TrimSpace(name), "host") {
			hosts = append(hosts, strings.Trim(value, " \t"))
		}
	}
	switch {
	case len(hosts) != 1:
		return fmt.Sprintf("the tunnel's first request has %d Host headers; it needs one, naming the CONNECT authority %s", len(hosts), t.authority())
	case !matches(hosts[0]):
		return fmt.Sprintf("the Host header %q differs from the CONNECT authority %s", hosts[0], t.authority())
	}
	return ""
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// replayConn reads recorded bytes and discards writes: crypto/tls parses a
// ClientHello from it without anything reaching the client.
type replayConn struct{ r *bytes.Reader }

func (c *replayConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *replayConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// writeTunnelDenial answers a refused plain-HTTP tunnel start with a 403,
// as deny would have, and asks the client to close.
func writeTunnelDenial(conn net.Conn, cur *loaded, req policy.Request, reason, id string) {
	version := ""
	if cur != nil {
		version = cur.version
	}
	body, _ := json.Marshal(map[string]any{
		"error":          "policy_denied",
		"reason":         reason,
		"policy_version": version,
		"denial_id":      id,
		"host":           req.Host,
		"port":           req.Port,
	})
	fmt.Fprintf(conn, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}
