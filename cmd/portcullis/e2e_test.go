package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// cliAgainst runs the CLI against a gateway with a token.
func cliAgainst(t *testing.T, gw *gatewaytest.Gateway, token string, args ...string) (string, string, int) {
	t.Helper()
	return runCLI(t, append([]string{"--gateway", gw.URL, "--token", token}, args...)...)
}

// jsonOut runs a command with -o json, requires exit 0 and decodes stdout.
func jsonOut(t *testing.T, gw *gatewaytest.Gateway, token string, args ...string) map[string]any {
	t.Helper()
	stdout, stderr, code := cliAgainst(t, gw, token, append(args, "-o", "json")...)
	if code != exitOK {
		t.Fatalf("%v: exit %d, stderr %s", args, code, stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("%v: stdout is not JSON: %v\n%s", args, err, stdout)
	}
	return m
}

func historyCount(t *testing.T, gw *gatewaytest.Gateway, sandbox string) int {
	t.Helper()
	h := jsonOut(t, gw, gatewaytest.AdminToken, "policy", "history", sandbox)
	versions, _ := h["versions"].([]any)
	return len(versions)
}

// TestWalkthrough is the README's five-minute walk, through the real CLI
// against a real gateway on each engine, with the acceptance
// checks on exit codes and on what is stored.
func TestWalkthrough(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			gw := gatewaytest.Start(t, engine)
			admin := gatewaytest.AdminToken
			v1File := filepath.Join("..", "..", "gateway", "testdata", "orders-v1.json")
			v2File := filepath.Join("..", "..", "gateway", "testdata", "orders-v2.yaml")

			created := jsonOut(t, gw, admin, "sandbox", "create", "orders")
			if created["name"] != "orders" || !strings.HasPrefix(created["token"].(string), "pcs_") {
				t.Fatalf("sandbox create = %v", created)
			}
			v1 := jsonOut(t, gw, admin, "policy", "set", "orders", "-f", v1File)
			if !versionIs(v1, 1) {
				t.Fatalf("first set: version %v, want 1", v1["version"])
			}
			v2 := jsonOut(t, gw, admin, "policy", "set", "orders", "-f", v2File, "--expect-version", "1")
			if v2["hash"] == v1["hash"] {
				t.Fatalf("v2 has v1's hash")
			}
			diff, stderr, code := cliAgainst(t, gw, admin, "policy", "diff", "orders", "1", "2")
			if code != exitOK || !strings.Contains(diff, "track_shipment") {
				t.Fatalf("diff 1 2: exit %d, stdout %q, stderr %q; want the added tool named", code, diff, stderr)
			}
			v3 := jsonOut(t, gw, admin, "policy", "rollback", "orders", "--to", "1")
			if v3["hash"] != v1["hash"] || !versionIs(v3, 3) {
				t.Fatalf("rollback --to 1 = version %v hash %v; want 3 with hash %v", v3["version"], v3["hash"], v1["hash"])
			}

			// A stale --expect-version: exit 3, nothing stored.
			_, stderr, code = cliAgainst(t, gw, admin, "policy", "set", "orders", "-f", v2File, "--expect-version", "1")
			if code != exitConflict || !strings.Contains(stderr, "expected version 1") {
				t.Fatalf("stale --expect-version: exit %d, stderr %q; want 3", code, stderr)
			}
			// An unknown field and a bad value: exit 2 naming both paths, nothing stored.
			_, stderr, code = cliAgainst(t, gw, admin, "policy", "set", "orders", "-f", filepath.Join("..", "..", "gateway", "testdata", "invalid.yaml"))
			if code != exitInvalid ||
				!strings.Contains(stderr, "network_policies.orders.endpoints[0].colour") ||
				!strings.Contains(stderr, "network_policies.orders.endpoints[0].mcp.max_body_bytes") {
				t.Fatalf("invalid policy: exit %d, stderr %q; want 2 naming both paths", code, stderr)
			}
			if strings.Count(stderr, "colour") != 1 {
				t.Errorf("invalid policy: each problem should be printed once:\n%s", stderr)
			}
			if n := historyCount(t, gw, "orders"); n != 3 {
				t.Fatalf("history has %d versions after refused sets, want 3", n)
			}

			// Identical content stores nothing and says so.
			same := jsonOut(t, gw, admin, "policy", "set", "orders", "-f", v1File)
			if same["unchanged"] != true || !versionIs(same, 3) {
				t.Fatalf("identical set = %v; want unchanged at version 3", same)
			}

			// get -o yaml feeds back into set with the same hash.
			yamlDoc, stderr, code := cliAgainst(t, gw, admin, "policy", "get", "orders", "-o", "yaml")
			if code != exitOK {
				t.Fatalf("get -o yaml: exit %d: %s", code, stderr)
			}
			again := setFromStdin(t, gw, "orders", yamlDoc)
			if again["unchanged"] != true || again["hash"] != v1["hash"] {
				t.Fatalf("set of get -o yaml = %v; want unchanged with v1's hash", again)
			}

			// Roles: a sandbox token reads only its own policy and sets none;
			// an operator cannot create tokens; a revoked token is refused.
			jsonOut(t, gw, admin, "sandbox", "create", "other")
			sbToken := created["token"].(string)
			if _, _, code := cliAgainst(t, gw, sbToken, "policy", "get", "orders"); code != exitOK {
				t.Fatalf("sandbox token reading its own policy: exit %d", code)
			}
			if _, _, code := cliAgainst(t, gw, sbToken, "policy", "get", "other"); code != exitNo {
				t.Fatalf("sandbox token reading another sandbox: exit %d, want 1", code)
			}
			if _, _, code := cliAgainst(t, gw, sbToken, "policy", "set", "orders", "-f", v2File); code != exitNo {
				t.Fatalf("sandbox token setting a policy: exit %d, want 1", code)
			}
			op := jsonOut(t, gw, admin, "token", "create", "--role", "operator", "--name", "olive")
			opToken := op["token"].(string)
			if _, _, code := cliAgainst(t, gw, opToken, "token", "create", "--role", "operator", "--name", "mallory"); code != exitNo {
				t.Fatalf("operator creating a token: exit %d, want 1", code)
			}
			jsonOut(t, gw, admin, "token", "revoke", "olive")
			if _, stderr, code := cliAgainst(t, gw, opToken, "sandbox", "list"); code != exitNo || !strings.Contains(stderr, "revoked") {
				t.Fatalf("revoked token: exit %d, stderr %q; want 1, revoked", code, stderr)
			}

			// A restart keeps everything.
			gw.Restart()
			if n := historyCount(t, gw, "orders"); n != 3 {
				t.Fatalf("after restart the history has %d versions, want 3", n)
			}

			// The gateway gone: exit 4.
			gw.Stop()
			if _, _, code := cliAgainst(t, gw, admin, "sandbox", "list"); code != exitUnavailable {
				t.Fatalf("gateway down: exit %d, want 4", code)
			}
		})
	}
}

// versionIs reads the version field of a PolicyVersion: a JSON number.
func versionIs(m map[string]any, v int) bool {
	return m["version"] == float64(v)
}

func setFromStdin(t *testing.T, gw *gatewaytest.Gateway, sandbox, doc string) map[string]any {
	t.Helper()
	stdout, stderr, code := runCLIWith(t, cliInput{stdin: doc}, "--gateway", gw.URL, "--token", gatewaytest.AdminToken, "policy", "set", sandbox, "-f", "-", "-o", "json")
	if code != exitOK {
		t.Fatalf("set from stdin: exit %d: %s", code, stderr)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOpenShellCorpusRoundTrip stores every real OpenShell policy and the
// article's policies through the gateway, reads each back as YAML and sets
// it again: the hash must not change.
func TestOpenShellCorpusRoundTrip(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	var files []string
	for _, dir := range []string{"openshell", "article"} {
		matches, err := filepath.Glob(filepath.Join("..", "..", "policy", "testdata", dir, "*.*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			if strings.HasSuffix(m, ".yaml") || strings.HasSuffix(m, ".json") {
				files = append(files, m)
			}
		}
	}
	if len(files) < 15 {
		t.Fatalf("found %d corpus files, want the 13 OpenShell policies and the article's 2", len(files))
	}
	for i, file := range files {
		name := "corpus-" + strconv.Itoa(i)
		jsonOut(t, gw, gatewaytest.AdminToken, "sandbox", "create", name)
		first := jsonOut(t, gw, gatewaytest.AdminToken, "policy", "set", name, "-f", file)
		yamlDoc, stderr, code := cliAgainst(t, gw, gatewaytest.AdminToken, "policy", "get", name, "-o", "yaml")
		if code != exitOK {
			t.Fatalf("%s: get -o yaml: %s", file, stderr)
		}
		again := setFromStdin(t, gw, name, yamlDoc)
		if again["hash"] != first["hash"] || again["unchanged"] != true {
			t.Errorf("%s: round trip changed the hash: %v then %v", file, first["hash"], again["hash"])
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) == 0 {
			t.Errorf("%s is empty", file)
		}
	}
}
