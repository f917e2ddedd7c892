package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// trackAndShip is the article's proposal (trackShipment: the
// track_shipment tool on the orders MCP endpoint, credentialed in these
// tests) with its rationale on two lines and a second operation: a new
// entry for python3 to the carrier.
var trackAndShip = "rationale: |-\n  support agents must track shipments\n  for open orders\n" +
	trackShipment[strings.Index(trackShipment, "operations:"):] +
	`  - add_rule: { name: shipping, rule: { endpoints: [ { host: ship.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: "/v1/shipments/x" } } ] } ], binaries: [ { path: /usr/bin/python3 } ] } }
`

// proposeSandbox creates the sandbox orders on the article's policy, with
// demo-mcp:8081 credentialed, and returns its token.
func proposeSandbox(t *testing.T, g *testGateway) string {
	t.Helper()
	sb := g.json(t, gatewaytest.AdminToken, "sandbox", "create", "orders", "-f", ordersExample)["token"].(string)
	g.must(t, gatewaytest.AdminToken, "sandbox", "credentials", "orders", "--add", "demo-mcp:8081")
	return sb
}

// mcpDenial is a tools/call of tool on demo-mcp that a proxy denied.
func mcpDenial(id, tool string) *portcullisv1.DecisionRecord {
	return &portcullisv1.DecisionRecord{
		Time: timestamppb.New(logsT0), Decision: "deny", Binary: "/usr/bin/python3",
		Host: "demo-mcp", Port: 8081, HttpMethod: "POST", Path: "/mcp",
		McpMethod: "tools/call", Tool: tool, Entry: "orders",
		Reason: "tools/call " + tool + " is not allowed", PolicyVersion: "1", DenialId: id,
	}
}

// addTool is a proposal of one more tool on demo-mcp.
func addTool(tool string) string {
	return "rationale: " + tool + "\noperations:\n  - add_allow_rules: { policy: orders, host: demo-mcp, port: 8081, rules: [ { allow: { method: tools/call, tool: " + tool + " } } ] }\n"
}

func TestPropose(t *testing.T) {
	g := startGateway(t)
	sb := proposeSandbox(t, g)
	base := g.json(t, gatewaytest.AdminToken, "policy", "get", "orders")
	g.took()

	t.Run("file sent unchanged", func(t *testing.T) {
		stdout, stderr, code := g.cliWith(t, cliInput{stdin: trackAndShip}, sb, "propose", "-f", "-")
		ok(t, code, stderr)
		if c := g.took(); len(c) != 1 || c[0].auth != "Bearer "+sb {
			t.Errorf("calls %v; want one with the sandbox's bearer token", c)
		}
		id := field(t, stdout, "id")
		p := g.json(t, sb, "proposals", "show", id)
		if p["rationale"] != "support agents must track shipments\nfor open orders" || p["denial_id"] != nil || len(p["changes"].([]any)) != 2 {
			t.Errorf("stored proposal = %v; want the document as given", p)
		}
		for _, want := range []string{
			"status:", "pending", "base version:", "1 (sha256 " + short(base["hash"]) + ")",
			"resulting hash:", p["resulting_hash"].(string),
			"findings (2):",
			"new_mcp_tool [credentialed]  entry orders endpoint demo-mcp:8081/mcp rule rules[5]", // appended after the five of version 1
			"tools/call track_shipment was not allowed",
			"request: any binary → demo-mcp:8081 POST /mcp mcp tools/call track_shipment\n",
			"new_reach  entry shipping endpoint ship.example.com:443",
			"request: /usr/bin/python3 → ship.example.com:443 GET /v1/shipments/x\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout does not contain %q:\n%s", want, stdout)
			}
		}
		if strings.Contains(stdout, "deduplicated") || strings.Contains(stdout, "rationale") {
			t.Errorf("propose printed what only show or a duplicate prints:\n%s", stdout)
		}
	})

	t.Run("deduplicated", func(t *testing.T) {
		stdout, stderr, code := g.cliWith(t, cliInput{stdin: trackAndShip}, sb, "propose", "-f", "-")
		ok(t, code, stderr)
		if !strings.Contains(stdout, "deduplicated: an identical proposal is already pending") {
			t.Errorf("stdout does not say deduplicated:\n%s", stdout)
		}
	})

	shipRecords(t, g.Gateway, sb, mcpDenial("dn_0123456789abcdef", "cancel_order"))

	t.Run("from denial", func(t *testing.T) {
		_, stderr, code := g.cli(t, sb, "propose", "--from-denial", "dn_0123456789abcdef", "--rationale", "needed", "--idempotency-key", "k1")
		ok(t, code, stderr)
		ps, _ := g.json(t, sb, "proposals", "list", "--status", "pending")["proposals"].([]any)
		var found []any
		for _, p := range ps {
			if p := p.(map[string]any); p["denial_id"] == "dn_0123456789abcdef" && p["rationale"] == "needed" && p["idempotency_key"] == "k1" {
				found = append(found, p)
			}
		}
		if len(found) != 1 {
			t.Errorf("pending = %v; want one proposal of the denial with its rationale and key", ps)
		}
	})

	t.Run("json", func(t *testing.T) {
		// The same key: the same proposal, as JSON.
		m := g.json(t, sb, "propose", "--from-denial", "dn_0123456789abcdef", "--rationale", "needed", "--idempotency-key", "k1")
		hasKeys(t, m, "id", "status", "base_version", "resulting_hash", "findings", "created_at")
		findings := m["findings"].([]any)
		first := findings[0].(map[string]any)
		if first["kind"] != "new_mcp_tool" || first["counterexample"].(map[string]any)["mcp_method"] != "tools/call" {
			t.Errorf("findings[0] = %v", first)
		}
	})

	t.Run("refused", func(t *testing.T) {
		shipRecords(t, g.Gateway, sb, &portcullisv1.DecisionRecord{
			Time: timestamppb.New(logsT0), Decision: "deny", Binary: "/usr/bin/python3",
			Host: "bad_host!", Port: 443, HttpMethod: "GET", Path: "/", Reason: "no entry", PolicyVersion: "1",
			DenialId: "dn_00000000000000ff",
		})
		for _, tt := range []struct {
			args, want []string // want: the refusal line's start and end
			stdin      string
		}{
			{[]string{"-f", "-"}, []string{`refused: operations[0].add_rule.rule.endpoints[0].host: "*.github.io": github.io is a public suffix`, "(rule public_suffix_wildcard)"},
				"rationale: x\noperations:\n  - add_rule:\n      name: gh\n      rule: { endpoints: [ { host: \"*.github.io\", port: 443 } ], binaries: [ { path: /usr/bin/curl } ] }\n"},
			{[]string{"-f", "-"}, []string{"refused: operations[1].add_allow_rules: would change nothing: tools/list is already allowed", "(rule changes_nothing)"},
				addTool("a1") + "  - add_allow_rules: { policy: orders, host: demo-mcp, port: 8081, rules: [ { allow: { method: tools/list } } ] }\n"},
			// A refusal of the proposal as a whole names no operation.
			{[]string{"--from-denial", "dn_00000000000000ff"}, []string{`refused: host: the denied host "bad_host!" is not a host name`, "(rule invalid_host)"}, ""},
		} {
			stdout, stderr, code := g.cliWith(t, cliInput{stdin: tt.stdin}, sb, append([]string{"propose"}, tt.args...)...)
			line, _, _ := strings.Cut(strings.TrimPrefix(stderr, "error: "), "\n")
			if code != exitInvalid || !strings.HasPrefix(line, tt.want[0]) || !strings.HasSuffix(line, tt.want[1]) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q … %q", code, stdout, stderr, tt.want[0], tt.want[1])
			}
		}
	})

	t.Run("invalid document without refusal detail", func(t *testing.T) {
		doc := "rationale: x\noperations:\n  - add_rule:\n      name: gh\n      colour: red\n      rule: { endpoints: [ { host: api.github.com, port: 443 } ], binaries: [ { path: /usr/bin/curl } ] }\n"
		_, stderr, code := g.cliWith(t, cliInput{stdin: doc}, sb, "propose", "-f", "-")
		if code != exitInvalid || !strings.Contains(stderr, "error: invalid proposal:") || !strings.Contains(stderr, "operations[0].add_rule.colour: unknown field") {
			t.Errorf("exit %d, stderr %q; want 2 with the gateway's message", code, stderr)
		}
	})
}

func TestProposeRateLimited(t *testing.T) {
	g := startGateway(t, func(c *gateway.Config) { c.ProposalRateMax, c.ProposalRateWindow = 1, 42*time.Second })
	sb := proposeSandbox(t, g)
	g.must(t, sb, "propose", "-f", writeFile(t, "a.yaml", addTool("a1")))
	_, stderr, code := g.cli(t, sb, "propose", "-f", writeFile(t, "b.yaml", "rationale: b\noperations:\n  - add_allow_rules: { policy: orders, host: demo-mcp, port: 8081, rules: [ { allow: { method: ping } } ] }\n"))
	m := regexp.MustCompile(`rate limited: retry in (\d+) s`).FindStringSubmatch(stderr)
	if code != exitNo || m == nil {
		t.Fatalf("exit %d, stderr %q; want 1 and the wait", code, stderr)
	}
	if s, _ := strconv.Atoi(m[1]); s < 1 || s > 42 {
		t.Errorf("retry in %d s; want the rest of the 42 s window", s)
	}
}

// TestProposalsSandboxCommands: the sandbox's own queue, as its token
// sees it through AdvisorService.
func TestProposalsSandboxCommands(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	sb := proposeSandbox(t, g)
	superseded := field(t, g.must(t, sb, "propose", "-f", writeFile(t, "a.yaml", addTool("a1"))), "id")
	withdrawn := field(t, g.must(t, sb, "propose", "-f", writeFile(t, "b.yaml", addTool("a2"))), "id")
	g.must(t, sb, "proposals", "withdraw", withdrawn, "--reason", "moved on")
	id := field(t, g.mustWith(t, cliInput{stdin: trackAndShip}, sb, "propose", "-f", "-"), "id")
	created := secondsOf(t, g.json(t, sb, "proposals", "show", id)["created_at"])

	t.Run("list", func(t *testing.T) {
		stdout := g.must(t, sb, "proposals", "list", "--status", "pending")
		ls := lines(stdout)
		if len(ls) != 2 || !strings.HasPrefix(ls[0], "ID") {
			t.Fatalf("want a header and one row:\n%s", stdout)
		}
		for _, want := range []string{id, "pending", created, "2 (new_mcp_tool, new_reach)", "support agents must track shipments for open or…"} {
			if !strings.Contains(ls[1], want) {
				t.Errorf("row does not contain %q: %s", want, ls[1])
			}
		}
	})

	t.Run("list json", func(t *testing.T) {
		if ps, _ := g.json(t, sb, "proposals", "list")["proposals"].([]any); len(ps) != 3 {
			t.Errorf("proposals = %v", ps)
		}
	})

	t.Run("show", func(t *testing.T) {
		stdout := g.must(t, sb, "proposals", "show", id)
		containsAll(t, "show", stdout,
			"rationale:", "support agents must track shipments for open orders",
			"proposer:", "sandbox-orders-",
			"changes (2):", "+ network_policies.orders.endpoints[demo-mcp:8081/mcp].rules: added tool track_shipment (tools/call)",
			"request: any binary → demo-mcp:8081 POST /mcp mcp tools/call track_shipment",
		)
		if got := field(t, g.must(t, sb, "proposals", "show", withdrawn), "status reason"); got != "moved on" {
			t.Errorf("status reason %q, want moved on", got)
		}
		if got := field(t, g.must(t, sb, "proposals", "show", superseded), "superseded by"); got != withdrawn {
			t.Errorf("superseded by %q, want %s", got, withdrawn)
		}
		// The base moves under the pending proposal to a version without
		// the endpoint it extends: it cannot be re-based.
		moved := strings.Replace(string(mustReadFile(t, ordersExample)), "port: 8081", "port: 8082", 1)
		g.mustWith(t, cliInput{stdin: moved}, admin, "policy", "set", "orders", "-f", "-")
		if got := field(t, g.must(t, sb, "proposals", "show", id), "rebase error"); !strings.Contains(got, "no longer applies to version 2") {
			t.Errorf("rebase error %q", got)
		}
	})

	t.Run("withdraw", func(t *testing.T) {
		stdout := g.must(t, sb, "proposals", "withdraw", id, "--reason", "wrong host")
		if stdout != "proposal "+id+" withdrawn\n" {
			t.Errorf("stdout = %q", stdout)
		}
		if p := g.json(t, sb, "proposals", "show", id); p["status"] != "withdrawn" || p["status_reason"] != "wrong host" {
			t.Errorf("after withdraw: %v", p)
		}
	})

	t.Run("exit codes", func(t *testing.T) {
		for _, tt := range []struct {
			token, id, msg string
			want           int
		}{
			{sb, "999", "proposal 999 not found", exitNo},
			{sb, id, "proposal " + id + " is withdrawn: only a pending proposal can be withdrawn", exitConflict},
			{admin, id, "an admin token cannot withdraw proposals (only the proposing sandbox may)", exitNo},
		} {
			_, stderr, code := g.cli(t, tt.token, "proposals", "withdraw", tt.id)
			if code != tt.want || !strings.Contains(stderr, tt.msg) {
				t.Errorf("withdraw %s: exit %d, stderr %q; want %d and %q", tt.id, code, stderr, tt.want, tt.msg)
			}
		}
	})
}

func TestProposeUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"propose"}, "needs -f FILE or --from-denial ID"},
		{[]string{"propose", "-f", "p.yaml", "--from-denial", "dn_1"}, "not both"},
		{[]string{"propose", "-f", "p.yaml", "--rationale", "r"}, "--rationale goes with --from-denial"},
		{[]string{"propose", "-f", "p.yaml", "--idempotency-key", "k"}, "--idempotency-key goes with --from-denial"},
		{[]string{"propose", "extra", "--from-denial", "dn_1"}, `unexpected argument "extra"`},
		{[]string{"propose", "-f", "testdata/does-not-exist.yaml"}, "no such file"},
		{[]string{"proposals", "bogus"}, `unknown command "bogus"`},
		{[]string{"proposals", "show"}, "needs ID"},
		{[]string{"proposals", "show", "0"}, "ID must be a proposal id"},
		{[]string{"proposals", "show", "x7"}, "ID must be a proposal id"},
		{[]string{"proposals", "withdraw", "-3"}, "unknown shorthand flag"},
		{[]string{"proposals", "list", "--status", "open"}, "--status must be one of"},
		{[]string{"proposals", "approve", "7"}, "needs --reason"},
		{[]string{"proposals", "approve", "7", "--reason", " "}, "needs --reason"},
		{[]string{"proposals", "approve", "7", "--reason", "r", "--hash", ""}, "--hash is empty"},
		{[]string{"proposals", "approve", "7", "--reason", "r", "-o", "json"}, "give --hash H"},
		{[]string{"proposals", "approve", "7", "--reason", "r", "--until", "soon"}, "--until must be an RFC 3339 time or a duration"},
		{[]string{"proposals", "approve", "7", "--reason", "r", "--until", "-1h"}, "--until must be in the future"},
		{[]string{"proposals", "approve", "7", "--reason", "r", "--until", "2001-01-01T00:00:00Z"}, "is in the past"},
		{[]string{"proposals", "approve", "x", "--reason", "r"}, "ID must be a proposal id"},
		{[]string{"proposals", "reject", "7"}, "needs --reason"},
		{[]string{"proposals", "list", "--finding", "new_everything"}, "--finding must be one of"},
		{[]string{"proposals", "list", "--sandbox", ""}, "--sandbox is empty"},
		{[]string{"approval-policy", "set"}, "needs -f FILE"},
		{[]string{"approval-policy", "set", "-f", "testdata/does-not-exist.rego"}, "no such file"},
		{[]string{"approval-policy", "get", "extra"}, `unexpected argument "extra"`},
		{[]string{"sandbox", "freeze", "orders"}, "needs --reason"},
		{[]string{"sandbox", "unfreeze", "orders"}, "needs --reason"},
		{[]string{"sandbox", "freeze"}, "needs NAME"},
		{[]string{"sandbox", "set-boundary", "orders"}, "needs -f FILE or --clear"},
		{[]string{"sandbox", "set-boundary", "orders", "-f", "b.yaml", "--clear"}, "not both"},
		{[]string{"sandbox", "credentials", "orders"}, "needs --add HOST:PORT or --remove HOST:PORT"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			// No gateway listens there: a usage error must come first.
			stdout, stderr, code := runCLI(t, append(tt.args, "--gateway", "http://127.0.0.1:1")...)
			if code != exitInvalid || !strings.Contains(stderr, "error: ") || !strings.Contains(stderr, tt.want) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 saying %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

func TestSetBoundaryEmptyFile(t *testing.T) {
	stdout, stderr, code := runCLIWith(t, cliInput{stdin: "\n  \n"}, "--gateway", "http://127.0.0.1:1", "sandbox", "set-boundary", "orders", "-f", "-")
	if code != exitInvalid || !strings.Contains(stderr, "use --clear") || stdout != "" {
		t.Errorf("empty boundary: exit %d, stderr %q; want 2 pointing at --clear", code, stderr)
	}
}
