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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/policy"
)

// plainUpstream is an HTTP server on loopback that records the request
// lines it receives. /events streams two SSE events, the second only after
// release is closed.
type plainUpstream struct {
	port    int
	release chan struct{}

	mu    sync.Mutex
	lines []string
}

func (u *plainUpstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.lines...)
}

func startPlainUpstream(t *testing.T) *plainUpstream {
	t.Helper()
	u := &plainUpstream{release: make(chan struct{})}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.lines = append(u.lines, r.Method+" "+r.URL.EscapedPath()+" host="+r.Host)
		u.mu.Unlock()
		if r.URL.Path == "/silent" {
			// An SSE response that says nothing yet, as a tool that works
			// a while: headers now, the first event after release.
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Mcp-Session-Id", "s-1")
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			<-u.release
			fmt.Fprint(w, "data: late\n\n")
			return
		}
		if r.URL.Path == "/events" {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: one\n\n")
			http.NewResponseController(w).Flush()
			<-u.release
			fmt.Fprint(w, "data: two\n\n")
			return
		}
		fmt.Fprintf(w, "ok %s", r.URL.Path)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.port = ln.Addr().(*net.TCPAddr).Port
	// raw.example.com, an L4 destination, lives on another address than
	// the inspected api.example.com: the proxy refuses L4 to an address
	// that serves an inspected endpoint.
	raw, err := net.Listen("tcp", net.JoinHostPort(rawAddr, strconv.Itoa(u.port)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	go srv.Serve(raw)
	t.Cleanup(func() {
		select {
		case <-u.release:
		default:
			close(u.release)
		}
		srv.Close()
	})
	return u
}

// rawAddr is where raw.example.com lives: the plain upstream listens there
// too, on the same port as on 127.0.0.1.
const rawAddr = "127.0.0.2"

// fakeDNS resolves the test names: api and raw to loopback (the upstream),
// meta to the cloud-metadata address, private to an RFC 1918 address.
func fakeDNS(_ context.Context, host string) ([]netip.Addr, error) {
	switch host {
	case "api.example.com":
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	case "raw.example.com":
		return []netip.Addr{netip.MustParseAddr(rawAddr)}, nil
	case "meta.example.com":
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	case "private.example.com":
		return []netip.Addr{netip.MustParseAddr("10.0.0.5")}, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// plainProxy runs a proxy with the fake DNS, a settable clock and the real
// binary identification (through /proc).
func plainProxy(t *testing.T, doc string, port int, clk *clock) (*dataplane.Agent, *url.URL) {
	t.Helper()
	return startAgent(t, plainConfig(t, clk), strings.ReplaceAll(doc, "PORT", strconv.Itoa(port)), "v1")
}

// plainConfig is plainProxy's configuration.
func plainConfig(t *testing.T, clk *clock) dataplane.Config {
	t.Helper()
	proxyCA, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := dataplane.Config{DevAllowLoopback: true, Resolve: fakeDNS, CA: proxyCA}
	if clk != nil {
		cfg.Now = clk.Now
	}
	return cfg
}

const restPolicy = `
version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: PORT
        protocol: rest
        enforcement: enforce
        access: read-only
        deny_rules:
          - { method: GET, path: "/admin/**" }
      - host: meta.example.com
        port: PORT
        protocol: rest
        enforcement: enforce
        access: read-only
      - host: private.example.com
        port: PORT
        protocol: rest
        enforcement: enforce
        access: read-only
    binaries: []
  raw:
    endpoints:
      - { host: raw.example.com, port: PORT }
    binaries: []
  graph:
    endpoints:
      - { host: api.example.com, port: 1, protocol: graphql, enforcement: enforce, access: full }
    binaries: []
`

func proxied(proxyURL *url.URL) *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}}
}

func TestRESTThroughProxy(t *testing.T) {
	up := startPlainUpstream(t)
	p, pu := plainProxy(t, restPolicy, up.port, nil)
	c := proxied(pu)
	base := fmt.Sprintf("http://api.example.com:%d", up.port)

	get := func(u string) (int, string) {
		t.Helper()
		res, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(base + "/v1/orders"); code != 200 || body != "ok /v1/orders" {
		t.Fatalf("allowed GET = %d %q", code, body)
	}
	// The canonical path is what is judged and what is forwarded.
	if code, _ := get(base + "/v1//x/../orders"); code != 200 {
		t.Fatalf("GET of a non-canonical allowed path = %d", code)
	}
	if got := up.seen(); got[len(got)-1] != fmt.Sprintf("GET /v1/orders host=api.example.com:%d", up.port) {
		t.Fatalf("forwarded %q; want the canonical path and the original Host", got[len(got)-1])
	}
	n := len(up.seen())
	// Deny rule, also through dot segments; a method the preset lacks.
	if code, body := get(base + "/v1/../admin/users"); code != 403 || !strings.Contains(body, "denial_id") || !strings.Contains(body, "deny_rules[0]") {
		t.Fatalf("denied path = %d %s", code, body)
	}
	res, err := c.Post(base+"/v1/orders", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 403 {
		t.Fatalf("POST under read-only = %d", res.StatusCode)
	}
	// Names resolving to the metadata address or a private address
	// (without allowed_ips) are denied at dial time.
	for _, host := range []string{"meta.example.com", "private.example.com"} {
		if code, body := get(fmt.Sprintf("http://%s:%d/v1/x", host, up.port)); code != 403 {
			t.Fatalf("%s = %d %s, want 403", host, code, body)
		}
	}
	// An uninspected protocol denies, saying so.
	if code, body := get("http://api.example.com:1/graphql"); code != 403 || !strings.Contains(body, "not inspected") {
		t.Fatalf("graphql endpoint = %d %s", code, body)
	}
	if len(up.seen()) != n {
		t.Fatalf("the upstream saw denied requests: %q", up.seen()[n:])
	}
	var denials int
	for _, r := range p.Decisions() {
		if r.Decision == decision.Deny {
			denials++
		}
	}
	if denials != 5 {
		t.Fatalf("%d denials recorded, want 5", denials)
	}
}

// An absolute URI whose authority differs from Host is refused.
func TestAbsoluteURIHostMismatch(t *testing.T) {
	up := startPlainUpstream(t)
	_, pu := plainProxy(t, restPolicy, up.port, nil)
	conn, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET http://api.example.com:%d/v1/x HTTP/1.1\r\nHost: raw.example.com:%d\r\n\r\n", up.port, up.port)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 403 || len(up.seen()) != 0 {
		t.Fatalf("authority/Host mismatch = %d, upstream saw %d", res.StatusCode, len(up.seen()))
	}
}

func TestConnectL4(t *testing.T) {
	up := startPlainUpstream(t)
	_, pu := plainProxy(t, restPolicy, up.port, nil)
	connect := func(authority string) (*http.Response, net.Conn) {
		t.Helper()
		conn, err := net.Dial("tcp", pu.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		return res, conn
	}
	// Allowed L4: bytes flow to the upstream.
	res, conn := connect(fmt.Sprintf("raw.example.com:%d", up.port))
	if res.StatusCode != 200 {
		t.Fatalf("CONNECT to an allowed L4 destination = %d", res.StatusCode)
	}
	fmt.Fprintf(conn, "GET /tunnelled HTTP/1.1\r\nHost: raw.example.com\r\nConnection: close\r\n\r\n")
	inner, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(inner.Body)
	if string(b) != "ok /tunnelled" {
		t.Fatalf("tunnelled response %q", b)
	}
	// Denied: no entry, the metadata address in several spellings, a
	// control-plane port.
	for _, authority := range []string{
		"elsewhere.example.com:443",
		"169.254.169.254:80", "[::ffff:169.254.169.254]:80", "2852039166:80", "0xa9fea9fe:80",
		fmt.Sprintf("meta.example.com:%d", up.port),
		"raw.example.com:6443",
	} {
		if res, _ := connect(authority); res.StatusCode != 403 {
			t.Errorf("CONNECT %s = %d, want 403", authority, res.StatusCode)
		}
	}
}

// A policy naming the metadata address, in any spelling, is refused at
// load; the proxy keeps the version it has.
func TestMetadataPolicyRefusedAtLoad(t *testing.T) {
	up := startPlainUpstream(t)
	p, _ := plainProxy(t, restPolicy, up.port, nil)
	dir := t.TempDir()
	for i, host := range []string{"169.254.169.254", "0xa9fea9fe", "2852039166", "metadata.google.internal.", "[fd00:ec2::254]"} {
		file := filepath.Join(dir, strconv.Itoa(i)+".yaml")
		doc := fmt.Sprintf("version: 1\nnetwork_policies:\n  m:\n    endpoints: [{host: %q, port: 80}]\n    binaries: []\n", host)
		if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := p.LoadFile(file); err == nil {
			t.Errorf("a policy naming %s loaded", host)
		}
		if p.PolicyVersion() != "v1" {
			t.Fatalf("after a refused load the version is %q, want v1", p.PolicyVersion())
		}
	}
}

// SSE flows event by event: the client reads the first event while the
// upstream still holds the second.
func TestSSEStreamsUnbuffered(t *testing.T) {
	up := startPlainUpstream(t)
	_, pu := plainProxy(t, restPolicy, up.port, nil)
	res, err := proxied(pu).Get(fmt.Sprintf("http://api.example.com:%d/events", up.port))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	line, err := r.ReadString('\n')
	if err != nil || line != "data: one\n" {
		t.Fatalf("first event = %q, %v (it should arrive before the second is sent)", line, err)
	}
	close(up.release)
	rest, _ := io.ReadAll(r)
	if !strings.Contains(string(rest), "data: two") {
		t.Fatalf("second event missing: %q", rest)
	}
}

// An SSE response's status and headers reach the client when the
// upstream sends them, not with its first event: a silent tool kept them
// back, and a client with a shorter header timeout failed only through
// the proxy (issue 14, 6a).
func TestSSEHeadersBeforeFirstEvent(t *testing.T) {
	up := startPlainUpstream(t)
	_, pu := plainProxy(t, restPolicy, up.port, nil)
	type answer struct {
		res *http.Response
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := proxied(pu).Get(fmt.Sprintf("http://api.example.com:%d/silent", up.port))
		got <- answer{res, err}
	}()
	var a answer
	select {
	case a = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no response headers while the upstream holds its first event")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.res.Body.Close()
	if a.res.StatusCode != http.StatusOK || a.res.Header.Get("Mcp-Session-Id") != "s-1" || !strings.HasPrefix(a.res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("headers = %d %v", a.res.StatusCode, a.res.Header)
	}
	close(up.release)
	body, _ := io.ReadAll(a.res.Body)
	if string(body) != "data: late\n\n" {
		t.Fatalf("body = %q", body)
	}
}

// A policy file is watched: a valid change swaps in, an invalid one is
// refused and the last good version stays; with no valid policy at all,
// everything is denied.
func TestPolicyFileHotReload(t *testing.T) {
	up := startPlainUpstream(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(doc string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(strings.ReplaceAll(doc, "PORT", strconv.Itoa(up.port))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("version: 1\nbogus: true\n")
	cfg := plainConfig(t, nil)
	cfg.PolicyFile, cfg.ReloadInterval = file, 10*time.Millisecond
	p := newAgent(t, cfg)
	c := proxied(dataplanetest.Serve(t, p))
	u := fmt.Sprintf("http://api.example.com:%d/v1/x", up.port)
	status := func() int {
		t.Helper()
		res, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if s := status(); s != 403 {
		t.Fatalf("with no policy = %d, want 403", s)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	write(restPolicy)
	waitFor("the valid policy", func() bool { return p.PolicyVersion() != "" })
	good := p.PolicyVersion()
	if s := status(); s != 200 {
		t.Fatalf("after loading = %d, want 200", s)
	}
	reads, _ := p.FileReloads()
	write("version: 1\nnetwork_policies: {x: {endpoints: [{host: 169.254.169.254, port: 80}], binaries: []}}\n")
	waitFor("the invalid file to be read", func() bool {
		n, err := p.FileReloads()
		return n > reads && err != nil
	})
	if p.PolicyVersion() != good {
		t.Fatalf("an invalid file replaced the version")
	}
	if s := status(); s != 200 {
		t.Fatalf("after an invalid file = %d, want the last good version to allow", s)
	}
}

// expires_at is honoured by the proxy's own clock (standalone; in
// gateway mode by the later of it and the gateway's: clock_internal_test.go).
func TestGrantExpiresByProxyClock(t *testing.T) {
	up := startPlainUpstream(t)
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := &clock{now: start}
	doc := `
version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: PORT
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/v1/**", expires_at: "2026-11-30T13:00:00Z" }
    binaries: []
`
	_, pu := plainProxy(t, doc, up.port, clk)
	c := proxied(pu)
	u := fmt.Sprintf("http://api.example.com:%d/v1/x", up.port)
	for _, tc := range []struct {
		at   time.Time
		want int
	}{
		{start, 200},
		{start.Add(59 * time.Minute), 200},
		{start.Add(time.Hour), 403},
		{start.Add(2 * time.Hour), 403},
	} {
		clk.set(tc.at)
		res, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("at %s: %d, want %d", tc.at.Format(time.TimeOnly), res.StatusCode, tc.want)
		}
	}
}

// With the real binary identification, a client the proxy cannot identify
// (here: the test process itself) matches no rule that names binaries.
func TestUnknownBinaryMatchesNoNamedRule(t *testing.T) {
	up := startPlainUpstream(t)
	named := strings.Replace(restPolicy, "  raw:\n    endpoints:\n      - { host: raw.example.com, port: PORT }\n    binaries: []", "  raw:\n    endpoints:\n      - { host: raw.example.com, port: PORT }\n    binaries: [{path: /usr/bin/python3}]", 1)
	_, pu := plainProxy(t, named, up.port, nil)
	res, err := proxied(pu).Get(fmt.Sprintf("http://raw.example.com:%d/x", up.port))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 403 {
		t.Fatalf("unknown binary on a rule naming binaries = %d, want 403", res.StatusCode)
	}
}

// A request in flight finishes under the version it started with; the
// next request is judged by the new one.
func TestInFlightRequestKeepsItsVersion(t *testing.T) {
	up := startPlainUpstream(t)
	p, pu := plainProxy(t, restPolicy, up.port, nil)
	c := proxied(pu)
	res, err := c.Get(fmt.Sprintf("http://api.example.com:%d/events", up.port))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "data: one\n" {
		t.Fatalf("first event = %q, %v", line, err)
	}
	denyAll, _, err := policy.Parse([]byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetPolicy(denyAll, "v2"); err != nil {
		t.Fatal(err)
	}
	close(up.release)
	if rest, _ := io.ReadAll(r); !strings.Contains(string(rest), "data: two") {
		t.Fatalf("the in-flight stream was cut by the new version: %q", rest)
	}
	next, err := c.Get(fmt.Sprintf("http://api.example.com:%d/v1/x", up.port))
	if err != nil {
		t.Fatal(err)
	}
	next.Body.Close()
	if next.StatusCode != 403 {
		t.Fatalf("a request after the swap = %d, want 403 under v2", next.StatusCode)
	}
}

// An open L4 tunnel is judged again when the policy changes, and closed
// when the new version no longer allows it.
func TestOpenTunnelClosedWhenPolicyChanges(t *testing.T) {
	withoutRaw := strings.Replace(restPolicy, "  raw:\n    endpoints:\n      - { host: raw.example.com, port: PORT }\n    binaries: []\n", "", 1)
	// raw.example.com's address now also serves an inspected endpoint.
	inspectedThere := restPolicy + "  there:\n    endpoints:\n      - { host: " + rawAddr + ", port: PORT, protocol: rest, access: read-only }\n"
	for name, next := range map[string]string{"raw removed": withoutRaw, "raw's address inspected": inspectedThere} {
		t.Run(name, func(t *testing.T) { openTunnelClosedBy(t, next) })
	}
}

func openTunnelClosedBy(t *testing.T, next string) {
	up := startPlainUpstream(t)
	p, pu := plainProxy(t, restPolicy, up.port, nil)
	conn, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	authority := fmt.Sprintf("raw.example.com:%d", up.port)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	br := bufio.NewReader(conn)
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("CONNECT = %v, %v", res, err)
	}
	// The tunnel works (keep-alive, so it stays open afterwards).
	fmt.Fprintf(conn, "GET /one HTTP/1.1\r\nHost: raw.example.com\r\n\r\n")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()

	pol, _, err := policy.Parse([]byte(strings.ReplaceAll(next, "PORT", strconv.Itoa(up.port))))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetPolicy(pol, "v2"); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /two HTTP/1.1\r\nHost: raw.example.com\r\n\r\n")
	if res, err := http.ReadResponse(br, nil); err == nil {
		res.Body.Close()
		t.Fatalf("the tunnel still carried a request after the policy stopped allowing it: %d", res.StatusCode)
	}
	for _, line := range up.seen() {
		if strings.Contains(line, "/two") {
			t.Fatalf("the upstream received %q after the policy change", line)
		}
	}
	recs := p.Decisions()
	if last := recs[len(recs)-1]; last.Decision != decision.Deny || !strings.Contains(last.Reason, "open tunnel closed") {
		t.Fatalf("last record = %+v, want the tunnel's closing", last)
	}
}

// Header tricks found in review: a padded header line long enough to hide
// from a short scanner, and a Connection header naming an end-to-end
// header (which would be judged, then dropped before the upstream).
func TestHeaderTricksRefused(t *testing.T) {
	up := startPlainUpstream(t)
	_, pu := plainProxy(t, restPolicy, up.port, nil)
	send := func(raw string) int {
		t.Helper()
		conn, err := net.Dial("tcp", pu.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, raw)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	target := fmt.Sprintf("http://api.example.com:%d/v1/x", up.port)
	padded := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: api.example.com:%d\r\nContent-Length: 5%s\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", target, up.port, strings.Repeat(" ", 17000))
	if code := send(padded); code != http.StatusForbidden {
		t.Errorf("padded Content-Length with Transfer-Encoding = %d, want 403", code)
	}
	named := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: api.example.com:%d\r\nConnection: Authorization\r\nAuthorization: Bearer x\r\n\r\n", target, up.port)
	if code := send(named); code != http.StatusForbidden {
		t.Errorf("Connection naming Authorization = %d, want 403", code)
	}
	if len(up.seen()) != 0 {
		t.Fatalf("the upstream saw %q", up.seen())
	}
}

// A file already applied when the agent is built is not applied again
// when the watcher starts.
func TestWatchFileStartsFromTheLoadedFile(t *testing.T) {
	up := startPlainUpstream(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(restPolicy, "PORT", strconv.Itoa(up.port))), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := plainConfig(t, nil)
	cfg.PolicyFile, cfg.ReloadInterval = file, time.Millisecond
	p := newAgent(t, cfg) // loads the file
	if p.PolicyVersion() == "" {
		t.Fatal("the policy file was not loaded")
	}
	dataplanetest.Serve(t, p) // and watches it
	// A negative check: give the watcher many ticks on the unchanged file.
	time.Sleep(20 * time.Millisecond)
	if n, _ := p.FileReloads(); n != 0 {
		t.Fatalf("the unchanged file was read as a change %d times", n)
	}
}

// Hop-by-hop fields describe one connection: the proxy forwards neither
// the client's (Proxy-Authorization among them) nor the upstream's, nor
// the fields a Connection header names, also when it says close. Three
// requests on one client connection: nothing of one request or of its
// answer reaches the next's.
func TestHopByHopFieldsStayOnTheirConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	heads := make(chan string, 3)
	go func() {
		answers := []string{
			"HTTP/1.1 200 OK\r\nConnection: X-Private\r\nX-Private: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\nX-Public: 1\r\nContent-Length: 2\r\n\r\nok",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			"HTTP/1.1 200 OK\r\nConnection: close, X-Closing\r\nX-Closing: 1\r\nContent-Length: 2\r\n\r\nok",
		}
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for _, answer := range answers {
			var head strings.Builder
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if line == "\r\n" {
					break
				}
				head.WriteString(line)
			}
			heads <- head.String()
			io.WriteString(c, answer)
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	_, pu := plainProxy(t, restPolicy, port, nil)
	conn, err := net.Dial("tcp", pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	exchange := func(fields string) (string, *http.Response) {
		t.Helper()
		fmt.Fprintf(conn, "GET http://api.example.com:%d/v1/x HTTP/1.1\r\nHost: api.example.com:%d\r\n%s\r\n", port, port, fields)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d", res.StatusCode)
		}
		select {
		case head := <-heads:
			return head, res
		case <-time.After(10 * time.Second):
			t.Fatal("the upstream saw no request")
			return "", nil
		}
	}

	head, res := exchange("Connection: keep-alive, Te\r\nProxy-Connection: keep-alive\r\nKeep-Alive: 300\r\nProxy-Authorization: Basic c2VjcmV0\r\nTe: trailers\r\nX-End: 1\r\n")
	if !strings.Contains(head, "X-End: 1\r\n") {
		t.Errorf("the upstream did not get the end-to-end field:\n%s", head)
	}
	for _, hop := range []string{"Connection:", "Proxy-Connection:", "Keep-Alive:", "Proxy-Authorization:", "Te:"} {
		if strings.Contains(head, hop) {
			t.Errorf("the upstream got %s:\n%s", hop, head)
		}
	}
	if res.Header.Get("X-Public") != "1" {
		t.Errorf("the client did not get the upstream's end-to-end field: %v", res.Header)
	}
	for _, hop := range []string{"X-Private", "Keep-Alive", "Proxy-Authenticate"} {
		if _, ok := res.Header[hop]; ok {
			t.Errorf("the client got the upstream's %s: %v", hop, res.Header)
		}
	}

	head, res = exchange("X-Second: 1\r\n")
	if !strings.Contains(head, "X-Second: 1\r\n") || strings.Contains(head, "X-End") {
		t.Errorf("the second request reached the upstream as:\n%s", head)
	}
	if _, ok := res.Header["X-Public"]; ok {
		t.Errorf("the second answer carries the first's field: %v", res.Header)
	}

	// The upstream closes its connection, naming a field as it does: the
	// field goes no further than the Connection header would.
	_, res = exchange("")
	if _, ok := res.Header["X-Closing"]; ok {
		t.Errorf("the client got the field the upstream's Connection: close named: %v", res.Header)
	}
}
