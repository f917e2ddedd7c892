//go:build linux

package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/portcullis-dev/portcullis/internal/netnstest"
)

// The transparent path's acceptance, with real processes in network
// namespaces the test makes: upstreams in a namespace of their own
// (internal/netnstest: reached over a veth pair, as hosts on a network),
// the proxy binary with --transparent-listen, and agents started by the
// binary's `portcullis run`, with no proxy settings, as nobody. Whatever
// an agent does, it reaches nothing but the proxy.

const nobody = "65534"

// upstreams are the servers of the transparent tests and what each saw.
type upstreams struct {
	mu       sync.Mutex
	requests []string       // "HOST PATH" of each HTTP request
	conns    map[string]int // connections accepted, by listener address
	queries  map[string]int // DNS questions the outside resolver got, by name
	packets  int            // datagrams to the UDP port
	tlsHello int            // TLS handshakes that reached the TLS server
}

func (u *upstreams) count(f func()) { u.mu.Lock(); f(); u.mu.Unlock() }

// startUpstreams makes the namespace (api.test is 198.18.0.10, db.test
// 198.18.0.11, evil.test 198.18.0.12) and its servers: HTTP on :80
// and :8080 of each, TLS on :443, a TCP echo on db.test:7000 and :7001,
// a UDP port 9999, and the "real" resolver on 198.18.0.10:53 that the
// proxy asks (through PORTCULLIS_TEST_RESOLVER).
func startUpstreams(t *testing.T) *upstreams {
	t.Helper()
	link := fmt.Sprintf("pcte%d", os.Getpid()%100000)
	host, err := netnstest.New(link, netip.MustParsePrefix("198.18.0.1/28"),
		netip.MustParsePrefix("198.18.0.10/28"), netip.MustParsePrefix("198.18.0.11/28"), netip.MustParsePrefix("198.18.0.12/28"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	u := &upstreams{conns: map[string]int{}, queries: map[string]int{}}
	listen := func(addr string) net.Listener {
		ln, err := host.Listen("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return &countingListener{Listener: ln, u: u}
	}
	web := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.count(func() { u.requests = append(u.requests, r.Host+" "+r.URL.Path) })
		io.WriteString(w, "upstream "+r.URL.Path)
	})
	for _, addr := range []string{"0.0.0.0:80", "0.0.0.0:8080"} {
		srv := &http.Server{Handler: web}
		go srv.Serve(listen(addr))
		t.Cleanup(func() { srv.Close() })
	}
	tlsSrv := httptest.NewUnstartedServer(web)
	tlsSrv.Listener = listen("198.18.0.10:443")
	tlsSrv.Config.TLSConfig = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		u.count(func() { u.tlsHello++ })
		return nil, nil
	}}
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)
	for _, addr := range []string{"198.18.0.11:7000", "198.18.0.11:7001"} {
		ln := listen(addr)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { io.Copy(c, c); c.Close() }()
			}
		}()
	}
	pc, err := host.ListenPacket("udp", "198.18.0.10:9999")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			u.count(func() { u.packets++ })
		}
	}()
	dnsConn, err := host.ListenPacket("udp", "198.18.0.10:53")
	if err != nil {
		t.Fatal(err)
	}
	resolver := &dns.Server{PacketConn: dnsConn, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		name := strings.TrimSuffix(strings.ToLower(q.Question[0].Name), ".")
		u.count(func() { u.queries[name]++ })
		addr := map[string]string{"api.test": "198.18.0.10", "db.test": "198.18.0.11", "evil.test": "198.18.0.12"}[name]
		if addr == "" {
			m.Rcode = dns.RcodeNameError
		} else if q.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A " + addr)
			m.Answer = append(m.Answer, rr)
		}
		w.WriteMsg(m)
	})}
	go resolver.ActivateAndServe()
	t.Cleanup(func() { resolver.Shutdown() })
	return u
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	u *upstreams
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.u.count(func() { l.u.conns[l.Addr().String()]++ })
	}
	return c, err
}

// transparentPolicy allows GET /allowed/** on api.test:80 to the agents
// and node, a TLS tunnel to api.test:443, and raw TCP to db.test:7000 to
// agent A only.
func transparentPolicy(agentA, agentB, node string) string {
	return fmt.Sprintf(`version: 1
network_policies:
  web:
    name: web
    endpoints:
      - host: api.test
        port: 80
        protocol: rest
        enforcement: enforce
        allowed_ips: ["198.18.0.0/28"]
        rules:
          - allow: { method: GET, path: "/allowed/**" }
      - host: api.test
        port: 443
        allowed_ips: ["198.18.0.0/28"]
    binaries: [{path: %[1]s}, {path: %[2]s}, {path: %[3]s}]
  raw:
    name: raw
    endpoints:
      - host: db.test
        port: 7000
        protocol: tcp
        allowed_ips: ["198.18.0.0/28"]
    binaries: [{path: %[1]s}]
`, agentA, agentB, node)
}

// transparentFixture is a proxy with a transparent listener, the
// upstreams, and two copies of the agent.
type transparentFixture struct {
	bin, dataDir   string
	transparent    string // the proxy's --transparent-listen address
	agentA, agentB string
	up             *upstreams
}

func newTransparentFixture(t *testing.T) *transparentFixture {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("portcullis run needs root (CI=true: not skipped)")
		}
		t.Skip("portcullis run needs root")
	}
	bin, err := buildHookBinary()
	if err != nil {
		t.Fatal(err)
	}
	// The agents run as nobody: their directory must be theirs to read.
	agents, err := os.MkdirTemp("", "portcullis-agents-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(agents) })
	os.Chmod(agents, 0o755)
	f := &transparentFixture{bin: bin, agentA: filepath.Join(agents, "agent-a"), agentB: filepath.Join(agents, "agent-b")}
	for _, out := range []string{f.agentA, f.agentB} {
		if b, err := exec.Command("go", "build", "-o", out, "./testdata/transparentagent").CombinedOutput(); err != nil {
			t.Fatalf("build agent: %v\n%s", err, b)
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed for the fetch test: %v", err)
	}
	if node, err = filepath.EvalSymlinks(node); err != nil {
		t.Fatal(err)
	}
	f.up = startUpstreams(t)
	dir := t.TempDir()
	f.dataDir = filepath.Join(dir, "proxy")
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(transparentPolicy(f.agentA, f.agentB, node)), 0o600); err != nil {
		t.Fatal(err)
	}
	proxy := exec.Command(bin, "proxy", "--policy", policyFile, "--data-dir", f.dataDir,
		"--listen", "127.0.0.1:0", "--transparent-listen", "127.0.0.1:0")
	proxy.Env = append(os.Environ(), "PORTCULLIS_TEST_RESOLVER=198.18.0.10:53")
	stdout, err := proxy.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(lockedBuffer)
	proxy.Stderr = stderr
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Process.Kill(); proxy.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "transparent:"); ok {
				found <- strings.Fields(addr)[0]
			}
		}
	}()
	select {
	case f.transparent = <-found:
	case <-time.After(30 * time.Second):
		t.Fatalf("the proxy did not say its transparent address\nstderr:\n%s", stderr.String())
	}
	return f
}

// run runs the agent (or any command) under `portcullis run` as nobody
// and returns its first output line and whether it exited 0.
func (f *transparentFixture) run(t *testing.T, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(f.bin, append([]string{"run", "--proxy", f.transparent, "--uid", nobody, "--gid", nobody, "--"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/tmp"} // no proxy variables
	out, err := cmd.Output()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 && line == "" {
		line = "stderr: " + strings.TrimSpace(string(ee.Stderr))
	}
	return line, err == nil
}

// decisions are the proxy's decision log lines so far.
func (f *transparentFixture) decisions(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(f.dataDir, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestTransparentBoundary(t *testing.T) {
	f := newTransparentFixture(t)
	u := f.up

	t.Run("allowed GET from a plain socket", func(t *testing.T) {
		if got, _ := f.run(t, f.agentA, "get", "http://api.test/allowed/socket"); got != "HTTP/1.1 200 OK" {
			t.Fatalf("got %q", got)
		}
		assertRequested(t, u, "api.test /allowed/socket", true)
	})
	t.Run("allowed GET from node's fetch", func(t *testing.T) {
		script := `fetch("http://api.test/allowed/node").then(async r => console.log(r.status, await r.text())).catch(e => { console.log("error", e.cause ? e.cause.code || e.cause.message : e.message); process.exit(1) })`
		if got, _ := f.run(t, "node", "-e", script); got != "200 upstream /allowed/node" {
			t.Fatalf("got %q", got)
		}
		assertRequested(t, u, "api.test /allowed/node", true)
	})
	t.Run("denied path never reaches the upstream", func(t *testing.T) {
		if got, _ := f.run(t, f.agentA, "get", "http://api.test/secret"); got != "HTTP/1.1 403 Forbidden" {
			t.Fatalf("got %q", got)
		}
		assertRequested(t, u, "api.test /secret", false)
	})
	t.Run("a port no policy names", func(t *testing.T) {
		if got, ok := f.run(t, f.agentA, "get", "http://api.test:8080/allowed/x"); ok && strings.Contains(got, "200") {
			t.Fatalf("got %q", got)
		}
		assertConns(t, u, "0.0.0.0:8080", 0)
	})
	t.Run("raw TCP to a protocol tcp endpoint", func(t *testing.T) {
		if got, _ := f.run(t, f.agentA, "tcp", "db.test:7000", "ping"); got != "echo ping" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("raw TCP to another port", func(t *testing.T) {
		if got, ok := f.run(t, f.agentA, "tcp", "db.test:7001", "ping"); ok {
			t.Fatalf("got %q", got)
		}
		assertConns(t, u, "198.18.0.11:7001", 0)
	})
	t.Run("caller identity", func(t *testing.T) {
		// The same program under another path: the raw rule names only A.
		if got, ok := f.run(t, f.agentB, "tcp", "db.test:7000", "ping"); ok {
			t.Fatalf("agent B got %q", got)
		}
		if !strings.Contains(f.decisions(t), f.agentB) {
			t.Fatalf("no decision names %s:\n%s", f.agentB, f.decisions(t))
		}
	})
	t.Run("DNS for a denied name", func(t *testing.T) {
		for _, server := range []string{"", "198.18.0.10:53", "127.0.0.53:53"} {
			if got, _ := f.run(t, f.agentA, "dns", "evil.test", server); got != "NXDOMAIN" {
				t.Fatalf("server %q: got %q", server, got)
			}
		}
		u.count(func() {
			if n := u.queries["evil.test"]; n != 0 {
				t.Fatalf("the outside resolver got %d questions for evil.test", n)
			}
		})
		if got, _ := f.run(t, f.agentA, "dns", "api.test"); got != "198.18.0.10" {
			t.Fatalf("api.test: got %q", got)
		}
	})
	t.Run("UDP to another port reaches nothing", func(t *testing.T) {
		f.run(t, f.agentA, "udp", "198.18.0.10:9999")
		time.Sleep(200 * time.Millisecond)
		u.count(func() {
			if u.packets != 0 {
				t.Fatalf("%d datagrams reached the upstream", u.packets)
			}
		})
	})
	t.Run("an address no name was answered for", func(t *testing.T) {
		// 198.18.0.12 was never answered: judged by the address alone,
		// and a Host naming api.test disagrees with it.
		if got, _ := f.run(t, f.agentA, "get", "http://198.18.0.12/allowed/x", "api.test"); got != "HTTP/1.1 403 Forbidden" {
			t.Fatalf("got %q", got)
		}
		assertRequested(t, u, "api.test /allowed/x", false)
	})
	t.Run("a Host that disagrees with the destination", func(t *testing.T) {
		f.run(t, f.agentA, "dns", "api.test") // the proxy answers api.test = 198.18.0.10
		if got, _ := f.run(t, f.agentA, "get", "http://198.18.0.10/allowed/host", "db.test"); got != "HTTP/1.1 403 Forbidden" {
			t.Fatalf("got %q", got)
		}
		assertRequested(t, u, "db.test /allowed/host", false)
	})
	t.Run("a TLS server name that disagrees with the destination", func(t *testing.T) {
		if got, ok := f.run(t, f.agentA, "tls", "api.test:443", "evil.test"); ok {
			t.Fatalf("got %q", got)
		}
		u.count(func() {
			if u.tlsHello != 0 {
				t.Fatalf("%d handshakes reached the TLS upstream", u.tlsHello)
			}
		})
		if got, _ := f.run(t, f.agentA, "tls", "api.test:443", "api.test"); got != "handshake ok" {
			t.Fatalf("with the right name: got %q", got)
		}
	})
	log := f.decisions(t)
	for _, want := range []string{`"decision":"allow"`, "/allowed/socket", "/secret", "db.test"} {
		if !strings.Contains(log, want) {
			t.Errorf("the decision log has no %q:\n%s", want, log)
		}
	}
}

// assertRequested checks whether the upstream saw "HOST PATH".
func assertRequested(t *testing.T, u *upstreams, req string, want bool) {
	t.Helper()
	u.count(func() {
		seen := false
		for _, r := range u.requests {
			seen = seen || r == req
		}
		if seen != want {
			t.Fatalf("upstream saw %q: %v, want %v (it saw %q)", req, seen, want, u.requests)
		}
	})
}

// assertConns checks the connections a listener accepted.
func assertConns(t *testing.T, u *upstreams, addr string, want int) {
	t.Helper()
	u.count(func() {
		if got := u.conns[addr]; got != want {
			t.Fatalf("%s accepted %d connections, want %d", addr, got, want)
		}
	})
}
