package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// approvalRules needs required approvers for a proposal with a finding on
// a credentialed destination, one otherwise, and asks for auto-approval
// (which a blocking finding overrides, with a note for the approvers).
func approvalRules(required int) string {
	return fmt.Sprintf(`package portcullis.approval

default approvals_required := 1

approvals_required := %d if {
	some f in input.findings
	f.credentialed
}

auto_approve := true
`, required)
}

// autoApprovalNote is the note the gateway adds under approvalRules to a
// proposal with a new MCP tool.
const autoApprovalNote = "no auto-approval: the prover found new_mcp_tool, which always needs a human"

// queue is the decision side of a real gateway with one reviewed
// proposal: track_shipment on the sandbox orders (demo-mcp credentialed),
// approved by carol before its base moved, so her approval no longer
// counts. An earlier proposal of the sandbox was withdrawn.
type queue struct {
	g                *testGateway
	sb, olive, carol string
	id               string // the track_shipment proposal
	hash, stale      string // its resulting hash now, and when carol approved
	withdrawn        string // the withdrawn proposal
}

// trackChange and trackRequest are how show prints the track_shipment
// proposal's change and finding.
const (
	trackChange  = "+ network_policies.orders.endpoints[demo-mcp:8081/mcp].rules: added tool track_shipment (tools/call)"
	trackRequest = "request: any binary → demo-mcp:8081 POST /mcp mcp tools/call track_shipment"
)

// newQueue builds a queue under approvalRules(required); with olive, olive
// approves the re-based proposal too ("narrow,\nticket 8812").
func newQueue(t *testing.T, required int, olive bool, configure ...func(*gateway.Config)) *queue {
	t.Helper()
	admin := gatewaytest.AdminToken
	g := startGateway(t, configure...)
	q := &queue{g: g, sb: proposeSandbox(t, g)}
	q.olive = g.json(t, admin, "token", "create", "--role", "operator", "--name", "olive")["token"].(string)
	q.carol = g.json(t, admin, "token", "create", "--role", "operator", "--name", "carol")["token"].(string)
	g.must(t, admin, "approval-policy", "set", "-f", writeFile(t, "rules.rego", approvalRules(required)))

	q.withdrawn = fmt.Sprint(g.json(t, q.sb, "propose", "-f", writeFile(t, "x1.yaml", addTool("x1")))["id"])
	g.must(t, q.sb, "proposals", "withdraw", q.withdrawn)
	p := g.json(t, q.sb, "propose", "-f", writeFile(t, "track.yaml", trackShipment))
	q.id, q.stale = fmt.Sprint(p["id"]), p["resulting_hash"].(string)
	g.must(t, q.carol, "proposals", "approve", q.id, "--reason", "saw the old one")
	// An unrelated change moves the base: the proposal is re-based.
	cur := g.must(t, admin, "policy", "get", "orders", "-o", "yaml")
	g.mustWith(t, cliInput{stdin: strings.Replace(cur, "tools/list", "ping", 1)}, admin, "policy", "set", "orders", "-f", "-")
	q.hash = g.json(t, q.olive, "proposals", "show", q.id)["resulting_hash"].(string)
	if q.hash == q.stale {
		t.Fatal("the proposal was not re-based")
	}
	if olive {
		g.must(t, q.olive, "proposals", "approve", q.id, "--reason", "narrow,\nticket 8812")
	}
	g.took()
	return q
}

// approvalLine is how show lists the approval of approver: its time from
// the JSON view.
func (q *queue) approvalLine(t *testing.T, approver string) string {
	t.Helper()
	as, _ := q.g.json(t, q.olive, "proposals", "show", q.id)["approvals"].([]any)
	for _, a := range as {
		if a := a.(map[string]any); a["approver"] == approver {
			return "  " + approver + "  " + secondsOf(t, a["time"]) + "  "
		}
	}
	t.Fatalf("no approval by %s in %v", approver, as)
	return ""
}

func containsAll(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s does not contain %q:\n%s", what, want, out)
		}
	}
}

func TestProposalsOperatorView(t *testing.T) {
	q := newQueue(t, 2, true)
	g, admin := q.g, gatewaytest.AdminToken
	// What the filters leave out: another sandbox's pending new_mcp_tool,
	// a pending proposal of orders without one, and (in the queue) a
	// withdrawn one of orders with one.
	other := g.json(t, admin, "sandbox", "create", "other", "-f", ordersExample)["token"].(string)
	g.must(t, other, "propose", "-f", writeFile(t, "track.yaml", trackShipment))
	g.must(t, q.sb, "propose", "-f", writeFile(t, "ship.yaml", shippingRule))
	g.took()

	t.Run("list", func(t *testing.T) {
		stdout := g.must(t, q.olive, "proposals", "list", "--status", "pending", "--sandbox", "orders", "--finding", "new_mcp_tool")
		calls := g.took()
		if methods(calls) != "ApprovalService.ListProposals" {
			t.Fatalf("calls %s, want ApprovalService alone", methods(calls))
		}
		if calls[0].auth != "Bearer "+q.olive {
			t.Errorf("Authorization %q", calls[0].auth)
		}
		ls := lines(stdout)
		if len(ls) != 2 || strings.Join(strings.Fields(ls[0]), " ") != "ID SANDBOX STATUS APPROVALS CREATED FINDINGS RATIONALE" {
			t.Fatalf("want the operator's header and one row:\n%s", stdout)
		}
		// One of the two approvals is of an earlier hash: it does not count.
		if got := strings.Fields(ls[1]); len(got) < 5 || got[0] != q.id || got[1] != "orders" || got[2] != "pending" || got[3] != "1/2" {
			t.Errorf("row = %q; want id, sandbox, status, approvals 1/2", ls[1])
		}
	})

	t.Run("show", func(t *testing.T) {
		stdout := g.must(t, q.olive, "proposals", "show", q.id)
		if m := methods(g.took()); m != "ApprovalService.GetProposal" {
			t.Fatalf("calls %s", m)
		}
		containsAll(t, "show", stdout,
			"changes (1):", trackChange, trackRequest,
			"approvals: 1 of 2 needed\n",
			q.approvalLine(t, "olive")+"narrow, ticket 8812\n",
			q.approvalLine(t, "carol")+"saw the old one  (of an earlier resulting hash "+short(q.stale)+": does not count)\n",
			"approval notes:\n  "+autoApprovalNote+"\n",
		)
		// The gateway's clock stands at t0: proposals expire a day later.
		if field(t, stdout, "auto-approvable") != "no" || field(t, stdout, "expires") != "2026-01-03T03:04:05Z" || field(t, stdout, "grant ends") != "never" {
			t.Errorf("decision fields wrong:\n%s", stdout)
		}
		if strings.Contains(stdout, "decided by") || strings.Contains(stdout, "applied version") {
			t.Errorf("a pending proposal shows a decision:\n%s", stdout)
		}
	})

	t.Run("show json", func(t *testing.T) {
		m := g.json(t, q.olive, "proposals", "show", q.id)
		hasKeys(t, m, "id", "sandbox", "resulting_hash", "approvals", "approvals_required", "approval_notes", "expires_at")
	})

	t.Run("show applied", func(t *testing.T) {
		g.must(t, admin, "proposals", "approve", q.id, "--reason", "ok", "--until", "2099-01-02T11:04:05Z")
		stdout := g.must(t, q.olive, "proposals", "show", q.id)
		decided := secondsOf(t, g.json(t, q.olive, "proposals", "show", q.id)["decided_at"])
		for k, want := range map[string]string{
			"applied version": "3", "decided by": "admin", "decided at": decided, "grant ends": "2099-01-02T11:04:05Z",
		} {
			if got := field(t, stdout, k); got != want {
				t.Errorf("%s: %q, want %q", k, got, want)
			}
		}
		if strings.Contains(stdout, "expires:") {
			t.Errorf("an applied proposal shows when it would have expired:\n%s", stdout)
		}
	})
}

func TestProposalsSandboxFallback(t *testing.T) {
	q := newQueue(t, 2, true)
	g := q.g

	t.Run("list", func(t *testing.T) {
		stdout := g.must(t, q.sb, "proposals", "list", "--status", "pending")
		if m := methods(g.took()); m != "ApprovalService.ListProposals,AdvisorService.ListProposals" {
			t.Fatalf("calls %s; want ApprovalService refused, then AdvisorService", m)
		}
		// The status went to AdvisorService: the withdrawn one is not listed.
		ls := lines(stdout)
		if len(ls) != 2 || strings.Contains(ls[0], "SANDBOX") || !strings.HasPrefix(ls[1], q.id+" ") {
			t.Errorf("want the sandbox's table, without a sandbox column:\n%s", stdout)
		}
	})

	t.Run("list filters", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			rows int
		}{
			{[]string{"--finding", "new_mcp_tool"}, 2},
			{[]string{"--finding", "private_network"}, 0},
			{[]string{"--sandbox", "orders"}, 2},
			{[]string{"--sandbox", "other"}, 0},
		} {
			stdout := g.must(t, q.sb, append([]string{"proposals", "list"}, tt.args...)...)
			if n := len(lines(stdout)) - 1; n != tt.rows {
				t.Errorf("%v: %d rows, want %d:\n%s", tt.args, n, tt.rows, stdout)
			}
		}
	})

	t.Run("show", func(t *testing.T) {
		g.took()
		stdout := g.must(t, q.sb, "proposals", "show", q.id)
		if m := methods(g.took()); m != "ApprovalService.GetProposal,AdvisorService.GetProposal" {
			t.Fatalf("calls %s", m)
		}
		containsAll(t, "show", stdout, "approvals: 2\n", "  olive  ", "changes (1):")
		if strings.Contains(stdout, "needed") || strings.Contains(stdout, "auto-approvable") {
			t.Errorf("the sandbox's view shows a quorum it was not sent:\n%s", stdout)
		}
	})

	t.Run("other refusals are not a fallback", func(t *testing.T) {
		rita := g.json(t, gatewaytest.AdminToken, "token", "create", "--role", "operator", "--name", "rita")["token"].(string)
		g.must(t, gatewaytest.AdminToken, "token", "revoke", "rita")
		g.took()
		_, stderr, code := g.cli(t, rita, "proposals", "show", q.id)
		if m := methods(g.took()); m != "ApprovalService.GetProposal" || code != exitNo || !strings.Contains(stderr, "token revoked") {
			t.Errorf("calls %s, exit %d, stderr %q; want one call and exit 1", m, code, stderr)
		}
	})

	t.Run("approve is never a fallback", func(t *testing.T) {
		stdout, stderr, code := g.cli(t, q.sb, "proposals", "approve", q.id, "--reason", "mine")
		if m := methods(g.took()); m != "ApprovalService.GetProposal" || code != exitNo || stdout != "" || !strings.Contains(stderr, "error: ") {
			t.Errorf("calls %s, exit %d, stdout %q, stderr %q; want refused at the first call, exit 1", m, code, stdout, stderr)
		}
	})
}

// lastApproval is the newest approval of the queue's proposal.
func (q *queue) lastApproval(t *testing.T) map[string]any {
	t.Helper()
	p := q.g.json(t, q.olive, "proposals", "show", q.id)
	as, _ := p["approvals"].([]any)
	if len(as) == 0 {
		t.Fatalf("no approvals: %v", p)
	}
	return as[len(as)-1].(map[string]any)
}

func TestProposalsApprove(t *testing.T) {
	admin := gatewaytest.AdminToken

	t.Run("shows then approves what it showed", func(t *testing.T) {
		q := newQueue(t, 2, false)
		stdout, stderr, code := q.g.cli(t, admin, "proposals", "approve", q.id, "--reason", "narrow; ticket 8812")
		ok(t, code, stderr)
		if m := methods(q.g.took()); m != "ApprovalService.GetProposal,ApprovalService.ApproveProposal" {
			t.Fatalf("calls %s", m)
		}
		if a := q.lastApproval(t); a["approver"] != "admin" || a["reason"] != "narrow; ticket 8812" || a["resulting_hash"] != q.hash {
			t.Errorf("approval = %v; want admin's, of the hash shown", a)
		}
		if p := q.g.json(t, admin, "proposals", "show", q.id); p["grant_expires_at"] != nil {
			t.Errorf("a grant end without --until: %v", p["grant_expires_at"])
		}
		containsAll(t, "approve", stdout,
			"resulting hash: "+q.hash, trackChange, "new_mcp_tool [credentialed]", trackRequest, "approvals: 0 of 2 needed",
		)
		outcome := "proposal " + q.id + " approved by you; 1 more approval needed\n"
		if !strings.HasSuffix(stdout, outcome) {
			t.Errorf("stdout does not end with %q:\n%s", outcome, stdout)
		}
		if strings.Index(stdout, "request: ") > strings.Index(stdout, outcome) {
			t.Errorf("the outcome comes before what was approved:\n%s", stdout)
		}
		if stderr != "" {
			t.Errorf("stderr = %q", stderr)
		}
	})

	t.Run("more approvals", func(t *testing.T) {
		q := newQueue(t, 4, false)
		if stdout := q.g.must(t, admin, "proposals", "approve", q.id, "--reason", "ok"); !strings.HasSuffix(stdout, "proposal "+q.id+" approved by you; 3 more approvals needed\n") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("applied", func(t *testing.T) {
		q := newQueue(t, 2, true)
		stdout := q.g.must(t, admin, "proposals", "approve", q.id, "--reason", "ok", "--until", "2099-01-02T11:04:05Z")
		if p := q.g.json(t, admin, "proposals", "show", q.id); p["grant_expires_at"] != "2099-01-02T11:04:05Z" {
			t.Errorf("grant_expires_at = %v", p["grant_expires_at"])
		}
		if !strings.HasSuffix(stdout, "proposal "+q.id+" applied: sandbox orders is at version 3 (the grant ends 2099-01-02T11:04:05Z)\n") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("until a duration", func(t *testing.T) {
		q := newQueue(t, 2, true)
		before := time.Now()
		q.g.must(t, admin, "proposals", "approve", q.id, "--reason", "ok", "--until", "8h")
		end, err := time.Parse(time.RFC3339, q.g.json(t, admin, "proposals", "show", q.id)["grant_expires_at"].(string))
		if err != nil || end.Before(before.Add(8*time.Hour-time.Second)) || end.After(time.Now().Add(8*time.Hour)) {
			t.Errorf("grant_expires_at %v (%v), want 8h from %v", end, err, before)
		}
	})

	t.Run("hash given", func(t *testing.T) {
		q := newQueue(t, 4, false)
		// The hash given is what is sent: an earlier one is a conflict.
		_, stderr, code := q.g.cli(t, admin, "proposals", "approve", q.id, "--reason", "ok", "--hash", q.stale)
		if !strings.Contains(stderr, "warning: --hash "+q.stale+" is not the resulting hash shown above ("+q.hash+")") {
			t.Errorf("stderr = %q; want a warning", stderr)
		}
		if code != exitConflict || !strings.Contains(stderr, "changed since it was shown") {
			t.Errorf("exit %d, stderr %q; want the gateway to refuse the earlier hash", code, stderr)
		}
		_, stderr, code = q.g.cli(t, admin, "proposals", "approve", q.id, "--reason", "ok", "--hash", q.hash)
		ok(t, code, stderr)
		if stderr != "" {
			t.Errorf("the shown hash given: stderr %q", stderr)
		}
		if a := q.lastApproval(t); a["approver"] != "admin" || a["resulting_hash"] != q.hash {
			t.Errorf("approval = %v", a)
		}
	})

	t.Run("json", func(t *testing.T) {
		q := newQueue(t, 4, true)
		m := q.g.json(t, admin, "proposals", "approve", q.id, "--reason", "ci", "--hash", q.hash)
		if calls := methods(q.g.took()); calls != "ApprovalService.ApproveProposal" {
			t.Fatalf("calls %s; want the approval alone", calls)
		}
		if as, _ := m["approvals"].([]any); len(as) != 3 || fmt.Sprint(m["id"]) != q.id {
			t.Errorf("json = %v", m)
		}
	})

	t.Run("exit codes", func(t *testing.T) {
		q := newQueue(t, 2, true)
		g := q.g
		// A new entry for an L4 endpoint: approved alone, it could not
		// end with a grant.
		l4 := fmt.Sprint(g.json(t, q.sb, "propose", "-f", writeFile(t, "l4.yaml", `rationale: reports
operations:
  - add_rule:
      name: reports
      rule: { endpoints: [ { host: reports.example.com, port: 5432 } ], binaries: [ { path: /usr/bin/psql } ] }
`))["id"])
		g.took()
		getApprove := "ApprovalService.GetProposal,ApprovalService.ApproveProposal"
		for _, tt := range []struct {
			name  string
			setup func()
			token string
			args  []string
			msg   string
			want  int
			calls string
		}{
			{"stale hash", nil, admin, []string{q.id, "--hash", q.stale}, "changed since it was shown", exitConflict, getApprove},
			{"twice", nil, q.olive, []string{q.id}, "olive already approved proposal " + q.id + ": another approver is needed", exitConflict, getApprove},
			{"sandbox", nil, q.sb, []string{q.id, "--hash", q.hash, "-o", "json"}, "a sandbox token cannot approve proposals", exitNo, "ApprovalService.ApproveProposal"},
			{"grant refused", nil, admin, []string{l4, "--until", "8h"}, "grant_expires_at: operation 0 adds an endpoint without rules", exitInvalid, getApprove},
			{"not found", nil, admin, []string{"999"}, "proposal 999 not found", exitNo, "ApprovalService.GetProposal"},
			{"frozen", func() { g.must(t, q.olive, "sandbox", "freeze", "orders", "--reason", "incident") }, admin, []string{q.id},
				`sandbox "orders" is frozen (incident): unfreeze it first`, exitConflict, getApprove},
			{"unavailable", g.Stop, admin, []string{q.id}, "error: gateway " + g.url + " unavailable", exitUnavailable, "ApprovalService.GetProposal"},
		} {
			if tt.setup != nil {
				tt.setup()
				g.took()
			}
			stdout, stderr, code := g.cli(t, tt.token, append([]string{"proposals", "approve", "--reason", "ok"}, tt.args...)...)
			if m := methods(g.took()); m != tt.calls {
				t.Errorf("%s: calls %s, want %s", tt.name, m, tt.calls)
			}
			if code != tt.want || !strings.Contains(stderr, "error: ") || !strings.Contains(stderr, tt.msg) {
				t.Errorf("%s: exit %d, stderr %q; want %d with %q", tt.name, code, stderr, tt.want, tt.msg)
			}
			if strings.Contains(stdout, "approved by you") {
				t.Errorf("%s: stdout claims an approval:\n%s", tt.name, stdout)
			}
		}
	})
}

func TestProposalsReject(t *testing.T) {
	q := newQueue(t, 2, false)
	g := q.g
	second := fmt.Sprint(g.json(t, q.sb, "propose", "-f", writeFile(t, "ship.yaml", shippingRule))["id"])
	applied := fmt.Sprint(g.json(t, q.sb, "propose", "-f", writeFile(t, "l4.yaml", "rationale: r\noperations:\n  - add_rule: { name: reports, rule: { endpoints: [ { host: reports.example.com, port: 5432 } ], binaries: [ { path: /usr/bin/psql } ] } }\n"))["id"])
	g.must(t, q.olive, "proposals", "approve", applied, "--reason", "ok")
	g.took()

	stdout := g.must(t, q.olive, "proposals", "reject", q.id, "--reason", "use the carrier's API")
	if m := methods(g.took()); m != "ApprovalService.RejectProposal" {
		t.Fatalf("calls %s", m)
	}
	if p := g.json(t, q.sb, "proposals", "show", q.id); p["status"] != "rejected" || p["status_reason"] != "use the carrier's API" || p["decided_by"] != "olive" {
		t.Errorf("the sandbox sees %v", p)
	}
	if stdout != "proposal "+q.id+" rejected\n" {
		t.Errorf("stdout = %q", stdout)
	}
	if m := g.json(t, q.olive, "proposals", "reject", second, "--reason", "no"); m["status"] != "rejected" || m["status_reason"] != "no" || m["decided_by"] != "olive" {
		t.Errorf("json = %v", m)
	}
	for _, tt := range []struct {
		id, msg string
		want    int
	}{
		{applied, "applied", exitConflict},
		{q.id, "rejected", exitConflict},
		{"999", "proposal 999 not found", exitNo},
	} {
		_, stderr, code := g.cli(t, q.olive, "proposals", "reject", tt.id, "--reason", "no")
		if code != tt.want || !strings.Contains(stderr, tt.msg) {
			t.Errorf("reject %s: exit %d, want %d; stderr %s", tt.id, code, tt.want, stderr)
		}
	}
}

func TestApprovalPolicyCommands(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	olive := g.json(t, admin, "token", "create", "--role", "operator", "--name", "olive")["token"].(string)
	module := "package portcullis.approval\n\ndefault approvals_required := 2\n\ndefault auto_approve := false\n"
	// header is the line get prints to stderr and set to stdout.
	header := func(t *testing.T, version int) string {
		m := g.json(t, olive, "approval-policy", "get")
		return fmt.Sprintf("approval rules version %d (sha256 %s) by admin at %s\n", version, short(m["hash"]), secondsOf(t, m["created_at"]))
	}

	t.Run("get built-in", func(t *testing.T) {
		builtin := g.json(t, olive, "approval-policy", "get")
		stdout, stderr, code := g.cli(t, olive, "approval-policy", "get")
		ok(t, code, stderr)
		if stdout != builtin["module"] || !strings.Contains(stderr, "version 0 (built-in, sha256 "+short(builtin["hash"])+")") {
			t.Errorf("stdout %q, stderr %q", stdout, stderr)
		}
	})

	t.Run("set", func(t *testing.T) {
		g.took()
		stdout := g.must(t, admin, "approval-policy", "set", "-f", writeFile(t, "rules.rego", "# one\n"+module))
		if m := methods(g.took()); m != "ApprovalService.SetApprovalPolicy" {
			t.Fatalf("calls %s", m)
		}
		if stdout != header(t, 1) {
			t.Errorf("stdout = %q", stdout)
		}
		stdout, stderr, code := g.cliWith(t, cliInput{stdin: "# two\n" + module}, admin, "approval-policy", "set", "-f", "-", "-o", "json")
		ok(t, code, stderr)
		if m := decodeJSON(t, stdout); m["version"] != float64(2) || m["module"] != "# two\n"+module {
			t.Errorf("json = %v", m)
		}
		g.must(t, admin, "approval-policy", "set", "-f", writeFile(t, "rules.rego", module))
	})

	t.Run("get prints the module alone", func(t *testing.T) {
		g.took()
		stdout, stderr, code := g.cli(t, olive, "approval-policy", "get")
		ok(t, code, stderr)
		if m := methods(g.took()); m != "ApprovalService.GetApprovalPolicy" {
			t.Fatalf("calls %s", m)
		}
		if stdout != module {
			t.Errorf("stdout = %q, want the module exactly", stdout)
		}
		if want := header(t, 3); stderr != want {
			t.Errorf("stderr = %q, want %q", stderr, want)
		}
	})

	t.Run("get json", func(t *testing.T) {
		m := g.json(t, olive, "approval-policy", "get")
		if h, _ := m["hash"].(string); m["version"] != float64(3) || m["module"] != module || len(h) != 64 {
			t.Errorf("json = %v", m)
		}
	})

	t.Run("set refused", func(t *testing.T) {
		for _, tt := range []struct {
			token, module, msg string
			want               int
		}{
			{admin, "package elsewhere\n", "module: invalid approval rules: package is elsewhere, want portcullis.approval", exitInvalid},
			{olive, module, "an operator token cannot set the approval policy: that takes an admin token", exitNo},
		} {
			stdout, stderr, code := g.cli(t, tt.token, "approval-policy", "set", "-f", writeFile(t, "rules.rego", tt.module))
			if code != tt.want || stdout != "" || !strings.Contains(stderr, "error: "+tt.msg) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", code, stdout, stderr, tt.want, tt.msg)
			}
		}
		if m := g.json(t, olive, "approval-policy", "get"); m["version"] != float64(3) {
			t.Errorf("refused modules changed the rules: %v", m["version"])
		}
	})

	t.Run("set empty file", func(t *testing.T) {
		g.took()
		_, stderr, code := g.cliWith(t, cliInput{stdin: " \n"}, admin, "approval-policy", "set", "-f", "-")
		if code != exitInvalid || !strings.Contains(stderr, "stdin is empty") || len(g.took()) != 0 {
			t.Errorf("exit %d, stderr %q; want 2 without a call", code, stderr)
		}
	})
}

func TestSandboxFreezeCommands(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	g.must(t, admin, "sandbox", "create", "orders", "-f", ordersExample)
	olive := g.json(t, admin, "token", "create", "--role", "operator", "--name", "olive")["token"].(string)

	stdout := g.must(t, olive, "sandbox", "get", "orders")
	if field(t, stdout, "frozen") != "no" || strings.Contains(stdout, "frozen reason") {
		t.Errorf("an unfrozen sandbox:\n%s", stdout)
	}

	g.took()
	stdout = g.must(t, olive, "sandbox", "freeze", "orders", "--reason", "exfiltration suspected")
	if m := methods(g.took()); m != "SandboxService.FreezeSandbox" {
		t.Fatalf("calls %s", m)
	}
	if stdout != "sandbox orders frozen: deny-all is version 2\n" {
		t.Errorf("stdout = %q", stdout)
	}

	stdout = g.must(t, olive, "sandbox", "get", "orders")
	frozenAt := secondsOf(t, g.json(t, olive, "sandbox", "get", "orders")["frozen_at"])
	for k, want := range map[string]string{
		"frozen": "yes", "frozen reason": "exfiltration suspected", "frozen by": "olive", "frozen at": frozenAt, "version": "2",
	} {
		if got := field(t, stdout, k); got != want {
			t.Errorf("sandbox get %s = %q, want %q", k, got, want)
		}
	}

	_, stderr, code := g.cli(t, olive, "sandbox", "freeze", "orders", "--reason", "again")
	if code != exitConflict || !strings.Contains(stderr, "already frozen") {
		t.Errorf("freezing a frozen sandbox: exit %d, stderr %q; want 3", code, stderr)
	}

	m := g.json(t, admin, "sandbox", "unfreeze", "orders", "--reason", "incident closed")
	if m["current_version"] != float64(3) || m["frozen"] != nil {
		t.Errorf("unfreeze json = %v", m)
	}
	if prov, _ := g.json(t, admin, "policy", "get", "orders")["provenance"].(map[string]any); prov["reason"] != "incident closed" {
		t.Errorf("the unfreeze's reason is not on the version it made: %v", prov)
	}
	g.must(t, olive, "sandbox", "freeze", "orders", "--reason", "again")
	if stdout := g.must(t, admin, "sandbox", "unfreeze", "orders", "--reason", "closed"); stdout != "sandbox orders unfrozen: the policy from before the freeze is version 5\n" {
		t.Errorf("stdout = %q", stdout)
	}
}

func TestParseUntil(t *testing.T) {
	now := mustTime("2026-01-02T03:04:05Z")
	for _, tt := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{"8h", now.Add(8 * time.Hour), ""},
		{"90m", now.Add(90 * time.Minute), ""},
		{"7d", now.Add(7 * 24 * time.Hour), ""},
		{"2026-01-03T00:00:00Z", mustTime("2026-01-03T00:00:00Z"), ""},
		{"2026-01-03T01:00:00+01:00", mustTime("2026-01-03T00:00:00Z"), ""},
		{"2026-01-01T00:00:00Z", time.Time{}, "in the past"},
		{"0s", time.Time{}, "in the future"},
		{"-2h", time.Time{}, "in the future"},
		{"0d", time.Time{}, "RFC 3339 time or a duration"},
		{"1.5d", time.Time{}, "RFC 3339 time or a duration"},
		{"tomorrow", time.Time{}, "RFC 3339 time or a duration"},
		{"2026-01-03", time.Time{}, "RFC 3339 time or a duration"},
	} {
		got, err := parseUntil(tt.in, now)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) || exitCode(err) != exitInvalid {
				t.Errorf("%q: err %v, want a usage error saying %q", tt.in, err, tt.err)
			}
		case err != nil || !got.Equal(tt.want):
			t.Errorf("%q = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// field is the value of a "key: value" line.
func field(t *testing.T, out, key string) string {
	t.Helper()
	for _, l := range lines(out) {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	t.Errorf("no %q line in:\n%s", key, out)
	return ""
}
