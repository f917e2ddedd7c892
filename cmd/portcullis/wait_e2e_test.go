package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// enforcementJSON is the "enforcement" of a --wait -o json answer.
type enforcementJSON struct {
	Sandbox string `json:"sandbox"`
	Version int    `json:"version"`
	Acked   *int   `json:"acked"`
	Nacked  *int   `json:"nacked"`
	Pending *int   `json:"pending"`
	Total   *int   `json:"total"`
	Ms      *int   `json:"ms"`
	Proxies []struct {
		ProxyID        string `json:"proxy_id"`
		State          string `json:"state"`
		Error          string `json:"error"`
		AppliedVersion int    `json:"applied_version"`
	} `json:"proxies"`
}

// counts is acked/nacked/pending/total; every one must be present.
func (e enforcementJSON) counts(t *testing.T) [4]int {
	t.Helper()
	if e.Acked == nil || e.Nacked == nil || e.Pending == nil || e.Total == nil || e.Ms == nil {
		t.Fatalf("enforcement without all its counters: %+v", e)
	}
	return [4]int{*e.Acked, *e.Nacked, *e.Pending, *e.Total}
}

func (e enforcementJSON) state(id string) (state, why string) {
	for _, p := range e.Proxies {
		if p.ProxyID == id {
			return p.State, p.Error
		}
	}
	return "", ""
}

// waited decodes a --wait -o json answer: the committed message's version
// and its enforcement.
func waited(t *testing.T, stdout string) (version int, e enforcementJSON) {
	t.Helper()
	var m struct {
		Version        int              `json:"version"`
		CurrentVersion int              `json:"current_version"`
		AppliedVersion int              `json:"applied_version"`
		Enforcement    *enforcementJSON `json:"enforcement"`
	}
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
	}
	if m.Enforcement == nil {
		t.Fatalf("no enforcement in %s", stdout)
	}
	version = max(m.Version, m.CurrentVersion, m.AppliedVersion)
	if m.Enforcement.Version != version || m.Enforcement.Sandbox != "agent-1" {
		t.Fatalf("enforcement of %s version %d, want agent-1 version %d", m.Enforcement.Sandbox, m.Enforcement.Version, version)
	}
	return version, *m.Enforcement
}

// reportsHost is the upstream's public-looking name (a proposal cannot
// reach loopback); the proxies resolve it to 127.0.0.1.
const reportsHost = "reports.example.com"

// reportsDoc is pushDoc for reportsHost.
func reportsDoc(port int, paths ...string) string {
	return strings.ReplaceAll(pushDoc(port, paths...), "host: 127.0.0.1", "host: "+reportsHost)
}

// extraProposal adds GET /extra/* to the v1 entry of reportsDoc.
func extraProposal(port int) string {
	return fmt.Sprintf(`rationale: the extra reports
operations:
  - add_allow_rules:
      policy: v1
      host: `+reportsHost+`
      port: %d
      rules:
        - allow: { method: GET, path: "/extra/*" }
`, port)
}

// TestWaitEnforcementEndToEnd: commands that commit a version wait, with
// --wait, until the sandbox's connected proxies (real proxy processes)
// ACK it — and say who refused it or is still pending when they do not.
func TestWaitEnforcementEndToEnd(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	dir := t.TempDir()
	upstreamURL := fmt.Sprintf("http://%s:%d", reportsHost, upPort)
	docFile := func(paths ...string) string {
		return writeFile(t, strings.Join(paths, "-")+".yaml", reportsDoc(upPort, paths...))
	}
	created := jsonOut(t, gw, admin, "sandbox", "create", "agent-1", "-f", docFile("v1"))
	sandboxToken, _ := created["token"].(string)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(sandboxToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// No proxy connected: the version is committed, there is nothing to
	// wait for, and the command says so.
	stdout, stderr, code := cliAgainst(t, gw, admin, "policy", "set", "agent-1", "-f", docFile("v1", "v2"), "--wait", "-o", "json")
	if code != exitOK || !strings.Contains(stderr, "no proxy of sandbox agent-1 is connected to a gateway replica or was seen") {
		t.Fatalf("set --wait with no proxy: exit %d, stderr %q", code, stderr)
	}
	if v, e := waited(t, stdout); v != 2 || e.counts(t) != [4]int{0, 0, 0, 0} {
		t.Fatalf("set --wait with no proxy: version %d, enforcement %+v", v, e)
	}

	// Bad flags: refused before anything is stored.
	for _, bad := range [][]string{{"--wait-timeout", "5s"}, {"--wait", "--wait-timeout", "0s"}} {
		_, stderr, code := cliAgainst(t, gw, admin, append([]string{"policy", "set", "agent-1", "-f", docFile("v1", "bad")}, bad...)...)
		if code != exitInvalid || !strings.Contains(stderr, "--wait-timeout") {
			t.Errorf("policy set %v: exit %d, stderr %q; want 2 naming --wait-timeout", bad, code, stderr)
		}
	}
	if n := historyCount(t, gw, "agent-1"); n != 2 {
		t.Fatalf("refused flags stored a version: %d versions", n)
	}

	// Two proxies; p2 cannot compile a network policy named "shipping".
	api := newPushAPIWith(gw.URL, admin)
	hosts := "PORTCULLIS_TEST_HOSTS=" + reportsHost + "=127.0.0.1"
	p1 := startProxyProcess(t, gw.URL, tokenFile, filepath.Join(dir, "p1"), "p1", hosts)
	p2 := startProxyProcess(t, gw.URL, tokenFile, filepath.Join(dir, "p2"), "p2", hosts, "PORTCULLIS_TEST_REFUSE=shipping")
	api.waitStatuses(t, []string{"p1", "p2"}, "version 2 applied", func(p *portcullisv1.ProxyStatus) bool {
		return p.GetConnected() && p.GetAppliedVersion() == 2
	})

	// The acceptance: approve --wait -o json with two connected proxies.
	op := operator(t, gw, "olive")
	id, hash := submit(t, gw, sandboxToken, extraProposal(upPort))
	stdout, stderr, code = cliAgainst(t, gw, op, "proposals", "approve", id, "--reason", "reports", "--hash", hash, "--wait", "-o", "json")
	if code != exitOK {
		t.Fatalf("approve --wait: exit %d, stderr %s", code, stderr)
	}
	v3, e := waited(t, stdout)
	if v3 != 3 || e.counts(t) != [4]int{2, 0, 0, 2} {
		t.Fatalf("approve --wait: version %d, enforcement %+v", v3, e)
	}
	if !strings.Contains(stdout, `"status": "applied"`) {
		t.Fatalf("approve --wait -o json is not the applied proposal:\n%s", stdout)
	}
	// ACKed means enforced: no polling here.
	for _, p := range []*proxyProcess{p1, p2} {
		if got := p.get(t, upstreamURL, "/extra/a"); got != 200 {
			t.Fatalf("%s after approve --wait: GET /extra/a answered %d, want 200", p.id, got)
		}
	}

	// A proxy that NACKs: exit 1, naming it and its reason.
	id, hash = submit(t, gw, sandboxToken, shippingRule)
	stdout, stderr, code = cliAgainst(t, gw, op, "proposals", "approve", id, "--reason", "shipments", "--hash", hash, "--wait", "-o", "json")
	if code != exitNo || !strings.Contains(stderr, "refused by proxy p2") || !strings.Contains(stderr, "cannot compile network policy shipping") {
		t.Fatalf("approve --wait with p2 refusing: exit %d, stderr %q", code, stderr)
	}
	v4, e := waited(t, stdout)
	if c := e.counts(t); v4 != 4 || c[1] != 1 || c[3] != 2 {
		t.Fatalf("approve --wait with p2 refusing: version %d, enforcement %+v", v4, e)
	}
	if state, why := e.state("p2"); state != "nacked" || !strings.Contains(why, "shipping") {
		t.Fatalf("p2 in the enforcement: %s %q", state, why)
	}

	// A proxy that does not answer in time: p1 is stopped (its stream
	// stays open), the wait ends at --wait-timeout naming it, exit 1.
	if err := p1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = cliAgainst(t, gw, admin, "policy", "rollback", "agent-1", "--to", "3", "--wait", "--wait-timeout", "1s")
	if err := p1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if code != exitNo || !strings.Contains(stderr, "not enforced within 1s") || !strings.Contains(stderr, "still pending: p1") {
		t.Fatalf("rollback --wait with p1 stopped: exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "agent-1: version 5") || !strings.Contains(stdout, "p1  pending") {
		t.Fatalf("rollback --wait with p1 stopped printed:\n%s", stdout)
	}

	// Once p1 runs again, the kill switch waits for both.
	stdout, stderr, code = cliAgainst(t, gw, op, "sandbox", "freeze", "agent-1", "--reason", "incident 42", "--wait", "-o", "json")
	if code != exitOK {
		t.Fatalf("freeze --wait: exit %d, stderr %s", code, stderr)
	}
	if v, e := waited(t, stdout); v != 6 || e.counts(t) != [4]int{2, 0, 0, 2} {
		t.Fatalf("freeze --wait: version %d, enforcement %+v", v, e)
	}
	for _, p := range []*proxyProcess{p1, p2} {
		if got := p.get(t, upstreamURL, "/v1/a"); got != 403 {
			t.Fatalf("%s after freeze --wait: GET /v1/a answered %d, want 403", p.id, got)
		}
	}
	stdout, stderr, code = cliAgainst(t, gw, admin, "sandbox", "unfreeze", "agent-1", "--reason", "closed", "--wait")
	if code != exitOK || !strings.Contains(stdout, "version 7 enforced by 2 of 2 connected proxies") {
		t.Fatalf("unfreeze --wait: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
