package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/pgtest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// The policy push acceptance, with real processes: a gateway, proxies
// following it, an upstream the proxies forward to, and requests through
// the proxies showing which version each one enforces.

const pushAdminToken = "pcs_push-e2e-admin-token-0123456789abcdef"

// buildHookBinary builds the binary with the test hook that lets a proxy
// refuse a version (cmd/portcullis/testhook_on.go), as a proxy too old for a
// new feature would.
var buildHookBinary = sync.OnceValues(func() (string, error) { return buildTagged("portcullis_testhook", "portcullis-testhook") })

// buildTagged builds the binary with a build tag into binDir as name.
func buildTagged(tag, name string) (string, error) {
	if _, err := buildBinary(); err != nil { // creates binDir
		return "", err
	}
	bin := filepath.Join(binDir, name)
	out, err := exec.Command("go", "build", "-tags", tag, "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return bin, nil
}

// pushDoc is a policy for the upstream on port: GET allowed on the paths
// given, each in its own network policy named after it.
func pushDoc(port int, paths ...string) string {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n")
	for _, p := range paths {
		fmt.Fprintf(&b, `  %s:
    name: %s
    endpoints:
      - host: 127.0.0.1
        port: %d
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/%s/**" }
`, p, p, port, p)
	}
	return b.String()
}

type pushAPI struct {
	sandbox   portcullisv1connect.SandboxServiceClient
	policy    portcullisv1connect.PolicyServiceClient
	proxies   portcullisv1connect.ProxyServiceClient
	decisions portcullisv1connect.DecisionServiceClient
}

func newPushAPI(baseURL string) pushAPI { return newPushAPIWith(baseURL, pushAdminToken) }

// newPushAPIWith is newPushAPI with another admin token.
func newPushAPIWith(baseURL, token string) pushAPI {
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL), gatewaytest.Bearer(token))
	return pushAPI{
		sandbox:   portcullisv1connect.NewSandboxServiceClient(c),
		policy:    portcullisv1connect.NewPolicyServiceClient(c),
		proxies:   portcullisv1connect.NewProxyServiceClient(c),
		decisions: portcullisv1connect.NewDecisionServiceClient(c),
	}
}

func (a pushAPI) set(t *testing.T, doc string) uint32 {
	t.Helper()
	res, err := a.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: doc})
	if err != nil {
		t.Fatalf("set policy: %v", err)
	}
	return res.GetVersion()
}

// waitStatuses polls ListProxies until ok holds for every one of ids.
func (a pushAPI) waitStatuses(t *testing.T, ids []string, what string, ok func(*portcullisv1.ProxyStatus) bool) map[string]*portcullisv1.ProxyStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last map[string]*portcullisv1.ProxyStatus
	for time.Now().Before(deadline) {
		res, err := a.proxies.ListProxies(t.Context(), &portcullisv1.ListProxiesRequest{Sandbox: "agent-1"})
		if err == nil {
			last = map[string]*portcullisv1.ProxyStatus{}
			for _, p := range res.GetProxies() {
				last[p.GetProxyId()] = p
			}
			all := true
			for _, id := range ids {
				if p, found := last[id]; !found || !ok(p) {
					all = false
				}
			}
			if all {
				return last
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("proxies %v never reached %s; last statuses: %v", ids, what, last)
	return nil
}

// proxyProcess is `portcullis proxy --sandbox` running as its own process.
type proxyProcess struct {
	id, dataDir string
	addr        string
	cmd         *exec.Cmd
	done        chan error
	stderr      *lockedBuffer
}

func startProxyProcess(t *testing.T, gatewayURL, tokenFile, dataDir, id string, env ...string) *proxyProcess {
	t.Helper()
	bin, err := buildHookBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return startProxyBinary(t, bin, gatewayURL, tokenFile, dataDir, id, env...)
}

// startProxyBinary is startProxyProcess with the binary bin.
func startProxyBinary(t *testing.T, bin, gatewayURL, tokenFile, dataDir, id string, env ...string) *proxyProcess {
	t.Helper()
	cmd := exec.Command(bin, "proxy", "--sandbox", "agent-1", "--gateway", gatewayURL, "--token-file", tokenFile,
		"--listen", "127.0.0.1:0", "--data-dir", dataDir, "--proxy-id", id, "--dev-allow-loopback", "--max-reconnect-delay", "500ms")
	cmd.Env = append(append(os.Environ(), "PORTCULLIS_TEST_REFUSE=refuse", "PORTCULLIS_TOKEN="), env...)
	p := &proxyProcess{id: id, dataDir: dataDir, cmd: cmd, done: make(chan error, 1), stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "Portcullis proxy listening on "); ok {
				listening <- addr
			}
		}
		io.Copy(io.Discard, stdout)
		p.done <- cmd.Wait()
	}()
	select {
	case p.addr = <-listening:
	case err := <-p.done:
		t.Fatalf("proxy %s exited before listening: %v\n%s", id, err, p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("proxy %s did not start listening\n%s", id, p.stderr.String())
	}
	t.Cleanup(func() { p.kill() })
	return p
}

// stop ends the proxy with SIGTERM (kill: SIGKILL, mid-stream).
func (p *proxyProcess) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("proxy %s did not stop", p.id)
	}
}

func (p *proxyProcess) kill() {
	if p.cmd.ProcessState == nil {
		p.cmd.Process.Kill()
		<-p.done
		p.done <- nil // for a later kill or stop
	}
}

// get asks for path on the upstream through the proxy: 200 or 403.
func (p *proxyProcess) get(t *testing.T, upstream, path string) int {
	t.Helper()
	proxyURL := &url.URL{Scheme: "http", Host: p.addr}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: true}, Timeout: 10 * time.Second}
	res, err := c.Get(upstream + path)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", path, p.id, err)
	}
	res.Body.Close()
	return res.StatusCode
}

// wantStatus polls until GET path through p answers want (a version may
// still be on its way).
func (p *proxyProcess) wantStatus(t *testing.T, upstream, path string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got int
	for time.Now().Before(deadline) {
		if got = p.get(t, upstream, path); got == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("GET %s through %s: %d, want %d\n%s", path, p.id, got, want, p.stderr.String())
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestPushEndToEnd(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	// A fixed port, so the restarted gateway is where the proxies look.
	listen := "127.0.0.1:" + strconv.Itoa(freeFixedPort(t))
	gwEnv := []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="}
	gw := startGatewayProcess(t, gwEnv, "--listen", listen, "--data-dir", filepath.Join(dir, "gateway"))
	gatewayURL := "http://" + gw.addr
	api := newPushAPI(gatewayURL)

	created, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(upPort, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	ids := []string{"p1", "p2", "p3"}
	proxies := map[string]*proxyProcess{}
	for _, id := range ids {
		proxies[id] = startProxyProcess(t, gatewayURL, tokenFile, filepath.Join(dir, id), id)
	}
	applied := func(v uint32) func(*portcullisv1.ProxyStatus) bool {
		return func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() && p.GetAppliedVersion() == v }
	}
	api.waitStatuses(t, ids, "version 1 applied", applied(1))
	for _, p := range proxies {
		p.wantStatus(t, upstream.URL, "/v1/a", 200)
		if got := p.get(t, upstream.URL, "/v2/a"); got != 403 {
			t.Fatalf("%s: /v2 before version 2: %d", p.id, got)
		}
	}

	// Each proxy shipped its decisions, denials with their denial_id.
	for _, p := range proxies {
		waitDenial(t, api, p.id, "/v2/a")
	}

	// A new version reaches all three, ACKed and enforced.
	v2 := api.set(t, pushDoc(upPort, "v1", "v2"))
	statuses := api.waitStatuses(t, ids, "version 2 applied", applied(v2))
	for _, p := range proxies {
		p.wantStatus(t, upstream.URL, "/v2/a", 200)
		if s := statuses[p.id]; s.GetLagMs() > 60_000 || s.GetAppliedHash() == "" {
			t.Fatalf("%s status %v", p.id, s)
		}
	}

	// A version the proxies cannot compile is NACKed, once, with the
	// reason; they keep enforcing version 2.
	v3 := api.set(t, pushDoc(upPort, "v1", "v2", "refuse"))
	statuses = api.waitStatuses(t, ids, "version 3 NACKed", func(p *portcullisv1.ProxyStatus) bool { return p.GetLastNackVersion() == v3 })
	for _, p := range proxies {
		s := statuses[p.id]
		if !strings.Contains(s.GetLastNackError(), "cannot compile network policy refuse") || s.GetAppliedVersion() != v2 || s.GetCurrentVersion() != v3 {
			t.Fatalf("%s after the refused version: %v", p.id, s)
		}
		if got := p.get(t, upstream.URL, "/refuse/a"); got != 403 {
			t.Fatalf("%s enforces the refused version: /refuse answered %d", p.id, got)
		}
		if got := p.get(t, upstream.URL, "/v2/a"); got != 200 {
			t.Fatalf("%s stopped enforcing version 2: %d", p.id, got)
		}
	}
	v4 := api.set(t, pushDoc(upPort, "v1", "v2", "v4"))
	api.waitStatuses(t, ids, "version 4 applied", applied(v4))

	// The gateway goes down: the proxies keep enforcing.
	gw.stop(t)
	for _, p := range proxies {
		if got := p.get(t, upstream.URL, "/v4/a"); got != 200 {
			t.Fatalf("%s with the gateway down: /v4 answered %d", p.id, got)
		}
	}

	// With the gateway still down: p1's data dir is edited by hand (the
	// kept version widened) and p1 restarted — it refuses the forged file
	// and denies everything; p2 restarted with its data dir intact
	// enforces its kept version.
	p1, p2 := proxies["p1"], proxies["p2"]
	p1.stop(t)
	forgeKeptVersion(t, filepath.Join(p1.dataDir, "policy.signed"), pushDoc(upPort, "v1", "v2", "v4", "forged"))
	p1 = startProxyProcess(t, gatewayURL, tokenFile, p1.dataDir, "p1")
	proxies["p1"] = p1
	for _, path := range []string{"/forged/a", "/v1/a"} {
		if got := p1.get(t, upstream.URL, path); got != 403 {
			t.Fatalf("p1 with a forged data dir: %s answered %d, want 403 (deny everything)", path, got)
		}
	}
	if !strings.Contains(p1.stderr.String(), "refused") {
		t.Fatalf("p1 did not say it refused the kept version:\n%s", p1.stderr.String())
	}
	p2.stop(t)
	p2 = startProxyProcess(t, gatewayURL, tokenFile, p2.dataDir, "p2")
	proxies["p2"] = p2
	if got := p2.get(t, upstream.URL, "/v4/a"); got != 200 {
		t.Fatalf("p2 restarted with the gateway down: /v4 answered %d, want its kept version enforced\n%s", got, p2.stderr.String())
	}

	// The gateway comes back: every proxy reconnects and converges, the
	// forged one included.
	gw = startGatewayProcess(t, gwEnv, "--listen", listen, "--data-dir", filepath.Join(dir, "gateway"))
	v5 := api.set(t, pushDoc(upPort, "v1", "v5"))
	api.waitStatuses(t, ids, "version 5 applied after the gateway restart", applied(v5))
	for _, p := range proxies {
		p.wantStatus(t, upstream.URL, "/v5/a", 200)
		if got := p.get(t, upstream.URL, "/forged/a"); got != 403 {
			t.Fatalf("%s: /forged answered %d", p.id, got)
		}
	}

	// A proxy killed mid-stream misses two versions; restarted, it
	// converges to the latest.
	p3 := proxies["p3"]
	p3.kill()
	api.set(t, pushDoc(upPort, "v1", "v6"))
	v7 := api.set(t, pushDoc(upPort, "v1", "v7"))
	p3 = startProxyProcess(t, gatewayURL, tokenFile, p3.dataDir, "p3")
	api.waitStatuses(t, []string{"p3"}, "version 7 applied after restart", applied(v7))
	p3.wantStatus(t, upstream.URL, "/v7/a", 200)
	gw.stop(t)
}

// waitDenial polls the gateway's decision records for a denial of path
// shipped by proxy id.
func waitDenial(t *testing.T, api pushAPI, id, path string) *portcullisv1.DecisionRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		res, err := api.decisions.ListDecisions(t.Context(), &portcullisv1.ListDecisionsRequest{Sandbox: "agent-1", Decision: "deny", Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range res.GetDecisions() {
			r := d.GetRecord()
			if r.GetProxyId() == id && r.GetPath() == path {
				if !strings.HasPrefix(r.GetDenialId(), "dn_") || r.GetSandbox() != "agent-1" || r.GetPolicyVersion() == "" {
					t.Fatalf("shipped denial %v", r)
				}
				return r
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no denial of %s shipped by %s", path, id)
	return nil
}

// forgeKeptVersion rewrites the document of a kept signed version, as an
// agent with write access to the data dir might, keeping the signature.
func forgeKeptVersion(t *testing.T, path, doc string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sp portcullisv1.SignedPolicy
	if err := proto.Unmarshal(data, &sp); err != nil {
		t.Fatal(err)
	}
	sp.Document = []byte(doc)
	if data, err = proto.Marshal(&sp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Two gateway replicas on one Postgres: a proxy connected to replica B
// receives a version committed through replica A.
func TestPushAcrossReplicas(t *testing.T) {
	dsn := pgtest.Database(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port

	env := []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL=" + dsn}
	a := startGatewayProcess(t, env)
	b := startGatewayProcess(t, env)
	apiA, apiB := newPushAPI("http://"+a.addr), newPushAPI("http://"+b.addr)
	created, err := apiA.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(upPort, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte(created.GetToken()), 0o600)
	p := startProxyProcess(t, "http://"+b.addr, tokenFile, filepath.Join(dir, "p"), "p-on-b")
	apiA.waitStatuses(t, []string{"p-on-b"}, "version 1 applied", func(s *portcullisv1.ProxyStatus) bool { return s.GetAppliedVersion() == 1 })

	v2 := apiA.set(t, pushDoc(upPort, "v1", "v2"))
	// Seen through either replica: statuses live in the shared store.
	apiB.waitStatuses(t, []string{"p-on-b"}, "version 2 applied", func(s *portcullisv1.ProxyStatus) bool {
		return s.GetAppliedVersion() == v2 && s.GetConnected()
	})
	p.wantStatus(t, upstream.URL, "/v2/a", 200)
	// Well within the periodic check's interval (5 s): NOTIFY carried it.
	s := apiA.waitStatuses(t, []string{"p-on-b"}, "a lag", func(s *portcullisv1.ProxyStatus) bool { return s.GetAppliedVersion() == v2 })
	if lag := s["p-on-b"].GetLagMs(); lag >= 5000 {
		t.Fatalf("lag %d ms: the version came by the periodic check, not the notification", lag)
	}
}
