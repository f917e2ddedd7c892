package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/web/webtest"
)

const trackShipment = `
rationale: support agents must track shipments for open orders
operations:
  - add_allow_rules:
      policy: orders
      host: orders.example.com
      port: 443
      rules:
        - allow: { method: tools/call, tool: track_shipment }
`

// The acceptance path: an operator signs in, opens the queue, opens a
// proposal, sees its finding and approves it with a reason. Screenshots
// of the queue and the proposal page go to the test's temporary directory
// (go test -v prints where; PORTCULLIS_CONSOLE_SCREENSHOTS=DIR keeps them).
func TestConsoleApproveProposal(t *testing.T) {
	e := start(t)
	p, err := newClients(e.gw.URL, e.sandbox).advisor.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: trackShipment})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.GetFindings()) == 0 {
		t.Fatal("the proposal has no findings to show")
	}
	id := p.GetId()
	shots := webtest.ScreenshotDir(t)
	ctx := webtest.Browser(t)

	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	row := fmt.Sprintf(`#queue tr[data-id="%d"]`, id)
	webtest.Act(t, ctx, "open the queue", chromedp.WaitVisible(chromedp.CSS(row)))
	if chip := webtest.TextOf(t, ctx, row+" .finding-chip"); !strings.Contains(chip, "New MCP tool") {
		t.Errorf("the queue shows findings %q, want New MCP tool", chip)
	}
	if cells := webtest.TextOf(t, ctx, row); !strings.Contains(cells, "support") || !strings.Contains(cells, "track shipments") {
		t.Errorf("queue row %q", cells)
	}
	webtest.Screenshot(t, ctx, shots, "queue.png")

	webtest.Act(t, ctx, "open the proposal", chromedp.Click(chromedp.CSS(fmt.Sprintf(`%s a[href="#/proposal/%d"]`, row, id))), chromedp.WaitVisible(chromedp.ID("proposal-title")))
	if r := webtest.TextOf(t, ctx, "#rationale"); r != "support agents must track shipments for open orders" {
		t.Errorf("rationale %q", r)
	}
	if added := webtest.TextOf(t, ctx, "#proposal-diff .line.add"); !strings.Contains(added, "track_shipment") {
		t.Errorf("the diff's added line %q lacks track_shipment", added)
	}
	if kind := webtest.TextOf(t, ctx, "#findings .finding-kind"); kind != "New MCP tool" {
		t.Errorf("finding %q", kind)
	}
	if ce := webtest.TextOf(t, ctx, "#findings .counterexample .request"); !strings.Contains(ce, "track_shipment") || !strings.Contains(ce, "orders.example.com:443") {
		t.Errorf("counterexample %q", ce)
	}
	if n := webtest.TextOf(t, ctx, "#approvals-count"); !strings.HasPrefix(n, "0 of ") {
		t.Errorf("approvals %q", n)
	}
	webtest.Screenshot(t, ctx, shots, "proposal.png")

	// Approving needs a reason.
	webtest.Act(t, ctx, "approve without a reason", chromedp.Click(chromedp.ID("approve")))
	if msg := webtest.WaitText(t, ctx, "decision-result"); !strings.Contains(msg, "reason is required") {
		t.Errorf("approve without a reason: %q", msg)
	}
	const reason = "orders team confirmed: tracking is read-only"
	webtest.Act(t, ctx, "approve", chromedp.SendKeys(chromedp.ID("reason"), reason), chromedp.Click(chromedp.ID("approve")))
	msg := webtest.Value(t, ctx, "decision result", chromedp.Poll[string](`(document.querySelector("#decision-result .notice.ok")?.textContent || "")`))
	if !strings.Contains(msg, "Approv") {
		t.Errorf("after approve: %q", msg)
	}
	webtest.Screenshot(t, ctx, shots, "proposal-approved.png")

	got, err := e.admin.approval.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	a := got.GetApprovals()
	if len(a) != 1 || a[0].GetApprover() != "ops-alice" || a[0].GetReason() != reason || a[0].GetResultingHash() != p.GetResultingHash() {
		t.Fatalf("approvals after the console's approve: %v", a)
	}
	if got.GetApprovalsRequired() <= 1 && got.GetStatus() != "applied" {
		t.Errorf("one approval of %d required, status %q, want applied", got.GetApprovalsRequired(), got.GetStatus())
	}
	if got.GetStatus() == "applied" && !strings.Contains(msg, fmt.Sprintf("version %d", got.GetAppliedVersion())) {
		t.Errorf("the page said %q, the proposal was applied as v%d", msg, got.GetAppliedVersion())
	}
}

const shipping = `
rationale: look up carrier status for shipments
operations:
  - add_rule:
      name: shipping
      rule:
        endpoints:
          - host: ship.example.com
            port: 443
            protocol: rest
            rules: [ { allow: { method: GET, path: "/v1/shipments/*" } } ]
        binaries: [ { path: /usr/bin/python3 } ]
`

// The queue lists proposals newest first, and a rejection with its
// reason takes one out of it.
func TestConsoleRejectProposal(t *testing.T) {
	e := start(t)
	agent := newClients(e.gw.URL, e.sandbox).advisor
	older, err := agent.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: trackShipment})
	if err != nil {
		t.Fatal(err)
	}
	newer, err := agent.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: shipping})
	if err != nil {
		t.Fatal(err)
	}
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the queue", chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#queue tr[data-id="%d"]`, older.GetId()))))
	ids := webtest.Value(t, ctx, "queue order", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#queue tbody tr")].map(tr => tr.dataset.id)`))
	if want := []string{fmt.Sprint(newer.GetId()), fmt.Sprint(older.GetId())}; strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("queue order %v, want newest first %v", ids, want)
	}
	if chips := webtest.TextOf(t, ctx, fmt.Sprintf(`#queue tr[data-id="%d"] .chips`, newer.GetId())); !strings.Contains(chips, "New destination") {
		t.Errorf("the new entry's findings show as %q", chips)
	}

	webtest.Act(t, ctx, "open the newer proposal", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#queue tr[data-id="%d"] a[href="#/proposal/%d"]`, newer.GetId(), newer.GetId()))),
		chromedp.WaitVisible(chromedp.ID("reason")))
	const reason = "carrier lookups go through the orders service"
	webtest.Act(t, ctx, "reject", chromedp.SendKeys(chromedp.ID("reason"), reason), chromedp.Click(chromedp.ID("reject")))
	msg := webtest.Value(t, ctx, "decision result", chromedp.Poll[string](`(document.querySelector("#decision-result .notice.ok")?.textContent || "")`))
	if !strings.Contains(msg, "Rejected") {
		t.Errorf("after reject: %q", msg)
	}
	got, err := e.admin.approval.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: newer.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus() != "rejected" || got.GetStatusReason() != reason || got.GetDecidedBy() != "ops-alice" {
		t.Errorf("after the console's reject: status %q reason %q by %q", got.GetStatus(), got.GetStatusReason(), got.GetDecidedBy())
	}
	webtest.Act(t, ctx, "back to the queue", chromedp.Click(chromedp.CSS(`#nav a[data-nav="queue"]`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#queue tr[data-id="%d"]`, older.GetId()))))
	if n := webtest.Value(t, ctx, "rows", chromedp.Evaluate[int](`document.querySelectorAll("#queue tbody tr").length`)); n != 1 {
		t.Errorf("%d pending proposals after the reject, want 1", n)
	}

	// The sandbox's page lists what is pending for it.
	webtest.Act(t, ctx, "open the sandbox", chromedp.Navigate(e.gw.URL+"/#/sandbox/support"), chromedp.WaitVisible(chromedp.ID("sandbox-proposals")))
	if rows := webtest.TextOf(t, ctx, "#sandbox-proposals"); !strings.Contains(rows, fmt.Sprintf("#%d", older.GetId())) || strings.Contains(rows, fmt.Sprintf("#%d", newer.GetId())) {
		t.Errorf("the sandbox's pending proposals: %q", rows)
	}
}

// An approval sends the resulting hash the page showed: when the proposal
// was re-based since (the policy moved), the gateway refuses it and the
// page says so instead of approving what nobody saw.
func TestConsoleApproveStale(t *testing.T) {
	e := start(t)
	p, err := newClients(e.gw.URL, e.sandbox).advisor.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: trackShipment})
	if err != nil {
		t.Fatal(err)
	}
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the proposal", chromedp.WaitVisible(chromedp.ID("who-name")),
		chromedp.Navigate(fmt.Sprintf("%s/#/proposal/%d", e.gw.URL, p.GetId())), chromedp.WaitVisible(chromedp.ID("reason")))

	// The policy moves under the open page; the proposal is re-based.
	if _, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: ordersPolicyV2}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := e.admin.approval.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: p.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetResultingHash() != p.GetResultingHash() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the proposal was never re-based onto v2")
		}
		time.Sleep(20 * time.Millisecond)
	}

	webtest.Act(t, ctx, "approve", chromedp.SendKeys(chromedp.ID("reason"), "looks fine"), chromedp.Click(chromedp.ID("approve")))
	msg := webtest.Value(t, ctx, "decision result", chromedp.Poll[string](`(document.querySelector("#decision-result .notice")?.textContent || "")`))
	if !strings.Contains(msg, "changed since this page showed it") {
		t.Errorf("a stale approval shows %q", msg)
	}
	got, err := e.admin.approval.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: p.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus() != "pending" || len(got.GetApprovals()) != 0 {
		t.Errorf("after a stale approval: status %q, approvals %v", got.GetStatus(), got.GetApprovals())
	}
}
