package main

import (
	"bufio"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/version"
)

// TestVersion builds the binary from a git checkout of this tree, as a
// user does with go build, and checks that `portcullis version` and the
// build a proxy reports to its gateway (proxies list) name the checkout's
// commit; then again from the same checkout with a change not committed.
//
// The checkout is a fresh repository holding a copy of the tree: the Go
// toolchain stamps no VCS data in a git worktree (a .git file), and this
// machine's GOFLAGS turn stamping off.
func TestVersion(t *testing.T) {
	root := moduleRoot(t)
	src := filepath.Join(t.TempDir(), "src")
	copyTree(t, root, src)
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = src
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", ".")
	git("add", "-A")
	git("commit", "-q", "-m", "the tree under test")
	head := git("rev-parse", "HEAD")

	build := func() string {
		t.Helper()
		bin := filepath.Join(t.TempDir(), "portcullis")
		cmd := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/portcullis")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		return bin
	}
	versionOf := func(bin string) (version.Info, string) {
		t.Helper()
		out, err := exec.Command(bin, "version", "-o", "json").Output()
		if err != nil {
			t.Fatalf("version -o json: %v", err)
		}
		var info version.Info
		if err := json.Unmarshal(out, &info); err != nil {
			t.Fatalf("version -o json: %v\n%s", err, out)
		}
		text, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("version: %v", err)
		}
		return info, string(text)
	}

	bin := build()
	info, text := versionOf(bin)
	if info.Revision != head || info.Modified || info.Time == "" || info.Version == "" || info.Version == version.Devel {
		t.Errorf("version of a clean checkout at %s: %+v", head, info)
	}
	if !strings.Contains(text, "portcullis "+info.Version+"\n") || !strings.Contains(text, head) {
		t.Errorf("version text does not show version %s and revision %s:\n%s", info.Version, head, text)
	}
	if got := proxyBuild(t, bin); got != info.String() || !strings.Contains(got, head[:12]) {
		t.Errorf("proxies list shows build %q; want %q, naming %s", got, info.String(), head[:12])
	}

	// A change not committed: the same revision, marked modified.
	if err := os.WriteFile(filepath.Join(src, "cmd/portcullis/zz_uncommitted.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	info, _ = versionOf(build())
	if info.Revision != head || !info.Modified {
		t.Errorf("version of a modified checkout: %+v; want revision %s, modified", info, head)
	}
}

// proxyBuild runs bin as a gateway-mode proxy of a test gateway and
// returns the build the gateway lists for it.
func proxyBuild(t *testing.T, bin string) string {
	t.Helper()
	g := startGateway(t)
	tok, _ := g.json(t, gatewaytest.AdminToken, "sandbox", "create", "versioned")["token"].(string)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "proxy", "--sandbox", "versioned", "--gateway", g.Gateway.URL, "--token-file", tokenFile,
		"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "proxy"), "--proxy-id", "p1")
	cmd.Env = append(os.Environ(), "PORTCULLIS_TOKEN=")
	stderr := new(lockedBuffer)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, bufio.NewReader(stdout))
		cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := g.json(t, gatewaytest.AdminToken, "proxies", "list", "--sandbox", "versioned")
		if ps, _ := m["proxies"].([]any); len(ps) == 1 {
			p, _ := ps[0].(map[string]any)
			if b, _ := p["build"].(string); b != "" {
				return b
			}
		}
		select {
		case <-done:
			t.Fatalf("proxy exited:\n%s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy never showed in proxies list:\n%s", stderr.String())
		}
	}
}

// moduleRoot is the directory of go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// copyTree copies the regular files under from to to, leaving out .git.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.Name() == ".git" {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
