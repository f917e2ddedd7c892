//go:build drills

package gateway

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/drills/internal/drillkit"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// longDrills selects the long variants (also PORTCULLIS_DRILLS_LONG=1).
var longDrills = flag.Bool("drills.long", false, "run the long variants of the drills")

func long() bool { return *longDrills || os.Getenv("PORTCULLIS_DRILLS_LONG") == "1" }

// adminToken is every drill gateway's bootstrap admin token.
const adminToken = "pcs_drill-gateway-admin-token-0123456789abcdef"

// bin is the real portcullis binary, built once.
var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	remove := func() {}
	if b := os.Getenv("PORTCULLIS_DRILLS_BIN"); b != "" {
		bin = b // built already (CI builds once; a run as another user)
	} else {
		var err error
		if bin, remove, err = drillkit.Build(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	code := m.Run()
	remove()
	os.Exit(code)
}

// figure prints one measured figure line: FIGURE drill=NAME k=v ….
func figure(t *testing.T, drill string, kv ...any) {
	t.Helper()
	var b strings.Builder
	b.WriteString("FIGURE drill=" + drill)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, " %v=%v", kv[i], kv[i+1])
	}
	t.Log(b.String())
}

// freeAddr returns a loopback address nothing listens on now, so a
// process restarted on it keeps the address its clients know.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// tail is the end of a log, for failure messages.
func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// process is a long-running portcullis command (a gateway or a proxy)
// that a drill starts, kills and starts again with the same arguments.
type process struct {
	t    *testing.T
	name string
	args []string
	env  []string
	// ready is the stdout line prefix that says it serves; the rest of
	// the line is its address.
	ready string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
	addr string
	log  *drillkit.LockedBuffer // stdout and stderr of every run
}

// newProcess prepares `portcullis ARGS…`; start runs it. It is killed
// when the test ends.
func newProcess(t *testing.T, name, ready string, env []string, args ...string) *process {
	p := &process{t: t, name: name, args: args, env: env, ready: ready, log: &drillkit.LockedBuffer{}}
	t.Cleanup(func() {
		p.kill9()
		if t.Failed() {
			t.Logf("%s log:\n%s", p.name, tail(p.log.String()))
		}
	})
	return p
}

// start runs the process and waits for its ready line.
func (p *process) start() {
	t := p.t
	t.Helper()
	cmd := exec.Command(bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stderr = p.log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan error, 1)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			p.log.Write([]byte(line + "\n"))
			if a, ok := strings.CutPrefix(line, p.ready); ok {
				select {
				case addr <- strings.TrimSpace(a):
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
		done <- cmd.Wait()
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	select {
	case a := <-addr:
		p.mu.Lock()
		p.addr = a
		p.mu.Unlock()
	case err := <-done:
		done <- err
		t.Fatalf("%s exited before serving: %v\n%s", p.name, err, tail(p.log.String()))
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not serve within 60s\n%s", p.name, tail(p.log.String()))
	}
}

// kill9 sends SIGKILL and waits for the process to be gone (no-op when it
// is not running).
func (p *process) kill9() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// internalErrors logs (up to 5 of) the gateway's "internal error" lines:
// the detail behind calls a drill saw answered Internal.
func (g *gateway) internalErrors(t *testing.T) {
	t.Helper()
	n := 0
	for line := range strings.Lines(g.log.String()) {
		if strings.Contains(line, `"msg":"internal error"`) {
			if n++; n <= 5 {
				t.Logf("%s: %s", g.name, strings.TrimSpace(line))
			}
		}
	}
	if n > 5 {
		t.Logf("%s: %d internal errors in all", g.name, n)
	}
}

// gateway is a `portcullis gateway` replica on a fixed address.
type gateway struct {
	*process
	url string
}

// newGateway prepares a gateway replica listening on a fixed loopback
// address (kept across restarts) with the drills' admin token; extra are
// more flags (--data-dir, …) and env the store (PORTCULLIS_DATABASE_URL).
func newGateway(t *testing.T, name string, env []string, extra ...string) *gateway {
	addr := freeAddr(t)
	env = append([]string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + adminToken, "PORTCULLIS_LOG_LEVEL=info"}, env...)
	args := append([]string{"gateway", "--listen", addr}, extra...)
	return &gateway{
		process: newProcess(t, name, "Portcullis gateway listening on ", env, args...),
		url:     "http://" + addr,
	}
}

// ready reports whether /readyz answers 200 now.
func (g *gateway) ready() bool {
	return readyz(g.url) == http.StatusOK
}

// readyzClient never waits long: a dead or wedged replica is not ready.
var readyzClient = &http.Client{Timeout: 3 * time.Second}

// readyz is the status /readyz answers (0 when nothing answers).
func readyz(base string) int {
	res, err := readyzClient.Get(base + "/readyz")
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// waitReady polls /readyz until it answers 200 and returns how long that
// took from since.
func (g *gateway) waitReady(since time.Time, within time.Duration) time.Duration {
	g.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if g.ready() {
			return time.Since(since)
		}
		time.Sleep(20 * time.Millisecond)
	}
	g.t.Fatalf("%s not ready within %v\n%s", g.name, within, tail(g.log.String()))
	return 0
}

// restart starts a killed replica again on its address and returns the
// time from exec to ready.
func (g *gateway) restart() time.Duration {
	g.t.Helper()
	start := time.Now()
	g.start()
	return g.waitReady(start, 60*time.Second)
}

// client is the API as one token sees it through one replica.
type client struct {
	sandbox  portcullisv1connect.SandboxServiceClient
	token    portcullisv1connect.TokenServiceClient
	policy   portcullisv1connect.PolicyServiceClient
	advisor  portcullisv1connect.AdvisorServiceClient
	approval portcullisv1connect.ApprovalServiceClient
	audit    portcullisv1connect.AuditServiceClient
	proxies  portcullisv1connect.ProxyServiceClient
}

// apiHTTP is the drills' HTTP client: its own connection pool, and no
// call waits forever on a replica that died mid-call.
var apiHTTP = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
}

func newClient(baseURL, token string) client {
	c := connect.NewClient(connecthttp.NewTransport(apiHTTP, baseURL), bearer(token))
	return client{
		sandbox:  portcullisv1connect.NewSandboxServiceClient(c),
		token:    portcullisv1connect.NewTokenServiceClient(c),
		policy:   portcullisv1connect.NewPolicyServiceClient(c),
		advisor:  portcullisv1connect.NewAdvisorServiceClient(c),
		approval: portcullisv1connect.NewApprovalServiceClient(c),
		audit:    portcullisv1connect.NewAuditServiceClient(c),
		proxies:  portcullisv1connect.NewProxyServiceClient(c),
	}
}

// bearer sends the token on every call.
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

// createSandbox creates name with doc as its first version and returns its
// token.
func createSandbox(t *testing.T, admin client, name, doc string) string {
	t.Helper()
	res, err := admin.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: name, Policy: doc})
	if err != nil {
		t.Fatalf("create sandbox %s: %v", name, err)
	}
	return res.GetToken()
}

// createOperator creates an operator token named name.
func createOperator(t *testing.T, admin client, name string) string {
	t.Helper()
	res, err := admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Role: "operator", Name: name})
	if err != nil {
		t.Fatalf("create operator %s: %v", name, err)
	}
	return res.GetToken()
}

// setDoc is a policy document unique to (tag, n): one REST endpoint whose
// allowed path names them, so its hash names the write that stored it.
func setDoc(tag string, n int) string {
	return fmt.Sprintf(`version: 1
network_policies:
  base:
    name: base
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/%s/%d/**" }
    binaries: [ { path: /usr/bin/python3 } ]
`, tag, n)
}

// callCtx bounds one drill call.
func callCtx(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 20*time.Second)
}

// readSignedVersion is the version a proxy persisted as its last good one
// (DATA-DIR/policy.signed), 0 if none yet.
func readSignedVersion(dataDir string) uint32 {
	b, err := os.ReadFile(filepath.Join(dataDir, "policy.signed"))
	if err != nil {
		return 0
	}
	var sp portcullisv1.SignedPolicy
	if proto.Unmarshal(b, &sp) != nil {
		return 0
	}
	return sp.GetVersion()
}

// durations are measured times, summarised for a figure.
type durations []time.Duration

func (d durations) summary() string {
	if len(d) == 0 {
		return "none"
	}
	s := append(durations(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	p := func(q float64) int64 { return s[int(math.Ceil(q*float64(len(s))))-1].Milliseconds() }
	return fmt.Sprintf("n=%d p50_ms=%d p99_ms=%d max_ms=%d", len(s), p(0.5), p(0.99), s[len(s)-1].Milliseconds())
}
