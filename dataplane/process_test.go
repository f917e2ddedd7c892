package dataplane_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
)

// New prepares a proxy's data dir: a standalone proxy's CA and its
// decision log there; in gateway mode the subscription's directory and
// a proxy id generated once and kept.
func TestProcessDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := dataplane.New(dataplane.Config{PolicyFile: policyFile, Process: dataplane.Process{DataDir: dir, DecisionLogKeep: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ca.pem", dataplane.DecisionLogName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("standalone: %v", err)
		}
	}

	gwDir := filepath.Join(t.TempDir(), "gw")
	ids := map[string]bool{}
	for range 2 {
		a, err := dataplane.New(dataplane.Config{
			Gateway: &gatewayclient.SubscribeConfig{Gateway: "http://127.0.0.1:1", Sandbox: "orders", Token: func() (string, error) { return "pcs_x", nil }},
			Process: dataplane.Process{DataDir: gwDir},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(gwDir, "proxy-id"))
		if err != nil {
			t.Fatal(err)
		}
		ids[strings.TrimSpace(string(b))] = true
	}
	if len(ids) != 1 {
		t.Errorf("proxy ids %v: want one, kept across restarts", ids)
	}
	if _, err := os.Stat(filepath.Join(gwDir, "ca.pem")); !os.IsNotExist(err) {
		t.Errorf("gateway mode made a CA of its own (%v): the sandbox's comes from the gateway", err)
	}
}
