package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// buildProxyOnlyBinary builds the sidecar's binary (-tags proxyonly, the
// Dockerfile's proxy stage) once per test run.
var buildProxyOnlyBinary = sync.OnceValues(func() (string, error) { return buildTagged("proxyonly", "portcullis-proxyonly") })

// The proxy-only build leaves out what only the gateway and the client
// commands use: an idle proxy's resident memory follows the size of its
// binary (BENCHMARKS.md, "The footprint").
func TestProxyOnlyBuildLinksNoGateway(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "proxyonly", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/portcullis-dev/portcullis/gateway",
		"github.com/portcullis-dev/portcullis/lifecycle",
		"github.com/portcullis-dev/portcullis/approval",
		"github.com/portcullis-dev/portcullis/store/sqlite",
		"github.com/portcullis-dev/portcullis/store/postgres",
		"github.com/portcullis-dev/portcullis/web",
		"github.com/open-policy-agent/opa",
		"modernc.org/sqlite",
		"github.com/jackc/pgx",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, f+"/") {
				t.Errorf("the proxy-only build links %s", pkg)
			}
		}
	}
}

// The proxy-only binary runs the proxy exactly as the full one does: it
// follows the gateway (a full binary), enforces the version it receives,
// ships its decisions and answers policy.local; the gateway's commands
// are not there.
func TestProxyOnlyBinaryFollowsGateway(t *testing.T) {
	bin, err := buildProxyOnlyBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	err = exec.Command(bin, "gateway").Run()
	if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != exitInvalid {
		t.Fatalf("proxy-only binary, gateway command: %v, want exit %d (unknown command)", err, exitInvalid)
	}

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	gwEnv := []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="}
	gw := startGatewayProcess(t, gwEnv, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "gateway"))
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

	p := startProxyBinary(t, bin, gatewayURL, tokenFile, filepath.Join(dir, "p1"), "p1", envLogLevel+"=debug")
	api.waitStatuses(t, []string{"p1"}, "version 1 applied", func(s *portcullisv1.ProxyStatus) bool {
		return s.GetConnected() && s.GetAppliedVersion() == 1
	})
	// Once enforcing, it releases the pages of its executable it mapped
	// only to start (internal/exetrim): without that, a proxy holds most
	// of its binary's code resident (the test binary is about 30 MB).
	waitUntil(t, "the proxy to release its startup pages", func() bool {
		return strings.Contains(p.stderr.String(), "released the executable's pages")
	})
	if kb := procStatusKB(t, p.cmd.Process.Pid, "RssFile"); kb > 8<<10 {
		t.Errorf("the proxy holds %d kB of file pages resident after releasing its startup pages; want at most 8 MiB", kb)
	}
	p.wantStatus(t, upstream.URL, "/v1/a", http.StatusOK)
	if got := p.get(t, upstream.URL, "/v2/a"); got != http.StatusForbidden {
		t.Fatalf("/v2/a: %d, want 403", got)
	}
	waitDenial(t, api, "p1", "/v2/a")
	if got := p.get(t, "http://policy.local", "/v1/policy"); got != http.StatusOK {
		t.Fatalf("policy.local/v1/policy: %d", got)
	}
	p.stop(t)
}

// procStatusKB reads a "kB" field of /proc/PID/status.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", field, v, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
