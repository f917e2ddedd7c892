package dataplane_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
)

// nameBook is the proxy's DNS as the tests fake it: the names it answered
// for each address, most recent first.
type nameBook map[netip.Addr][]string

func (b nameBook) Names(a netip.Addr) []string { return b[a] }

// transparentProxy is an Agent serving a transparent listener, whose
// connections the tests dial as redirected to where they say.
type transparentProxy struct {
	agent     *dataplane.Agent
	listener  string // the transparent listener's address
	redirects *dataplanetest.Redirects
	roots     *x509.CertPool // the proxy's CA
}

func startTransparent(t *testing.T, doc string, port int, names nameBook, options ...func(*dataplane.Config)) *transparentProxy {
	t.Helper()
	tp := &transparentProxy{redirects: &dataplanetest.Redirects{}}
	cfg := plainConfig(t, nil)
	cfg.Names = names
	cfg.OriginalDst = tp.redirects.OriginalDst
	for _, o := range options {
		o(&cfg)
	}
	tp.roots = x509.NewCertPool()
	tp.roots.AppendCertsFromPEM(cfg.CA.CertPEM())
	tp.agent = newAgent(t, cfg)
	setPolicy(t, tp.agent, strings.ReplaceAll(doc, "PORT", strconv.Itoa(port)), "v1")
	_, tp.listener = dataplanetest.ServeTransparent(t, tp.agent)
	return tp
}

// dial opens a connection redirected to orig.
func (tp *transparentProxy) dial(t *testing.T, orig string) net.Conn {
	t.Helper()
	conn := tp.redirects.Dial(t, tp.listener, netip.MustParseAddrPort(orig))
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	return conn
}

// get sends a GET for path with host as Host on a connection redirected
// to orig and returns the response.
func (tp *transparentProxy) get(t *testing.T, orig, host, path string) (*http.Response, string) {
	t.Helper()
	conn := tp.dial(t, orig)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host)
	return readResponse(t, bufio.NewReader(conn))
}

func readResponse(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(body)
}

// last returns the last decision recorded.
func (tp *transparentProxy) last(t *testing.T) decision.Record {
	t.Helper()
	recs := tp.agent.Decisions()
	if len(recs) == 0 {
		t.Fatal("no decision recorded")
	}
	return recs[len(recs)-1]
}

// denied checks that the last decision is a denial for host whose reason
// holds want.
func (tp *transparentProxy) denied(t *testing.T, host, want string) {
	t.Helper()
	// An L4 denial is recorded as its connection closes: wait for it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		recs := tp.agent.Decisions()
		if n := len(recs); n > 0 && recs[n-1].Decision == decision.Deny && recs[n-1].Host == host && strings.Contains(recs[n-1].Reason, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no denial of %s for %q recorded last: %+v", host, want, recs)
		}
	}
}

// closedUnanswered checks that the proxy closes conn without a byte.
func closedUnanswered(t *testing.T, conn net.Conn) {
	t.Helper()
	if b, err := io.ReadAll(conn); len(b) != 0 || err != nil {
		t.Fatalf("the proxy answered %q, %v; want the connection closed", b, err)
	}
}

// Plain HTTP redirected to an inspected endpoint's address is judged per
// request, by the name the proxy's DNS answered for that address; its
// Host must be that name or the address.
func TestTransparentHTTP(t *testing.T) {
	up := startPlainUpstream(t)
	tp := startTransparent(t, restPolicy, up.port, nameBook{netip.MustParseAddr("127.0.0.1"): {"api.example.com"}})
	orig := fmt.Sprintf("127.0.0.1:%d", up.port)
	named := fmt.Sprintf("api.example.com:%d", up.port)

	for _, host := range []string{named, "API.example.com", orig} {
		res, body := tp.get(t, orig, host, "/v1/orders")
		if res.StatusCode != http.StatusOK || body != "ok /v1/orders" {
			t.Fatalf("GET with Host %s = %d %q; want the upstream's answer", host, res.StatusCode, body)
		}
		if rec := tp.last(t); rec.Decision != decision.Allow || rec.Host != "api.example.com" || rec.Path != "/v1/orders" || rec.Addr != "127.0.0.1" {
			t.Fatalf("record %+v; want an allow of api.example.com /v1/orders at 127.0.0.1", rec)
		}
	}
	seen := len(up.seen())

	// Denied by path: the same 403 as through the proxy listener.
	res, body := tp.get(t, orig, named, "/admin/users")
	var denial map[string]any
	if err := json.Unmarshal([]byte(body), &denial); err != nil || res.StatusCode != http.StatusForbidden || denial["error"] != "policy_denied" || denial["path"] != "/admin/users" {
		t.Fatalf("GET /admin/users = %d %s; want a policy denial", res.StatusCode, body)
	}
	tp.denied(t, "api.example.com", "deny")

	// A Host naming another site at that address.
	if res, body := tp.get(t, orig, fmt.Sprintf("other.example.com:%d", up.port), "/v1/orders"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("GET with another Host = %d %s; want 403", res.StatusCode, body)
	}
	tp.denied(t, "api.example.com", "the Host header differs from the transparent connection's authority")
	if n := len(up.seen()); n != seen {
		t.Fatalf("the upstream saw denied requests: %q", up.seen()[seen:])
	}
}

// With several names answered for an address, the client's first bytes
// pick one; a name never answered for it is denied.
func TestTransparentPicksName(t *testing.T) {
	up := startPlainUpstream(t)
	tp := startTransparent(t, restPolicy, up.port, nameBook{netip.MustParseAddr("127.0.0.1"): {"other.example.com", "api.example.com"}})
	orig := fmt.Sprintf("127.0.0.1:%d", up.port)
	if res, body := tp.get(t, orig, "api.example.com", "/v1/x"); res.StatusCode != http.StatusOK {
		t.Fatalf("GET as api.example.com = %d %s; want 200", res.StatusCode, body)
	}
	if rec := tp.last(t); rec.Host != "api.example.com" {
		t.Fatalf("judged as %q; want api.example.com", rec.Host)
	}
	// The most recent name (other.example.com) is not allowed.
	if res, _ := tp.get(t, orig, orig, "/v1/x"); res.StatusCode != http.StatusForbidden {
		t.Fatalf("GET naming the address = %d; want 403 (judged by the most recent name)", res.StatusCode)
	}
	tp.denied(t, "other.example.com", "")
	seen := len(up.seen())
	res, body := tp.get(t, orig, "evil.example.com", "/v1/x")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, `server name \"evil.example.com\" was not answered for 127.0.0.1`) {
		t.Fatalf("GET as a name never answered = %d %s; want 403", res.StatusCode, body)
	}
	tp.denied(t, "evil.example.com", "was not answered for 127.0.0.1 by the proxy's DNS")

	// TLS: the server name picks, and one never answered is denied with
	// the connection closed.
	conn := tp.dial(t, orig)
	tc := tls.Client(conn, &tls.Config{ServerName: "evil.example.com", InsecureSkipVerify: true})
	if err := tc.Handshake(); err == nil {
		t.Fatal("a TLS handshake for a name never answered succeeded")
	}
	tp.denied(t, "evil.example.com", "was not answered")
	if n := len(up.seen()); n != seen {
		t.Fatalf("the upstream saw denied requests: %q", up.seen()[seen:])
	}
}

// TLS redirected to an inspected endpoint is intercepted (the proxy's CA)
// and judged per request; a server name other than the name answered for
// the address is refused, and nothing reaches the upstream.
func TestTransparentTLSIntercepted(t *testing.T) {
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "tls %s", r.URL.Path) }))
	doc := `
version: 1
network_policies:
  api:
    endpoints:
      - { host: secure.example.com, port: PORT, protocol: rest, enforcement: enforce, access: read-only }
    binaries: []
`
	tp := startTransparent(t, doc, up.port, nameBook{netip.MustParseAddr("127.0.0.1"): {"secure.example.com"}},
		func(c *dataplane.Config) { c.UpstreamRoots = up.roots })
	orig := fmt.Sprintf("127.0.0.1:%d", up.port)
	open := func(serverName string) (*tls.Conn, error) {
		tc := tls.Client(tp.dial(t, orig), &tls.Config{ServerName: serverName, RootCAs: tp.roots, InsecureSkipVerify: serverName != "secure.example.com"})
		return tc, tc.Handshake()
	}

	tc, err := open("secure.example.com")
	if err != nil {
		t.Fatalf("handshake with the proxy's CA: %v", err)
	}
	br := bufio.NewReader(tc)
	for _, tc2 := range []struct {
		method string
		status int
	}{{"GET", http.StatusOK}, {"DELETE", http.StatusForbidden}} {
		fmt.Fprintf(tc, "%s /v1/x HTTP/1.1\r\nHost: secure.example.com\r\n\r\n", tc2.method)
		if res, body := readResponse(t, br); res.StatusCode != tc2.status {
			t.Fatalf("%s through the intercepted connection = %d %s; want %d", tc2.method, res.StatusCode, body, tc2.status)
		}
	}
	if up.count() != 1 || !up.saw("GET /v1/x") {
		t.Fatalf("the upstream saw %d requests; want the GET alone", up.count())
	}

	tc, err = open("evil.example.com")
	if err == nil {
		fmt.Fprintf(tc, "GET /v1/x HTTP/1.1\r\nHost: secure.example.com\r\n\r\n")
		if res, err := http.ReadResponse(bufio.NewReader(tc), nil); err == nil {
			t.Fatalf("a connection with another server name was answered %d", res.StatusCode)
		}
	}
	tp.denied(t, "secure.example.com", `the TLS server name "evil.example.com" differs from the transparent connection's host "secure.example.com"`)
	if up.count() != 1 {
		t.Fatalf("the upstream saw %d requests; want 1", up.count())
	}
}

// Raw TCP is an L4 connection to the original address and port: allowed
// by an L4 endpoint's host and port, closed otherwise, with its first
// bytes held to the name.
func TestTransparentRawTCP(t *testing.T) {
	allowed := startRawServer(t, "")
	other := startRawServer(t, "")
	doc := fmt.Sprintf(`
version: 1
network_policies:
  raw:
    endpoints:
      - { host: raw.example.com, port: %d }
    binaries: []
`, allowed.port)
	raw := netip.MustParseAddr(rawAddr)
	tp := startTransparent(t, doc, 0, nameBook{raw: {"raw.example.com"}})

	conn := tp.dial(t, fmt.Sprintf("%s:%d", rawAddr, allowed.port))
	io.WriteString(conn, "hello\x00")
	conn.(*net.TCPConn).CloseWrite()
	if got := allowed.received(t); string(got) != "hello\x00" {
		t.Fatalf("the upstream received %q; want hello", got)
	}
	if rec := tp.last(t); rec.Decision != decision.Allow || rec.Host != "raw.example.com" || rec.Port != allowed.port {
		t.Fatalf("record %+v; want an allow of raw.example.com", rec)
	}

	// A port no endpoint names: closed, nothing forwarded.
	conn = tp.dial(t, fmt.Sprintf("%s:%d", rawAddr, other.port))
	io.WriteString(conn, "hello\x00")
	closedUnanswered(t, conn)
	tp.denied(t, "raw.example.com", "")

	// An allowed port, but TLS for another name: closed before a byte
	// is forwarded.
	conn = tp.dial(t, fmt.Sprintf("%s:%d", rawAddr, allowed.port))
	conn.Write(helloFor(t, "api.example.com"))
	closedUnanswered(t, conn)
	tp.denied(t, "raw.example.com", `the TLS server name "api.example.com" differs from the transparent connection's host "raw.example.com"`)
	if got := allowed.received(t); len(got) != 0 {
		t.Fatalf("the upstream received %q; want nothing", got)
	}
	select {
	case got := <-other.got:
		t.Fatalf("the port no endpoint names received %q", got)
	default:
	}
}

// An address the proxy's DNS answered no name for is judged by the
// address alone: a name-based endpoint is never reached by dialling its
// address; an endpoint naming the address is.
func TestTransparentAddressOnly(t *testing.T) {
	srv := startRawServer(t, "")
	doc := fmt.Sprintf(`
version: 1
network_policies:
  raw:
    endpoints:
      - { host: raw.example.com, port: %d }
  byaddress:
    endpoints:
      - { host: 127.0.0.3, port: %d }
`, srv.port, srv.port)
	tp := startTransparent(t, doc, 0, nil)
	// raw.example.com is at rawAddr (fakeDNS), but no name was answered.
	conn := tp.dial(t, fmt.Sprintf("%s:%d", rawAddr, srv.port))
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: raw.example.com:%d\r\n\r\n", srv.port)
	res, body := readResponse(t, bufio.NewReader(conn))
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, `"host":"`+rawAddr+`"`) {
		t.Fatalf("plain HTTP to raw.example.com's address = %d %s; want a 403 for the address", res.StatusCode, body)
	}
	tp.denied(t, rawAddr, "")
	conn = tp.dial(t, fmt.Sprintf("%s:%d", rawAddr, srv.port))
	io.WriteString(conn, "\x00raw")
	closedUnanswered(t, conn)
	tp.denied(t, rawAddr, "")

	// An IP host names the address: allowed, the address dialled.
	third, err := net.Listen("tcp", fmt.Sprintf("127.0.0.3:%d", srv.port))
	if err != nil {
		t.Skipf("listen on 127.0.0.3: %v", err)
	}
	got := make(chan []byte, 1)
	go func() {
		c, err := third.Accept()
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		got <- b
	}()
	t.Cleanup(func() { third.Close() })
	conn = tp.dial(t, fmt.Sprintf("127.0.0.3:%d", srv.port))
	io.WriteString(conn, "\x00raw")
	conn.(*net.TCPConn).CloseWrite()
	if b := <-got; string(b) != "\x00raw" {
		t.Fatalf("the endpoint naming the address received %q", b)
	}
	if rec := tp.last(t); rec.Decision != decision.Allow || rec.Host != "127.0.0.3" {
		t.Fatalf("record %+v; want an allow of 127.0.0.3", rec)
	}
	select {
	case b := <-srv.got:
		t.Fatalf("raw.example.com's server received %q", b)
	default:
	}
}

// A connection sent to the transparent listener itself (not redirected)
// is refused; the address checks of any destination apply.
func TestTransparentRefusals(t *testing.T) {
	up := startPlainUpstream(t)
	tp := startTransparent(t, restPolicy, up.port, nameBook{netip.MustParseAddr("169.254.169.254"): {"meta.example.com"}})
	res, body := tp.get(t, tp.listener, "x", "/")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "not redirected") {
		t.Fatalf("a connection to the listener itself = %d %s; want 403", res.StatusCode, body)
	}
	tp.denied(t, "127.0.0.1", "not redirected")
	res, body = tp.get(t, fmt.Sprintf("169.254.169.254:%d", up.port), "meta.example.com", "/")
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "169.254.169.254") {
		t.Fatalf("a connection to the metadata address = %d %s; want 403", res.StatusCode, body)
	}
	tp.denied(t, "meta.example.com", "always denied")
}
