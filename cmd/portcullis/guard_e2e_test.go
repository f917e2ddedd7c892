package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// TestPolicySetKeepsGrants, through the real CLI: a newer proposal says
// which pending one it supersedes; once it is applied, `policy set` of the
// copy taken before is refused naming it (exit 3, nothing stored); with
// --expect-version and "yes" typed on a terminal it is stored, as it is
// with --force (said in the version's provenance); a stale
// --expect-version is refused.
func TestPolicySetKeepsGrants(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	sb := createSandbox(t, gw, "orders")
	old, stderr, code := cliAgainst(t, gw, admin, "policy", "get", "orders", "-o", "yaml")
	ok(t, code, stderr)
	oldFile := writeFile(t, "old.yaml", old)

	first := jsonOut(t, gw, sb, "propose", "-f", writeFile(t, "track.yaml", trackShipment))
	stdout, stderr, code := cliAgainst(t, gw, sb, "propose", "-f", writeFile(t, "parcel.yaml", strings.ReplaceAll(trackShipment, "track_shipment", "track_parcel")))
	ok(t, code, stderr)
	if want := fmt.Sprintf("supersedes: proposal %v (", first["id"]); !strings.Contains(stdout, want) {
		t.Errorf("propose of a newer proposal does not say %q:\n%s", want, stdout)
	}
	m := regexp.MustCompile(`(?m)^id:\s+(\d+)$`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no id in:\n%s", stdout)
	}
	id := m[1]
	_, stderr, code = cliAgainst(t, gw, admin, "proposals", "approve", id, "--reason", "reviewed")
	ok(t, code, stderr)
	history := func() int { return len(jsonOut(t, gw, admin, "policy", "history", "orders")["versions"].([]any)) }

	_, stderr, code = cliAgainst(t, gw, admin, "policy", "set", "orders", "-f", oldFile)
	if code != exitConflict || !strings.Contains(stderr, "proposal "+id+" (demo-mcp:8081 tools/call track_parcel") || history() != 2 {
		t.Fatalf("set of the old copy: exit %d, stderr %q, %d versions; want exit 3 naming proposal %s, 2 versions", code, stderr, history(), id)
	}
	_, stderr, code = cliAgainst(t, gw, admin, "policy", "set", "orders", "-f", oldFile, "--expect-version", "1")
	if code != exitConflict || !strings.Contains(stderr, "expected version 1") || history() != 2 {
		t.Fatalf("a stale --expect-version: exit %d, stderr %q, %d versions", code, stderr, history())
	}
	gwArgs := []string{"--gateway", gw.URL, "--token", admin, "policy", "set", "orders", "-f", oldFile, "--expect-version", "2"}
	if _, stderr, err := runTerminal(t, "no\n", gwArgs...); err == nil || !strings.Contains(stderr, "proposal "+id+": demo-mcp:8081") || history() != 2 {
		t.Fatalf("confirmation refused: err %v, stderr %q, %d versions", err, stderr, history())
	}
	if stdout, stderr, err := runTerminal(t, "yes\n", gwArgs...); err != nil || !strings.Contains(stdout, "orders: version 3 (sha256 ") || !strings.Contains(stdout, "taking away what proposals "+id+" granted") {
		t.Fatalf("confirmed: err %v, stdout %q, stderr %q", err, stdout, stderr)
	}

	// Granted again (the version the proposal made, set back), then
	// taken away by force.
	v2, stderr, code := cliAgainst(t, gw, admin, "policy", "get", "orders", "--version", "2", "-o", "yaml")
	ok(t, code, stderr)
	_, stderr, code = cliAgainst(t, gw, admin, "policy", "set", "orders", "-f", writeFile(t, "v2.yaml", v2))
	ok(t, code, stderr)
	_, stderr, code = cliAgainst(t, gw, admin, "policy", "set", "orders", "-f", oldFile, "--force")
	ok(t, code, stderr)
	got := jsonOut(t, gw, admin, "policy", "get", "orders")
	prov, _ := got["provenance"].(map[string]any)
	if got["version"] != float64(5) || prov["forced"] != "true" || prov["removed_grants"] != id {
		t.Fatalf("forced set: version %v, provenance %v", got["version"], prov)
	}
}
