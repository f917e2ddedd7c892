package web_test

// The console follows the gateway by itself, says what each proposal
// changes, offers only what the role may do, shows times exactly on
// hover, policies as YAML, and an audit log that pages and fits.

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/web/webtest"
)

// refundProposal allows one more REST call on ordersPolicyV2's status
// endpoint.
const refundProposal = `
rationale: refunds under 20 EUR go through without a ticket
operations:
  - add_allow_rules:
      policy: status
      host: status.example.com
      port: 443
      rules:
        - allow: { method: POST, path: /v1/refunds }
`

// isoTitle is the exact time a relative one shows on hover.
var isoTitle = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`)

// checkTimes fails unless every time element on the page carries its
// exact time, in ISO 8601, as its title; it returns how many there are.
func checkTimes(t *testing.T, ctx context.Context, page string) int {
	t.Helper()
	titles := webtest.Value(t, ctx, "time titles", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#view time")].map((e) => e.title)`))
	for _, title := range titles {
		if !isoTitle.MatchString(title) {
			t.Errorf("%s: a time shows %q on hover, want an ISO 8601 time", page, title)
		}
	}
	return len(titles)
}

func shots(t *testing.T) string {
	t.Helper()
	return webtest.ScreenshotDir(t)
}

// TestConsoleLiveQueue: proposals filed after the queue opened appear
// without a reload, each row leading with what it changes.
func TestConsoleLiveQueue(t *testing.T) {
	e := start(t)
	if _, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: ordersPolicyV2}); err != nil {
		t.Fatal(err)
	}
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the empty queue", chromedp.WaitVisible(chromedp.CSS("#queue p.muted")))

	sandbox := newClients(e.gw.URL, e.sandbox).advisor
	mcp, err := sandbox.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: trackShipment})
	if err != nil {
		t.Fatal(err)
	}
	rest, err := sandbox.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: refundProposal})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id              uint64
		summary, reason string
	}{
		{mcp.GetId(), "allow tools/call track_shipment at orders.example.com/mcp for /usr/bin/python3", "support agents must track shipments"},
		{rest.GetId(), "allow POST status.example.com/v1/refunds for /usr/bin/curl", "refunds under 20 EUR"},
	} {
		row := fmt.Sprintf(`#queue tr[data-id="%d"]`, tc.id)
		// Polling every 2 s: the row shows within the step's deadline, no reload.
		webtest.Act(t, ctx, fmt.Sprintf("proposal %d appears", tc.id), chromedp.WaitVisible(chromedp.CSS(row)))
		lead := webtest.Value(t, ctx, "the change cell", chromedp.Evaluate[[]string](fmt.Sprintf(
			`[...document.querySelector(%q).children].map((e) => e.className + "|" + e.textContent)`, row+" td.change")))
		if len(lead) != 2 || lead[0] != "summary|"+tc.summary || !strings.Contains(lead[1], tc.reason) {
			t.Errorf("proposal %d's change cell = %q, want the summary %q first, then the rationale", tc.id, lead, tc.summary)
		}
	}
	if n := webtest.TextOf(t, ctx, "#queue-count"); !strings.HasPrefix(n, "2 pending") {
		t.Errorf("queue count %q, want 2 pending", n)
	}
	if n := checkTimes(t, ctx, "queue"); n < 2 {
		t.Errorf("queue shows %d times, want one per proposal", n)
	}
	webtest.ScreenshotWidths(t, ctx, shots(t), "queue-live")

	// The proposal page leads with the same line, and shows the
	// resulting policy as YAML.
	webtest.Act(t, ctx, "open the proposal", chromedp.Navigate(fmt.Sprintf("%s/#/proposal/%d", e.gw.URL, rest.GetId())),
		chromedp.WaitVisible(chromedp.ID("proposal-summary")))
	if s := webtest.TextOf(t, ctx, "#proposal-summary"); s != "allow POST status.example.com/v1/refunds for /usr/bin/curl" {
		t.Errorf("proposal summary %q", s)
	}
	doc := webtest.Value(t, ctx, "resulting policy", chromedp.Evaluate[string](`(() => { const p = document.querySelector("#resulting-policy pre"); return p.dataset.format + "|" + p.textContent; })()`))
	if !strings.HasPrefix(doc, "yaml|") || !strings.Contains(doc, "path: /v1/refunds") || strings.Contains(doc, "{") {
		t.Errorf("the resulting policy shows as %q, want YAML", doc)
	}
	checkTimes(t, ctx, "proposal")
}

// TestConsoleFrozenSandboxLive: the sandbox page follows a freeze made
// elsewhere, says where each proxy stands, and offers an operator
// neither Unfreeze nor Roll back; an admin gets Unfreeze, and no Roll back
// while frozen.
func TestConsoleFrozenSandboxLive(t *testing.T) {
	e := start(t)
	if _, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: ordersPolicyV2}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.sandbox.SetSandboxBoundary(t.Context(), &portcullisv1.SetSandboxBoundaryRequest{Name: "support", Document: ordersPolicyV2}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.policy.RollbackPolicy(t.Context(), &portcullisv1.RollbackPolicyRequest{Sandbox: "support", ToVersion: 1}); err != nil {
		t.Fatal(err)
	}
	// A proxy that ACKs v3 and then answers nothing: the freeze's version
	// never reaches it.
	p := connectHeldProxy(t, e, "proxy-slow")
	p.answer("")
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the sandbox", chromedp.WaitVisible(chromedp.ID("who-name")),
		chromedp.Navigate(e.gw.URL+"/#/sandbox/support"), chromedp.WaitVisible(chromedp.CSS(`#proxies tr[data-proxy="proxy-slow"]`)))

	// The policy and the boundary, as YAML, exactly as policy get -o yaml.
	want := func(doc string) string {
		pol, _, err := policy.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		y, err := policy.EncodeYAML(pol)
		if err != nil {
			t.Fatal(err)
		}
		return string(y)
	}
	if got := webtest.Value(t, ctx, "policy", chromedp.Evaluate[string](`document.querySelector("#current-policy pre").textContent`)); got != want(ordersPolicy) {
		t.Errorf("current policy shows\n%s\nwant the YAML\n%s", got, want(ordersPolicy))
	}
	if got := webtest.Value(t, ctx, "boundary", chromedp.Evaluate[string](`document.querySelector("#boundary pre").textContent`)); got != want(ordersPolicyV2) {
		t.Errorf("boundary shows\n%s\nwant the YAML\n%s", got, want(ordersPolicyV2))
	}
	// History names the version a rollback went to.
	if src := webtest.TextOf(t, ctx, `#history tr[data-version="3"] td.source`); src != "rollback to v1" {
		t.Errorf("history says %q for the rollback, want \"rollback to v1\"", src)
	}
	// An operator may not roll back: nothing offers it.
	if n := webtest.Value(t, ctx, "rollback buttons", chromedp.Evaluate[int](`document.querySelectorAll("[data-rollback]").length`)); n != 0 {
		t.Errorf("an operator is offered %d rollbacks", n)
	}
	if note := webtest.TextOf(t, ctx, "#history-note"); !strings.Contains(note, "an admin can") {
		t.Errorf("history note %q", note)
	}
	checkTimes(t, ctx, "sandbox")

	// Frozen elsewhere (the CLI, Sentry): the open page shows it.
	if _, err := e.admin.sandbox.FreezeSandbox(t.Context(), &portcullisv1.FreezeSandboxRequest{Name: "support", Reason: "agent exfiltrating order data"}); err != nil {
		t.Fatal(err)
	}
	frozen := webtest.Value(t, ctx, "the freeze shows", chromedp.Poll[string](`document.querySelector("#frozen")?.textContent || ""`))
	if !strings.Contains(frozen, "agent exfiltrating order data") || !strings.Contains(frozen, "v4 denies everything, but 1 of 1 connected proxy has not applied it yet (proxy-slow still on v3)") {
		t.Errorf("frozen notice %q", frozen)
	}
	if row := webtest.TextOf(t, ctx, `#proxies tr[data-proxy="proxy-slow"]`); !strings.Contains(row, "not frozen yet: freeze is v4") || strings.Contains(row, "behind") {
		t.Errorf("the proxy that has not applied the freeze shows %q", row)
	}
	if ks := webtest.TextOf(t, ctx, "#kill-switch"); ks != "Only an admin can unfreeze it." {
		t.Errorf("an operator's kill switch on a frozen sandbox: %q", ks)
	}
	webtest.ScreenshotWidths(t, ctx, shots(t), "sandbox-frozen-operator")

	// The proxy applies the freeze: the page says all enforce it.
	p.answer("")
	enforced := webtest.Value(t, ctx, "the proxy's ACK shows", chromedp.Poll[string](
		`(() => { const t = document.querySelector("#frozen")?.textContent || ""; return t.includes("its one connected proxy enforces it") ? t : ""; })()`))
	if strings.Contains(enforced, "not applied") {
		t.Errorf("frozen notice after the ACK: %q", enforced)
	}

	// An admin may unfreeze, but is offered no rollback while frozen.
	webtest.Act(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("signin")))
	webtest.SignIn(t, ctx, e.gw.URL, gatewaytest.AdminToken)
	webtest.Act(t, ctx, "admin opens the sandbox", chromedp.WaitVisible(chromedp.ID("who-name")),
		chromedp.Navigate(e.gw.URL+"/#/sandbox/support"), chromedp.WaitVisible(chromedp.ID("freeze-start")))
	if b := webtest.TextOf(t, ctx, "#freeze-start"); b != "Unfreeze…" {
		t.Errorf("admin's kill switch %q", b)
	}
	if n := webtest.Value(t, ctx, "rollback buttons", chromedp.Evaluate[int](`document.querySelectorAll("[data-rollback]").length`)); n != 0 {
		t.Errorf("a frozen sandbox offers %d rollbacks", n)
	}
	webtest.ScreenshotWidths(t, ctx, shots(t), "sandbox-frozen-admin")
}

// TestConsoleAuditPaging: the audit log fits the window at both widths,
// pages back through older entries, and shows absolute times and the
// before/after hashes of each change.
func TestConsoleAuditPaging(t *testing.T) {
	e := start(t)
	// Over a page of entries: 60 tokens, then a policy change.
	for i := range 60 {
		if _, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: fmt.Sprintf("ops-%02d-with-a-rather-long-name-for-the-layout", i), Role: "operator"}); err != nil {
			t.Fatal(err)
		}
	}
	set, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: ordersPolicyV2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the audit log", chromedp.WaitVisible(chromedp.ID("who-name")),
		chromedp.Navigate(e.gw.URL+"/#/audit"), chromedp.WaitVisible(chromedp.ID("audit-older")))
	seqs := func() []int64 {
		return webtest.Value(t, ctx, "rows", chromedp.Evaluate[[]int64](`[...document.querySelectorAll("#audit tbody tr")].map((r) => Number(r.dataset.seq))`))
	}
	first := seqs()
	if len(first) != 50 {
		t.Fatalf("the first page has %d entries, want 50", len(first))
	}
	// The policy change, newest: its hashes before and after.
	if row := webtest.TextOf(t, ctx, "#audit tbody tr"); !strings.Contains(row, "policy.set") {
		t.Errorf("the newest audit row is %q, want the policy change", row)
	}
	hashes := webtest.Value(t, ctx, "hashes", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#audit tbody tr")].
		filter((r) => r.querySelector("code")?.textContent === "policy.set").
		flatMap((r) => [...r.querySelectorAll(".hashes span")].map((s) => s.title))`))
	if len(hashes) != 2 || hashes[1] != set.GetHash() || hashes[0] == "" || hashes[0] == hashes[1] {
		t.Errorf("the policy change shows hashes %q, want the old one and %s", hashes, set.GetHash())
	}
	if ts := webtest.TextOf(t, ctx, "#audit tbody tr td:nth-child(2)"); !regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`).MatchString(ts) {
		t.Errorf("audit time %q, want an absolute time", ts)
	}
	checkTimes(t, ctx, "audit")
	for _, w := range webtest.Widths {
		webtest.SetWidth(t, ctx, w)
		if over := webtest.Overflowing(t, ctx, "#audit .table-wrap"); len(over) > 0 {
			t.Errorf("at %d px the audit table is clipped (scroll width > width: %v)", w, over)
		}
	}
	webtest.ScreenshotWidths(t, ctx, shots(t), "audit")

	webtest.Act(t, ctx, "older", chromedp.Click(chromedp.ID("audit-older")),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#audit tbody tr[data-seq="%d"]`, first[len(first)-1]-1))))
	second := seqs()
	if len(second) == 0 || second[0] != first[len(first)-1]-1 {
		t.Errorf("the second page starts at %v, want entry %d", second, first[len(first)-1]-1)
	}
	if last := second[len(second)-1]; last != 1 {
		t.Errorf("the second page ends at entry %d, want 1 (%d entries in all)", last, first[0])
	}
	if n := webtest.Value(t, ctx, "older link", chromedp.Evaluate[int](`document.querySelectorAll("#audit-older").length`)); n != 0 {
		t.Error("the last page offers older entries")
	}
}
