package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/demo"
	"github.com/portcullis-dev/portcullis/internal/ocsf/ocsftest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// scenarioPolicy: GET /v1/** on a REST upstream, an uninspected tunnel
// (L4) to a TLS upstream, and the demo orders MCP server with
// lookup_order allowed once a minute (refund_order not listed).
const scenarioPolicy = `version: 1
network_policies:
  api:
    name: api
    endpoints:
      - host: 127.0.0.1
        port: REST_PORT
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/v1/**" }
  tunnel:
    name: tunnel
    endpoints:
      - host: 127.0.0.1
        port: TLS_PORT
  orders:
    name: orders
    endpoints:
      - host: 127.0.0.1
        port: MCP_PORT
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
          - allow: { method: tools/list }
          - allow: { method: tools/call, tool: lookup_order, rate_limit: { requests_per_minute: 1, burst: 1 } }
`

// trackingRule is a second proposal, to be rejected.
const trackingRule = `rationale: parcel tracking
operations:
  - add_rule:
      name: tracking
      rule: { endpoints: [ { host: track.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: "/v1/parcels/*" } } ] } ], binaries: [ { path: /usr/bin/python3 } ] }
`

// ocsfKind is one kind of event the scenario must produce: where, and
// how to recognise it.
type ocsfKind struct {
	name  string
	proxy bool // in the proxy's file, else the gateway's
	dry   bool // in the dry-run gateway's file
	match func(map[string]any) bool
}

// TestOCSFScenarioEndToEnd is issue 34's OCSF acceptance over a full
// scenario with real processes: a gateway and a proxy with --ocsf-file,
// and a second gateway with --sentry-dry-run. Through the proxy: plain
// HTTP allowed and denied, a CONNECT tunnel allowed and one denied, MCP
// tools/list, tools/call allowed, denied and over its rate limit (a
// real MCP client and server). On the gateway: a policy set, a proposal
// approved and another rejected, a token created and revoked, and Sentry
// quarantines ending in every status an action can have (frozen,
// already_frozen, failed, held then dismissed, held then applied,
// dry_run) plus a replayed one refused. Every line of the three files
// validates against OCSF 1.8.0 as OCSF's validator reads it (profiles
// honoured) without its enum-sibling warnings, and every kind of event
// appears, recognised by class, activity and a field of its own (no
// counts: a flood may be summarised).
func TestOCSFScenarioEndToEnd(t *testing.T) {
	rest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer rest.Close()
	tlsUp := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tunnelled") }))
	defer tlsUp.Close()
	mcpUp := httptest.NewServer(demo.OrdersHandler(&mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true}))
	defer mcpUp.Close()
	port := func(s *httptest.Server) int { return s.Listener.Addr().(*net.TCPAddr).Port }
	restPort, tlsPort, mcpPort, closedPort := port(rest), port(tlsUp), port(mcpUp), freeLoopbackPort(t)
	policy := strings.NewReplacer("REST_PORT", strconv.Itoa(restPort), "TLS_PORT", strconv.Itoa(tlsPort),
		"MCP_PORT", strconv.Itoa(mcpPort)).Replace(scenarioPolicy)

	dir := t.TempDir()
	gwFile, pxFile, dryFile := filepath.Join(dir, "gateway.ocsf.jsonl"), filepath.Join(dir, "proxy.ocsf.jsonl"), filepath.Join(dir, "dry.ocsf.jsonl")
	noDB := []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="}
	// A budget of one freeze: the second sandbox to be quarantined is held.
	gw := startGatewayProcess(t, noDB, "--data-dir", filepath.Join(dir, "gateway"), "--ocsf-file", gwFile, "--quarantine-budget", "1")
	gatewayURL := "http://" + gw.addr
	api := newPushAPI(gatewayURL)
	created, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	px := startOCSFProxy(t, gatewayURL, tokenFile, filepath.Join(dir, "p1"), "p1", "--ocsf-file", pxFile)
	api.waitStatuses(t, []string{"p1"}, "version 1 applied", func(p *portcullisv1.ProxyStatus) bool {
		return p.GetConnected() && p.GetAppliedVersion() == 1
	})

	// Plain HTTP, allowed and denied.
	px.wantStatus(t, rest.URL, "/v1/a", 200)
	if got := px.get(t, rest.URL, "/v2/denied"); got != 403 {
		t.Fatalf("GET /v2/denied: %d, want 403", got)
	}

	// A CONNECT tunnel to the TLS upstream, and one to a port the policy
	// does not name.
	tr := tlsUp.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: px.addr})
	tr.DisableKeepAlives = true
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(tlsUp.URL + "/through")
	if err != nil {
		t.Fatalf("GET %s through the tunnel: %v", tlsUp.URL, err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(body) != "tunnelled" {
		t.Fatalf("through the tunnel: %d %q", res.StatusCode, body)
	}
	if got := rawConnect(t, px.addr, fmt.Sprintf("127.0.0.1:%d", closedPort)); got != 403 {
		t.Fatalf("CONNECT to port %d: %d, want 403", closedPort, got)
	}

	// MCP through the proxy: tools/list, lookup_order allowed, refund_order
	// denied, lookup_order again over its rate limit.
	mcpTr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: px.addr})}
	defer mcpTr.CloseIdleConnections()
	session, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", mcpPort), HTTPClient: &http.Client{Transport: mcpTr}, DisableStandaloneSSE: true, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect to orders through the proxy: %v", err)
	}
	defer session.Close()
	if _, err := session.ListTools(t.Context(), nil); err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	call := func(tool string) error {
		res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"order_id": "A-1042"}})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		return err
	}
	if err := call("lookup_order"); err != nil {
		t.Fatalf("lookup_order: %v", err)
	}
	if err := call("refund_order"); err == nil {
		t.Fatal("refund_order: allowed, want denied")
	}
	if err := call("lookup_order"); err == nil {
		t.Fatal("lookup_order a second time within the minute: allowed, want rate limited")
	}

	// A policy set; a proposal approved, another rejected; a token created
	// and revoked.
	policy2 := policy + `  extra:
    name: extra
    endpoints:
      - host: 127.0.0.1
        port: REST_PORT
        protocol: rest
        rules:
          - allow: { method: GET, path: "/v3/**" }
`
	api.set(t, strings.ReplaceAll(policy2, "REST_PORT", strconv.Itoa(restPort)))
	sbEnv := []string{"PORTCULLIS_GATEWAY=" + gatewayURL, "PORTCULLIS_TOKEN=" + created.GetToken()}
	adminEnv := []string{"PORTCULLIS_GATEWAY=" + gatewayURL, "PORTCULLIS_TOKEN=" + pushAdminToken}
	propose := func(doc string) string {
		t.Helper()
		out, code := runBinary(t, sbEnv, "propose", "-o", "json", "-f", writeFile(t, "proposal.yaml", doc))
		if code != 0 {
			t.Fatalf("propose: exit %d\n%s", code, out)
		}
		var prop map[string]any
		if err := json.Unmarshal([]byte(out), &prop); err != nil {
			t.Fatalf("propose output: %v\n%s", err, out)
		}
		return fmt.Sprint(prop["id"])
	}
	approved := propose(shippingRule)
	if out, code := runBinary(t, adminEnv, "proposals", "approve", approved, "--reason", "carrier status"); code != 0 {
		t.Fatalf("approve: exit %d\n%s", code, out)
	}
	rejected := propose(trackingRule)
	if out, code := runBinary(t, adminEnv, "proposals", "reject", rejected, "--reason", "use the carrier's API"); code != 0 {
		t.Fatalf("reject: exit %d\n%s", code, out)
	}
	admin := []string{"--gateway", gatewayURL, "--token", pushAdminToken}
	mustRun := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := runCLI(t, append(admin, args...)...)
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		return stdout
	}
	mustRun("token", "create", "--role", "operator", "--name", "olive", "-o", "json")
	mustRun("token", "revoke", "olive")

	// Sentry: a watchdog quarantines sandboxes.
	for _, sb := range []string{"victim-a", "victim-b", "victim-c"} {
		if _, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: sb, Policy: pushDoc(restPort, "v1")}); err != nil {
			t.Fatal(err)
		}
	}
	dpu := sentryToken(t, gatewayURL, pushAdminToken)
	quarantine := func(id string, seq int, subject string) string {
		return fmt.Sprintf(`{"specversion": "1.0", "id": %q, "source": %q, "sequence": %d,
		  "type": "portcullis.sentry.v1.quarantine", "subject": %q, "time": %q,
		  "data": {"severity": "critical", "processing": "remediate", "finding": {"title": "exfiltration", "confidence": 0.9}}}`,
			id, watchdog, seq, subject, time.Now().UTC().Format(time.RFC3339Nano))
	}
	postSentry(t, gatewayURL, dpu, quarantine("q-1", 1, "victim-a"), false) // frozen: the budget's one freeze
	postSentry(t, gatewayURL, dpu, quarantine("q-2", 2, "victim-a"), false) // already_frozen
	postSentry(t, gatewayURL, dpu, quarantine("q-3", 3, "ghost"), false)    // failed: no such sandbox
	postSentry(t, gatewayURL, dpu, quarantine("q-4", 4, "victim-b"), false) // held: the budget is spent
	postSentry(t, gatewayURL, dpu, quarantine("q-5", 5, "victim-c"), false) // held
	postSentry(t, gatewayURL, dpu, quarantine("q-6", 1, "victim-b"), true)  // refused: sequence 1 replayed
	held := map[string]string{}                                             // event id → action id
	var actions struct {
		Actions []struct {
			ID      json.Number `json:"id"`
			EventID string      `json:"event_id"`
			Status  string      `json:"status"`
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(mustRun("sentry", "actions", "--status", "held", "-o", "json")), &actions); err != nil {
		t.Fatal(err)
	}
	for _, a := range actions.Actions {
		held[a.EventID] = a.ID.String()
	}
	if held["q-4"] == "" || held["q-5"] == "" {
		t.Fatalf("held actions %v; want q-4 and q-5 held", held)
	}
	mustRun("sentry", "decide", held["q-4"], "--dismiss", "--reason", "false positive")
	mustRun("sentry", "decide", held["q-5"], "--freeze", "--reason", "confirmed")

	// A gateway running dry records what it would have frozen.
	dry := startGatewayProcess(t, noDB, "--data-dir", filepath.Join(dir, "dry"), "--ocsf-file", dryFile, "--sentry-dry-run")
	dryURL := "http://" + dry.addr
	if _, err := newPushAPI(dryURL).sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "victim-d", Policy: pushDoc(restPort, "v1")}); err != nil {
		t.Fatal(err)
	}
	postSentry(t, dryURL, sentryToken(t, dryURL, pushAdminToken), quarantine("q-7", 1, "victim-d"), false)

	// remediation: what the gateway did about quarantine event id, with
	// the status and disposition docs/ocsf.md gives for it.
	remediation := func(id, status string, statusID, disposition float64) func(map[string]any) bool {
		return func(e map[string]any) bool {
			return e["class_uid"] == float64(7001) && e["activity_id"] == float64(1) && unmapped(e, "status") == status &&
				dig(e, "metadata", "correlation_uid") == watchdog+"/"+id && e["status_id"] == statusID && e["disposition_id"] == disposition
		}
	}
	decision := func(class, activity float64, verdict string, ok func(map[string]any) bool) func(map[string]any) bool {
		return func(e map[string]any) bool {
			action := float64(2)
			if verdict == "allow" {
				action = 1
			}
			return e["class_uid"] == class && e["activity_id"] == activity && e["action_id"] == action &&
				unmapped(e, "decision") == verdict && ok(e)
		}
	}
	path := func(p string) func(map[string]any) bool {
		return func(e map[string]any) bool { return dig(e, "http_request", "url", "path") == p }
	}
	dstPort := func(p int) func(map[string]any) bool {
		return func(e map[string]any) bool { return dig(e, "dst_endpoint", "port") == float64(p) }
	}
	mcpCall := func(op, tool string) func(map[string]any) bool {
		return func(e map[string]any) bool {
			if dig(e, "api", "operation") != op || dig(e, "dst_endpoint", "port") != float64(mcpPort) {
				return false
			}
			if tool == "" {
				return true
			}
			rs, _ := e["resources"].([]any)
			if len(rs) == 0 {
				return false
			}
			r, _ := rs[0].(map[string]any)
			return r["name"] == tool && r["type"] == "mcp_tool"
		}
	}
	audit := func(action, activity string, ok func(map[string]any) bool) func(map[string]any) bool {
		return func(e map[string]any) bool {
			return e["class_uid"] == float64(3004) && unmapped(e, "action") == action && e["activity_name"] == activity && ok(e)
		}
	}
	target := func(v string) func(map[string]any) bool {
		return func(e map[string]any) bool { return unmapped(e, "target") == v }
	}
	kinds := []ocsfKind{
		{"HTTP allowed", true, false, decision(4002, 3, "allow", path("/v1/a"))},
		{"HTTP denied", true, false, decision(4002, 3, "deny", path("/v2/denied"))},
		{"CONNECT allowed", true, false, decision(4002, 1, "allow", dstPort(tlsPort))},
		{"CONNECT denied", true, false, decision(4002, 1, "deny", dstPort(closedPort))},
		{"MCP tools/list", true, false, decision(6003, 2, "allow", mcpCall("tools/list", ""))},
		{"MCP tools/call allowed", true, false, decision(6003, 99, "allow", mcpCall("tools/call", "lookup_order"))},
		{"MCP tools/call denied", true, false, decision(6003, 99, "deny", mcpCall("tools/call", "refund_order"))},
		{"MCP tools/call rate limited", true, false, decision(6003, 99, "rate_limited", mcpCall("tools/call", "lookup_order"))},
		{"policy set", false, false, audit("policy.set", "Update", func(e map[string]any) bool {
			return dig(e, "unmapped", "detail", "source") == "set" && dig(e, "entity_result", "data", "hash") != nil
		})},
		{"proposal submitted", false, false, audit("proposal.submit", "Create", target(rejected))},
		{"proposal approved", false, false, audit("proposal.approve", "Approve", target(approved))},
		{"proposal applied", false, false, audit("proposal.apply", "Update", target(approved))},
		{"proposal rejected", false, false, audit("proposal.status", "Reject", target(rejected))},
		{"proposal finding", false, false, func(e map[string]any) bool {
			return e["class_uid"] == float64(2004) && dig(e, "finding_info", "uid") == rejected && dig(e, "metadata", "uid") == "proposal-"+rejected
		}},
		{"token created", false, false, audit("token.create", "Create", target("olive"))},
		{"token revoked", false, false, audit("token.revoke", "Delete", target("olive"))},
		{"sentry quarantine finding", false, false, func(e map[string]any) bool {
			return e["class_uid"] == float64(2004) && dig(e, "metadata", "uid") == watchdog+"/q-1"
		}},
		{"sentry frozen", false, false, remediation("q-1", "frozen", 1, 4)},
		{"sentry already_frozen", false, false, remediation("q-2", "already_frozen", 1, 16)},
		{"sentry failed", false, false, remediation("q-3", "failed", 3, 27)},
		{"sentry held", false, false, remediation("q-4", "held", 99, 14)},
		{"sentry dismissed", false, false, remediation("q-4", "dismissed", 99, 16)},
		{"sentry applied", false, false, remediation("q-5", "applied", 1, 4)},
		{"sentry refused", false, false, audit("sentry.refused", "Refuse", func(e map[string]any) bool {
			detail, _ := dig(e, "unmapped", "detail", "event_0").(string)
			return e["status_id"] == float64(2) && strings.HasPrefix(detail, "q-6: ")
		})},
		{"sentry dry_run", false, true, remediation("q-7", "dry_run", 99, 17)},
		{"sentry action audited, failed", false, false, audit("sentry.action", "Remediate", func(e map[string]any) bool {
			return dig(e, "unmapped", "detail", "status") == "failed" && e["status_id"] == float64(2)
		})},
		{"sentry action audited, dry run", false, true, audit("sentry.action", "Remediate", func(e map[string]any) bool {
			return dig(e, "unmapped", "detail", "status") == "dry_run" && e["status_id"] == float64(1)
		})},
	}
	fileOf := func(k ocsfKind) string {
		switch {
		case k.proxy:
			return pxFile
		case k.dry:
			return dryFile
		}
		return gwFile
	}
	missing := func() []string {
		events := map[string][]map[string]any{}
		for _, f := range []string{gwFile, pxFile, dryFile} {
			events[f] = scanOCSF(f)
		}
		var out []string
		for _, k := range kinds {
			if !slices.ContainsFunc(events[fileOf(k)], k.match) {
				out = append(out, k.name)
			}
		}
		return out
	}
	// The proxy emits as it decides, the gateway reads its audit log
	// every second.
	if err := pollUntil(30*time.Second, func() bool { return len(missing()) == 0 }); err != nil {
		t.Errorf("kinds of events never emitted: %s", strings.Join(missing(), ", "))
	}
	px.stop(t)
	gw.stop(t)
	dry.stop(t)

	// Every line of every file validates (readOCSF) without the
	// warnings OCSF's validator gives about enum siblings, and is counted.
	var lines int
	classes := map[string]map[float64]int{}
	for _, f := range []string{gwFile, pxFile, dryFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
			if warnings, err := ocsftest.Check([]byte(line)); err == nil && len(warnings) > 0 {
				t.Errorf("%s: OCSF's validator would warn: %s\n%s", filepath.Base(f), strings.Join(warnings, "; "), line)
			}
		}
		events := readOCSF(t, f)
		lines += len(events)
		classes[filepath.Base(f)] = map[float64]int{}
		for _, e := range events {
			c, _ := e["class_uid"].(float64)
			classes[filepath.Base(f)][c]++
		}
	}
	t.Logf("%d OCSF events validated; per file and class: %v", lines, classes)
}

// rawConnect sends CONNECT target through the proxy at addr and returns
// the status of its answer.
func rawConnect(t *testing.T, addr, target string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	res, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	res.Body.Close()
	return res.StatusCode
}

// postSentry posts one CloudEvent to the gateway's Sentry intake; refused
// says whether the intake should refuse it.
func postSentry(t *testing.T, gatewayURL, token, event string, refused bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, gatewayURL+"/v1/sentry/events", strings.NewReader(event))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if got := strings.Contains(string(b), `"refused":[{`) || res.StatusCode != http.StatusOK; got != refused {
		t.Fatalf("POST /v1/sentry/events: %d %s; want refused %v", res.StatusCode, b, refused)
	}
}

// scanOCSF reads the events of an OCSF JSON-lines file as they are now
// (none while it does not exist).
func scanOCSF(path string) []map[string]any {
	b, _ := os.ReadFile(path)
	var out []map[string]any
	for _, line := range strings.Split(string(b), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}
