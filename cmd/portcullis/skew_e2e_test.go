package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// olderProxyCommit is the commit issue 37 (upgrades) starts from: a
// proxy built from it must keep following today's gateway, as the skew
// policy in docs/upgrading.md promises (a proxy may be one minor version
// behind its gateway). Move it forward to the previous release when one
// is cut.
const olderProxyCommit = "61caf2e"

// A proxy built from olderProxyCommit follows today's gateway, with real
// processes: it receives the sandbox's version, ACKs it, enforces it, and
// then does the same for a version set after it started.
func TestOlderProxyFollowsTodaysGateway(t *testing.T) {
	old := buildAtCommit(t, olderProxyCommit)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()

	gw := startGatewayProcess(t, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="},
		"--data-dir", filepath.Join(dir, "gateway"))
	api := newPushAPI("http://" + gw.addr)
	created, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(upPort, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxyBinary(t, old, "http://"+gw.addr, tokenFile, filepath.Join(dir, "proxy"), "old-1")

	applied := func(v uint32) {
		t.Helper()
		api.waitStatuses(t, []string{"old-1"}, fmt.Sprintf("version %d ACKed", v), func(s *portcullisv1.ProxyStatus) bool {
			return s.GetConnected() && s.GetAppliedVersion() == v
		})
	}
	applied(1)
	p.wantStatus(t, upstream.URL, "/v1/a", http.StatusOK)
	p.wantStatus(t, upstream.URL, "/v2/a", http.StatusForbidden)

	// A version set while the old proxy runs: v1 replaced by v2.
	if v := api.set(t, pushDoc(upPort, "v2")); v != 2 {
		t.Fatalf("set policy: version %d, want 2", v)
	}
	applied(2)
	p.wantStatus(t, upstream.URL, "/v2/a", http.StatusOK)
	p.wantStatus(t, upstream.URL, "/v1/a", http.StatusForbidden)
}

// buildAtCommit builds ./cmd/portcullis as it was at commit, from this
// checkout's git history, and returns the binary. Built with -trimpath,
// the packages' compilations are in the shared Go build cache however the
// temporary directory is named, so a warm build only links. Without git
// history (a checkout without .git, an archive) the test cannot run: it
// fails under CI=true, where that is a broken setup, and skips otherwise.
func buildAtCommit(t *testing.T, commit string) string {
	t.Helper()
	if out, err := exec.Command("git", "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("commit %s is not in this checkout's git history (%v: %s): the test builds a proxy from it; run it in a git clone with that history (git fetch --unshallow in a shallow one)",
			commit, err, strings.TrimSpace(string(out)))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	src, tmp := t.TempDir(), t.TempDir()
	tarball := filepath.Join(tmp, commit+".tar")
	// From the top: git archive run in a subdirectory archives only it.
	for _, args := range [][]string{{"git", "-C", "../..", "archive", "-o", tarball, commit}, {"tar", "-xf", tarball, "-C", src}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("extract commit %s: %s: %v\n%s", commit, strings.Join(args, " "), err, out)
		}
	}
	bin := filepath.Join(tmp, "portcullis-"+commit)
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", bin, "./cmd/portcullis")
	build.Dir = src
	// That commit's go.sum may lack entries today's build added: the
	// module cache has them, so -mod=mod resolves offline.
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build ./cmd/portcullis at %s: %v\n%s", commit, err, out)
	}
	return bin
}
