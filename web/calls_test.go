package web_test

// The Held calls page: a call a proxy files appears without a reload,
// with its countdown and its arguments as the agent wrote them; the
// approval reaches the proxy's stream; the list and the navigation's
// count follow.

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"github.com/chromedp/chromedp"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/web/webtest"
)

// reviewPolicy is ordersPolicy with refunds held for a person.
var reviewPolicy = strings.Replace(ordersPolicy, "          - allow: { method: tools/call, tool: lookup_order }\n",
	"          - allow: { method: tools/call, tool: lookup_order }\n          - allow: { method: tools/call, tool: refund, review: { required: true, timeout: 5m } }\n", 1)

// refundArguments are written as an agent might: numbers a float would
// round, spacing of its own.
const refundArguments = `{"order": "A-1009", "amount": 12.50, "ledger": 12345678901234567890, "lines": [], "note": {"by": "agent"}}`

// refundArgumentsShown is refundArguments as the console shows them.
const refundArgumentsShown = `{
  "order": "A-1009",
  "amount": 12.50,
  "ledger": 12345678901234567890,
  "lines": [],
  "note": {
    "by": "agent"
  }
}`

var countdownText = regexp.MustCompile(`^\d+:\d\d left$`)

// holdRefund files a refund as the sandbox's proxy would, on the
// version reviewPolicy was stored as.
func holdRefund(t *testing.T, e *env, version uint32, arguments string) *gatewaytest.Held {
	t.Helper()
	p, _, err := policy.Parse([]byte(reviewPolicy))
	if err != nil {
		t.Fatal(err)
	}
	c := gatewaytest.ToolCall(t, "support", "refund", arguments)
	c.PolicyVersion = version
	d := policy.Decide(p, policy.Request{Binary: c.Binary, Host: c.Host, Port: 443, HTTPMethod: "POST", Path: "/mcp",
		MCP: &policy.MCPMessage{Method: "tools/call", Tool: "refund", Arguments: []byte(arguments)}})
	if !d.Allow || d.Review == 0 {
		t.Fatalf("reviewPolicy does not hold the refund: %+v", d)
	}
	c.Entry, c.Rule = d.Entry, d.Rule
	return e.gw.HoldCall(t, e.sandbox, c)
}

// TestConsoleHeldCalls: at each width, a call filed after the page
// opened appears live, counts down, shows its arguments as written, and
// an approval with a reason (the second time "and remember") reaches the
// proxy's stream bound to the call; the page and the count follow.
func TestConsoleHeldCalls(t *testing.T) {
	e := start(t)
	v, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: reviewPolicy})
	if err != nil {
		t.Fatal(err)
	}
	version := v.GetVersion()
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the held calls page", chromedp.Click(chromedp.CSS(`#nav a[data-nav="calls"]`)),
		chromedp.WaitVisible(chromedp.ID("calls-empty")))

	for i, width := range webtest.Widths {
		webtest.SetWidth(t, ctx, width)
		remember := i == 1
		// Remembering needs arguments a rule can name exactly: no number
		// past what a float64 holds.
		arguments, shown := refundArguments, refundArgumentsShown
		if remember {
			arguments = strings.Replace(refundArguments, ` "ledger": 12345678901234567890,`, "", 1)
			shown = strings.Replace(refundArgumentsShown, "  \"ledger\": 12345678901234567890,\n", "", 1)
		}
		held := holdRefund(t, e, version, arguments)
		card := fmt.Sprintf(`#calls-list .call[data-id="%d"]`, held.ID)
		webtest.Act(t, ctx, fmt.Sprintf("call %d appears without a reload", held.ID), chromedp.WaitVisible(chromedp.CSS(card+`[data-status="held"]`)))
		if c := webtest.TextOf(t, ctx, card+" .countdown"); !countdownText.MatchString(c) {
			t.Errorf("call %d counts down as %q, want M:SS left", held.ID, c)
		}
		if args := webtest.Value(t, ctx, "the arguments", chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector(%q).textContent`, card+" pre.arguments"))); args != shown {
			t.Errorf("call %d's arguments show as\n%s\nwant\n%s", held.ID, args, shown)
		}
		if n := webtest.WaitText(t, ctx, "nav-held"); n != "1" {
			t.Errorf("the navigation counts %q held calls, want 1", n)
		}
		if over := webtest.Overflowing(t, ctx, "#calls .call, #calls pre.arguments"); len(over) > 0 {
			t.Errorf("at %d px, held call cards overflow: %v", width, over)
		}
		webtest.Screenshot(t, ctx, shots(t), fmt.Sprintf("held-calls-%d.png", width))

		// No reason, no decision.
		button := card + ` button[data-decide="approve"]`
		if remember {
			button = card + ` button[data-decide="remember"]`
		}
		webtest.Act(t, ctx, "approve without a reason", chromedp.Click(chromedp.CSS(button)),
			chromedp.WaitVisible(chromedp.CSS(card+" .call-result .notice.bad")))
		if s := webtest.TextOf(t, ctx, card+" .call-result"); !strings.Contains(s, "A reason is required") {
			t.Errorf("approving without a reason says %q", s)
		}
		webtest.Act(t, ctx, "approve with a reason",
			chromedp.SendKeys(chromedp.CSS(card+" input.call-reason"), "refund agreed on ticket 8812"),
			chromedp.Click(chromedp.CSS(button)))
		d := held.Decision(t)
		if d.GetStatus() != "approved" || d.GetId() != held.ID || d.GetDecidedBy() != "ops-alice" || d.GetPolicyVersion() != version ||
			!strings.HasPrefix(d.GetArgumentsDigest(), "sha256:") {
			t.Errorf("the proxy's stream got %v, want call %d approved by ops-alice at version %d with its digest", d, held.ID, version)
		}
		webtest.Act(t, ctx, "the card shows the approval", chromedp.WaitVisible(chromedp.CSS(card+`[data-status="approved"]`)))
		if s := webtest.TextOf(t, ctx, card); !strings.Contains(s, "approved by ops-alice") {
			t.Errorf("the approved call reads %q", s)
		}
		if remember {
			if s := webtest.TextOf(t, ctx, card+" .notice.ok"); !strings.Contains(s, "filed to allow these arguments without review") {
				t.Errorf("approve and remember says %q, want the proposal filed", s)
			}
		}
		webtest.Act(t, ctx, "the navigation's count clears", chromedp.WaitNotVisible(chromedp.ID("nav-held")))
	}
	if s := webtest.TextOf(t, ctx, "#calls-count"); s != "0 held, newest first" {
		t.Errorf("count %q", s)
	}
	// A call decided elsewhere (another operator's terminal) changes on
	// the page too.
	other := holdRefund(t, e, version, `{"order": "A-2000", "amount": 5}`)
	card := fmt.Sprintf(`#calls-list .call[data-id="%d"]`, other.ID)
	webtest.Act(t, ctx, "the third call appears", chromedp.WaitVisible(chromedp.CSS(card+`[data-status="held"]`)))
	calls := portcullisv1connect.NewCallServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, e.gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	if _, err := calls.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: other.ID, Reason: "not this customer"}); err != nil {
		t.Fatal(err)
	}
	if d := other.Decision(t); d.GetStatus() != "denied" {
		t.Errorf("the proxy's stream got %v", d)
	}
	webtest.Act(t, ctx, "the denial shows without a reload", chromedp.WaitVisible(chromedp.CSS(card+`[data-status="denied"]`)))
	if s := webtest.TextOf(t, ctx, card); !strings.Contains(s, "not this customer") || strings.Contains(s, "Approve") {
		t.Errorf("the denied call reads %q", s)
	}
	order := webtest.Value(t, ctx, "the order", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#calls-list .call")].map((e) => e.dataset.id)`))
	if len(order) != 3 || order[0] <= order[1] || order[1] <= order[2] {
		t.Errorf("calls shown in the order %v, want newest first", order)
	}

	// The sandbox's page lists them, and its timeline shows each.
	webtest.Act(t, ctx, "open the sandbox", chromedp.Navigate(e.gw.URL+"/#/sandbox/support"),
		chromedp.WaitVisible(chromedp.CSS(`#sandbox-calls tr[data-status="approved"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline tr[data-kind="held_call"]`)))
	if s := webtest.TextOf(t, ctx, `#timeline tr[data-kind="held_call"]`); !strings.Contains(s, "tools/call refund held for review: approved by ops-alice") {
		t.Errorf("the timeline shows %q", s)
	}
}
