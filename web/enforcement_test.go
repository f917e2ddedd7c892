package web_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/web/webtest"
)

// heldProxy is a proxy of the sandbox "support" whose answers the test
// gives, one version at a time, so the page can be watched between them.
type heldProxy struct {
	t  *testing.T
	st portcullisv1.DistributionService_StreamPolicyClient
}

func connectHeldProxy(t *testing.T, e *env, id string) *heldProxy {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(e.gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+e.sandbox))
	t.Cleanup(cancel)
	st, err := portcullisv1.NewDistributionServiceClient(conn).StreamPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hello := &portcullisv1.ProxyHello{Sandbox: "support", ProxyId: id, Build: "console-test"}
	if err := st.Send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	return &heldProxy{t: t, st: st}
}

// answer receives the next version and ACKs it, or NACKs it with nack.
func (p *heldProxy) answer(nack string) {
	p.t.Helper()
	var sp *portcullisv1.SignedPolicy
	for sp == nil {
		res, err := p.st.Recv()
		if err != nil {
			p.t.Fatalf("receive: %v", err)
		}
		sp = res.GetPolicy()
	}
	msg := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Ack{Ack: &portcullisv1.PolicyAck{Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash()}}}
	if nack != "" {
		msg = &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Nack{Nack: &portcullisv1.PolicyNack{Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash(), Error: nack}}}
	}
	if err := p.st.Send(msg); err != nil {
		p.t.Fatal(err)
	}
}

// enforcementLine waits until the proposal page's enforcement line says
// want, and returns it with its notice class.
func enforcementLine(t *testing.T, ctx context.Context, want string) (text, class string) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const l = document.querySelector("#enforcement-line"); return l && l.textContent.includes(%q) ? l.className + "|" + l.textContent : ""; })()`, want)
	got := webtest.Value(t, ctx, "the enforcement line saying "+want, chromedp.Poll[string](js))
	class, text, _ = strings.Cut(got, "|")
	return text, class
}

// The proposal page follows an applied proposal to the proxies, live:
// pending, then each ACK, then a NACK with its error.
func TestConsoleEnforcement(t *testing.T) {
	e := start(t)
	p1, p2 := connectHeldProxy(t, e, "p1"), connectHeldProxy(t, e, "p2")
	p1.answer("")
	p2.answer("")
	p, err := newClients(e.gw.URL, e.sandbox).advisor.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: trackShipment})
	if err != nil {
		t.Fatal(err)
	}
	shots := webtest.ScreenshotDir(t)
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the proposal", chromedp.WaitVisible(chromedp.ID("who-name")),
		chromedp.Navigate(fmt.Sprintf("%s/#/proposal/%d", e.gw.URL, p.GetId())), chromedp.WaitVisible(chromedp.ID("reason")))
	if n := webtest.Value(t, ctx, "enforcement card", chromedp.Evaluate[int](`document.querySelectorAll("#enforcement").length`)); n != 0 {
		t.Fatal("a pending proposal shows an enforcement card")
	}

	webtest.Act(t, ctx, "approve", chromedp.SendKeys(chromedp.ID("reason"), "tracking is read-only"), chromedp.Click(chromedp.ID("approve")))
	text, class := enforcementLine(t, ctx, "so far")
	if text != "applied as v2 — enforced by 0 of 2 proxies so far (2 pending)" || class != "notice warn" {
		t.Errorf("before any answer: %q (%s)", text, class)
	}
	p1.answer("")
	if text, class = enforcementLine(t, ctx, "1 of 2"); text != "applied as v2 — enforced by 1 of 2 proxies so far (1 pending)" || class != "notice warn" {
		t.Errorf("after p1's ACK: %q (%s)", text, class)
	}
	const why = "this proxy cannot compile tools/call rules for track_shipment"
	p2.answer(why)
	if text, class = enforcementLine(t, ctx, "refused"); text != "applied as v2 — enforced by 1 of 2 proxies (1 refused it)" || class != "notice bad" {
		t.Errorf("after p2's NACK: %q (%s)", text, class)
	}
	if nack := webtest.TextOf(t, ctx, `#enforcement-nacks li[data-proxy="p2"]`); nack != "p2 refused v2: "+why {
		t.Errorf("the NACK shows as %q", nack)
	}
	webtest.Screenshot(t, ctx, shots, "proposal-enforcement.png")

	// Opened later, the page says the same of the settled version.
	webtest.Act(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("proposal-title")))
	if text, _ = enforcementLine(t, ctx, "refused"); text != "applied as v2 — enforced by 1 of 2 proxies (1 refused it)" {
		t.Errorf("after a reload: %q", text)
	}
}

// With every proxy ACKing, the line says how long enforcement took.
func TestConsoleEnforcementComplete(t *testing.T) {
	e := start(t)
	px := connectHeldProxy(t, e, "p1")
	px.answer("")
	p, err := newClients(e.gw.URL, e.sandbox).advisor.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: trackShipment})
	if err != nil {
		t.Fatal(err)
	}
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the proposal", chromedp.WaitVisible(chromedp.ID("who-name")),
		chromedp.Navigate(fmt.Sprintf("%s/#/proposal/%d", e.gw.URL, p.GetId())), chromedp.WaitVisible(chromedp.ID("reason")))
	webtest.Act(t, ctx, "approve", chromedp.SendKeys(chromedp.ID("reason"), "tracking is read-only"), chromedp.Click(chromedp.ID("approve")))
	enforcementLine(t, ctx, "so far")
	px.answer("")
	text, class := enforcementLine(t, ctx, "enforced by 1 of 1 proxy")
	if !strings.HasPrefix(text, "applied as v2 — enforced by 1 of 1 proxy in ") || !strings.HasSuffix(text, " ms") || class != "notice ok" {
		t.Errorf("after the ACK: %q (%s)", text, class)
	}
}
