package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// refundsPolicy holds every refund for a person.
const refundsPolicy = `version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
          - allow: { method: tools/call, tool: refund, review: { required: true, timeout: 5m } }
    binaries: [ { path: /usr/bin/python3 } ]
`

// TestCallsCommands: a call held as a proxy files it is listed and shown
// with its arguments as written; approve shows it and releases exactly
// it on the proxy's stream (with --remember, a proposal is filed and its
// id printed); deny refuses another; deciding twice is a conflict (3), a
// sandbox token is refused (1), bad input is usage (2) and no gateway is
// unavailable (4).
func TestCallsCommands(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	sb := g.json(t, admin, "sandbox", "create", "refunds", "-f", writeFile(t, "refunds.yaml", refundsPolicy))["token"].(string)
	olive := g.json(t, admin, "token", "create", "--role", "operator", "--name", "olive")["token"].(string)
	hold := func(arguments string) *gatewaytest.Held {
		c := gatewaytest.ToolCall(t, "refunds", "refund", arguments)
		c.PolicyVersion, c.Entry = 1, "orders"
		return g.HoldCall(t, sb, c)
	}
	a := hold(`{"order": "A-1009",  "amount": 12.50, "ledger": 12345678901234567890}`)
	id := fmt.Sprint(a.ID)

	list := g.must(t, olive, "calls", "list")
	if !strings.Contains(list, "ID  ") || !strings.Contains(list, id+"   refunds  tools/call refund  held") || !strings.Contains(list, "proxy-refunds") {
		t.Errorf("calls list:\n%s", list)
	}
	res := g.json(t, olive, "calls", "list", "refunds", "--status", "held")
	calls := res["calls"].([]any)
	if len(calls) != 1 || res["held"] != float64(1) || calls[0].(map[string]any)["id"] != float64(a.ID) {
		t.Errorf("calls list -o json: %v", res)
	}
	if got := g.json(t, olive, "calls", "list", "--status", "denied"); got["held"] != float64(1) || got["calls"] != nil {
		t.Errorf("calls list --status denied -o json: %v, want no calls and held 1", got)
	}
	show := g.must(t, olive, "calls", "show", id)
	want := "arguments:\n  {\n    \"order\": \"A-1009\",\n    \"amount\": 12.50,\n    \"ledger\": 12345678901234567890\n  }\n"
	if !strings.Contains(show, want) || !strings.Contains(show, "sandbox:          refunds") || !strings.Contains(show, "arguments digest: sha256:") {
		t.Errorf("calls show:\n%s\nwant the arguments as written:\n%s", show, want)
	}

	for _, c := range []struct {
		token string
		args  []string
		code  int
		say   string
	}{
		{olive, []string{"calls", "list", "--status", "pending"}, exitInvalid, "--status must be one of held"},
		{olive, []string{"calls", "show", "0"}, exitInvalid, "ID must be a held call id"},
		{olive, []string{"calls", "show", "999"}, exitNo, ""},
		{olive, []string{"calls", "approve", id}, exitInvalid, "needs --reason"},
		{olive, []string{"calls", "deny", id, "--reason", " "}, exitInvalid, "needs --reason"},
		{sb, []string{"calls", "approve", id, "--reason", "mine"}, exitNo, ""},
		{sb, []string{"calls", "list"}, exitNo, ""},
	} {
		if _, stderr, code := g.cli(t, c.token, c.args...); code != c.code || !strings.Contains(stderr, c.say) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.say)
		}
	}
	if _, _, code := runCLI(t, "--gateway", "http://127.0.0.1:1", "--token", olive, "calls", "list"); code != exitUnavailable {
		t.Errorf("calls list with no gateway: exit %d, want %d", code, exitUnavailable)
	}
	// Nothing above decided the call.
	if got := g.json(t, olive, "calls", "show", id); got["status"] != "held" {
		t.Fatalf("after the refused decisions the call is %v", got["status"])
	}

	// Approve, remembering: the call as shown, then the outcome. A rule
	// cannot name a number a float64 does not hold: the call is approved
	// all the same, and the command says why nothing was remembered
	// (exit 3).
	g.took()
	out, stderr, code := g.cli(t, olive, "calls", "approve", id, "--reason", "refund agreed", "--remember")
	if code != exitConflict || !strings.Contains(out, want) || !strings.Contains(stderr, "no proposal to remember it was filed") {
		t.Errorf("calls approve --remember of an inexact number: exit %d\n%s\n%s", code, out, stderr)
	}
	if m := methods(g.took()); m != "CallService.GetCall,CallService.ApproveCall" {
		t.Errorf("calls approve called %s, want GetCall then ApproveCall", m)
	}
	if d := a.Decision(t); d.GetStatus() != "approved" || d.GetId() != a.ID || d.GetDecidedBy() != "olive" ||
		d.GetArgumentsDigest() != g.json(t, olive, "calls", "show", id)["arguments_digest"] {
		t.Errorf("the proxy's stream got %v", d)
	}
	if _, stderr, code := g.cli(t, olive, "calls", "approve", id, "--reason", "again"); code != exitConflict {
		t.Errorf("approving twice: exit %d (%s), want %d", code, stderr, exitConflict)
	}
	c := hold(`{"order": "A-1011", "amount": 12.50}`)
	cid := fmt.Sprint(c.ID)
	out = g.must(t, olive, "calls", "approve", cid, "--reason", "refund agreed", "--remember")
	if d := c.Decision(t); d.GetStatus() != "approved" || d.GetId() != c.ID {
		t.Errorf("the proxy's stream got %v", d)
	}
	approved := g.json(t, olive, "calls", "show", cid)
	proposal := fmt.Sprint(approved["proposal_id"])
	if approved["status"] != "approved" || approved["reason"] != "refund agreed" || !strings.Contains(out, "call "+cid+" approved; proposal "+proposal+" filed") {
		t.Errorf("approved call %v; approve printed %q", approved, out)
	}
	if p := g.json(t, olive, "proposals", "show", proposal); p["status"] != "pending" || p["sandbox"] != "refunds" {
		t.Errorf("the remembered proposal: %v", p)
	}

	// Deny another.
	b := hold(`{"order": "A-1010", "amount": 99}`)
	bid := fmt.Sprint(b.ID)
	if out := g.must(t, olive, "calls", "deny", bid, "--reason", "not this customer"); strings.TrimSpace(out) != "call "+bid+" denied" {
		t.Errorf("calls deny printed %q", out)
	}
	if d := b.Decision(t); d.GetStatus() != "denied" || d.GetId() != b.ID || d.GetReason() != "not this customer" {
		t.Errorf("the proxy's stream got %v", d)
	}
	if _, _, code := g.cli(t, olive, "calls", "deny", bid, "--reason", "again"); code != exitConflict {
		t.Errorf("denying twice: exit %d, want %d", code, exitConflict)
	}
	if list := g.must(t, olive, "calls", "list"); !strings.Contains(list, "decided ") || strings.Contains(list, " held ") {
		t.Errorf("calls list after both decisions:\n%s", list)
	}
}
