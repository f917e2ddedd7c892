package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/demo"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/web/webtest"
)

// consolePolicy allows lookup_order only; refund_order is simply not
// listed (a deny rule would make a proposal for it change nothing).
const consolePolicy = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: orders.example.com
        port: PORT
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
          - allow: { method: tools/list }
          - allow: { method: tools/call, tool: lookup_order }
    binaries: []
`

// TestConsoleApprovalEndToEnd is the approval workflow with real
// processes: a gateway and a proxy (the binaries), the demo orders MCP
// server, a real MCP client behind the proxy, and an operator in a real
// browser. The sandbox proposes refund_order through policy.local; the
// operator signs in to the console, opens the queue and the proposal,
// sees the finding and approves with a reason; the page follows the new
// version to the sandbox's two proxies live until both ACKed it, and the
// proxy then lets refund_order through. Freezing the sandbox afterwards
// (--wait: both proxies ACK deny-all) makes the proxy deny everything. Screenshots of the queue and the proposal page go to
// the test's temporary directory.
func TestConsoleApprovalEndToEnd(t *testing.T) {
	browser := webtest.Browser(t)
	shots := webtest.ScreenshotDir(t)

	upstream := httptest.NewServer(demo.OrdersHandler(&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true}))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	listen := "127.0.0.1:" + strconv.Itoa(freeLoopbackPort(t))
	gw := startGatewayProcess(t, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="},
		"--listen", listen, "--data-dir", filepath.Join(dir, "gateway"))
	defer gw.stop(t)
	gatewayURL := "http://" + gw.addr
	api := newPushAPI(gatewayURL)
	created, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{
		Name: "agent-1", Policy: strings.ReplaceAll(consolePolicy, "PORT", strconv.Itoa(upPort))})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := []string{"--gateway", gatewayURL, "--token", pushAdminToken}
	stdout, stderr, code := runCLI(t, append(admin, "token", "create", "--role", "operator", "--name", "olive", "-o", "json")...)
	if code != exitOK {
		t.Fatalf("token create: exit %d: %s", code, stderr)
	}
	var op struct{ Token string }
	if err := json.Unmarshal([]byte(stdout), &op); err != nil || op.Token == "" {
		t.Fatalf("token create answered %s: %v", stdout, err)
	}

	proxy := startProxyProcess(t, gatewayURL, tokenFile, filepath.Join(dir, "p1"), "p1", "PORTCULLIS_TEST_HOSTS=orders.example.com=127.0.0.1")
	defer proxy.stop(t)
	api.waitStatuses(t, []string{"p1"}, "version 1 applied", func(p *portcullisv1.ProxyStatus) bool { return p.GetAppliedVersion() == 1 })
	second := startProxyProcess(t, gatewayURL, tokenFile, filepath.Join(dir, "p2"), "p2")
	defer second.stop(t)
	api.waitStatuses(t, []string{"p2"}, "version 1 applied", func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() && p.GetAppliedVersion() == 1 })

	// The agent: a real MCP client behind the proxy.
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy.addr})}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	agent := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	session, err := agent.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: fmt.Sprintf("http://orders.example.com:%d/mcp", upPort), HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect to orders through the proxy: %v", err)
	}
	defer session.Close()
	refund := func() error {
		res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "A-1042"}})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		return err
	}
	if res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": "A-1042"}}); err != nil || res.IsError {
		t.Fatalf("lookup_order: %v, %v", res, err)
	}
	if err := refund(); err == nil || !strings.Contains(err.Error(), "refund_order") {
		t.Fatalf("refund_order before approval: %v, want denied", err)
	}

	// The sandbox proposes through policy.local (the agent holds no token).
	proposal := fmt.Sprintf(`{"rationale": "support may refund damaged orders", "operations": [{"add_allow_rules":
	  {"policy": "orders", "host": "orders.example.com", "port": %d, "path": "/mcp",
	   "rules": [{"allow": {"method": "tools/call", "tool": "refund_order"}}]}}]}`, upPort)
	res, err := hc.Post("http://policy.local/v1/proposals", "application/json", strings.NewReader(proposal))
	if err != nil {
		t.Fatal(err)
	}
	var filed struct {
		ID     json.Number `json:"id"` // policy.local's numbers are JSON numbers
		Status string      `json:"status"`
	}
	err = json.NewDecoder(res.Body).Decode(&filed)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusCreated || filed.Status != "pending" {
		t.Fatalf("policy.local proposal: %d %+v %v", res.StatusCode, filed, err)
	}

	// The operator, in the console.
	webtest.SignIn(t, browser, gatewayURL, op.Token)
	row := fmt.Sprintf(`#queue tr[data-id="%s"]`, filed.ID)
	webtest.Act(t, browser, "open the queue", chromedp.WaitVisible(chromedp.CSS(row)))
	if chip := webtest.TextOf(t, browser, row+" .finding-chip"); !strings.Contains(chip, "New MCP tool") {
		t.Errorf("the queue shows findings %q, want New MCP tool", chip)
	}
	webtest.Screenshot(t, browser, shots, "queue.png")
	webtest.Act(t, browser, "open the proposal",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`%s a[href="#/proposal/%s"]`, row, filed.ID))), chromedp.WaitVisible(chromedp.ID("proposal-title")))
	if kind := webtest.TextOf(t, browser, "#findings .finding-kind"); kind != "New MCP tool" {
		t.Errorf("finding %q, want New MCP tool", kind)
	}
	if ce := webtest.TextOf(t, browser, "#findings .counterexample .request"); !strings.Contains(ce, "refund_order") {
		t.Errorf("counterexample %q lacks refund_order", ce)
	}
	webtest.Screenshot(t, browser, shots, "proposal.png")
	webtest.Act(t, browser, "approve",
		chromedp.SendKeys(chromedp.ID("reason"), "damaged-goods refunds approved by the support lead"), chromedp.Click(chromedp.ID("approve")))
	approved := time.Now()
	msg := webtest.Value(t, browser, "the decision", chromedp.Poll[string](`(document.querySelector("#decision-result .notice.ok")?.textContent || "")`))
	if !strings.Contains(msg, "version 2") {
		t.Errorf("after approve the page says %q, want applied as version 2", msg)
	}
	// The page follows version 2 to the proxies until both ACKed it.
	line := webtest.Value(t, browser, "the enforcement line", chromedp.Poll[string](
		`(document.querySelector("#enforcement-line.notice.ok")?.textContent || "")`))
	if !strings.HasPrefix(line, "applied as v2 — enforced by 2 of 2 proxies in ") || !strings.HasSuffix(line, " ms") {
		t.Errorf("the enforcement line says %q", line)
	}
	t.Logf("the console: %s", line)
	webtest.Screenshot(t, browser, shots, "proposal-enforcement.png")

	// The proxy lets refund_order through once it applied version 2.
	if err := pollUntil(15*time.Second, func() bool { return refund() == nil }); err != nil {
		t.Fatalf("refund_order after approval: %v (last: %v)", err, refund())
	}
	t.Logf("refund_order allowed %v after the console's approve click", time.Since(approved).Round(time.Millisecond))
	statuses := api.waitStatuses(t, []string{"p1"}, "version 2 ACKed", func(p *portcullisv1.ProxyStatus) bool { return p.GetAppliedVersion() == 2 })
	t.Logf("proxy p1: version %d ACKed, commit-to-ACK lag %d ms", statuses["p1"].GetAppliedVersion(), statuses["p1"].GetLagMs())
	v, err := api.policy.GetPolicy(t.Context(), &portcullisv1.GetPolicyRequest{Sandbox: "agent-1"})
	if err != nil || v.GetSource() != "proposal" || v.GetProvenance()["approvers"] != "olive" {
		t.Fatalf("version 2: %v, %v", v, err)
	}

	// The kill switch: the operator freezes the sandbox; the proxy denies
	// everything.
	stdout, stderr, code = runCLI(t, "--gateway", gatewayURL, "--token", op.Token, "sandbox", "freeze", "agent-1", "--reason", "refund spree", "--wait")
	if code != exitOK || !strings.Contains(stdout, "version 3 enforced by 2 of 2 connected proxies") {
		t.Fatalf("freeze --wait: exit %d: %s%s", code, stdout, stderr)
	}
	frozen := time.Now()
	lookup := func() error {
		_, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": "A-1042"}})
		return err
	}
	if err := pollUntil(15*time.Second, func() bool { return lookup() != nil && refund() != nil }); err != nil {
		t.Fatalf("after freeze: %v", err)
	}
	t.Logf("the proxy denied everything %v after the freeze", time.Since(frozen).Round(time.Millisecond))
}

// pollUntil calls cond every 10 ms until it holds or d passes.
func pollUntil(d time.Duration, cond func() bool) error {
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", d)
		}
	}
	return nil
}
