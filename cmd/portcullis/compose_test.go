package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	"github.com/portcullis-dev/portcullis/demo"
	"github.com/portcullis-dev/portcullis/internal/pgtest"
)

// composeFile is what the tests read of docker-compose.yml.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"` // "." or {context, target}
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// target is the Dockerfile stage the service builds ("" for the default).
func (s composeService) target() string {
	if m, ok := s.Build.(map[string]any); ok {
		t, _ := m["target"].(string)
		return t
	}
	return ""
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		// Keys this test does not read (ports, healthcheck, restart) are
		// fine: decode again without the strict check.
		if err := yaml.Unmarshal(data, &c); err != nil {
			t.Fatalf("docker-compose.yml: %v", err)
		}
	}
	return c
}

// invocations returns the portcullis command lines a service runs, each
// as its arguments: the command itself for the portcullis image, the
// `portcullis …` commands of its script for the tools image (a busybox
// shell), redirections dropped.
func (s composeService) invocations(t *testing.T) [][]string {
	t.Helper()
	if s.target() != "tools" {
		return [][]string{s.Command}
	}
	if len(s.Command) != 1 {
		t.Fatalf("a tools service's command is one shell script, got %q", s.Command)
	}
	var out [][]string
	for _, line := range strings.Split(s.Command[0], "\n") {
		for _, part := range regexp.MustCompile(`\|\||&&|;`).Split(line, -1) {
			f := strings.Fields(part)
			if len(f) == 0 || f[0] != "portcullis" {
				continue
			}
			args := f[1:]
			for i, a := range args {
				if strings.HasPrefix(a, ">") || a == "|" {
					args = args[:i]
					break
				}
			}
			out = append(out, args)
		}
	}
	return out
}

// checkArgs parses args with the CLI's own command tree: the command must
// exist and take every flag and argument given.
func checkArgs(t *testing.T, args []string) {
	t.Helper()
	root := newRootCmd(newEnvironment(strings.NewReader(""), io.Discard, io.Discard, func(string) string { return "" }))
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		t.Errorf("%q: no such command (%v)", args, err)
		return
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%q: %v", args, err)
		return
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		t.Errorf("%q: %v", args, err)
	}
	if !cmd.Runnable() {
		t.Errorf("%q: %s runs nothing", args, cmd.CommandPath())
	}
}

// flagValue is the value of --name in args ("" if absent).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestComposeFile keeps docker-compose.yml valid without a Docker engine:
// every portcullis command of every service is one the CLI takes, flags
// and all; dependencies and volumes name what exists; the loop's pieces
// are wired to each other (the proxy follows the gateway with the token
// the provisioning step writes, the demo server is stateless and where
// the policy and the agent expect it); and the directories the nonroot
// user writes are created for it in the image.
func TestComposeFile(t *testing.T) {
	c := readCompose(t)
	for _, name := range []string{"postgres", "gateway", "provision", "demo-mcp", "proxy", "agent"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no service %q", name)
		}
	}
	commands := map[string][][]string{}
	for name, s := range c.Services {
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("%s depends on %s, which is not a service", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				if _, ok := c.Volumes[src]; !ok {
					t.Errorf("%s mounts volume %s, which is not declared", name, src)
				}
			} else if _, err := os.Stat(filepath.Join("../..", src)); err != nil {
				t.Errorf("%s mounts %s: %v", name, src, err)
			}
		}
		if s.Build == nil {
			continue
		}
		commands[name] = s.invocations(t)
		for _, args := range commands[name] {
			checkArgs(t, args)
		}
	}

	gw := commands["gateway"][0]
	if gw[0] != "gateway" || flagValue(gw, "listen") != "0.0.0.0:7070" || !slices.Contains(gw, "--insecure") {
		t.Errorf("gateway: %q", gw)
	}
	var created bool
	for _, args := range commands["provision"] {
		if len(args) > 2 && args[0] == "sandbox" && args[1] == "create" && args[2] == "orders" {
			created = slices.Contains(args, "/examples/orders.yaml")
		}
	}
	if !created || !strings.Contains(c.Services["provision"].Command[0], "> /secrets/orders.token") {
		t.Errorf("provision does not create sandbox orders from /examples/orders.yaml and write its token: %q", c.Services["provision"].Command)
	}
	if env := c.Services["provision"].Environment; env["PORTCULLIS_GATEWAY"] != "http://gateway:7070" {
		t.Errorf("provision talks to %q", env["PORTCULLIS_GATEWAY"])
	}
	px := commands["proxy"][0]
	if flagValue(px, "gateway") != "http://gateway:7070" || flagValue(px, "sandbox") != "orders" ||
		flagValue(px, "token-file") != "/secrets/orders.token" || !slices.Contains(px, "--insecure") || flagValue(px, "policy") != "" {
		t.Errorf("the proxy does not follow the gateway with the provisioned token: %q", px)
	}
	if c.Services["proxy"].DependsOn["provision"].Condition != "service_completed_successfully" {
		t.Errorf("the proxy starts before its token is written: %+v", c.Services["proxy"].DependsOn)
	}
	demoArgs := commands["demo-mcp"][0]
	if !slices.Contains(demoArgs, "--stateless") || flagValue(demoArgs, "listen") != "0.0.0.0:8081" {
		t.Errorf("demo-mcp: %q, want stateless on 0.0.0.0:8081", demoArgs)
	}
	policy, err := os.ReadFile("../../examples/orders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(policy), "host: demo-mcp") || !strings.Contains(string(policy), "port: 8081") || !strings.Contains(string(policy), `"2026-07-28"`) {
		t.Errorf("examples/orders.yaml does not name demo-mcp:8081 with MCP 2026-07-28")
	}
	ag := commands["agent"][0]
	if ag[0] != "demo" || ag[1] != "agent" || flagValue(ag, "proxy") != "http://proxy:3128" || flagValue(ag, "server") != "http://demo-mcp:8081/mcp" {
		t.Errorf("agent: %q", ag)
	}
	for _, v := range c.Services["agent"].Volumes {
		if strings.Contains(v, "secrets") {
			t.Errorf("the agent mounts %s: it must hold no token", v)
		}
	}

	// Volumes the nonroot user writes: the image creates their mount
	// points owned by it.
	dockerfile, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/data", "/secrets"} {
		if !regexp.MustCompile(`(?m)^COPY --from=build --chown=65532:65532 \S* /out` + dir + ` ` + dir + `$`).Match(dockerfile) {
			t.Errorf("Dockerfile does not create %s for the nonroot user (65532)", dir)
		}
	}
	if !strings.Contains(string(dockerfile), "AS tools") {
		t.Error("Dockerfile has no tools stage for the provision service")
	}
}

// TestComposeTopology runs docker-compose.yml's services as processes, with
// their commands as the file writes them: the gateway on Postgres, the
// provision script (in bash for busybox sh), the stateless demo server (in
// the test's process: see below), the
// proxy following the gateway with the provisioned token, and the agent,
// which is denied, proposes through policy.local and succeeds once an
// operator approved. What differs from the containers: addresses (each
// service's 0.0.0.0 port becomes a free loopback one, and service names in
// URLs 127.0.0.1; the proxy resolves demo-mcp to 127.0.0.1 through the test
// build's PORTCULLIS_TEST_HOSTS and runs with --dev-allow-loopback), the
// mounts (temporary directories), and the policy's allowed_ips, which
// cannot cover loopback and so are dropped from the copy the script reads.
func TestComposeTopology(t *testing.T) {
	c := readCompose(t)
	dsn := pgtest.Database(t)
	bin, err := buildHookBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	dir := t.TempDir()
	secrets, examples := filepath.Join(dir, "secrets"), filepath.Join(dir, "examples")
	for _, d := range []string{secrets, examples} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	policy, err := os.ReadFile("../../examples/orders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy = regexp.MustCompile(`(?m)^\s*allowed_ips:.*\n`).ReplaceAll(policy, nil)

	ports := map[string]string{}
	for _, svc := range []string{"gateway", "demo-mcp", "proxy"} {
		ports[svc] = strconv.Itoa(freeLoopbackPort(t))
	}
	policy = []byte(strings.ReplaceAll(string(policy), "port: 8081", "port: "+ports["demo-mcp"]))
	if err := os.WriteFile(filepath.Join(examples, "orders.yaml"), policy, 0o600); err != nil {
		t.Fatal(err)
	}
	local := strings.NewReplacer(
		"0.0.0.0:7070", "127.0.0.1:"+ports["gateway"], "http://gateway:7070", "http://127.0.0.1:"+ports["gateway"],
		"0.0.0.0:8081", "127.0.0.1:"+ports["demo-mcp"], "http://demo-mcp:8081", "http://demo-mcp:"+ports["demo-mcp"],
		"0.0.0.0:3128", "127.0.0.1:"+ports["proxy"], "http://proxy:3128", "http://127.0.0.1:"+ports["proxy"],
		"/secrets", secrets, "/examples", examples, "/data", filepath.Join(dir, "proxy-data"),
		"postgres://portcullis:portcullis@postgres:5432/portcullis?sslmode=disable", dsn,
	)
	args := func(svc string) []string {
		var out []string
		for _, a := range c.Services[svc].Command {
			out = append(out, local.Replace(a))
		}
		return out
	}
	const admin = "pcs_compose-topology-admin-token-0123456789"
	envOf := func(svc string) []string {
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PORTCULLIS_") })
		for k, v := range c.Services[svc].Environment {
			if v == "${PORTCULLIS_BOOTSTRAP_TOKEN}" || strings.HasPrefix(v, "${PORTCULLIS_BOOTSTRAP_TOKEN:") {
				v = admin
			}
			env = append(env, k+"="+local.Replace(v))
		}
		return env
	}
	start := func(svc string, argv []string, env []string) *processOut {
		t.Helper()
		cmd := exec.Command(bin, argv...)
		cmd.Env, cmd.Dir = env, dir
		return startProcess(t, svc, cmd)
	}

	gw := start("gateway", args("gateway"), envOf("gateway"))
	gw.waitLine(t, 60*time.Second, func(l string) bool { return strings.HasPrefix(l, "  console: ") })

	script := local.Replace(c.Services["provision"].Command[0])
	for range 2 { // a second run keeps the token it wrote
		prov := exec.Command("bash", "-c", script)
		prov.Env, prov.Dir = append(envOf("provision"), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH")), dir
		if out, err := prov.CombinedOutput(); err != nil {
			t.Fatalf("provision: %v\n%s", err, out)
		}
	}
	if tok, err := os.ReadFile(filepath.Join(secrets, "orders.token")); err != nil || !strings.HasPrefix(string(tok), "pcs_") {
		t.Fatalf("provision wrote %q: %v", tok, err)
	}

	// The demo server in-process, as its command configures it
	// (--stateless), because a process on loopback would refuse the Host
	// demo-mcp (the SDK's DNS-rebinding protection), which in compose
	// arrives from another container.
	ln, err := net.Listen("tcp", "127.0.0.1:"+ports["demo-mcp"])
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", demo.OrdersHandler(&mcp.StreamableHTTPOptions{
		Stateless: slices.Contains(c.Services["demo-mcp"].Command, "--stateless"), DisableLocalhostProtection: true}))
	upstream := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	upstream.Start()
	defer upstream.Close()
	proxy := start("proxy", append(args("proxy"), "--dev-allow-loopback"),
		append(envOf("proxy"), "PORTCULLIS_TEST_HOSTS=demo-mcp=127.0.0.1"))
	proxy.waitLine(t, 30*time.Second, func(l string) bool { return strings.HasPrefix(l, "Portcullis proxy listening on ") })

	agent := start("agent", args("agent"), envOf("agent"))
	filed := agent.waitLine(t, 60*time.Second, func(l string) bool { return strings.Contains(l, "waiting for an operator") })
	m := regexp.MustCompile(`^proposal (\d+) filed`).FindStringSubmatch(filed)
	if m == nil {
		t.Fatalf("agent: %q", filed)
	}
	// The operator approves from the host, as the file's header says.
	gatewayURL := "http://127.0.0.1:" + ports["gateway"]
	if out, stderr, code := runCLI(t, "--gateway", gatewayURL, "--token", admin, "proposals", "approve", m[1], "--reason", "five-digit order ids"); code != exitOK {
		t.Fatalf("approve: exit %d: %s%s", code, out, stderr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("proxy:\n%s\ngateway:\n%s", proxy.out.String(), gw.out.String())
		}
	})
	agent.waitLine(t, 60*time.Second, func(l string) bool { return strings.Contains(l, ": allowed: ") })
	if err := agent.wait(t, 30*time.Second); err != nil {
		t.Fatalf("agent exited with %v\n%s", err, agent.out.String())
	}
	t.Logf("agent:\n%s", agent.out.String())
}

// processOut is a service's process with its output, line by line.
type processOut struct {
	name  string
	cmd   *exec.Cmd
	out   *lockedBuffer
	lines chan string
	done  chan error
	// exited is closed once the process was waited for.
	exited chan struct{}
}

func startProcess(t *testing.T, name string, cmd *exec.Cmd) *processOut {
	t.Helper()
	p := &processOut{name: name, cmd: cmd, out: new(lockedBuffer), lines: make(chan string, 1024), done: make(chan error, 1), exited: make(chan struct{})}
	cmd.Stderr = p.out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.out.Write([]byte(sc.Text() + "\n"))
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		err := cmd.Wait()
		close(p.exited)
		p.done <- err
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	})
	return p
}

func (p *processOut) waitLine(t *testing.T, d time.Duration, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l := <-p.lines:
			if ok(l) {
				return l
			}
		case err := <-p.done:
			// Every line was sent before the exit: look at those not read yet
			// (select picks the exit as readily as a line waiting beside it).
			p.done <- err
			for {
				select {
				case l := <-p.lines:
					if ok(l) {
						return l
					}
					continue
				default:
				}
				t.Fatalf("%s exited (%v) before the line awaited:\n%s", p.name, err, p.out.String())
			}
		case <-deadline:
			t.Fatalf("%s: the line awaited did not come within %v:\n%s", p.name, d, p.out.String())
		}
	}
}

func (p *processOut) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v:\n%s", p.name, d, p.out.String())
		return nil
	}
}
