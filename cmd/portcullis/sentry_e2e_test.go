package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/demo"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// TestSentryQuarantineEndToEnd is the quarantine lane with real
// processes: a gateway and a proxy (the binaries), the demo orders MCP
// server and a real MCP client behind the proxy. A watchdog with a sentry
// token posts a quarantine (remediate) for the sandbox; the proxy denies
// the agent's next MCP call; the sandbox shows it is frozen by that
// event; the gateway logs the time from ingest to the proxy's ACK and
// records it on the action.
func TestSentryQuarantineEndToEnd(t *testing.T) {
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
	stdout, stderr, code := runCLI(t, append(admin, "token", "create", "--role", "sentry", "--name", "sentry://dpu-7", "-o", "json")...)
	if code != exitOK {
		t.Fatalf("token create --role sentry: exit %d: %s", code, stderr)
	}
	var watchdog struct{ Token string }
	if err := json.Unmarshal([]byte(stdout), &watchdog); err != nil || watchdog.Token == "" {
		t.Fatalf("token create answered %s: %v", stdout, err)
	}

	proxy := startProxyProcess(t, gatewayURL, tokenFile, filepath.Join(dir, "p1"), "p1", "PORTCULLIS_TEST_HOSTS=orders.example.com=127.0.0.1")
	defer proxy.stop(t)
	api.waitStatuses(t, []string{"p1"}, "version 1 applied", func(p *portcullisv1.ProxyStatus) bool { return p.GetAppliedVersion() == 1 })

	// The agent: a real MCP client behind the proxy.
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy.addr})}
	defer tr.CloseIdleConnections()
	agent := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	session, err := agent.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: fmt.Sprintf("http://orders.example.com:%d/mcp", upPort), HTTPClient: &http.Client{Transport: tr}, DisableStandaloneSSE: true, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect to orders through the proxy: %v", err)
	}
	defer session.Close()
	lookup := func() error {
		res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": "A-1042"}})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		return err
	}
	if err := lookup(); err != nil {
		t.Fatalf("lookup_order before the quarantine: %v", err)
	}

	// The watchdog: one CloudEvent over HTTP, as curl would send it.
	event := fmt.Sprintf(`{"specversion": "1.0", "id": "q-0001", "source": "sentry://dpu-7", "sequence": 1,
	  "type": "portcullis.sentry.v1.quarantine", "subject": "agent-1", "time": %q,
	  "data": {"severity": "critical", "processing": "remediate",
	           "finding": {"title": "agent exfiltrating order data", "confidence": 0.98}}}`, time.Now().UTC().Format(time.RFC3339Nano))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, gatewayURL+"/v1/sentry/events", strings.NewReader(event))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set("Authorization", "Bearer "+watchdog.Token)
	sent := time.Now()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"stored":1`) || !strings.Contains(string(body), `"acked_sequence":1`) {
		t.Fatalf("POST /v1/sentry/events: %d %s", res.StatusCode, body)
	}

	// The proxy denies the agent's next call.
	if err := pollUntil(15*time.Second, func() bool { return lookup() != nil }); err != nil {
		t.Fatalf("lookup_order after the quarantine: %v", err)
	}
	t.Logf("the proxy denied lookup_order %v after the quarantine was posted", time.Since(sent).Round(time.Millisecond))

	var sb map[string]any
	out, stderr, code := runCLI(t, append(admin, "sandbox", "get", "agent-1", "-o", "json")...)
	if code != exitOK || json.Unmarshal([]byte(out), &sb) != nil {
		t.Fatalf("sandbox get: exit %d: %s\n%s", code, stderr, out)
	}
	if sb["frozen"] != true || sb["quarantine_event_id"] != "q-0001" || sb["quarantine_source"] != "sentry://dpu-7" ||
		!strings.Contains(fmt.Sprint(sb["frozen_reason"]), "agent exfiltrating order data") || sb["frozen_by"] != "sentry:sentry://dpu-7" {
		t.Fatalf("sandbox get after the quarantine: %v", sb)
	}

	// Ingest to the proxy's ACK: logged, and kept on the action.
	logged := regexp.MustCompile(`"msg":"sentry quarantine applied by every proxy".*"ingest_to_last_ack_ms":([0-9.]+)`)
	var m []string
	if err := pollUntil(15*time.Second, func() bool { m = logged.FindStringSubmatch(gw.stderr.String()); return m != nil }); err != nil {
		t.Fatalf("the gateway did not log the ingest-to-ACK time:\n%s", gw.stderr.String())
	}
	t.Logf("ingest to the last proxy's ACK: %s ms (gateway log)", m[1])
	acts, err := newSentryAPI(gatewayURL).ListActions(t.Context(), &portcullisv1.ListSentryActionsRequest{Sandbox: "agent-1"})
	if err != nil {
		t.Fatal(err)
	}
	if a := acts.GetActions(); len(a) != 1 || a[0].GetStatus() != "frozen" || a[0].GetAckedAt() == nil || a[0].GetVersion() != 2 {
		t.Fatalf("actions = %v, want one frozen at version 2 with its ACK time", a)
	}

	// The timeline: the event, the deny-all version it caused, and the
	// proxy's ACK of it, in that order.
	out, stderr, code = runCLI(t, append(admin, "sentry", "timeline", "agent-1")...)
	if code != exitOK {
		t.Fatalf("sentry timeline: exit %d: %s", code, stderr)
	}
	at := func(words ...string) int {
		for i, l := range strings.Split(out, "\n") {
			all := true
			for _, w := range words {
				all = all && strings.Contains(l, w)
			}
			if all {
				return i
			}
		}
		t.Fatalf("no timeline line has %q:\n%s", words, out)
		return -1
	}
	evLine := at("sentry_event", "quarantine from sentry://dpu-7")
	versionLine := at("version", "version 2 committed (freeze)")
	ackLine := at("ack", "applied version 2")
	if !(evLine < versionLine && versionLine < ackLine) {
		t.Errorf("timeline order: event line %d, version %d, ack %d; want them in that order:\n%s", evLine, versionLine, ackLine, out)
	}
	t.Logf("timeline:\n%s", out)
}

// newSentryAPI is the Sentry service as the push tests' admin.
func newSentryAPI(baseURL string) portcullisv1connect.SentryServiceClient {
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL), gatewaytest.Bearer(pushAdminToken))
	return portcullisv1connect.NewSentryServiceClient(c)
}
