// Package tunnelstart reads the start of a tunnel's client stream — its
// first bytes, before any is forwarded — and judges the server name they
// ask for against the one the tunnel was granted for.
//
// An L4 grant is for one host (a CONNECT's, or the name a transparent
// connection was judged by), but the upstream would serve whatever name
// the client asks for at that address: a TLS server name, or an HTTP
// Host, naming another (perhaps inspected) site co-hosted there. So the
// client's first bytes are read before any is forwarded:
//
//   - a TLS handshake (first byte 0x16): the ClientHello, read whole, must
//     parse, and its server name, when it has one, must be the host;
//   - an HTTP/1.x request (a request line ending in HTTP/x.y, after any
//     empty lines): its header block, read whole, must be well formed with
//     exactly one Host, and that Host (and an absolute-form or
//     authority-form target) must name the destination (Want.Names: the
//     port may be omitted). HTTP/2 with prior knowledge carries no Host
//     and is refused;
//   - anything else (SSH, a Postgres startup message, SMTP's EHLO): the
//     tunnel relays as before.
//
// Waiting for the client's first byte is the caller's to bound (a CONNECT
// tunnel waits unbounded — the server's bytes flow meanwhile, so
// protocols where the server speaks first work), but once a byte has
// come, the rest of a ClientHello or request head must come within
// PeekTimeout and MaxPeek bytes, else the tunnel is closed: a start that
// could still be TLS or HTTP is never relayed unchecked. Only the start is
// checked: later requests on a kept-alive tunnel, and what TLS carries,
// are not (an L4 grant is not inspection).
package tunnelstart

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/policy"
)

const (
	// PeekTimeout bounds the rest of a start once its first byte came.
	PeekTimeout = 10 * time.Second
	// MaxPeek bounds the bytes a start may take to be judged.
	MaxPeek = 64 << 10
)

// Want is what a tunnel's start must name.
type Want struct {
	// Host is the tunnel's host (a host name, lowercase without a
	// trailing dot, or an IP literal): a TLS server name must be it.
	Host string
	// Authority is Host:port, for the reasons.
	Authority string
	// Names reports whether an HTTP authority (a Host header's, or a
	// request target's; its port may be omitted) names the tunnel's
	// destination.
	Names func(authority string) bool
	// Of is whose host and authority the reasons name: "CONNECT" when
	// "" ("the CONNECT host"), "transparent connection's" …
	Of string
}

func (w Want) of() string {
	if w.Of == "" {
		return "CONNECT"
	}
	return w.Of
}

// Verdict is what the bytes seen so far say about a tunnel's start.
type Verdict struct {
	More bool   // not enough bytes to tell yet
	What string // "TLS ClientHello" or "HTTP request head"
	HTTP bool   // the client speaks plain HTTP: an HTTP answer can explain a refusal
	// Reason is why the tunnel must close ("" relays).
	Reason string
	// Name is the server name the start asks for, whether or not it is
	// the one wanted: the TLS server name, or the value of the request's
	// one Host header; "" when it names none.
	Name string
}

// Read reads the client's first bytes from r (conn's, whose read
// deadline it sets once a first byte has come, and clears) and returns
// them (held, to forward if the tunnel goes on) with their verdict: its
// Reason says why the tunnel must close, if it must. A client that closes
// (or whose first read fails: the caller's deadline) before speaking has
// nothing to check: no bytes and an empty verdict. Memory grows only with
// the bytes that arrive, up to MaxPeek.
func Read(conn net.Conn, r io.Reader, w Want) (held []byte, v Verdict) {
	chunk := make([]byte, 4<<10)
	n, err := r.Read(chunk)
	if n == 0 {
		return nil, Verdict{}
	}
	held = append([]byte(nil), chunk[:n]...)
	conn.SetReadDeadline(time.Now().Add(PeekTimeout))
	defer conn.SetReadDeadline(time.Time{})
	for {
		v = Judge(held, w)
		switch {
		case !v.More:
			return held, v
		case len(held) >= MaxPeek:
			v.More, v.Reason = false, fmt.Sprintf("the tunnel's first %s is over %d bytes", v.What, MaxPeek)
			return held, v
		case err != nil:
			v.More, v.Reason = false, fmt.Sprintf("the tunnel's first %s did not arrive whole: %v", v.What, err)
			return held, v
		}
		n, err = r.Read(chunk[:min(len(chunk), MaxPeek-len(held))])
		held = append(held, chunk[:n]...)
	}
}

// Judge judges the start data against w.
func Judge(data []byte, w Want) Verdict {
	if len(data) > 0 && data[0] == 0x16 {
		return helloVerdict(data, w)
	}
	return httpVerdict(data, w)
}

// helloVerdict judges a TLS start: once the whole ClientHello handshake
// message has arrived (it may span records), crypto/tls parses it.
func helloVerdict(data []byte, w Want) Verdict {
	v := Verdict{What: "TLS ClientHello"}
	var msg []byte
	for rest := data; ; {
		if len(rest) < 5 {
			v.More = true
			return v
		}
		if rest[0] != 0x16 {
			v.Reason = "the tunnel's first bytes are a malformed TLS handshake"
			return v
		}
		n := int(rest[3])<<8 | int(rest[4])
		if len(rest) < 5+n {
			v.More = true
			return v
		}
		msg = append(msg, rest[5:5+n]...)
		rest = rest[5+n:]
		if len(msg) >= 4 {
			if msg[0] != 1 { // client_hello
				v.Reason = "the tunnel's first bytes are a TLS handshake that is not a ClientHello"
				return v
			}
			if need := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])); len(msg) >= need {
				return judgeHello(data[:len(data)-len(rest)], w)
			}
		}
	}
}

// judgeHello parses a complete ClientHello with crypto/tls and compares
// its server name with the tunnel's host.
func judgeHello(records []byte, w Want) Verdict {
	v := Verdict{What: "TLS ClientHello"}
	got := false
	errEnough := fmt.Errorf("enough")
	srv := tls.Server(&replayConn{r: bytes.NewReader(records)}, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			v.Name, got = hello.ServerName, true
			return nil, errEnough
		},
	})
	srv.Handshake()
	switch {
	case !got:
		v.Reason = "the tunnel's TLS ClientHello is malformed"
	case v.Name != "" && !SameHost(v.Name, w.Host):
		v.Reason = w.ServerNameDiffers(v.Name)
	}
	return v
}

// ServerNameDiffers is why a TLS server name, sni, that is not w's host
// closes the tunnel.
func (w Want) ServerNameDiffers(sni string) string {
	return fmt.Sprintf("the TLS server name %q differs from the %s host %q", sni, w.of(), w.Host)
}

// SameHost reports whether two host names (or IP literals, in any
// spelling) are the same host: case and a trailing dot aside.
func SameHost(name, host string) bool {
	a, b := strings.ToLower(strings.TrimSuffix(name, ".")), strings.ToLower(strings.TrimSuffix(host, "."))
	if a == b {
		return true
	}
	ia, okA := policy.ParseHostIP(a)
	ib, okB := policy.ParseHostIP(b)
	return okA && okB && ia == ib
}

// httpVerdict judges a start that may be HTTP/1.x.
func httpVerdict(data []byte, w Want) Verdict {
	v := Verdict{What: "HTTP request head", HTTP: true}
	// Servers skip empty lines before a request line (RFC 9112 2.2).
	rest := bytes.TrimLeft(data, "\r\n")
	if len(rest) == 0 {
		v.More = true
		return v
	}
	if !isTokenChar(rest[0]) {
		return Verdict{}
	}
	eol := bytes.IndexByte(rest, '\n')
	if eol < 0 {
		// A request line in the making: printable, no control bytes.
		for _, c := range rest {
			if c < 0x20 && c != '\t' && c != '\r' || c == 0x7f {
				return Verdict{}
			}
		}
		v.More = true
		return v
	}
	line := string(bytes.TrimRight(rest[:eol], "\r"))
	if !strings.Contains(strings.ToUpper(line), "HTTP/") {
		return Verdict{} // not HTTP/1.x (HTTP/0.9 carries no Host)
	}
	end := bytes.Index(rest, []byte("\n\r\n"))
	if e := bytes.Index(rest, []byte("\n\n")); e >= 0 && (end < 0 || e < end) {
		end = e
	}
	if end < 0 {
		v.More = true
		return v
	}
	v.Name, v.Reason = checkHead(line, string(rest[eol+1:end+1]), w)
	return v
}

// checkHead checks a request head's target and Host against the tunnel's
// authority, and returns the one Host it names. Anything a lenient server
// might read differently is refused: folded lines, a line without a
// colon, more or fewer than one Host.
func checkHead(requestLine, headers string, w Want) (host, reason string) {
	fields := strings.Fields(requestLine)
	if len(fields) != 3 {
		return "", fmt.Sprintf("the tunnel's first request line %q is malformed", requestLine)
	}
	if target := fields[1]; target != "*" && !strings.HasPrefix(target, "/") {
		authority := target
		if i := strings.Index(target, "://"); i >= 0 {
			u, err := url.Parse(target)
			if err != nil {
				return "", fmt.Sprintf("the tunnel's first request target %q is malformed", target)
			}
			authority = u.Host
		}
		if !w.Names(authority) {
			return "", fmt.Sprintf("the tunnel's first request targets %q, not the %s authority %s", target, w.of(), w.Authority)
		}
	}
	var hosts []string
	for line := range strings.Lines(headers) {
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return "", "the tunnel's first request folds a header line"
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return "", fmt.Sprintf("the tunnel's first request has a header line without a colon: %q", line)
		}
		if h1.EqualFoldASCII(strings.TrimSpace(name), "host") {
			hosts = append(hosts, strings.Trim(value, " \t"))
		}
	}
	switch {
	case len(hosts) != 1:
		return "", fmt.Sprintf("the tunnel's first request has %d Host headers; it needs one, naming the %s authority %s", len(hosts), w.of(), w.Authority)
	case !w.Names(hosts[0]):
		return hosts[0], fmt.Sprintf("the Host header %q differs from the %s authority %s", hosts[0], w.of(), w.Authority)
	}
	return hosts[0], ""
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

// WriteDenial answers a refused plain-HTTP tunnel start (Verdict.HTTP)
// with a 403, as the proxy answers a denied request (denial id, reason,
// the policy version in force, the destination), and asks the client to
// close.
func WriteDenial(w io.Writer, version, host string, port int, reason, id string) {
	body, _ := json.Marshal(map[string]any{
		"error":          "policy_denied",
		"reason":         reason,
		"policy_version": version,
		"denial_id":      id,
		"host":           host,
		"port":           port,
	})
	fmt.Fprintf(w, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
}
