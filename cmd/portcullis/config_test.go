package main

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// freeAddr is a loopback address nothing listens on (just now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServer runs the program in-process with args until the test ends,
// once its stdout has a line starting with ready; it returns stdout.
func startServer(t *testing.T, env map[string]string, ready string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, args, strings.NewReader(""), stdout, stderr, func(k string) string { return env[k] })
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("%s exited %d: %s", args[0], code, stderr.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stdout.String(), ready) {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("%s exited %d before starting: %s", args[0], code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start: %s", args[0], stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return stdout.String()
}

// A proxy whose --config names its listen address and policy answers on
// that address with that policy.
func TestProxyConfigFile(t *testing.T) {
	policyFile := writeFile(t, "policy.yaml", "version: 1\n")
	addr := freeAddr(t)
	config := writeFile(t, "proxy.yaml", "# portcullis proxy --config\nlisten: "+addr+"\npolicy: "+policyFile+
		"\ndata-dir: "+filepath.Join(t.TempDir(), "data")+"\nreload-interval: 200ms\n")
	banner := startServer(t, nil, "decisions:", "proxy", "--config", config)
	if !strings.Contains(banner, "Portcullis proxy listening on "+addr+"\n") || !strings.Contains(banner, "policy:    "+policyFile) {
		t.Fatalf("banner:\n%s", banner)
	}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}, Timeout: 10 * time.Second}
	res, err := c.Get("http://policy.local/v1/policy")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("policy.local through %s: %s", addr, res.Status)
	}

	// A key the proxy does not have is refused by name, before anything starts.
	bad := writeFile(t, "bad.yaml", "listen: "+addr+"\npolcy: "+policyFile+"\ntoken: s3cret\n")
	_, stderr, code := runCLI(t, "proxy", "--config", bad)
	for _, want := range []string{`unknown key "polcy"`, `did you mean "policy"?`, `key "token" refused`} {
		if code != exitInvalid || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, exitInvalid, want)
		}
	}
}

// The gateway takes listen from its --config, and a --listen flag beats
// the file.
func TestGatewayConfigFile(t *testing.T) {
	fileAddr := freeAddr(t)
	config := writeFile(t, "gateway.yaml", "listen: "+fileAddr+"\ndata-dir: "+filepath.Join(t.TempDir(), "data")+"\ndecision-rate: 50\n")
	banner := startServer(t, nil, "  console:", "gateway", "--config", config)
	if !strings.Contains(banner, "Portcullis gateway listening on "+fileAddr+"\n") {
		t.Fatalf("want the file's address %s:\n%s", fileAddr, banner)
	}
	flagAddr := freeAddr(t)
	banner = startServer(t, nil, "  console:", "gateway", "--config", config, "--listen", flagAddr, "--data-dir", filepath.Join(t.TempDir(), "data"))
	if !strings.Contains(banner, "Portcullis gateway listening on "+flagAddr+"\n") {
		t.Fatalf("want the flag's address %s:\n%s", flagAddr, banner)
	}
	// A proxy's flag in the gateway's file is refused naming the proxy.
	bad := writeFile(t, "bad.yaml", "listen: "+fileAddr+"\npolicy: orders.yaml\n")
	_, stderr, code := runCLI(t, "gateway", "--config", bad)
	if code != exitInvalid || !strings.Contains(stderr, `key "policy" is a flag of portcullis proxy, not of portcullis gateway`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// The files docs/configuration.md and docs/operations.md show are accepted as
// they are: the gateway's starts (its addresses overridden by flags), and
// the proxy's gets as far as reading the token file it names.
func TestConfigDocExamples(t *testing.T) {
	block := func(file, marker string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join("..", "..", file))
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(string(data), marker)
		_, rest, ok2 := strings.Cut(rest, "```yaml\n")
		body, _, ok3 := strings.Cut(rest, "```")
		if !ok || !ok2 || !ok3 {
			t.Fatalf("%s has no yaml block after %q", file, marker)
		}
		return body
	}
	gw := writeFile(t, "gateway.yaml", block("docs/configuration.md", "<!-- config: gateway -->"))
	startServer(t, nil, "  console:", "gateway", "--config", gw, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data"))
	for _, ex := range []struct{ file, marker string }{{"docs/configuration.md", "<!-- config: proxy -->"}, {"docs/operations.md", "## Configuration files"}} {
		proxy := writeFile(t, "proxy.yaml", block(ex.file, ex.marker))
		_, stderr, code := runCLI(t, "proxy", "--config", proxy, "--data-dir", filepath.Join(t.TempDir(), "data"))
		if code != exitInvalid || !strings.Contains(stderr, "read token file: open /run/secrets/orders.token") {
			t.Errorf("%s's proxy file: exit %d, stderr %q; want it accepted, then its token-file read", ex.file, code, stderr)
		}
	}
}
