package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// A proxy whose token the gateway refuses, with real processes: it says
// so once, at Error, naming the token and the fix, and exits non-zero
// within the bound (--exit-on-auth-failure, on by default: 10 s of
// refusals, plus one reconnection wait of at most --max-reconnect-delay).
func TestProxyExitsOnRefusedToken(t *testing.T) {
	g := startGatewayProcess(t, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken}, "--data-dir", t.TempDir())
	if _, err := newPushAPI("http://"+g.addr).sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(1, "v1")}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("pcs_not-a-token-the-gateway-knows-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxyProcess(t, "http://"+g.addr, tokenFile, filepath.Join(dir, "p"), "p1")
	started := time.Now() // listening: the subscription starts
	var err error
	select {
	case err = <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the proxy still runs 20s after it started with a refused token\n%s", p.stderr.String())
	}
	took := time.Since(started)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("proxy exit: %v, want a non-zero status\n%s", err, p.stderr.String())
	}
	if took < 9*time.Second { // the grace counts from the first refusal, just after the banner
		t.Errorf("the proxy exited %v after it started, before the 10s it retries a refused token", took)
	}
	var errorsLogged []string
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["level"] == "ERROR" {
			errorsLogged = append(errorsLogged, line)
		}
		if rec["msg"] == "policy stream ended; reconnecting" {
			t.Errorf("a refused token logged a reconnection warning: %s", line)
		}
	}
	if len(errorsLogged) != 1 || !strings.Contains(errorsLogged[0], "refused this proxy's token") || !strings.Contains(errorsLogged[0], "portcullis sandbox rotate-token agent-1") {
		t.Fatalf("want one ERROR naming the refused token and its fix, got %d:\n%s", len(errorsLogged), p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "error: the gateway refuses this proxy's token") {
		t.Fatalf("the exit does not say why:\n%s", p.stderr.String())
	}
	t.Logf("exited %v after it started listening, with %v", took.Round(time.Millisecond), err)
}

// portcullis doctor against real processes: a gateway and a connected
// proxy pass every check (exit 0); a wrong token fails, named, with its
// fix (exit 1), and the checks that need a token do not run.
func TestDoctor(t *testing.T) {
	g := startGatewayProcess(t, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken}, "--data-dir", t.TempDir())
	created, err := newPushAPI("http://"+g.addr).sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(1, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	startProxyProcess(t, "http://"+g.addr, tokenFile, filepath.Join(dir, "p"), "p1")
	newPushAPI("http://"+g.addr).waitStatuses(t, []string{"p1"}, "version 1 applied", func(s *portcullisv1.ProxyStatus) bool {
		return s.GetConnected() && s.GetAppliedVersion() == 1
	})

	doctor := func(token string) (string, int) {
		return runBinary(t, []string{"PORTCULLIS_GATEWAY=http://" + g.addr, "PORTCULLIS_TOKEN=" + token}, "doctor", "--sandbox", "agent-1")
	}
	out, code := doctor(pushAdminToken)
	if code != exitOK || strings.Contains(out, "FAIL") {
		t.Fatalf("doctor on a healthy setup: exit %d\n%s", code, out)
	}
	for _, check := range []string{"gateway", "store", "clock", "token", "signing keys", "gateway version", "proxies", "proxy p1", "proxy p1 build", "proxy p1 policy"} {
		if !strings.Contains(out, fmt.Sprintf("ok    %-22s ", check)) {
			t.Errorf("doctor's report has no passing %q line:\n%s", check, out)
		}
	}
	if !strings.Contains(out, "role admin") || !strings.Contains(out, "enforces the current version 1") || !strings.Contains(out, "the chain verifies") {
		t.Errorf("doctor's report misses a detail:\n%s", out)
	}

	out, code = doctor("pcs_a-token-the-gateway-never-made-0123456789")
	if code != exitNo || !strings.Contains(out, "FAIL  token") || !strings.Contains(out, "the gateway refuses the token") ||
		!strings.Contains(out, "fix: give --token-file") || !strings.Contains(out, "portcullis token create") {
		t.Fatalf("doctor with a wrong token: exit %d, want 1 naming the token and its fix\n%s", code, out)
	}
	if strings.Contains(out, "signing keys") || strings.Contains(out, "proxy p1") {
		t.Errorf("doctor ran the token's checks with a refused token:\n%s", out)
	}

	// No gateway there: unavailable (exit 4), and nothing else is checked.
	out, code = runBinary(t, []string{"PORTCULLIS_GATEWAY=http://127.0.0.1:1", "PORTCULLIS_TOKEN=" + pushAdminToken}, "doctor")
	if code != exitUnavailable || !strings.Contains(out, "FAIL  gateway") || !strings.Contains(out, "fix: give --gateway") || strings.Contains(out, "token") {
		t.Fatalf("doctor with no gateway: exit %d, want 4 naming the gateway and its fix\n%s", code, out)
	}
}
