package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
)

// binDir holds the binary built for this test run; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	if addr := os.Getenv(runProbeEnv); addr != "" { // run_test.go's command
		os.Exit(runProbeMain(addr))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildBinary builds the real portcullis binary once per test run.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "portcullis-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "portcullis")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// gatewayProcess is `portcullis gateway` running as its own process.
type gatewayProcess struct {
	cmd   *exec.Cmd
	addr  string
	token string // printed admin token, "" if none was printed
	// bootstrapNoted: the banner said the admin token is the one in
	// PORTCULLIS_BOOTSTRAP_TOKEN.
	bootstrapNoted bool
	done           chan error
	// stderr is the gateway's log so far.
	stderr *lockedBuffer
}

// startGatewayProcess starts the binary with args and env and waits until
// it prints its listen address.
func startGatewayProcess(t *testing.T, env []string, args ...string) *gatewayProcess {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"gateway", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr := new(lockedBuffer)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProcess{cmd: cmd, done: make(chan error, 1), stderr: stderr}
	banner := make(chan struct{})
	var lines lockedBuffer
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			lines.Write([]byte(line + "\n"))
			if addr, ok := strings.CutPrefix(line, "Portcullis gateway listening on "); ok {
				g.addr = addr
			}
			if tok, ok := strings.CutPrefix(line, "  admin token (shown once, stored hashed): "); ok {
				g.token = tok
			}
			if strings.HasPrefix(line, "  admin token: the one in PORTCULLIS_BOOTSTRAP_TOKEN") {
				g.bootstrapNoted = true
			}
			if strings.HasPrefix(line, "  console: ") { // the banner's last line
				close(banner)
				break
			}
		}
		io.Copy(io.Discard, stdout)
		g.done <- cmd.Wait()
	}()
	select {
	case <-banner:
	case err := <-g.done:
		t.Fatalf("gateway exited before serving: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		cmd.Process.Signal(syscall.SIGQUIT) // a goroutine dump on stderr
		<-g.done
		t.Fatalf("gateway did not print its banner within 60s\nstdout:\n%s\nstderr:\n%s", lines.String(), stderr.String())
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-g.done
		}
	})
	return g
}

// stop sends SIGTERM and requires a clean exit.
func (g *gatewayProcess) stop(t *testing.T) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-g.done:
		if err != nil {
			t.Fatalf("gateway exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not stop within 30s of SIGTERM")
	}
}

// lockedBuffer collects a process's stderr for failure messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runBinary runs a client command of the real binary.
func runBinary(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// TestBinaryComposeTopology runs what docker-compose.yml runs — the
// gateway against Postgres, configured by environment — as real processes.
func TestBinaryComposeTopology(t *testing.T) {
	dbURL := pgtest.Database(t)
	const bootstrap = "pcs_compose-bootstrap-token-for-tests"
	env := []string{"PORTCULLIS_DATABASE_URL=" + dbURL, "PORTCULLIS_BOOTSTRAP_TOKEN=" + bootstrap}

	gw := startGatewayProcess(t, env)
	if !gw.bootstrapNoted || gw.token != "" {
		t.Fatalf("first start: token %q printed, bootstrap noted %v; want the env token named, never echoed", gw.token, gw.bootstrapNoted)
	}
	if out, code := runBinary(t, nil, "healthcheck", "--url", "http://"+gw.addr+"/readyz"); code != 0 {
		t.Fatalf("healthcheck: exit %d: %s", code, out)
	}
	client := []string{"PORTCULLIS_GATEWAY=http://" + gw.addr, "PORTCULLIS_TOKEN=" + bootstrap}
	if out, code := runBinary(t, client, "sandbox", "create", "demo"); code != 0 {
		t.Fatalf("sandbox create: exit %d: %s", code, out)
	}
	gw.stop(t)

	// A second start finds its admin and prints no token; data survived.
	gw = startGatewayProcess(t, env)
	if gw.token != "" || gw.bootstrapNoted {
		t.Fatalf("second start printed a token")
	}
	client = []string{"PORTCULLIS_GATEWAY=http://" + gw.addr, "PORTCULLIS_TOKEN=" + bootstrap}
	out, code := runBinary(t, client, "sandbox", "list")
	if code != 0 || !strings.Contains(out, "demo") {
		t.Fatalf("sandbox list after restart: exit %d: %s", code, out)
	}
	gw.stop(t)
	if out, code := runBinary(t, nil, "healthcheck", "--url", "http://"+gw.addr+"/readyz"); code == 0 {
		t.Fatalf("healthcheck of a stopped gateway succeeded: %s", out)
	}
}

// TestBinaryDefaultSQLite is the README's first command: no database URL,
// embedded SQLite in --data-dir, a random admin token printed once.
func TestBinaryDefaultSQLite(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	gw := startGatewayProcess(t, []string{"PORTCULLIS_DATABASE_URL=", "PORTCULLIS_BOOTSTRAP_TOKEN="}, "--data-dir", dataDir)
	if !strings.HasPrefix(gw.token, "pcs_") {
		t.Fatalf("first start printed token %q, want a pcs_ token", gw.token)
	}
	client := []string{"PORTCULLIS_GATEWAY=http://" + gw.addr, "PORTCULLIS_TOKEN=" + gw.token}
	if out, code := runBinary(t, client, "sandbox", "list"); code != 0 {
		t.Fatalf("sandbox list with the printed token: exit %d: %s", code, out)
	}
	gw.stop(t)
	if _, err := os.Stat(filepath.Join(dataDir, "portcullis.db")); err != nil {
		t.Fatalf("no database in the data dir: %v", err)
	}
	gw = startGatewayProcess(t, []string{"PORTCULLIS_DATABASE_URL=", "PORTCULLIS_BOOTSTRAP_TOKEN="}, "--data-dir", dataDir)
	if gw.token != "" {
		t.Fatalf("second start printed a token again")
	}
	gw.stop(t)

	// Plaintext on a non-loopback address is refused without --insecure,
	// and a refused start creates no admin token: the next start on a
	// fresh store still prints one.
	fresh := filepath.Join(t.TempDir(), "fresh")
	out, code := runBinary(t, []string{"PORTCULLIS_DATABASE_URL=", "PORTCULLIS_BOOTSTRAP_TOKEN="}, "gateway", "--data-dir", fresh, "--listen", "0.0.0.0:0")
	if code != exitInvalid || !strings.Contains(out, "--insecure") {
		t.Fatalf("non-loopback plaintext: exit %d: %s", code, out)
	}
	gw = startGatewayProcess(t, []string{"PORTCULLIS_DATABASE_URL=", "PORTCULLIS_BOOTSTRAP_TOKEN="}, "--data-dir", fresh)
	if !strings.HasPrefix(gw.token, "pcs_") {
		t.Fatalf("after a refused start the admin token was lost: first real start printed %q", gw.token)
	}
	gw.stop(t)

	// A short bootstrap token is a usage error.
	out, code = runBinary(t, []string{"PORTCULLIS_DATABASE_URL=", "PORTCULLIS_BOOTSTRAP_TOKEN=short"}, "gateway", "--data-dir", fresh)
	if code != exitInvalid || !strings.Contains(out, "at least 32") {
		t.Fatalf("short bootstrap token: exit %d: %s", code, out)
	}

	// A webhook needs its signing secret, and an http(s) URL.
	noSecret := []string{"PORTCULLIS_DATABASE_URL=", "PORTCULLIS_BOOTSTRAP_TOKEN=", "PORTCULLIS_WEBHOOK_SECRET="}
	out, code = runBinary(t, noSecret, "gateway", "--data-dir", fresh, "--webhook-url", "https://hooks.example.com/x")
	if code != exitInvalid || !strings.Contains(out, "PORTCULLIS_WEBHOOK_SECRET") {
		t.Fatalf("webhook without a secret: exit %d: %s", code, out)
	}
	withSecret := []string{"PORTCULLIS_DATABASE_URL=", "PORTCULLIS_BOOTSTRAP_TOKEN=", "PORTCULLIS_WEBHOOK_SECRET=k"}
	out, code = runBinary(t, withSecret, "gateway", "--data-dir", fresh, "--webhook-url", "ftp://hooks.example.com/x")
	if code != exitInvalid || !strings.Contains(out, "http(s) URL") {
		t.Fatalf("webhook with an ftp URL: exit %d: %s", code, out)
	}
}

// TestBinarySentryFlags: --quarantine-budget and --sentry-dry-run reach
// the real gateway process: with a budget of 1 the second quarantine is
// held; dry, none freezes; with a max age of 1ns every event is stale.
func TestBinarySentryFlags(t *testing.T) {
	noEnv := []string{"PORTCULLIS_DATABASE_URL=", "PORTCULLIS_BOOTSTRAP_TOKEN="}
	for _, tt := range []struct {
		flags []string
		want  []string // statuses of the actions for a and b
	}{
		{[]string{"--quarantine-budget", "1"}, []string{"frozen", "held"}},
		{[]string{"--sentry-dry-run", "--sentry-retention", "-1h"}, []string{"dry_run", "dry_run"}},
		{[]string{"--sentry-max-age", "1ns"}, []string{"stale", "stale"}},
	} {
		t.Run(strings.Join(tt.flags, " "), func(t *testing.T) {
			gw := startGatewayProcess(t, noEnv, append([]string{"--data-dir", filepath.Join(t.TempDir(), "data")}, tt.flags...)...)
			url := "http://" + gw.addr
			cli := func(args ...string) string {
				t.Helper()
				stdout, stderr, code := runCLI(t, append([]string{"--gateway", url, "--token", gw.token}, args...)...)
				ok(t, code, stderr)
				return stdout
			}
			for _, sb := range []string{"a", "b"} {
				cli("sandbox", "create", sb, "-f", "testdata/quickstart.yaml")
			}
			tok := sentryToken(t, url, gw.token)
			now := time.Now().UTC() // fresh, unless --sentry-max-age says otherwise
			postEvents(t, url, tok, quarantineEvent("qa", 1, "a", now.Format(time.RFC3339Nano)), quarantineEvent("qb", 2, "b", now.Add(time.Millisecond).Format(time.RFC3339Nano)))
			for i, sb := range []string{"a", "b"} {
				m := decodeJSON(t, cli("sentry", "actions", sb, "-o", "json"))
				acts, _ := m["actions"].([]any)
				if len(acts) != 1 || acts[0].(map[string]any)["status"] != tt.want[i] {
					t.Errorf("actions of %s = %v, want one %s", sb, m, tt.want[i])
				}
				frozen := decodeJSON(t, cli("sandbox", "get", sb, "-o", "json"))["frozen"] == true
				if frozen != (tt.want[i] == "frozen") {
					t.Errorf("sandbox %s frozen %v after a %s action", sb, frozen, tt.want[i])
				}
			}
			gw.stop(t)
		})
	}
}
