package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/web/webtest"
)

// watchdog is the source of the test's sentry token.
const watchdog = "sentry://node-7"

// quarantine is a remediating Sentry quarantine event of sandbox, in its
// CloudEvents JSON form (docs/sentry-events.md).
func quarantine(id string, seq uint64, sandbox string, at time.Time) map[string]any {
	return map[string]any{
		"specversion": "1.0", "id": id, "source": watchdog, "sequence": seq,
		"type": "portcullis.sentry.v1.quarantine", "subject": sandbox, "time": at.Format(time.RFC3339Nano),
		"data": map[string]any{"severity": "critical", "processing": "remediate",
			"finding": map[string]any{"title": "exfiltration", "confidence": 0.97}},
	}
}

// toolCall is a store-only Sentry event: the watchdog saw sandbox's agent
// call tool under the policy with hash.
func toolCall(id string, seq uint64, sandbox, tool, hash string, at time.Time) map[string]any {
	return map[string]any{
		"specversion": "1.0", "id": id, "source": watchdog, "sequence": seq,
		"type": "portcullis.sentry.v1.tool_access", "subject": sandbox, "time": at.Format(time.RFC3339Nano),
		"data": map[string]any{"severity": "low", "tool_call": map[string]any{"server": "orders", "tool": tool},
			"policy": map[string]any{"version": 1, "hash": hash}},
	}
}

// postEvent sends one event to the gateway's HTTP intake as the watchdog.
func postEvent(t *testing.T, baseURL, token string, event map[string]any) {
	t.Helper()
	body, err := json.Marshal(event)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, baseURL+gateway.SentryEventsPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(answer), `"stored":1`) {
		t.Fatalf("post event %s: %d %s", event["id"], res.StatusCode, answer)
	}
}

// ackingProxy connects a proxy of sandbox over stock grpc-go, as the real
// one does, and ACKs every version it is sent until the test ends. It
// returns once the proxy has applied the current version.
func ackingProxy(t *testing.T, baseURL, token, sandbox, id string) {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(baseURL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token))
	st, err := portcullisv1.NewDistributionServiceClient(conn).StreamPolicy(ctx)
	if err != nil {
		cancel()
		conn.Close()
		t.Fatal(err)
	}
	hello := &portcullisv1.ProxyHello{Sandbox: sandbox, ProxyId: id, Build: "console-test"}
	if err := st.Send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{Hello: hello}}); err != nil {
		cancel()
		conn.Close()
		t.Fatal(err)
	}
	first := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for once := false; ; {
			res, err := st.Recv()
			if err != nil {
				return // the test ended
			}
			sp := res.GetPolicy()
			if sp == nil {
				continue
			}
			ack := &portcullisv1.PolicyAck{Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash()}
			if st.Send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Ack{Ack: ack}}) != nil {
				return
			}
			if !once {
				once = true
				close(first)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close()
	})
	select {
	case <-first:
	case <-done:
		t.Fatalf("proxy %s: the stream ended before the first version", id)
	case <-time.After(10 * time.Second):
		t.Fatalf("proxy %s: no version within 10s", id)
	}
}

// TestConsoleIncidents: with a quarantine budget of 1, Sentry's first
// quarantine freezes its sandbox and the next two are held. The incidents
// page lists them held first; an operator freezes one and dismisses the
// other, each with a reason; the frozen sandbox's page names the event and
// shows the timeline from the event to the deny-all version. Signed out,
// the page shows nothing.
func TestConsoleIncidents(t *testing.T) {
	e := start(t, func(c *gateway.Config) { c.QuarantineBudget = 1 })
	for _, name := range []string{"billing", "returns"} {
		if _, err := e.admin.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: name, Policy: ordersPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: watchdog, Role: "sentry"})
	if err != nil {
		t.Fatal(err)
	}
	v1, err := e.admin.sandbox.GetSandbox(t.Context(), &portcullisv1.GetSandboxRequest{Name: "support"})
	if err != nil {
		t.Fatal(err)
	}
	// Before the quarantine, the watchdog saw a tool call that no proxy
	// decided, under a policy no proxy applied (none is connected): the
	// gateway flags it unmediated and drift a moment later.
	now := time.Now().UTC()
	postEvent(t, e.gw.URL, tok.GetToken(), toolCall("seen", 1, "support", "refund_order", v1.GetCurrentHash(), now))
	sentry := portcullisv1connect.NewSentryServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, e.gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		res, err := sentry.ListEvents(t.Context(), &portcullisv1.ListSentryEventsRequest{Sandbox: "support"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetEvents()) == 1 && len(res.GetEvents()[0].GetFlags()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tool call was never flagged drift and unmediated: %v", res.GetEvents())
		}
	}
	// Then a proxy connects, and the quarantines come: support's freeze
	// is applied by its proxy, which times ingest to ACK.
	ackingProxy(t, e.gw.URL, e.sandbox, "support", "proxy-1")
	for i, sb := range []string{"support", "billing", "returns"} {
		postEvent(t, e.gw.URL, tok.GetToken(), quarantine("q-"+sb, uint64(i+2), sb, now))
	}
	action := func(sandbox string) *portcullisv1.SentryAction {
		t.Helper()
		res, err := sentry.ListActions(t.Context(), &portcullisv1.ListSentryActionsRequest{Sandbox: sandbox})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetActions()) != 1 {
			t.Fatalf("actions of %s: %v, want one", sandbox, res.GetActions())
		}
		return res.GetActions()[0]
	}
	for deadline := time.Now().Add(10 * time.Second); action("support").GetAckedAt() == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the freeze was never ACKed: %v", action("support"))
		}
	}
	frozen, billing, returns := action("support"), action("billing"), action("returns")
	if frozen.GetStatus() != "frozen" || billing.GetStatus() != "held" || returns.GetStatus() != "held" {
		t.Fatalf("statuses support %q billing %q returns %q, want frozen, held, held", frozen.GetStatus(), billing.GetStatus(), returns.GetStatus())
	}

	shots := webtest.ScreenshotDir(t)
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the incidents", chromedp.WaitVisible(chromedp.ID("who-name")),
		chromedp.Click(chromedp.CSS(`#nav a[data-nav="incidents"]`)), chromedp.WaitVisible(chromedp.CSS("#incidents tbody tr")))
	row := func(a *portcullisv1.SentryAction) string {
		return fmt.Sprintf(`#incidents tr[data-id="%d"]`, a.GetId())
	}
	order := webtest.Value(t, ctx, "incident order", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#incidents tbody tr")].map(tr => tr.dataset.id)`))
	if want := []string{fmt.Sprint(returns.GetId()), fmt.Sprint(billing.GetId()), fmt.Sprint(frozen.GetId())}; strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("incident order %v, want held first, newest first %v", order, want)
	}
	if n := webtest.TextOf(t, ctx, "#held-count"); n != "2 held" {
		t.Errorf("held count %q", n)
	}
	got := webtest.TextOf(t, ctx, row(frozen))
	for _, want := range []string{"support", "frozen", "q-support", watchdog, fmt.Sprintf("v%d", frozen.GetVersion())} {
		if !strings.Contains(got, want) {
			t.Errorf("the frozen incident's row %q lacks %q", got, want)
		}
	}
	if ack := webtest.TextOf(t, ctx, row(frozen)+" td.ack"); !regexp.MustCompile(`^[0-9.]+ (ms|s)$`).MatchString(ack) {
		t.Errorf("the frozen incident's ingest to ACK: %q", ack)
	}
	got = webtest.TextOf(t, ctx, row(billing))
	for _, want := range []string{"billing", "held", "q-billing", "froze 1 of at most 1 sandboxes"} {
		if !strings.Contains(got, want) {
			t.Errorf("the held incident's row %q lacks %q", got, want)
		}
	}
	if n := webtest.Value(t, ctx, "decision buttons", chromedp.Evaluate[int](`document.querySelectorAll("#incidents button[data-decide]").length`)); n != 4 {
		t.Errorf("%d decision buttons, want Freeze and Dismiss on each of the two held incidents", n)
	}
	webtest.Screenshot(t, ctx, shots, "incidents.png")

	// A decision needs a reason.
	webtest.Act(t, ctx, "dismiss without a reason", chromedp.Click(chromedp.CSS(row(returns)+` button[data-decide="dismiss"]`)))
	if msg := webtest.WaitText(t, ctx, "incident-result"); !strings.Contains(msg, "reason is required") {
		t.Errorf("dismiss without a reason: %q", msg)
	}
	const dismissal = "the returns agent was replaying a test fixture"
	webtest.Act(t, ctx, "dismiss", chromedp.SendKeys(chromedp.CSS(row(returns)+" input.decide-reason"), dismissal),
		chromedp.Click(chromedp.CSS(row(returns)+` button[data-decide="dismiss"]`)))
	msg := webtest.Value(t, ctx, "dismiss result", chromedp.Poll[string](`(document.querySelector("#incident-result .notice.ok")?.textContent || "")`))
	if !strings.Contains(msg, "Dismissed the quarantine of returns") {
		t.Errorf("after dismiss: %q", msg)
	}
	if s := webtest.TextOf(t, ctx, row(returns)); !strings.Contains(s, "dismissed") || !strings.Contains(s, "decided by ops-alice") || !strings.Contains(s, dismissal) {
		t.Errorf("the dismissed incident's row: %q", s)
	}
	const confirmation = "the SOC confirmed the exfiltration"
	webtest.Act(t, ctx, "freeze", chromedp.SendKeys(chromedp.CSS(row(billing)+" input.decide-reason"), confirmation),
		chromedp.Click(chromedp.CSS(row(billing)+` button[data-decide="freeze"]`)))
	msg = webtest.Value(t, ctx, "freeze result", chromedp.Poll[string](`[...document.querySelectorAll("#incident-result .notice")].map(n => n.textContent).find(m => !m.startsWith("Dismissed")) || ""`))
	if !strings.Contains(msg, "Froze billing") {
		t.Errorf("after freeze: %q", msg)
	}
	if n := webtest.Value(t, ctx, "decision buttons", chromedp.Evaluate[int](`document.querySelectorAll("#incidents button[data-decide]").length`)); n != 0 {
		t.Errorf("%d decision buttons after both held incidents were decided", n)
	}
	if gone := webtest.Value(t, ctx, "held count", chromedp.Evaluate[bool](`document.getElementById("held-count") === null`)); !gone {
		t.Error("the page still counts held incidents")
	}
	webtest.Screenshot(t, ctx, shots, "incidents-decided.png")

	// As the API sees them.
	if a := action("returns"); a.GetStatus() != "dismissed" || a.GetDecidedBy() != "ops-alice" || !strings.HasSuffix(a.GetReason(), ": "+dismissal) || !strings.Contains(a.GetReason(), "quarantine budget spent") {
		t.Errorf("returns after the console's dismiss: %v", a)
	}
	a := action("billing")
	if a.GetStatus() != "applied" || a.GetDecidedBy() != "ops-alice" || !strings.HasSuffix(a.GetReason(), ": "+confirmation) || a.GetVersion() != 2 {
		t.Errorf("billing after the console's freeze: %v", a)
	}
	if !strings.Contains(msg, fmt.Sprintf("version %d", a.GetVersion())) {
		t.Errorf("the page said %q; the freeze committed version %d", msg, a.GetVersion())
	}
	for name, want := range map[string]bool{"support": true, "billing": true, "returns": false} {
		sb, err := e.admin.sandbox.GetSandbox(t.Context(), &portcullisv1.GetSandboxRequest{Name: name})
		if err != nil {
			t.Fatal(err)
		}
		if sb.GetFrozen() != want {
			t.Errorf("%s frozen = %v, want %v", name, sb.GetFrozen(), want)
		}
	}

	// The frozen sandbox's page names the event and shows the timeline.
	webtest.Act(t, ctx, "open the sandbox", chromedp.Click(chromedp.CSS(row(frozen)+` a[href="#/sandbox/support"]`)),
		chromedp.WaitVisible(chromedp.CSS("#timeline tbody tr")))
	if ev := webtest.TextOf(t, ctx, "#quarantine-event"); ev != "q-support" {
		t.Errorf("the quarantine event shown: %q", ev)
	}
	if src := webtest.TextOf(t, ctx, "#quarantine-source"); src != watchdog {
		t.Errorf("the quarantine source shown: %q", src)
	}
	if n := webtest.TextOf(t, ctx, "#quarantine"); !strings.Contains(n, "Quarantined: frozen for Sentry event q-support from "+watchdog) {
		t.Errorf("the frozen notice: %q", n)
	}
	kinds := webtest.Value(t, ctx, "timeline kinds", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#timeline tbody tr")].map(tr => tr.dataset.kind)`))
	for _, want := range []string{"version", "sentry_event", "sentry_action", "ack", "audit"} {
		if !strings.Contains(strings.Join(kinds, ","), want) {
			t.Errorf("the timeline's kinds %v lack %s", kinds, want)
		}
	}
	events := webtest.Value(t, ctx, "timeline events", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#timeline tr[data-kind="sentry_event"]')].map(tr => tr.textContent)`))
	if len(events) != 2 || !strings.Contains(events[1], "quarantine") || !strings.Contains(events[1], "event_id: q-support") || !strings.Contains(events[1], "v1") {
		t.Errorf("the timeline's events: %q, want the tool call, then the quarantine q-support under v1", events)
	}
	if ev := webtest.TextOf(t, ctx, `#timeline tr.alarm`); !strings.Contains(ev, "event_id: seen") || !strings.Contains(ev, "policy hash: version 1") {
		t.Errorf("the highlighted entry: %q, want the tool call joined to version 1", ev)
	}
	if flags := webtest.Value(t, ctx, "flags", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#timeline tr.alarm .chip.flag.high")].map(c => c.textContent).sort()`)); strings.Join(flags, ",") != "drift,unmediated" {
		t.Errorf("the highlighted flags: %q, want drift and unmediated", flags)
	}
	if act := webtest.TextOf(t, ctx, `#timeline tr[data-kind="sentry_action"]`); !strings.Contains(act, "frozen") || !strings.Contains(act, "committed version 2") {
		t.Errorf("the timeline's action: %q", act)
	}
	versions := webtest.Value(t, ctx, "timeline versions", chromedp.Evaluate[[]string](`[...document.querySelectorAll('#timeline tr[data-kind="version"]')].map(tr => tr.textContent)`))
	if len(versions) != 2 || !strings.Contains(versions[1], "version 2") || !strings.Contains(versions[1], "freeze") || !strings.Contains(versions[1], "v2") {
		t.Errorf("the timeline's versions, oldest first: %q, want v1 then the deny-all v2", versions)
	}
	webtest.Screenshot(t, ctx, shots, "sandbox-timeline.png")

	// Signed out, the console shows the sign-in form, not the incidents,
	// and the API refuses the list.
	webtest.Act(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("signin")))
	webtest.Act(t, ctx, "open the incidents signed out", chromedp.Navigate(e.gw.URL+"/#/incidents"), chromedp.WaitVisible(chromedp.ID("token")))
	if n := webtest.Value(t, ctx, "incidents shown", chromedp.Evaluate[int](`document.querySelectorAll("#incidents").length`)); n != 0 {
		t.Error("the incidents page shows without a session")
	}
	if hidden := webtest.Value(t, ctx, "nav hidden", chromedp.Evaluate[bool](`document.getElementById("nav").hidden`)); !hidden {
		t.Error("the console's navigation shows without a session")
	}
	if code := fetchCode(t, ctx, "/portcullis.v1.SentryService/ListActions", `{}`); code != "unauthenticated" {
		t.Errorf("ListActions without a session = %q, want unauthenticated", code)
	}
}
