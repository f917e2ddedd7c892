package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// shippingRule is a proposal for a new entry: ship.example.com for
// python3, GET /v1/shipments/* only.
const shippingRule = `rationale: shipment status from the carrier
operations:
  - add_rule:
      name: shipping
      rule: { endpoints: [ { host: ship.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: "/v1/shipments/*" } } ] } ], binaries: [ { path: /usr/bin/python3 } ] }
`

// exampleRules are the approval rules the approval package's tests run:
// two approvers for new reach to a credentialed destination.
var exampleRules = filepath.Join("..", "..", "approval", "testdata", "examples.rego")

// operator creates an operator token named name.
func operator(t *testing.T, gw *gatewaytest.Gateway, name string) string {
	t.Helper()
	tok, _ := jsonOut(t, gw, gatewaytest.AdminToken, "token", "create", "--role", "operator", "--name", name)["token"].(string)
	if tok == "" {
		t.Fatalf("token create %s: no token", name)
	}
	return tok
}

// submit files a proposal with the sandbox's token and returns its id and
// resulting hash.
func submit(t *testing.T, gw *gatewaytest.Gateway, sandboxToken, doc string) (id, hash string) {
	t.Helper()
	p := jsonOut(t, gw, sandboxToken, "propose", "-f", writeFile(t, "proposal.yaml", doc))
	id = fmt.Sprint(p["id"])
	hash, _ = p["resulting_hash"].(string)
	if id == "" || len(hash) != 64 || p["status"] != "pending" {
		t.Fatalf("propose = %v; want a pending proposal with a resulting hash", p)
	}
	return id, hash
}

// exitIs runs a command and checks its exit code and that stderr says want.
func exitIs(t *testing.T, gw *gatewaytest.Gateway, token string, code int, want string, args ...string) {
	t.Helper()
	_, stderr, got := cliAgainst(t, gw, token, args...)
	if got != code || !strings.Contains(stderr, want) {
		t.Errorf("%v: exit %d, stderr %q; want %d saying %q", args, got, stderr, code, want)
	}
}

// current is the sandbox's current policy version, as policy get -o json
// answers it.
func current(t *testing.T, gw *gatewaytest.Gateway, sandbox string) map[string]any {
	t.Helper()
	return jsonOut(t, gw, gatewaytest.AdminToken, "policy", "get", sandbox)
}

// TestApproveEndToEnd is the article's loop closed from a terminal: the
// sandbox proposes track_shipment, an operator sees it in the queue with
// its sandbox, a stale hash is a conflict, the approval shows the diff and
// applies it as the next version, and the sandbox can never approve.
func TestApproveEndToEnd(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	sb := createSandbox(t, gw, "orders")
	op := operator(t, gw, "olive")
	id, hash := submit(t, gw, sb, trackShipment)

	// The operator's queue: every sandbox, the sandbox column, the quorum.
	stdout, stderr, code := cliAgainst(t, gw, op, "proposals", "list", "--status", "pending")
	if code != exitOK {
		t.Fatalf("operator proposals list: exit %d, stderr %s", code, stderr)
	}
	ls := lines(stdout)
	if len(ls) != 2 || !strings.Contains(ls[0], "SANDBOX") {
		t.Fatalf("operator list: want the operator's header and one row:\n%s", stdout)
	}
	if f := strings.Fields(ls[1]); f[0] != id || f[1] != "orders" || f[2] != "pending" || f[3] != "0/1" {
		t.Errorf("operator row = %q; want %s, orders, pending, 0/1", ls[1], id)
	}
	for _, tt := range []struct {
		args []string
		want int
	}{
		{[]string{"--sandbox", "orders"}, 1},
		{[]string{"--sandbox", "other"}, 0},
		{[]string{"--finding", "new_mcp_tool"}, 1},
		{[]string{"--finding", "private_network"}, 0},
	} {
		if n := proposalCount(t, gw, op, tt.args...); n != tt.want {
			t.Errorf("operator list %v: %d proposals, want %d", tt.args, n, tt.want)
		}
	}
	// The sandbox's own token still lists its own, without the column.
	stdout, _, code = cliAgainst(t, gw, sb, "proposals", "list")
	if code != exitOK || strings.Contains(stdout, "SANDBOX") || len(lines(stdout)) != 2 {
		t.Errorf("sandbox list: exit %d\n%s", code, stdout)
	}
	shown := jsonOut(t, gw, op, "proposals", "show", id)
	if shown["resulting_hash"] != hash || shown["approvals_required"] != float64(1) {
		t.Errorf("operator show -o json = %v; want hash %s, one approval required", shown, hash)
	}

	// The sandbox proposes, never approves: exit 1, nothing recorded.
	exitIs(t, gw, sb, exitNo, "error: ", "proposals", "approve", id, "--reason", "mine")
	exitIs(t, gw, sb, exitNo, "error: ", "proposals", "reject", id, "--reason", "mine")

	// A hash that is not the proposal's: a conflict, nothing recorded.
	stale := strings.Repeat("0", 64)
	stdout, stderr, code = cliAgainst(t, gw, op, "proposals", "approve", id, "--reason", "narrow", "--hash", stale)
	if code != exitConflict || !strings.Contains(stderr, "changed since it was shown") || strings.Contains(stdout, "approved by you") {
		t.Errorf("approve --hash stale: exit %d, stderr %q; want 3 (conflict)\n%s", code, stderr, stdout)
	}
	if s := jsonOut(t, gw, op, "proposals", "show", id); s["status"] != "pending" || s["approvals"] != nil {
		t.Errorf("after a stale approval the proposal is %v; want pending without approvals", s)
	}
	if v := current(t, gw, "orders"); !versionIs(v, 1) {
		t.Fatalf("a stale approval moved the policy to version %v", v["version"])
	}

	// The approval shows what it approves, then applies it.
	stdout, stderr, code = cliAgainst(t, gw, op, "proposals", "approve", id, "--reason", "narrow; ticket 8812")
	if code != exitOK {
		t.Fatalf("approve: exit %d, stderr %s\n%s", code, stderr, stdout)
	}
	containsAll(t, "approve", stdout,
		"resulting hash: "+hash, "changes (", "track_shipment", "new_mcp_tool", "request: ", "approvals: 0 of 1 needed",
		"proposal "+id+" applied: sandbox orders is at version 2\n")
	v := current(t, gw, "orders")
	prov, _ := v["provenance"].(map[string]any)
	if !versionIs(v, 2) || v["hash"] != hash || v["source"] != "proposal" || prov["proposal"] != id {
		t.Errorf("policy get after approve = version %v hash %v source %v provenance %v; want 2, %s, proposal %s",
			v["version"], v["hash"], v["source"], v["provenance"], hash, id)
	}

	// show: applied, by whom, into which version; the sandbox sees it too.
	stdout, stderr, code = cliAgainst(t, gw, op, "proposals", "show", id)
	if code != exitOK {
		t.Fatalf("show: exit %d, stderr %s", code, stderr)
	}
	for k, want := range map[string]string{"status": "applied", "applied version": "2", "decided by": "olive", "approvals": "1 of 1 needed"} {
		if got := field(t, stdout, k); got != want {
			t.Errorf("show %s = %q, want %q", k, got, want)
		}
	}
	if !strings.Contains(stdout, "  olive  ") || !strings.Contains(stdout, "narrow; ticket 8812") {
		t.Errorf("show does not list olive's approval:\n%s", stdout)
	}
	if s := jsonOut(t, gw, sb, "proposals", "show", id); s["status"] != "applied" || s["applied_version"] != float64(2) {
		t.Errorf("the sandbox's show = %v; want applied as version 2", s)
	}

	// Decided is decided: approving or rejecting again is a conflict.
	exitIs(t, gw, op, exitConflict, "applied", "proposals", "approve", id, "--reason", "again")
	exitIs(t, gw, op, exitConflict, "applied", "proposals", "reject", id, "--reason", "too late")
	exitIs(t, gw, op, exitNo, "not found", "proposals", "approve", "999999", "--reason", "r")
}

// TestApproveAfterRebaseEndToEnd: a proposal re-based after its hash was
// read cannot be approved with that hash (exit 3); approving what show
// prints now applies it on the new base.
func TestApproveAfterRebaseEndToEnd(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	sb := createSandbox(t, gw, "orders")
	op := operator(t, gw, "olive")
	track, reviewed := submit(t, gw, sb, trackShipment)
	shipping, _ := submit(t, gw, sb, shippingRule)

	// Another proposal is applied first: the current version moves, and
	// track_shipment is re-based onto it.
	if out := mustCLI(t, gw, op, "proposals", "approve", shipping, "--reason", "carrier API"); !strings.Contains(out, "sandbox orders is at version 2") {
		t.Fatalf("approve %s:\n%s", shipping, out)
	}
	now := jsonOut(t, gw, op, "proposals", "show", track)
	if now["base_version"] != float64(2) || now["resulting_hash"] == reviewed || now["status"] != "pending" {
		t.Fatalf("after the base moved, show = base %v hash %v status %v; want pending on version 2 with a new hash",
			now["base_version"], now["resulting_hash"], now["status"])
	}

	// A script that reviewed the old hash: a conflict naming the new base.
	exitIs(t, gw, op, exitConflict, "changed since it was shown", "proposals", "approve", track, "--reason", "ci", "--hash", reviewed, "-o", "json")
	if v := current(t, gw, "orders"); !versionIs(v, 2) {
		t.Fatalf("a stale approval moved the policy to version %v", v["version"])
	}

	// A human approving now sees the new hash and approves that.
	stdout := mustCLI(t, gw, op, "proposals", "approve", track, "--reason", "narrow")
	if field(t, stdout, "resulting hash") != now["resulting_hash"] || !strings.HasPrefix(field(t, stdout, "base version"), "2 (sha256 ") ||
		!strings.HasSuffix(stdout, "proposal "+track+" applied: sandbox orders is at version 3\n") {
		t.Errorf("approve after the re-base:\n%s", stdout)
	}
	if v := current(t, gw, "orders"); !versionIs(v, 3) || v["hash"] != now["resulting_hash"] {
		t.Errorf("policy get = version %v hash %v; want 3 with %v", v["version"], v["hash"], now["resulting_hash"])
	}
}

// TestRejectEndToEnd: an operator rejects with a reason the sandbox sees;
// a rejected proposal can be neither approved nor rejected again.
func TestRejectEndToEnd(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	sb := createSandbox(t, gw, "orders")
	op := operator(t, gw, "olive")
	id, _ := submit(t, gw, sb, shippingRule)

	exitIs(t, gw, op, exitInvalid, "needs --reason", "proposals", "reject", id)
	stdout, stderr, code := cliAgainst(t, gw, op, "proposals", "reject", id, "--reason", "use the carrier's public API")
	if code != exitOK || stdout != "proposal "+id+" rejected\n" {
		t.Fatalf("reject: exit %d, stderr %s, stdout %q", code, stderr, stdout)
	}
	p := jsonOut(t, gw, sb, "proposals", "show", id)
	if p["status"] != "rejected" || p["status_reason"] != "use the carrier's public API" || p["decided_by"] != "olive" {
		t.Errorf("the sandbox sees %v; want rejected with the reason, by olive", p)
	}
	exitIs(t, gw, op, exitConflict, "rejected", "proposals", "reject", id, "--reason", "again")
	exitIs(t, gw, op, exitConflict, "rejected", "proposals", "approve", id, "--reason", "changed my mind")
	if n := proposalCount(t, gw, op, "--status", "rejected"); n != 1 {
		t.Errorf("%d rejected proposals, want 1", n)
	}
	if v := current(t, gw, "orders"); !versionIs(v, 1) {
		t.Errorf("a rejection moved the policy to version %v", v["version"])
	}
}

// TestApprovalRulesEndToEnd: an admin sets the example rules (get gives
// them back unchanged); under them new reach to a credentialed destination
// needs two distinct approvers, and the second applies it with the grant's
// end.
func TestApprovalRulesEndToEnd(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	sb := createSandbox(t, gw, "orders")
	op := operator(t, gw, "olive")

	// The built-in rules until an admin sets some.
	builtin := jsonOut(t, gw, op, "approval-policy", "get")
	if builtin["version"] != nil || builtin["module"] == nil {
		t.Errorf("approval-policy get before any set = %v; want the built-in module at version 0", builtin)
	}

	module, err := os.ReadFile(exampleRules)
	if err != nil {
		t.Fatal(err)
	}
	exitIs(t, gw, op, exitNo, "error: ", "approval-policy", "set", "-f", exampleRules)
	set := jsonOut(t, gw, admin, "approval-policy", "set", "-f", exampleRules)
	if set["version"] != float64(1) || set["module"] != string(module) || len(set["hash"].(string)) != 64 {
		t.Fatalf("approval-policy set = %v; want version 1 with the module", set)
	}
	stdout, stderr, code := cliAgainst(t, gw, op, "approval-policy", "get")
	if code != exitOK || stdout != string(module) || !strings.Contains(stderr, "version 1 (sha256 ") {
		t.Errorf("approval-policy get: exit %d, stderr %q; stdout is not the module as set:\n%s", code, stderr, stdout)
	}
	// What get prints sets again as it is.
	again, stderr, code := runCLIWith(t, cliInput{stdin: stdout}, "--gateway", gw.URL, "--token", admin, "approval-policy", "set", "-f", "-", "-o", "json")
	if code != exitOK || decodeJSON(t, again)["hash"] != set["hash"] {
		t.Errorf("set of what get printed: exit %d, stderr %s\n%s", code, stderr, again)
	}
	// A module that is not valid approval rules: exit 2, the rules kept.
	for _, bad := range []string{
		"package elsewhere\n\ndefault approvals_required := 1\n",
		"package portcullis.approval\n\napprovals_required := \n",
		"package portcullis.approval\n\napprovals_required := \"two\"\n",
	} {
		_, stderr, code := runCLIWith(t, cliInput{stdin: bad}, "--gateway", gw.URL, "--token", admin, "approval-policy", "set", "-f", "-")
		if code != exitInvalid || !strings.Contains(stderr, "error: ") {
			t.Errorf("invalid module %q: exit %d, stderr %q; want 2", bad, code, stderr)
		}
	}
	if cur := jsonOut(t, gw, op, "approval-policy", "get"); cur["hash"] != set["hash"] {
		t.Errorf("after refused modules the rules are %v, want version %v", cur["version"], set["version"])
	}

	// New reach to a credentialed destination: two approvers.
	jsonOut(t, gw, admin, "sandbox", "credentials", "orders", "--add", "ship.example.com:443")
	id, hash := submit(t, gw, sb, shippingRule)
	p := jsonOut(t, gw, op, "proposals", "show", id)
	if p["approvals_required"] != float64(2) {
		t.Fatalf("show = %v; want two approvals required", p)
	}
	stdout, stderr, code = cliAgainst(t, gw, op, "proposals", "approve", id, "--reason", "carrier API, read only")
	if code != exitOK || !strings.HasSuffix(stdout, "proposal "+id+" approved by you; 1 more approval needed\n") ||
		!strings.Contains(stdout, "new_credentialed_reach") {
		t.Fatalf("first approval: exit %d, stderr %s\n%s", code, stderr, stdout)
	}
	exitIs(t, gw, op, exitConflict, "already approved", "proposals", "approve", id, "--reason", "twice")
	if v := current(t, gw, "orders"); !versionIs(v, 1) {
		t.Fatalf("one of two approvals moved the policy to version %v", v["version"])
	}
	if f := strings.Fields(lines(mustCLI(t, gw, op, "proposals", "list", "--status", "pending"))[1]); f[3] != "1/2" {
		t.Errorf("list approvals = %s, want 1/2", f[3])
	}
	// The second approver, from a script, with the hash it reviewed and
	// an end to the grant.
	res := jsonOut(t, gw, admin, "proposals", "approve", id, "--reason", "agreed", "--hash", hash, "--until", "8h")
	if res["status"] != "applied" || res["applied_version"] != float64(2) || res["grant_expires_at"] == nil {
		t.Fatalf("second approval = %v; want applied as version 2 with the grant's end", res)
	}
	stdout = mustCLI(t, gw, op, "proposals", "show", id)
	if g := field(t, stdout, "grant ends"); g == "never" || g == "" {
		t.Errorf("show grant ends = %q, want the end", g)
	}
	v := current(t, gw, "orders")
	if !versionIs(v, 2) || v["source"] != "proposal" {
		t.Errorf("policy get = version %v source %v; want 2 from the proposal", v["version"], v["source"])
	}
	doc, _ := mustCLIWith(t, gw, admin, "policy", "get", "orders", "-o", "yaml")
	if !strings.Contains(doc, "expires_at") {
		t.Errorf("the granted rule carries no expires_at:\n%s", doc)
	}
}

// TestFreezeEndToEnd: the kill switch pushes deny-all as a new version,
// refuses proposals and approvals while frozen, and unfreezing (admin
// only) restores the policy from before as a new version.
func TestFreezeEndToEnd(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	sb := createSandbox(t, gw, "orders")
	op := operator(t, gw, "olive")
	// A new entry: it still applies to the deny-all version, so what
	// refuses its approval is the freeze itself.
	id, _ := submit(t, gw, sb, shippingRule)
	v1 := current(t, gw, "orders")

	exitIs(t, gw, op, exitInvalid, "needs --reason", "sandbox", "freeze", "orders")
	exitIs(t, gw, sb, exitNo, "error: ", "sandbox", "freeze", "orders", "--reason", "mine")
	stdout, stderr, code := cliAgainst(t, gw, op, "sandbox", "freeze", "orders", "--reason", "exfiltration suspected")
	if code != exitOK || stdout != "sandbox orders frozen: deny-all is version 2\n" {
		t.Fatalf("freeze: exit %d, stderr %s, stdout %q", code, stderr, stdout)
	}
	v2 := current(t, gw, "orders")
	pol, _ := v2["policy"].(map[string]any)
	if !versionIs(v2, 2) || v2["source"] != "freeze" || pol["network_policies"] != nil {
		t.Errorf("policy get after freeze = version %v source %v network_policies %v; want 2, freeze, none",
			v2["version"], v2["source"], pol["network_policies"])
	}
	stdout = mustCLI(t, gw, op, "sandbox", "get", "orders")
	for k, want := range map[string]string{"frozen": "yes", "frozen reason": "exfiltration suspected", "frozen by": "olive", "version": "2"} {
		if got := field(t, stdout, k); got != want {
			t.Errorf("sandbox get %s = %q, want %q", k, got, want)
		}
	}
	if list := mustCLI(t, gw, op, "sandbox", "list"); !strings.HasSuffix(strings.TrimSpace(lines(list)[1]), "yes") {
		t.Errorf("sandbox list does not mark it frozen:\n%s", list)
	}

	// Frozen: no second freeze, no proposals, no approvals, no sets.
	exitIs(t, gw, op, exitConflict, "already frozen", "sandbox", "freeze", "orders", "--reason", "again")
	exitIs(t, gw, sb, exitConflict, "frozen", "propose", "-f", writeFile(t, "p.yaml", trackShipment))
	exitIs(t, gw, op, exitConflict, "frozen", "proposals", "approve", id, "--reason", "during the incident")
	exitIs(t, gw, admin, exitConflict, "frozen", "policy", "set", "orders", "-f", ordersExample)

	// Unfreezing is the admin's.
	exitIs(t, gw, op, exitNo, "error: ", "sandbox", "unfreeze", "orders", "--reason", "done")
	exitIs(t, gw, admin, exitInvalid, "needs --reason", "sandbox", "unfreeze", "orders")
	stdout, stderr, code = cliAgainst(t, gw, admin, "sandbox", "unfreeze", "orders", "--reason", "incident closed")
	if code != exitOK || stdout != "sandbox orders unfrozen: the policy from before the freeze is version 3\n" {
		t.Fatalf("unfreeze: exit %d, stderr %s, stdout %q", code, stderr, stdout)
	}
	v3 := current(t, gw, "orders")
	if !versionIs(v3, 3) || v3["hash"] != v1["hash"] || v3["source"] != "unfreeze" {
		t.Errorf("policy get after unfreeze = version %v hash %v source %v; want 3 with version 1's hash %v",
			v3["version"], v3["hash"], v3["source"], v1["hash"])
	}
	if got := field(t, mustCLI(t, gw, op, "sandbox", "get", "orders"), "frozen"); got != "no" {
		t.Errorf("sandbox get frozen = %q after unfreeze, want no", got)
	}
	exitIs(t, gw, admin, exitConflict, "not frozen", "sandbox", "unfreeze", "orders", "--reason", "again")
	// Proposals are taken again.
	submit(t, gw, sb, trackShipment)
}

// mustCLI runs a command and requires exit 0.
func mustCLI(t *testing.T, gw *gatewaytest.Gateway, token string, args ...string) string {
	t.Helper()
	stdout, _ := mustCLIWith(t, gw, token, args...)
	return stdout
}

func mustCLIWith(t *testing.T, gw *gatewaytest.Gateway, token string, args ...string) (string, string) {
	t.Helper()
	stdout, stderr, code := cliAgainst(t, gw, token, args...)
	if code != exitOK {
		t.Fatalf("%v: exit %d, stderr %s", args, code, stderr)
	}
	return stdout, stderr
}
