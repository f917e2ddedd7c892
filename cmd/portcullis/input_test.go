package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
)

func TestFmtJSON(t *testing.T) {
	stdout, stderr, code := runCLI(t, "policy", "fmt", "testdata/quickstart.yaml", "-o", "json")
	if code != exitOK {
		t.Fatalf("fmt -o json: exit %d: %s", code, stderr)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("fmt -o json printed no JSON: %v\n%s", err, stdout)
	}
	p, _, err := policy.Parse([]byte(stdout))
	if err != nil {
		t.Fatal(err)
	}
	orig, _, err := policy.Parse(mustReadFile(t, "testdata/quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Hash() != orig.Hash() {
		t.Fatalf("fmt -o json changed the meaning: %s vs %s", p.Hash(), orig.Hash())
	}
}

func mustReadFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An oversized document fails locally as invalid input, and nothing
// reaches the gateway (there is none listening here).
func TestOversizedDocument(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("version: 1\n"+strings.Repeat("#", policy.MaxDocumentBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "--gateway", "http://127.0.0.1:1", "--token", "x", "policy", "set", "orders", "-f", big)
	if code != exitInvalid || !strings.Contains(stderr, "larger than") {
		t.Fatalf("oversized set: exit %d, stderr %q; want 2 before any call", code, stderr)
	}
}

func TestPlaintextTokenWarning(t *testing.T) {
	_, stderr, _ := runCLI(t, "--gateway", "http://192.0.2.1:7070", "--token", "pcs_x", "--timeout", "1ms", "sandbox", "list")
	if !strings.Contains(stderr, "warning: sending the token in plaintext") {
		t.Fatalf("no plaintext warning for a remote http:// gateway:\n%s", stderr)
	}
	_, stderr, _ = runCLI(t, "--gateway", "http://127.0.0.1:1", "--token", "pcs_x", "sandbox", "list")
	if strings.Contains(stderr, "plaintext") {
		t.Fatalf("plaintext warning for loopback:\n%s", stderr)
	}
}

// A single field error prints once, as "error: path: message".
func TestSingleFieldError(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	_, stderr, code := cliAgainst(t, gw, gatewaytest.AdminToken, "sandbox", "create", "Bad_Name")
	if code != exitInvalid || strings.Count(stderr, "name:") != 1 || !strings.HasPrefix(stderr, "error: name: must be") {
		t.Fatalf("bad name: exit %d, stderr %q; want one line naming the field", code, stderr)
	}
}
