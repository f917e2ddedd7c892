//go:build drills

package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/drills/internal/drillkit"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// The harness: the real binary built once with the drill hooks, a
// gateway process on embedded SQLite, a gateway-mode proxy process, an
// upstream HTTP server, and requests through the proxy.

const adminToken = "pcs_drill-proxy-admin-token-0123456789abcdef"

const sandboxName = "drill"

var removeBinary func()

func TestMain(m *testing.M) {
	code := m.Run()
	if removeBinary != nil {
		removeBinary()
	}
	os.Exit(code)
}

// buildBinary builds cmd/portcullis with -tags drills once per run.
var buildBinary = sync.OnceValues(func() (string, error) {
	bin, remove, err := drillkit.Build("drills")
	removeBinary = remove
	return bin, err
})

func binary(t *testing.T) string {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// gateway is `portcullis gateway` on embedded SQLite.
type gateway struct {
	addr   string
	cmd    *exec.Cmd
	done   chan error
	stderr *drillkit.LockedBuffer
	api    api
}

func startGateway(t *testing.T, dir string) *gateway {
	t.Helper()
	cmd := exec.Command(binary(t), "gateway", "--listen", "127.0.0.1:0", "--data-dir", dir)
	cmd.Env = append(os.Environ(), "PORTCULLIS_BOOTSTRAP_TOKEN="+adminToken, "PORTCULLIS_DATABASE_URL=")
	g := &gateway{cmd: cmd, done: make(chan error, 1), stderr: &drillkit.LockedBuffer{}}
	cmd.Stderr = g.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	banner := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "Portcullis gateway listening on "); ok {
				banner <- addr
			}
		}
		g.done <- cmd.Wait()
	}()
	select {
	case g.addr = <-banner:
	case err := <-g.done:
		t.Fatalf("gateway exited before serving: %v\n%s", err, g.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("gateway did not start within 60s\n%s", g.stderr.String())
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-g.done
		}
	})
	g.api = newAPI("http://" + g.addr)
	return g
}

func (g *gateway) url() string { return "http://" + g.addr }

// metric reads one unlabelled sample from the gateway's /metrics.
func (g *gateway) metric(t *testing.T, name string) float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", g.url()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("/metrics has no %s (status %d)", name, res.StatusCode)
	return 0
}

// api is the admin's view of the gateway.
type api struct {
	sandbox portcullisv1connect.SandboxServiceClient
	policy  portcullisv1connect.PolicyServiceClient
	proxies portcullisv1connect.ProxyServiceClient
}

func newAPI(baseURL string) api {
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL), bearer(adminToken))
	return api{
		sandbox: portcullisv1connect.NewSandboxServiceClient(c),
		policy:  portcullisv1connect.NewPolicyServiceClient(c),
		proxies: portcullisv1connect.NewProxyServiceClient(c),
	}
}

func bearer(token string) connect.ClientInterceptor {
	return func(next connect.ClientFunc) connect.ClientFunc {
		return func(ctx context.Context, spec connect.Spec) (connect.ClientStream, error) {
			if info, ok := connect.CallInfoForClientContext(ctx); ok {
				info.RequestHeader().Set("Authorization", "Bearer "+token)
			}
			return next(ctx, spec)
		}
	}
}

// createSandbox creates the drill's sandbox with doc and writes its token
// to a file, whose path it returns.
func (a api) createSandbox(t *testing.T, dir, doc string) string {
	t.Helper()
	res, err := a.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: sandboxName, Policy: doc})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(res.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// set commits doc as the sandbox's next version and returns it.
func (a api) set(t *testing.T, doc string) uint32 {
	t.Helper()
	res, err := a.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: sandboxName, Document: doc})
	if err != nil {
		t.Fatalf("set policy: %v", err)
	}
	return res.GetVersion()
}

// freeze is `portcullis sandbox freeze`: it returns the deny-all version.
func (a api) freeze(t *testing.T) uint32 {
	t.Helper()
	if _, err := a.sandbox.FreezeSandbox(t.Context(), &portcullisv1.FreezeSandboxRequest{Name: sandboxName, Reason: "drill"}); err != nil {
		t.Fatalf("freeze: %v", err)
	}
	res, err := a.policy.GetPolicy(t.Context(), &portcullisv1.GetPolicyRequest{Sandbox: sandboxName})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetVersion()
}

// status is the gateway's record of proxy id.
func (a api) status(t *testing.T, id string) *portcullisv1.ProxyStatus {
	t.Helper()
	res, err := a.proxies.ListProxies(t.Context(), &portcullisv1.ListProxiesRequest{Sandbox: sandboxName})
	if err != nil {
		t.Fatalf("list proxies: %v", err)
	}
	for _, p := range res.GetProxies() {
		if p.GetProxyId() == id {
			return p
		}
	}
	return nil
}

// waitStatus polls the gateway's record of proxy id until ok holds.
func (a api) waitStatus(t *testing.T, id string, ok func(*portcullisv1.ProxyStatus) bool) *portcullisv1.ProxyStatus {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last *portcullisv1.ProxyStatus
	for time.Now().Before(deadline) {
		if last = a.status(t, id); last != nil && ok(last) {
			return last
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("proxy %s never reached the expected status; last %v", id, last)
	return nil
}

// proxy is `portcullis proxy --sandbox` as its own process. Its JSON log
// lines are read as they come, each stamped with the time it arrived.
type proxy struct {
	id, dataDir, addr string
	cmd               *exec.Cmd
	done              chan error
	client            *http.Client

	mu    sync.Mutex
	lines []logLine
	grew  chan struct{} // closed and replaced at each new line
}

type logLine struct {
	at   time.Time
	raw  string
	msg  string
	attr map[string]any
}

// startProxy runs a proxy of the drill's sandbox following gatewayURL
// (the relay's address, usually), with env added to its environment.
func startProxy(t *testing.T, gatewayURL, tokenFile, dataDir, id string, env []string, args ...string) *proxy {
	t.Helper()
	args = append([]string{"proxy", "--sandbox", sandboxName, "--gateway", gatewayURL, "--token-file", tokenFile,
		"--listen", "127.0.0.1:0", "--data-dir", dataDir, "--proxy-id", id, "--dev-allow-loopback"}, args...)
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(append(os.Environ(), "PORTCULLIS_TOKEN="), env...)
	p := &proxy{id: id, dataDir: dataDir, cmd: cmd, done: make(chan error, 1), grew: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var readers sync.WaitGroup
	readers.Go(func() { p.readLog(stderr) })
	listening := make(chan string, 1)
	readers.Go(func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "Portcullis proxy listening on "); ok {
				listening <- addr
			}
		}
	})
	go func() {
		readers.Wait()
		p.done <- cmd.Wait()
	}()
	select {
	case p.addr = <-listening:
	case err := <-p.done:
		t.Fatalf("proxy %s exited before listening: %v\n%s", id, err, p.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("proxy %s did not start listening\n%s", id, p.log())
	}
	p.client = &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: p.addr}), DisableKeepAlives: true},
		Timeout:   5 * time.Second,
	}
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *proxy) readLog(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := logLine{at: time.Now(), raw: sc.Text()}
		if json.Unmarshal(sc.Bytes(), &l.attr) == nil {
			l.msg, _ = l.attr["msg"].(string)
		}
		p.mu.Lock()
		p.lines = append(p.lines, l)
		close(p.grew)
		p.grew = make(chan struct{})
		p.mu.Unlock()
	}
}

// log is the proxy's log so far, for failure messages.
func (p *proxy) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines {
		b.WriteString(l.raw + "\n")
	}
	return b.String()
}

// waitLog waits until a log line from index from on satisfies ok, and
// returns it with the index after it.
func (p *proxy) waitLog(t *testing.T, from int, within time.Duration, what string, ok func(logLine) bool) (logLine, int) {
	t.Helper()
	deadline := time.After(within)
	for {
		p.mu.Lock()
		for i := from; i < len(p.lines); i++ {
			if ok(p.lines[i]) {
				l := p.lines[i]
				p.mu.Unlock()
				return l, i + 1
			}
		}
		from = len(p.lines)
		grew := p.grew
		p.mu.Unlock()
		select {
		case <-grew:
		case <-deadline:
			t.Fatalf("proxy %s: no log line %s within %v\n%s", p.id, what, within, p.log())
		}
	}
}

// linesFrom returns the log lines from index from on.
func (p *proxy) linesFrom(from int) []logLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]logLine(nil), p.lines[min(from, len(p.lines)):]...)
}

// logLen is the count of log lines so far.
func (p *proxy) logLen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// applied matches the log line of version v applied.
func applied(v uint32) func(logLine) bool {
	return func(l logLine) bool {
		ver, _ := l.attr["version"].(float64)
		return l.msg == "policy version applied" && uint32(ver) == v
	}
}

func (p *proxy) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// get asks the upstream for path through the proxy and returns the
// status (0 with the error when there was no answer).
func (p *proxy) get(upstream, path string) (int, error) {
	res, err := p.client.Get(upstream + path)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// waitStatus polls GET path until it answers want.
func (p *proxy) waitStatus(t *testing.T, upstream, path string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got int
	var err error
	for time.Now().Before(deadline) {
		if got, err = p.get(upstream, path); got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("GET %s through %s: %d (%v), want %d\n%s", path, p.id, got, err, want, p.log())
}

// upstream is an HTTP server the policies name: every path answers 200.
func upstream(t *testing.T) (string, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port
}

// restDoc allows GET on each prefix's paths (/PREFIX/**) of the upstream
// on port, one network policy per prefix; extra is appended to each
// allow rule (e.g. an expires_at).
func restDoc(port int, prefixes ...string) string { return restDocWith(port, "", prefixes...) }

func restDocWith(port int, extra string, prefixes ...string) string {
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n")
	for _, p := range prefixes {
		fmt.Fprintf(&b, `  %s:
    name: %s
    endpoints:
      - host: 127.0.0.1
        port: %d
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/%s/**"%s }
`, p, p, port, p, extra)
	}
	return b.String()
}

// figure prints one figure line.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE "+format, args...)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }
