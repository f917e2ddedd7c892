package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/demo"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
)

// schemaPolicy guards lookup_order with the article's schema: order ids
// like A-1042 only.
const schemaPolicy = `
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
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema:
                type: object
                properties: { order_id: { type: string, pattern: "^[A-Z]-\\d{4}$" } }
                required: [order_id]
                additionalProperties: false
    binaries: []
`

// TestSchemaDenialProposalEndToEnd is issue 14's item 4 with real parts: a
// gateway, a proxy following it, the demo orders MCP server and a real MCP
// client behind the proxy. lookup_order {"order_id": "x"} is denied by the
// arguments_schema; it becomes a pending proposal with arguments_widened
// through policy.local, REST and MCP (the proxy supplies the arguments it
// kept), and
// through `propose --from-denial --arguments` (checked against the
// record's digest: other arguments, or none, are refused and nothing is
// stored). Approving it lets exactly that call through; order_id "y" is
// still denied and never reaches the server.
func TestSchemaDenialProposalEndToEnd(t *testing.T) {
	var mu sync.Mutex
	var seen []string // order ids the upstream received
	orders := demo.OrdersHandler(&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"tools/call"`) {
			var m struct {
				Params struct {
					Arguments struct {
						OrderID string `json:"order_id"`
					} `json:"arguments"`
				} `json:"params"`
			}
			json.Unmarshal(body, &m)
			mu.Lock()
			seen = append(seen, m.Params.Arguments.OrderID)
			mu.Unlock()
		}
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		orders.ServeHTTP(w, r)
	}))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port
	upstreamSaw := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(seen, "\n")+"\n", id+"\n")
	}

	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	file := writeFile(t, "policy.yaml", strings.ReplaceAll(schemaPolicy, "PORT", strconv.Itoa(upPort)))
	created := jsonOut(t, gw, admin, "sandbox", "create", "agent-1", "-f", file)
	token, _ := created["token"].(string)
	proxy, addr := startTestProxy(t, gw.URL, "agent-1", token)
	waitUntil(t, "the proxy to apply version 1", func() bool { return proxy.PolicyVersion() == "1" })

	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}
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
	lookup := func(id string) error {
		res, err := session.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": id}})
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		return err
	}
	if err := lookup("A-1042"); err != nil {
		t.Fatalf("lookup_order A-1042: %v", err)
	}
	if err := lookup("x"); err == nil || !strings.Contains(err.Error(), "arguments_schema") {
		t.Fatalf("lookup_order x = %v; want denied by the arguments_schema", err)
	}
	if upstreamSaw("x") {
		t.Fatal("the upstream saw the denied call")
	}

	// policy.local lists the denial with the narrowest suggestion: a rule
	// admitting exactly {"order_id": "x"}.
	local := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, "http://policy.local"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return res.StatusCode, out
	}
	code, denials := local(http.MethodGet, "/v1/denials", "")
	list, _ := denials["denials"].([]any)
	if code != http.StatusOK || len(list) == 0 {
		t.Fatalf("GET /v1/denials = %d %v", code, denials)
	}
	denial, _ := list[0].(map[string]any)
	denialID, _ := denial["denial_id"].(string)
	suggestion, _ := json.Marshal(denial["suggestion"])
	if denial["tool"] != "lookup_order" || !strings.Contains(string(suggestion), `"arguments_schema":{"const":{"order_id":"x"}}`) {
		t.Fatalf("denial %v: want lookup_order with a const suggestion, got %s", denial, suggestion)
	}

	// The gateway's record holds the digest, never the arguments.
	var digest string
	waitUntil(t, "the denial to reach the gateway", func() bool {
		logs := jsonOut(t, gw, admin, "logs", "agent-1", "--decision", "deny")
		ds, _ := logs["decisions"].([]any)
		for _, d := range ds {
			rec, _ := d.(map[string]any)["record"].(map[string]any)
			if rec["denial_id"] == denialID {
				digest, _ = rec["arguments_digest"].(string)
				raw, _ := json.Marshal(rec)
				if strings.Contains(string(raw), `"x"`) {
					t.Errorf("the stored record carries the arguments: %s", raw)
				}
			}
		}
		return digest != ""
	})
	if want, _ := policy.ArgumentsDigest([]byte(`{"order_id":"x"}`)); digest != want {
		t.Fatalf("record digest %q, want %q", digest, want)
	}

	pendingWithWidened := func(p map[string]any) {
		t.Helper()
		if p["status"] != "pending" || p["denial_id"] != denialID {
			t.Fatalf("proposal %v: want pending, from %s", p, denialID)
		}
		findings, _ := p["findings"].([]any)
		widened := false
		for _, f := range findings {
			f := f.(map[string]any)
			if f["kind"] != "arguments_widened" {
				t.Errorf("unexpected finding %v", f)
				continue
			}
			widened = true
			ce, _ := f["counterexample"].(map[string]any)
			if ce["tool"] != "lookup_order" || ce["arguments"] != `{"order_id":"x"}` {
				t.Errorf("arguments_widened counterexample %v: want lookup_order with the denied arguments", ce)
			}
		}
		if !widened {
			t.Fatalf("findings %v: want arguments_widened", findings)
		}
	}

	// Path 1: the agent, through policy.local, names only the denial.
	code, viaLocal := local(http.MethodPost, "/v1/proposals", `{"denial_id":"`+denialID+`","rationale":"order x is a legacy id"}`)
	if code != http.StatusCreated {
		t.Fatalf("POST policy.local/v1/proposals = %d %v", code, viaLocal)
	}
	pendingWithWidened(viaLocal)
	jsonOut(t, gw, token, "proposals", "withdraw", fmt.Sprint(viaLocal["id"]))

	// The same through policy.local's MCP server, tool propose.
	plClient := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	pl, err := plClient.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: "http://policy.local/mcp", HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatalf("connect to policy.local/mcp: %v", err)
	}
	defer pl.Close()
	res, err := pl.CallTool(t.Context(), &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{"denial_id": denialID, "rationale": "legacy id"}})
	if err != nil || res.IsError {
		t.Fatalf("policy.local/mcp propose = %v, %v", res, err)
	}
	var viaMCP map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &viaMCP); err != nil {
		t.Fatal(err)
	}
	pendingWithWidened(viaMCP)
	jsonOut(t, gw, token, "proposals", "withdraw", fmt.Sprint(viaMCP["id"]))

	// Path 2: `propose --from-denial`: without the arguments, or with
	// others than the denied ones, refused (exit 2, naming the field) and
	// nothing stored.
	before := proposalCount(t, gw, token)
	for _, extra := range [][]string{nil, {"--arguments", `{"order_id":"y"}`}, {"--arguments", `{"order_id":"x","all":true}`}, {"--arguments", `["x"]`}} {
		_, stderr, code := cliAgainst(t, gw, token, append([]string{"propose", "--from-denial", denialID}, extra...)...)
		if code != exitInvalid || !strings.Contains(stderr, "arguments") {
			t.Errorf("propose --from-denial %v: exit %d, stderr %s; want 2 naming arguments", extra, code, stderr)
		}
	}
	if n := proposalCount(t, gw, token); n != before {
		t.Fatalf("refused proposals were stored: %d proposals, had %d", n, before)
	}
	viaCLI := jsonOut(t, gw, token, "propose", "--from-denial", denialID, "--arguments", `{ "order_id" : "x" }`)
	pendingWithWidened(viaCLI)
	stdout, stderr, code := cliAgainst(t, gw, admin, "proposals", "show", fmt.Sprint(viaCLI["id"]))
	if code != exitOK || !strings.Contains(stdout, `arguments_schema {"const":{"order_id":"x"}}`) || !strings.Contains(stdout, `arguments {"order_id":"x"}`) {
		t.Errorf("proposals show: exit %d, stderr %s; want the schema change and the counterexample's arguments:\n%s", code, stderr, stdout)
	}

	// Still denied until approved; then exactly that call passes.
	if err := lookup("x"); err == nil {
		t.Fatal("a pending proposal changed enforcement")
	}
	jsonOut(t, gw, admin, "proposals", "approve", fmt.Sprint(viaCLI["id"]), "--reason", "legacy order", "--hash", viaCLI["resulting_hash"].(string))
	waitUntil(t, "the proxy to apply version 2", func() bool { return proxy.PolicyVersion() == "2" })
	if err := lookup("x"); err != nil {
		t.Fatalf("lookup_order x after the approval: %v", err)
	}
	if err := lookup("y"); err == nil || !strings.Contains(err.Error(), "arguments_schema") {
		t.Fatalf("lookup_order y after the approval = %v; want still denied", err)
	}
	if err := lookup("A-1042"); err != nil {
		t.Fatalf("lookup_order A-1042 after the approval: %v", err)
	}
	if !upstreamSaw("x") || upstreamSaw("y") {
		t.Errorf("the upstream saw %v; want x and never y", seen)
	}
}
