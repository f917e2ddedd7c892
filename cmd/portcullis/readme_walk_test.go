package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/web/webtest"
)

// walkMarker introduces a block the walk test runs (README.md, docs/):
// `<!-- walk: NAME -->` on the line before a fenced block.
var walkMarker = regexp.MustCompile(`^<!-- walk: ([a-z-]+) -->$`)

// walkDocs are the files holding the walk's blocks, relative to the
// repository's root, in the order a reader follows them: the README's
// loop, then Sentry, then Postgres.
var walkDocs = []string{"README.md", "docs/sentry.md", "docs/operations.md"}

// readmeWalk returns the blocks marked for the walk in files (paths
// relative to the repository's root), by name, in the order they appear,
// file after file. A name may mark one block across all the files.
func readmeWalk(t *testing.T, files ...string) (names []string, blocks map[string]string) {
	t.Helper()
	blocks = map[string]string{}
	where := map[string]string{} // block name → the file marking it
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join("..", "..", file))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			m := walkMarker.FindStringSubmatch(strings.TrimSpace(lines[i]))
			if m == nil {
				continue
			}
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
				t.Fatalf("%s:%d: %s is not followed by a fenced block", file, i+1, m[0])
			}
			var body []string
			j := i + 2
			for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
				body = append(body, lines[j])
			}
			if j == len(lines) {
				t.Fatalf("%s:%d: the block of %s never ends", file, i+1, m[0])
			}
			if prev, dup := where[m[1]]; dup {
				t.Fatalf("%s:%d: a second block marked %q (the first is in %s)", file, i+1, m[1], prev)
			}
			where[m[1]] = file
			names = append(names, m[1])
			blocks[m[1]] = strings.Join(body, "\n") + "\n"
			i = j
		}
	}
	return names, blocks
}

// The walk's fixed addresses, as the README writes them.
const (
	walkGateway = "127.0.0.1:7070"
	walkProxy   = "127.0.0.1:3128"
	walkMCP     = "127.0.0.1:8081"
)

// TestReadmeWalk runs the README's loop — agent denied, proposal through
// policy.local holding no token, approval in the console, call allowed —
// with the commands exactly as README.md (then docs/sentry.md) writes
// them, extracted from their blocks marked `<!-- walk: NAME -->`, against
// the real binary on PATH.
// Two things stand in for the reader: the binary is built by the test
// (the install block's `go install` would write to GOPATH/bin), and the
// line `export PORTCULLIS_TOKEN=pcs_…` is replaced by the one the gateway
// printed, as the reader pastes it. The gateway block runs as its own
// process (the first terminal); the other blocks are fed, in order, to one
// bash (the second terminal), whose background jobs live on between
// blocks. The operator approves in headless Chromium, as the prose says.
// The addresses are the README's (7070, 3128, 8081): the test fails, not
// skips, when one is taken.
func TestReadmeWalk(t *testing.T) {
	browser := webtest.Browser(t)
	shots := webtest.ScreenshotDir(t)
	for _, addr := range []string{walkGateway, walkProxy, walkMCP} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the README's walk needs %s free: %v", addr, err)
		}
		ln.Close()
	}
	names, blocks := readmeWalk(t, walkDocs...)
	want := []string{"install", "gateway", "setup", "denied", "propose", "allowed", "edit", "sentry-ingest", "sentry-events", "postgres"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("the walk blocks of %s are %q, want %q", strings.Join(walkDocs, ", "), names, want)
	}
	if !strings.Contains(blocks["install"], "go install ./cmd/portcullis") {
		t.Fatalf("the install block does not build the binary: %q", blocks["install"])
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}

	// The reader's directory: the repository's root, as far as the walk
	// reads it (examples/), without the state it writes there.
	dir := t.TempDir()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "examples"), filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	env := walkEnv(bin)

	// The first terminal: the gateway.
	gwLine := commandLines(blocks["gateway"])
	if len(gwLine) != 1 {
		t.Fatalf("the gateway block holds %d commands, want 1: %q", len(gwLine), blocks["gateway"])
	}
	gw := startShell(t, dir, env, gwLine[0])
	export := gw.waitLine(t, "the gateway's token line", 60*time.Second, func(l string) bool { return strings.HasPrefix(l, "  export PORTCULLIS_TOKEN=pcs_") })
	gw.waitLine(t, "the gateway's console line", 10*time.Second, func(l string) bool { return l == "  console: http://"+walkGateway+"/" })
	token := strings.TrimPrefix(export, "  export PORTCULLIS_TOKEN=")

	// The second terminal.
	sh := startShell(t, dir, env, "")
	const placeholder = "export PORTCULLIS_TOKEN=pcs_…"
	setup := blocks["setup"]
	if !strings.Contains(setup, placeholder) {
		t.Fatalf("the setup block no longer pastes the token (%q): %q", placeholder, setup)
	}
	setup = regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(placeholder)+`.*$`).ReplaceAllLiteralString(setup, strings.TrimSpace(export))
	sh.run(t, "setup", setup)
	// The reader waits for the proxy's banner; the test for what it means:
	// the proxy answers policy.local with the sandbox's first version.
	agent := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: walkProxy})}, Timeout: 5 * time.Second}
	if err := pollUntil(60*time.Second, func() bool {
		res, err := agent.Get("http://policy.local/v1/policy")
		if err != nil {
			return false
		}
		var v struct {
			Version json.Number `json:"version"`
		}
		err = json.NewDecoder(res.Body).Decode(&v)
		res.Body.Close()
		return err == nil && res.StatusCode == http.StatusOK && v.Version == "1"
	}); err != nil {
		t.Fatalf("the proxy did not apply version 1: %v\nterminal 2:\n%s\n%s", err, sh.out.String(), sh.errOut.String())
	}

	out := sh.run(t, "denied", blocks["denied"])
	if n := strings.Count(out, `\"status\":\"shipped\"`); n != 1 {
		t.Errorf("denied block: %d calls answered shipped, want 1 (lookup_order A-1042):\n%s", n, out)
	}
	if n := strings.Count(out, `"code":-32001`); n != 2 {
		t.Errorf("denied block: %d calls denied, want 2 (refund_order; lookup_order A-10420):\n%s", n, out)
	}
	if !strings.Contains(out, "deny_rules[0]") || !strings.Contains(out, "does not match pattern") {
		t.Errorf("denied block: the denials do not say why:\n%s", out)
	}

	out = sh.run(t, "propose", blocks["propose"])
	values := jsonValues(t, out)
	if len(values) != 2 {
		t.Fatalf("propose block printed %d JSON values, want 2 (the suggestion, the proposal):\n%s", len(values), out)
	}
	if s := string(values[0]); !strings.Contains(s, `"const"`) || !strings.Contains(s, `"A-10420"`) {
		t.Errorf("the suggestion does not admit exactly the denied arguments:\n%s", s)
	}
	var filed struct {
		ID       json.Number `json:"id"`
		Status   string      `json:"status"`
		Findings []struct {
			Kind string `json:"kind"`
		} `json:"findings"`
	}
	if err := json.Unmarshal(values[1], &filed); err != nil {
		// The id is a JSON number or, from an older gateway, a string.
		var loose struct {
			ID       string `json:"id"`
			Status   string `json:"status"`
			Findings []struct {
				Kind string `json:"kind"`
			} `json:"findings"`
		}
		if err2 := json.Unmarshal(values[1], &loose); err2 != nil {
			t.Fatalf("the proposal %s: %v", values[1], err)
		}
		filed.ID, filed.Status, filed.Findings = json.Number(loose.ID), loose.Status, loose.Findings
	}
	if filed.Status != "pending" || filed.ID == "" || len(filed.Findings) != 1 || filed.Findings[0].Kind != "arguments_widened" {
		t.Fatalf("the proposal: %s, want pending with one arguments_widened finding", values[1])
	}

	// The operator, in the console, as the README's prose says: sign in
	// with the admin token, open the proposal from the queue, approve with
	// a reason; the page follows the version to the proxy.
	base := "http://" + walkGateway
	webtest.SignIn(t, browser, base, token)
	row := fmt.Sprintf(`#queue tr[data-id="%s"]`, filed.ID)
	webtest.Act(t, browser, "open the queue", chromedp.WaitVisible(chromedp.CSS(row)))
	webtest.Screenshot(t, browser, shots, "walk-queue.png")
	webtest.Act(t, browser, "open the proposal",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`%s a[href="#/proposal/%s"]`, row, filed.ID))), chromedp.WaitVisible(chromedp.ID("proposal-title")))
	if f := webtest.TextOf(t, browser, "#findings"); !strings.Contains(f, "A-10420") {
		t.Errorf("the proposal page's findings do not show the call: %q", f)
	}
	webtest.Act(t, browser, "approve",
		chromedp.SendKeys(chromedp.ID("reason"), "order ids have five digits since May"), chromedp.Click(chromedp.ID("approve")))
	line := webtest.Value(t, browser, "the enforcement line", chromedp.Poll[string](
		`(document.querySelector("#enforcement-line.notice.ok")?.textContent || "")`))
	if !strings.HasPrefix(line, "applied as v2 — enforced by 1 of 1 prox") {
		t.Errorf("the enforcement line says %q", line)
	}
	webtest.Screenshot(t, browser, shots, "walk-approved.png")

	out = sh.run(t, "allowed", blocks["allowed"])
	if n := strings.Count(out, `\"order_id\":\"A-10420\",\"status\":\"shipped\"`); n != 1 {
		t.Errorf("allowed block: lookup_order A-10420 was not answered by the server after the approval:\n%s", out)
	}
	if n := strings.Count(out, `"code":-32001`); n != 1 || !strings.Contains(out, "A-10421") {
		t.Errorf("allowed block: lookup_order A-10421 was not denied (%d denials):\n%s", n, out)
	}

	// Editing the policy: an older copy is refused for the grant it would
	// take away; the current version, set again unedited, stores nothing.
	refusedBefore := sh.errOut.String()
	out = sh.run(t, "edit", blocks["edit"])
	if !strings.Contains(out, "refused (exit 3)") {
		t.Errorf("edit block: setting the older copy was not refused with exit code 3:\n%s", out)
	}
	if refused := strings.TrimPrefix(sh.errOut.String(), refusedBefore); !strings.Contains(refused, "proposal 1") {
		t.Errorf("edit block: setting the older copy was not refused naming proposal 1; stderr:\n%s", refused)
	}
	if !strings.Contains(out, "unchanged") {
		t.Errorf("edit block: setting the current version again did not say unchanged:\n%s", out)
	}

	// Sentry: a watchdog's quarantine event, stamped now, freezes orders;
	// the follow-up commands find it within their --since.
	out = sh.run(t, "sentry-ingest", blocks["sentry-ingest"])
	if !strings.Contains(out, `"stored":1`) || !strings.Contains(out, `"refused":[]`) {
		t.Errorf("sentry-ingest block: the event was not stored:\n%s", out)
	}
	if err := pollUntil(30*time.Second, func() bool {
		get := exec.Command(bin, "sandbox", "get", "orders", "-o", "json")
		get.Dir, get.Env = dir, append(env, "PORTCULLIS_TOKEN="+token)
		o, err := get.Output()
		return err == nil && regexp.MustCompile(`"frozen":\s*true`).Match(o)
	}); err != nil {
		t.Errorf("the quarantine event did not freeze orders: %v", err)
	}
	out = sh.run(t, "sentry-events", blocks["sentry-events"])
	if !regexp.MustCompile(`(?m)^\S+Z .*sentry://node-3 .* e1 .*portcullis\.sentry\.v1\.quarantine .*orders`).MatchString(out) {
		t.Errorf("sentry-events block: sentry events --since 24h does not list the event just sent:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^frozen:\s+yes$`).MatchString(out) {
		t.Errorf("sentry-events block: sandbox get does not show orders frozen:\n%s", out)
	}
	if strings.Contains(sh.errOut.String(), "command not found") {
		t.Errorf("terminal 2's stderr:\n%s", sh.errOut.String())
	}
}

// walkEnv is the reader's environment: the built binary first on PATH,
// none of the test's PORTCULLIS_ or proxy variables.
func walkEnv(bin string) []string {
	env := []string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || strings.HasPrefix(k, "PORTCULLIS_") || strings.EqualFold(k, "http_proxy") ||
			strings.EqualFold(k, "https_proxy") || strings.EqualFold(k, "all_proxy") || strings.EqualFold(k, "no_proxy") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// TestReadmePostgres runs "Running on Postgres" as docs/operations.md
// writes it — create the database, migrate, start the gateway — against
// the test's Postgres, with one change: the database is one of the test's own
// (a fresh name in place of "portcullis", dropped at the end), so that
// runs never share state. The gateway must start on the empty database
// and print the admin token it bootstrapped there.
func TestReadmePostgres(t *testing.T) {
	_, blocks := readmeWalk(t, walkDocs...)
	block := blocks["postgres"]
	const readmeURL = "postgres://postgres@127.0.0.1:5432/portcullis?sslmode=disable"
	if !strings.Contains(block, "createdb -h 127.0.0.1 -U postgres portcullis") || !strings.Contains(block, "'"+readmeURL+"'") {
		t.Fatalf("the postgres block no longer creates the database it names (%s):\n%s", readmeURL, block)
	}
	if pgtest.URL() != pgtest.DefaultURL {
		t.Skipf("docs/operations.md's Postgres is %s; PORTCULLIS_TEST_DATABASE_URL names another", pgtest.DefaultURL)
	}
	// A name of the test's own, dropped when it ends; the page's
	// createdb makes it.
	u, err := url.Parse(pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if out, err := exec.Command("dropdb", "-h", "127.0.0.1", "-U", "postgres", name).CombinedOutput(); err != nil {
		t.Fatalf("dropdb %s: %v\n%s", name, err, out)
	}
	block = strings.ReplaceAll(block, "-U postgres portcullis", "-U postgres "+name)
	block = strings.ReplaceAll(block, "5432/portcullis?", "5432/"+name+"?")

	ln, err := net.Listen("tcp", walkGateway)
	if err != nil {
		t.Fatalf("the README's gateway needs %s free: %v", walkGateway, err)
	}
	ln.Close()
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	gw := startShell(t, t.TempDir(), walkEnv(bin), block)
	gw.waitLine(t, "the gateway's token line", 60*time.Second, func(l string) bool { return strings.HasPrefix(l, "  export PORTCULLIS_TOKEN=pcs_") })
	gw.waitLine(t, "the gateway's console line", 10*time.Second, func(l string) bool { return l == "  console: http://"+walkGateway+"/" })
	if strings.Contains(gw.out.String()+gw.errOut.String(), "does not exist") {
		t.Errorf("the postgres block:\n%s\n%s", gw.out.String(), gw.errOut.String())
	}
}

// commandLines returns a block's commands without comments and blank
// lines (for one-line blocks).
func commandLines(block string) []string {
	var out []string
	for _, l := range strings.Split(block, "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// jsonValues decodes the JSON values s holds one after the other.
func jsonValues(t *testing.T, s string) []json.RawMessage {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	var out []json.RawMessage
	for {
		var v json.RawMessage
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("not JSON values: %v\n%s", err, s)
		}
		out = append(out, v)
	}
}

// shell is a bash in its own process group: a terminal of the walk.
type shell struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *lockedBuffer
	errOut *lockedBuffer
	lines  chan string // stdout, line by line
	done   chan error
	n      int
}

// startShell starts bash in dir with env: running script if it is not
// empty, else reading commands from run.
func startShell(t *testing.T, dir string, env []string, script string) *shell {
	t.Helper()
	args := []string{"--noprofile", "--norc", "-e"}
	if script != "" {
		args = append(args, "-c", script)
	}
	cmd := exec.Command("bash", args...)
	cmd.Dir, cmd.Env = dir, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s := &shell{cmd: cmd, out: new(lockedBuffer), errOut: new(lockedBuffer), lines: make(chan string, 1024), done: make(chan error, 1)}
	cmd.Stderr = s.errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if script == "" {
		if s.stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64*1024), 4<<20)
		for sc.Scan() {
			s.out.Write([]byte(sc.Text() + "\n"))
			select {
			case s.lines <- sc.Text():
			default: // nobody is waiting for lines now; out keeps them
			}
		}
		s.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		// The terminal and every job it started in the background.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	})
	return s
}

// waitLine waits for a stdout line for which ok holds, and returns it.
func (s *shell) waitLine(t *testing.T, what string, d time.Duration, ok func(string) bool) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l := <-s.lines:
			if ok(l) {
				return l
			}
		case err := <-s.done:
			t.Fatalf("%s: the terminal ended (%v)\nstdout:\n%s\nstderr:\n%s", what, err, s.out.String(), s.errOut.String())
		case <-deadline:
			t.Fatalf("%s: not within %v\nstdout:\n%s\nstderr:\n%s", what, d, s.out.String(), s.errOut.String())
		}
	}
}

// run feeds block to the shell and returns what it printed on stdout
// until the block finished.
func (s *shell) run(t *testing.T, name, block string) string {
	t.Helper()
	s.n++
	marker := fmt.Sprintf("__walk_block_%d_done__", s.n)
	var got bytes.Buffer
	// Drain lines of background jobs printed since the last block.
	for drained := false; !drained; {
		select {
		case l := <-s.lines:
			got.WriteString(l + "\n")
		default:
			drained = true
		}
	}
	got.Reset()
	if _, err := io.WriteString(s.stdin, block+"\necho "+marker+"\n"); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	s.waitLine(t, "block "+name, 60*time.Second, func(l string) bool {
		if l == marker {
			return true
		}
		got.WriteString(l + "\n")
		return false
	})
	t.Logf("block %s printed:\n%s", name, got.String())
	return got.String()
}
