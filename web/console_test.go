package web_test

// Browser tests of the console: a real gateway (gatewaytest, SQLite), a
// real headless Chromium driven by chromedp.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"github.com/chromedp/cdproto/network"
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

const ordersPolicy = `
version: 1
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
          - allow: { method: tools/call, tool: lookup_order }
    binaries: [ { path: /usr/bin/python3 } ]
`

// ordersPolicyV2 adds a REST endpoint to ordersPolicy.
const ordersPolicyV2 = ordersPolicy + `  status:
    name: status
    endpoints:
      - host: status.example.com
        port: 443
        protocol: rest
        rules:
          - allow: { method: GET, path: "/v1/health" }
    binaries: [ { path: /usr/bin/curl } ]
`

// clients are the Connect clients a test drives the gateway with.
type clients struct {
	sandbox  portcullisv1connect.SandboxServiceClient
	token    portcullisv1connect.TokenServiceClient
	policy   portcullisv1connect.PolicyServiceClient
	advisor  portcullisv1connect.AdvisorServiceClient
	approval portcullisv1connect.ApprovalServiceClient
}

func newClients(baseURL, token string) clients {
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL), gatewaytest.Bearer(token))
	return clients{
		sandbox:  portcullisv1connect.NewSandboxServiceClient(c),
		token:    portcullisv1connect.NewTokenServiceClient(c),
		policy:   portcullisv1connect.NewPolicyServiceClient(c),
		advisor:  portcullisv1connect.NewAdvisorServiceClient(c),
		approval: portcullisv1connect.NewApprovalServiceClient(c),
	}
}

// env is a gateway with an operator token ("ops-alice") and a sandbox
// ("support") on ordersPolicy.
type env struct {
	gw       *gatewaytest.Gateway
	admin    clients
	operator string
	sandbox  string // the sandbox's token
}

func start(t *testing.T, configure ...func(*gateway.Config)) *env {
	t.Helper()
	gw := gatewaytest.Start(t, "sqlite", configure...)
	admin := newClients(gw.URL, gatewaytest.AdminToken)
	op, err := admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: "ops-alice", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := admin.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "support", Policy: ordersPolicy})
	if err != nil {
		t.Fatal(err)
	}
	return &env{gw: gw, admin: admin, operator: op.GetToken(), sandbox: sb.GetToken()}
}

func sessionCookie(t *testing.T, ctx context.Context, baseURL string) *network.Cookie {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, webtest.StepTimeout)
	defer cancel()
	res, err := chromedp.Call(c, network.GetCookies, network.GetCookiesParams{URLs: []string{baseURL + "/"}})
	if err != nil {
		t.Fatalf("read cookies: %v", err)
	}
	for _, ck := range res.Cookies {
		if ck.Name == gateway.SessionCookie {
			return ck
		}
	}
	return nil
}

// fetchCode runs fetch in the page and returns the Connect error code of
// the answer, or "ok".
func fetchCode(t *testing.T, ctx context.Context, procedure string, header string) string {
	t.Helper()
	js := fmt.Sprintf(`fetch(%q, {method: "POST", credentials: "same-origin", headers: Object.assign({"Content-Type": "application/json"}, %s), body: "{}"})
		.then(r => r.ok ? "ok" : r.json().then(b => b.code || String(r.status)))`, procedure, header)
	return webtest.Value(t, ctx, "fetch "+procedure, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
}

func TestConsoleSignIn(t *testing.T) {
	e := start(t)
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	if who := webtest.TextOf(t, ctx, "#who-name"); who != "ops-alice" {
		t.Errorf("signed in as %q, want ops-alice", who)
	}
	if role := webtest.TextOf(t, ctx, "#who-role"); role != "operator" {
		t.Errorf("role shown %q, want operator", role)
	}
	// Signing in lands on the queue.
	if h := webtest.TextOf(t, ctx, "#queue h1"); h != "Approval queue" {
		t.Errorf("after sign-in the page shows %q, want the approval queue", h)
	}
	// The cookie, as the browser stored it: the page's scripts cannot
	// read it, and no other site's request carries it.
	c := sessionCookie(t, ctx, e.gw.URL)
	if c == nil {
		t.Fatal("no session cookie after sign-in")
	}
	if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Path != "/" {
		t.Errorf("session cookie httpOnly=%v sameSite=%q path=%q: want HttpOnly, Strict, /", c.HTTPOnly, c.SameSite, c.Path)
	}
	if got := webtest.Value(t, ctx, "document.cookie", chromedp.Evaluate[string](`document.cookie`)); strings.Contains(got, gateway.SessionCookie) {
		t.Errorf("the page's script can read the session cookie: %q", got)
	}

	// The page's own calls work; the same call with the cookie but
	// without the CSRF header is refused.
	if code := fetchCode(t, ctx, "/portcullis.v1.SandboxService/ListSandboxes", `{}`); code != "permission_denied" {
		t.Errorf("a cookie-only call = %q, want permission_denied", code)
	}
	csrf := gateway.CSRFToken(e.operator)
	if code := fetchCode(t, ctx, "/portcullis.v1.SandboxService/ListSandboxes", fmt.Sprintf(`{%q: %q}`, gateway.CSRFHeader, csrf)); code != "ok" {
		t.Errorf("a call with the CSRF header = %q, want ok", code)
	}

	// A reload keeps the session; signing out ends it.
	webtest.Act(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("who-name")))
	webtest.Act(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("signin")))
	if c := sessionCookie(t, ctx, e.gw.URL); c != nil {
		t.Errorf("the session cookie survived sign-out: %+v", c)
	}
}

func TestConsoleSandboxTokenCannotSignIn(t *testing.T) {
	e := start(t)
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.sandbox)
	if msg := webtest.WaitText(t, ctx, "signin-error"); !strings.Contains(msg, "a sandbox token cannot sign in to the console") {
		t.Errorf("sign-in message %q", msg)
	}
	if c := sessionCookie(t, ctx, e.gw.URL); c != nil {
		t.Errorf("a sandbox token got a session cookie: %+v", c)
	}
	if hidden := webtest.Value(t, ctx, "nav hidden", chromedp.Evaluate[bool](`document.getElementById("nav").hidden`)); !hidden {
		t.Error("the console's navigation shows after a refused sign-in")
	}
}

// crossSite is a page on another origin (another port of the same host:
// the same site, so SameSite=Strict alone would not keep the cookie off)
// that auto-submits a form to the gateway.
func crossSite(t *testing.T, forms map[string]string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	for path, form := range forms {
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html><html><body>%s<script>document.forms[0].submit()</script></body></html>`, form)
		})
	}
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// submitCrossSite opens the attacker's page and returns the status of the
// gateway's answer to the form it submits to action.
func submitCrossSite(t *testing.T, ctx context.Context, pageURL, action string) int64 {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, webtest.StepTimeout)
	defer cancel()
	responses := chromedp.Events(c, network.ResponseReceived) // subscribe before the trigger
	if err := chromedp.Do(c, chromedp.Navigate(pageURL)); err != nil {
		t.Fatalf("open %s: %v", pageURL, err)
	}
	for ev, err := range responses {
		if err != nil {
			t.Fatalf("waiting for the gateway's answer to %s: %v", pageURL, err)
		}
		// The form's answer is the next document; the console's own
		// fetches may still be answering.
		if ev.Type == network.ResourceTypeDocument && ev.Response.URL == action {
			return ev.Response.Status
		}
	}
	t.Fatalf("no answer from %s to the form of %s", action, pageURL)
	return 0
}

func TestConsoleRefusesCrossSiteForms(t *testing.T) {
	e := start(t)
	if _, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: ordersPolicyV2}); err != nil {
		t.Fatal(err)
	}
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, gatewaytest.AdminToken)
	if who := webtest.TextOf(t, ctx, "#who-role"); who != "admin" {
		t.Fatalf("signed in as %q", who)
	}
	evil := crossSite(t, map[string]string{
		// Login CSRF: sign the victim's browser in as someone else.
		"/signin": fmt.Sprintf(`<form method="post" action="%s/console/session"><input name="token" value="%s"></form>`, e.gw.URL, e.operator),
		// A state change through the API, with a JSON-looking text/plain
		// body and a form-encoded one.
		"/rollback-text": fmt.Sprintf(`<form method="post" enctype="text/plain" action="%s/portcullis.v1.PolicyService/RollbackPolicy"><input name='{"sandbox":"support","to_version":1,"x":"' value='"}'></form>`, e.gw.URL),
		"/rollback-form": fmt.Sprintf(`<form method="post" action="%s/portcullis.v1.PolicyService/RollbackPolicy"><input name="sandbox" value="support"><input name="to_version" value="1"></form>`, e.gw.URL),
	})

	if status := submitCrossSite(t, ctx, evil.URL+"/signin", e.gw.URL+gateway.SessionPath); status != http.StatusForbidden {
		t.Errorf("cross-site sign-in form answered %d, want 403", status)
	}
	if body := webtest.Value(t, ctx, "answer", chromedp.Evaluate[string](`document.body.innerText`)); !strings.Contains(body, "cross-origin request refused") {
		t.Errorf("cross-site sign-in answer: %q", body)
	}
	if c := sessionCookie(t, ctx, e.gw.URL); c == nil || c.Value != gatewaytest.AdminToken {
		t.Errorf("a cross-site form replaced the session: %+v", c)
	}
	for _, page := range []string{"/rollback-text", "/rollback-form"} {
		if status := submitCrossSite(t, ctx, evil.URL+page, e.gw.URL+"/portcullis.v1.PolicyService/RollbackPolicy"); status < 400 {
			t.Errorf("cross-site %s answered %d, want a refusal", page, status)
		}
	}
	cur, err := e.admin.policy.GetPolicy(t.Context(), &portcullisv1.GetPolicyRequest{Sandbox: "support"})
	if err != nil {
		t.Fatal(err)
	}
	if cur.GetVersion() != 2 {
		t.Errorf("after the cross-site forms the current version is %d, want 2 (nothing changed)", cur.GetVersion())
	}
	// The session still works for the console itself.
	webtest.Act(t, ctx, "back to the console", chromedp.Navigate(e.gw.URL+"/#/sandbox/support"), chromedp.WaitVisible(chromedp.ID("current-policy")))
	if h := webtest.TextOf(t, ctx, "#current-policy h2"); !strings.Contains(h, "v2") {
		t.Errorf("sandbox page heading %q, want v2", h)
	}
}

// proxy connects a proxy of the sandbox "support" over stock grpc-go, as
// the real one does, and answers the version it is sent: ACK, or NACK
// with nack as the error. It returns once ListProxies shows the answer.
func proxy(t *testing.T, e *env, id, nack string) {
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
	var sp *portcullisv1.SignedPolicy
	for sp == nil {
		res, err := st.Recv()
		if err != nil {
			t.Fatalf("proxy %s: receive: %v", id, err)
		}
		sp = res.GetPolicy()
	}
	answer := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Ack{Ack: &portcullisv1.PolicyAck{Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash()}}}
	if nack != "" {
		answer = &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Nack{Nack: &portcullisv1.PolicyNack{Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash(), Error: nack}}}
	}
	if err := st.Send(answer); err != nil {
		t.Fatal(err)
	}
	proxies := portcullisv1connect.NewProxyServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, e.gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := proxies.ListProxies(t.Context(), &portcullisv1.ListProxiesRequest{Sandbox: "support"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.GetProxies() {
			if p.GetProxyId() == id && (p.GetAppliedVersion() == sp.GetVersion() || p.GetLastNackVersion() == sp.GetVersion()) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy %s: its answer never showed in ListProxies: %v", id, res.GetProxies())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConsoleSandboxPage(t *testing.T) {
	e := start(t)
	if _, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: ordersPolicyV2}); err != nil {
		t.Fatal(err)
	}
	// Two proxies: one applies v2 (ACK), one refuses it (NACK).
	proxy(t, e, "proxy-ack", "")
	proxy(t, e, "proxy-nack", "unknown field network_policies.status.frobnicate")
	ctx := webtest.Browser(t)

	// An operator reads everything, and sees why a rollback is refused.
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the sandbox", chromedp.WaitVisible(chromedp.ID("who-name")), chromedp.Navigate(e.gw.URL+"/#/sandbox/support"), chromedp.WaitVisible(chromedp.ID("history")))
	if h := webtest.TextOf(t, ctx, "#current-policy h2"); !strings.Contains(h, "v2") {
		t.Errorf("current policy heading %q, want v2", h)
	}
	if doc := webtest.TextOf(t, ctx, "#current-policy pre"); !strings.Contains(doc, "status.example.com") {
		t.Errorf("current policy document lacks the v2 endpoint: %q", doc)
	}
	if p := webtest.TextOf(t, ctx, `#proxies tr[data-proxy="proxy-ack"]`); !strings.Contains(p, "connected") || !strings.Contains(p, "v2") || !strings.Contains(p, "ACK") {
		t.Errorf("the proxy that applied v2 shows %q", p)
	}
	if p := webtest.TextOf(t, ctx, `#proxies tr[data-proxy="proxy-nack"]`); !strings.Contains(p, "NACK v2") || !strings.Contains(p, "unknown field network_policies.status.frobnicate") {
		t.Errorf("the proxy that refused v2 shows %q", p)
	}
	webtest.Act(t, ctx, "diff v1 v2", chromedp.Click(chromedp.ID("diff-button")), chromedp.WaitVisible(chromedp.CSS("#history-diff .line.add")))
	webtest.Screenshot(t, ctx, webtest.ScreenshotDir(t), "sandbox.png")
	if added := webtest.TextOf(t, ctx, "#history-diff .line.add"); !strings.Contains(added, "+") || !strings.Contains(webtest.TextOf(t, ctx, "#history-diff"), "status") {
		t.Errorf("diff v1→v2: added line %q", added)
	}
	webtest.Act(t, ctx, "operator rollback", chromedp.Click(chromedp.CSS(`button[data-rollback="1"]`)), chromedp.Click(chromedp.CSS(`button[data-confirm-rollback="1"]`)))
	if msg := webtest.WaitText(t, ctx, "rollback-result"); !strings.Contains(msg, "an operator token cannot roll back policies") {
		t.Errorf("operator rollback message %q, want the permission error", msg)
	}

	// Any operator may pull the kill switch; unfreezing is an admin's.
	webtest.Act(t, ctx, "freeze", chromedp.Click(chromedp.ID("freeze-start")),
		chromedp.SendKeys(chromedp.ID("freeze-reason"), "agent exfiltrating order data"), chromedp.Click(chromedp.ID("freeze-confirm")))
	if msg := webtest.Value(t, ctx, "freeze result", chromedp.Poll[string](`(document.querySelector("#freeze-result .notice")?.textContent || "")`)); !strings.Contains(msg, "support is frozen") {
		t.Errorf("after freeze: %q", msg)
	}
	sb, err := e.admin.sandbox.GetSandbox(t.Context(), &portcullisv1.GetSandboxRequest{Name: "support"})
	if err != nil {
		t.Fatal(err)
	}
	if !sb.GetFrozen() || sb.GetFrozenReason() != "agent exfiltrating order data" || sb.GetFrozenBy() != "ops-alice" {
		t.Errorf("after the console's freeze: frozen=%v reason %q by %q", sb.GetFrozen(), sb.GetFrozenReason(), sb.GetFrozenBy())
	}
	webtest.Act(t, ctx, "operator unfreeze", chromedp.Click(chromedp.ID("freeze-start")),
		chromedp.SendKeys(chromedp.ID("freeze-reason"), "false alarm"), chromedp.Click(chromedp.ID("freeze-confirm")))
	if msg := webtest.Value(t, ctx, "unfreeze result", chromedp.Poll[string](`(document.querySelector("#freeze-result .notice.bad")?.textContent || "")`)); !strings.Contains(msg, "an operator token cannot unfreeze sandboxes") {
		t.Errorf("operator unfreeze: %q", msg)
	}
	if _, err := e.admin.sandbox.UnfreezeSandbox(t.Context(), &portcullisv1.UnfreezeSandboxRequest{Name: "support", Reason: "false alarm"}); err != nil {
		t.Fatal(err)
	}

	// An admin rolls back.
	before, err := e.admin.policy.GetPolicy(t.Context(), &portcullisv1.GetPolicyRequest{Sandbox: "support"})
	if err != nil {
		t.Fatal(err)
	}
	want := before.GetVersion() + 1
	webtest.Act(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("signin")))
	webtest.SignIn(t, ctx, e.gw.URL, gatewaytest.AdminToken)
	webtest.Act(t, ctx, "admin rollback", chromedp.WaitVisible(chromedp.ID("who-name")),
		chromedp.Navigate(e.gw.URL+"/#/sandbox/support"), chromedp.WaitVisible(chromedp.ID("history")),
		chromedp.Click(chromedp.CSS(`button[data-rollback="1"]`)), chromedp.Click(chromedp.CSS(`button[data-confirm-rollback="1"]`)))
	if msg := webtest.WaitText(t, ctx, "rollback-result"); !strings.Contains(msg, fmt.Sprintf("version %d", want)) {
		t.Errorf("admin rollback message %q", msg)
	}
	cur, err := e.admin.policy.GetPolicy(t.Context(), &portcullisv1.GetPolicyRequest{Sandbox: "support"})
	if err != nil {
		t.Fatal(err)
	}
	if cur.GetVersion() != want || cur.GetSource() == "" {
		t.Errorf("after rollback: v%d source %q, want v%d", cur.GetVersion(), cur.GetSource(), want)
	}
}

func TestConsoleAuditPage(t *testing.T) {
	e := start(t)
	ctx := webtest.Browser(t)
	webtest.SignIn(t, ctx, e.gw.URL, e.operator)
	webtest.Act(t, ctx, "open the audit log", chromedp.WaitVisible(chromedp.ID("who-name")),
		chromedp.Navigate(e.gw.URL+"/#/audit"), chromedp.WaitVisible(chromedp.CSS("#audit tbody tr")))
	if rows := webtest.TextOf(t, ctx, "#audit tbody"); !strings.Contains(rows, "support") || !strings.Contains(rows, "ops-alice") {
		t.Errorf("the audit log lacks the sandbox's creation or the token's: %q", rows)
	}
	webtest.Act(t, ctx, "verify", chromedp.Click(chromedp.ID("verify")))
	if msg := webtest.WaitText(t, ctx, "verify-result"); !strings.Contains(msg, "The chain holds") {
		t.Errorf("verify: %q", msg)
	}
	webtest.Screenshot(t, ctx, webtest.ScreenshotDir(t), "audit.png")
	// Narrowed to one sandbox.
	webtest.Act(t, ctx, "filter", chromedp.SendKeys(chromedp.ID("audit-sandbox"), "nosuch\r"),
		chromedp.WaitVisible(chromedp.CSS("#audit p.muted")))
	if msg := webtest.TextOf(t, ctx, "#audit p.muted"); msg != "No entries." {
		t.Errorf("audit for an unknown sandbox: %q", msg)
	}
}
