package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// --pprof-listen must be a loopback host:port: anything else is refused
// before the proxy starts (no data dir, no listener).
func TestProxyPprofListenRefusals(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0.0.0.0:6060", ":6060", "192.0.2.1:6060", "example.com:6060", "127.0.0.1"} {
		t.Run(addr, func(t *testing.T) {
			dataDir := filepath.Join(dir, "data")
			stdout, stderr, code := runCLI(t, "proxy", "--policy", policyFile, "--data-dir", dataDir,
				"--listen", "127.0.0.1:0", "--pprof-listen", addr)
			if code != exitInvalid || !strings.Contains(stderr, "--pprof-listen") {
				t.Fatalf("exit %d, stderr %q; want %d naming --pprof-listen", code, stderr, exitInvalid)
			}
			if strings.Contains(stdout, "listening") {
				t.Fatalf("the proxy started: %q", stdout)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Fatalf("the data dir was created (%v)", err)
			}
		})
	}
}

// With --pprof-listen the proxy serves Go's profiles there, and says
// where; without it, it serves none and says nothing of them.
func TestProxyPprofListen(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(t *testing.T, extra ...string) (stdout *lockedBuffer, stop func()) {
		ctx, cancel := context.WithCancel(t.Context())
		stdout = &lockedBuffer{}
		var stderr lockedBuffer
		args := append([]string{"proxy", "--policy", policyFile, "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0"}, extra...)
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, args, strings.NewReader(""), stdout, &stderr, func(string) string { return "" })
		}()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(stdout.String(), "decisions:") {
			select {
			case code := <-done:
				t.Fatalf("proxy exited %d before starting: %s", code, stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("proxy did not start: %s", stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		return stdout, func() {
			cancel()
			if code := <-done; code != exitOK {
				t.Errorf("proxy exited %d: %s", code, stderr.String())
			}
		}
	}

	t.Run("on", func(t *testing.T) {
		stdout, stop := start(t, "--pprof-listen", "127.0.0.1:0")
		defer stop()
		var url string
		for _, line := range strings.Split(stdout.String(), "\n") {
			if u, ok := strings.CutPrefix(strings.TrimSpace(line), "pprof:"); ok {
				url = strings.TrimSpace(u)
			}
		}
		if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/debug/pprof/") {
			t.Fatalf("no pprof URL printed: %q", stdout.String())
		}
		for _, path := range []string{"", "goroutine?debug=1", "heap"} {
			res, err := http.Get(url + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || len(body) == 0 {
				t.Fatalf("GET %s: %d, %d bytes", url+path, res.StatusCode, len(body))
			}
			if path == "goroutine?debug=1" && !strings.Contains(string(body), "dataplane") {
				t.Fatalf("the goroutine profile is not the proxy's: %.300s", body)
			}
		}
	})
	t.Run("off by default", func(t *testing.T) {
		stdout, stop := start(t)
		defer stop()
		if strings.Contains(stdout.String(), "pprof") {
			t.Fatalf("pprof mentioned without --pprof-listen: %q", stdout.String())
		}
	})
}
