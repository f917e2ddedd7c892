package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// ordersExample is the article's policy: the sandbox's first version in
// these tests.
var ordersExample = filepath.Join("..", "..", "examples", "orders.yaml")

// trackShipment is the article's proposal: track_shipment beside
// lookup_order on the orders MCP endpoint.
const trackShipment = `rationale: support agents must track shipments for open orders
operations:
  - add_allow_rules:
      policy: orders
      host: demo-mcp
      port: 8081
      rules:
        - allow: { method: tools/call, tool: track_shipment }
`

// writeFile writes content to a file in the test's temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// createSandbox creates a sandbox with the orders example as its policy and
// returns its token.
func createSandbox(t *testing.T, gw *gatewaytest.Gateway, name string) string {
	t.Helper()
	created := jsonOut(t, gw, gatewaytest.AdminToken, "sandbox", "create", name, "-f", ordersExample)
	tok, _ := created["token"].(string)
	if tok == "" {
		t.Fatalf("sandbox create %s: no token in %v", name, created)
	}
	return tok
}

// proposalCount is how many proposals the sandbox's token lists.
func proposalCount(t *testing.T, gw *gatewaytest.Gateway, token string, args ...string) int {
	t.Helper()
	list := jsonOut(t, gw, token, append([]string{"proposals", "list"}, args...)...)
	ps, _ := list["proposals"].([]any)
	return len(ps)
}

// TestProposeEndToEnd is the article's loop from the sandbox's side,
// through the real CLI against a real gateway: the track_shipment proposal
// is filed with a new_mcp_tool finding, deduplicated, listed, shown and
// withdrawn; a wide one is refused and nothing is stored.
func TestProposeEndToEnd(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	sb := createSandbox(t, gw, "orders")
	proposal := writeFile(t, "proposal.yaml", trackShipment)

	// Text: filed, pending, the finding with its counterexample.
	stdout, stderr, code := cliAgainst(t, gw, sb, "propose", "-f", proposal)
	if code != exitOK {
		t.Fatalf("propose -f: exit %d, stderr %s", code, stderr)
	}
	for _, want := range []string{"status:", "pending", "base version:", "resulting hash:", "new_mcp_tool", "request: ", "tools/call track_shipment"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("propose -f does not print %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "deduplicated") {
		t.Errorf("a first proposal printed as deduplicated:\n%s", stdout)
	}

	// JSON, the same proposal again: the one already pending answers.
	p := jsonOut(t, gw, sb, "propose", "-f", proposal)
	hasKeys(t, p, "id", "status", "base_version", "resulting_hash", "findings")
	id := fmt.Sprint(p["id"])
	if id == "" || p["status"] != "pending" || p["base_version"] != float64(1) || p["deduplicated"] != true {
		t.Errorf("propose -o json = %v; want pending on version 1, deduplicated", p)
	}
	if h, _ := p["resulting_hash"].(string); len(h) != 64 {
		t.Errorf("resulting_hash = %v, want a SHA-256 hex", p["resulting_hash"])
	}
	findings, _ := p["findings"].([]any)
	if len(findings) == 0 {
		t.Fatalf("no findings in %v", p)
	}
	first := findings[0].(map[string]any)
	counter, _ := first["counterexample"].(map[string]any)
	if first["kind"] != "new_mcp_tool" || counter["tool"] != "track_shipment" || counter["mcp_method"] != "tools/call" {
		t.Errorf("findings[0] = %v; want new_mcp_tool with a tools/call track_shipment counterexample", first)
	}
	dup, _, code := cliAgainst(t, gw, sb, "propose", "-f", proposal)
	if code != exitOK || !strings.Contains(dup, "deduplicated: an identical proposal is already pending") || !strings.Contains(dup, id) {
		t.Errorf("identical proposal: exit %d\n%s", code, dup)
	}

	// The same idempotency key twice: the same proposal. (A new entry: a
	// newer proposal on the orders endpoint would supersede the first.)
	keyed := writeFile(t, "keyed.yaml", `rationale: shipment status from the carrier
idempotency_key: ticket-8812
operations:
  - add_rule:
      name: shipping
      rule: { endpoints: [ { host: ship.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: "/v1/shipments/*" } } ] } ], binaries: [ { path: /usr/bin/python3 } ] }
`)
	k1 := jsonOut(t, gw, sb, "propose", "-f", keyed)
	k2 := jsonOut(t, gw, sb, "propose", "-f", keyed)
	if k1["id"] == nil || k1["id"] != k2["id"] || k1["id"] == id {
		t.Errorf("same idempotency key: ids %v and %v (first proposal %s); want one new id", k1["id"], k2["id"], id)
	}

	// List and show.
	stdout, stderr, code = cliAgainst(t, gw, sb, "proposals", "list", "--status", "pending")
	if code != exitOK || len(lines(stdout)) != 3 || !strings.Contains(stdout, "new_mcp_tool") || !strings.Contains(stdout, "support agents must track") {
		t.Errorf("proposals list: exit %d, stderr %s\n%s", code, stderr, stdout)
	}
	if n := proposalCount(t, gw, sb, "--status", "withdrawn"); n != 0 {
		t.Errorf("%d withdrawn proposals before any withdrawal", n)
	}
	stdout, stderr, code = cliAgainst(t, gw, sb, "proposals", "show", id)
	if code != exitOK || !strings.Contains(stdout, "rationale:") || !strings.Contains(stdout, "support agents must track shipments for open orders") ||
		!strings.Contains(stdout, "changes (") || !strings.Contains(stdout, "track_shipment") {
		t.Errorf("proposals show: exit %d, stderr %s\n%s", code, stderr, stdout)
	}
	shown := jsonOut(t, gw, sb, "proposals", "show", id)
	if fmt.Sprint(shown["id"]) != id || shown["resulting_hash"] != p["resulting_hash"] {
		t.Errorf("show -o json = %v; want proposal %s with the hash propose printed", shown, id)
	}

	// Withdraw, then again: no longer pending is a conflict.
	w := jsonOut(t, gw, sb, "proposals", "withdraw", id, "--reason", "filed twice")
	if w["status"] != "withdrawn" {
		t.Errorf("withdraw = %v; want withdrawn", w)
	}
	if _, stderr, code := cliAgainst(t, gw, sb, "proposals", "withdraw", id); code != exitConflict {
		t.Errorf("second withdraw: exit %d, stderr %s; want 3", code, stderr)
	}
	if n := proposalCount(t, gw, sb, "--status", "withdrawn"); n != 1 {
		t.Errorf("%d withdrawn proposals, want 1", n)
	}

	// What is not there, or not the sandbox's, is no (exit 1).
	if _, stderr, code := cliAgainst(t, gw, sb, "propose", "--from-denial", "dn_00000000000000000000", "--rationale", "r"); code != exitNo {
		t.Errorf("--from-denial of an unknown id: exit %d, stderr %s; want 1", code, stderr)
	}
	if _, stderr, code := cliAgainst(t, gw, sb, "proposals", "show", "999999"); code != exitNo {
		t.Errorf("show of an unknown id: exit %d, stderr %s; want 1", code, stderr)
	}
	if _, stderr, code := cliAgainst(t, gw, admin, "propose", "-f", proposal); code != exitNo {
		t.Errorf("an admin token proposing: exit %d, stderr %s; want 1 (the sandbox proposes)", code, stderr)
	}
	other := createSandbox(t, gw, "other")
	if _, stderr, code := cliAgainst(t, gw, other, "proposals", "show", id); code != exitNo {
		t.Errorf("another sandbox's proposal: exit %d, stderr %s; want 1", code, stderr)
	}
	if n := proposalCount(t, gw, other); n != 0 {
		t.Errorf("another sandbox lists %d proposals, want its own (none)", n)
	}
}

// TestProposeRefused: a proposal that is not narrow is refused with the
// operation, field and rule on stderr (exit 2), and nothing is stored.
func TestProposeRefused(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	sb := createSandbox(t, gw, "orders")
	wide := writeFile(t, "wide.yaml", `rationale: docs
operations:
  - add_rule:
      name: pages
      rule: { endpoints: [ { host: "*.github.io", port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /docs } } ] } ], binaries: [ { path: /usr/bin/python3 } ] }
`)
	stdout, stderr, code := cliAgainst(t, gw, sb, "propose", "-f", wide)
	if code != exitInvalid || stdout != "" {
		t.Fatalf("wide proposal: exit %d, stdout %q, stderr %s; want 2", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "refused: operations[0].add_rule.rule.endpoints[0].host: ") || !strings.Contains(stderr, "(rule public_suffix_wildcard)") {
		t.Errorf("stderr does not name the operation, field and rule:\n%s", stderr)
	}
	if n := proposalCount(t, gw, sb); n != 0 {
		t.Errorf("a refused proposal was stored: %d proposals", n)
	}
	stdout, stderr, code = cliAgainst(t, gw, sb, "proposals", "list")
	if code != exitOK || len(lines(stdout)) != 1 {
		t.Errorf("proposals list after a refusal: exit %d, stderr %s; want the header alone:\n%s", code, stderr, stdout)
	}
	// A proposal file that does not parse is invalid input too.
	bad := writeFile(t, "bad.yaml", "rationale: x\noperations: [ { add_rule: { colour: red } } ]\n")
	if _, stderr, code := cliAgainst(t, gw, sb, "propose", "-f", bad); code != exitInvalid {
		t.Errorf("unparsable proposal: exit %d, stderr %s; want 2", code, stderr)
	}
}

// TestSandboxBoundaryAndCredentials: an admin sets and clears a boundary
// and edits the credentialed hosts; sandbox get shows both.
func TestSandboxBoundaryAndCredentials(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	sb := createSandbox(t, gw, "orders")

	get := func() string {
		t.Helper()
		stdout, stderr, code := cliAgainst(t, gw, admin, "sandbox", "get", "orders")
		if code != exitOK {
			t.Fatalf("sandbox get: exit %d, stderr %s", code, stderr)
		}
		return stdout
	}
	field := func(out, key string) string {
		t.Helper()
		for _, l := range lines(out) {
			if k, v, ok := strings.Cut(l, ":"); ok && k == key {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("no %q line in:\n%s", key, out)
		return ""
	}

	if b := field(get(), "boundary"); b != "none" {
		t.Errorf("boundary before any is set: %q, want none", b)
	}
	set := jsonOut(t, gw, admin, "sandbox", "set-boundary", "orders", "-f", ordersExample)
	hash, _ := set["boundary_hash"].(string)
	if len(hash) != 64 || set["boundary"] == nil || set["name"] != "orders" {
		t.Fatalf("set-boundary -o json = %v; want the sandbox with its boundary and hash", set)
	}
	if b := field(get(), "boundary"); b != hash {
		t.Errorf("sandbox get boundary = %q, want %s", b, hash)
	}
	// From stdin, the same document: the same hash, in the text output.
	doc, err := os.ReadFile(ordersExample)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLIWith(t, cliInput{stdin: string(doc)}, "--gateway", gw.URL, "--token", admin, "sandbox", "set-boundary", "orders", "-f", "-")
	if code != exitOK || field(stdout, "boundary") != hash {
		t.Errorf("set-boundary -f -: exit %d, stderr %s\n%s", code, stderr, stdout)
	}
	// A sandbox token may not set its own boundary.
	if _, stderr, code := cliAgainst(t, gw, sb, "sandbox", "set-boundary", "orders", "--clear"); code != exitNo {
		t.Errorf("sandbox token clearing its boundary: exit %d, stderr %s; want 1", code, stderr)
	}
	// An invalid document: exit 2, the boundary kept.
	invalid := writeFile(t, "invalid.yaml", "version: 1\nnetwork_policies: { x: { colour: red } }\n")
	if _, stderr, code := cliAgainst(t, gw, admin, "sandbox", "set-boundary", "orders", "-f", invalid); code != exitInvalid {
		t.Errorf("invalid boundary: exit %d, stderr %s; want 2", code, stderr)
	}
	if b := field(get(), "boundary"); b != hash {
		t.Errorf("after an invalid boundary the boundary is %q, want %s", b, hash)
	}
	stdout, stderr, code = cliAgainst(t, gw, admin, "sandbox", "set-boundary", "orders", "--clear")
	if code != exitOK || field(stdout, "boundary") != "none" {
		t.Errorf("--clear: exit %d, stderr %s\n%s", code, stderr, stdout)
	}
	if b := field(get(), "boundary"); b != "none" {
		t.Errorf("after --clear the boundary is %q, want none", b)
	}
	if s := jsonOut(t, gw, admin, "sandbox", "get", "orders"); s["boundary"] != nil || s["boundary_hash"] != nil {
		t.Errorf("after --clear get -o json = %v; want no boundary", s)
	}

	// Credentialed hosts: added in any case, stored lower-case, sorted.
	if c := field(get(), "credentialed"); c != "none" {
		t.Errorf("credentialed before any: %q, want none", c)
	}
	stdout, stderr, code = cliAgainst(t, gw, admin, "sandbox", "credentials", "orders", "--add", "Ship.Example.COM:443", "--add", "api.example.com:443")
	if code != exitOK || !strings.Contains(stdout, "  api.example.com:443\n  ship.example.com:443\n") {
		t.Errorf("credentials --add: exit %d, stderr %s\n%s", code, stderr, stdout)
	}
	if c := field(get(), "credentialed"); c != "api.example.com:443, ship.example.com:443" {
		t.Errorf("sandbox get credentialed = %q", c)
	}
	// A bad one among good ones: exit 2, nothing stored.
	_, stderr, code = cliAgainst(t, gw, admin, "sandbox", "credentials", "orders", "--add", "new.example.com:443", "--add", "bad")
	if code != exitInvalid || !strings.Contains(stderr, "add[1]") {
		t.Errorf("credentials --add bad: exit %d, stderr %s; want 2 naming add[1]", code, stderr)
	}
	s := jsonOut(t, gw, admin, "sandbox", "credentials", "orders", "--remove", "API.example.com:443", "--remove", "absent.example.com:443")
	hosts, _ := s["credentialed_hosts"].([]any)
	if len(hosts) != 1 || hosts[0] != "ship.example.com:443" {
		t.Errorf("after --remove: credentialed_hosts = %v; want [ship.example.com:443] (nothing from the refused add)", s["credentialed_hosts"])
	}
	stdout, stderr, code = cliAgainst(t, gw, admin, "sandbox", "credentials", "orders", "--remove", "ship.example.com:443")
	if code != exitOK || stdout != "sandbox orders has no credentialed hosts\n" {
		t.Errorf("removing the last: exit %d, stderr %s\n%s", code, stderr, stdout)
	}
	if _, stderr, code := cliAgainst(t, gw, admin, "sandbox", "credentials", "nosuch", "--add", "a.example.com:443"); code != exitNo {
		t.Errorf("credentials of an unknown sandbox: exit %d, stderr %s; want 1", code, stderr)
	}
}

// TestProposeFromDenial: a denial the proxy shipped becomes the narrowest
// proposal that allows it, filed like a proposal file.
func TestProposeFromDenial(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	sb := createSandbox(t, gw, "orders")
	shipRecords(t, gw, sb, &portcullisv1.DecisionRecord{
		Time: timestamppb.New(logsT0), Decision: "deny", Binary: "/usr/bin/python3",
		Host: "demo-mcp", Port: 8081, HttpMethod: "POST", Path: "/mcp",
		McpMethod: "tools/call", Tool: "track_shipment", Entry: "orders",
		Reason: "tools/call track_shipment is not allowed", PolicyVersion: "1", DenialId: "dn_0123456789abcdef",
	})
	p := jsonOut(t, gw, sb, "propose", "--from-denial", "dn_0123456789abcdef",
		"--rationale", "support agents must track shipments", "--idempotency-key", "denial-1")
	findings, _ := p["findings"].([]any)
	if p["status"] != "pending" || p["denial_id"] != "dn_0123456789abcdef" || p["rationale"] != "support agents must track shipments" ||
		p["idempotency_key"] != "denial-1" || len(findings) == 0 || findings[0].(map[string]any)["kind"] != "new_mcp_tool" {
		t.Errorf("propose --from-denial = %v; want pending with the denial, rationale, key and a new_mcp_tool finding", p)
	}
	again := jsonOut(t, gw, sb, "propose", "--from-denial", "dn_0123456789abcdef", "--rationale", "again", "--idempotency-key", "denial-1")
	if again["id"] != p["id"] {
		t.Errorf("the same idempotency key: id %v, want %v", again["id"], p["id"])
	}
}
