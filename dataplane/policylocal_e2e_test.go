package dataplane_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// TestPolicyLocalEndToEnd is the acceptance test: a real MCP
// client behind a proxy subscribed to a real gateway is denied
// track_shipment, then — through the same proxy, at
// http://policy.local/mcp — lists its denials, proposes from the denial,
// and sees the proposal pending. The agent holds no token: the proxy
// relays with its own.
func TestPolicyLocalEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stateless bool
		version   string
	}{
		{"2025-11-25 with sessions", false, "2025-11-25"},
		{"2026-07-28 stateless", true, "2026-07-28"},
	} {
		t.Run(tc.name, func(t *testing.T) { policyLocalEndToEnd(t, tc.stateless, tc.version) })
	}
}

func policyLocalEndToEnd(t *testing.T, stateless bool, version string) {
	gw := gatewaytest.Start(t, "sqlite")
	up := startUpstream(t, ordersHandler(stateless))
	api := dataplanetest.NewAdmin(gw.URL)
	doc := strings.ReplaceAll(ordersPolicy, "PORT", strconv.Itoa(up.port))
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: doc})
	if err != nil {
		t.Fatal(err)
	}

	// The proxy as `portcullis proxy --sandbox` wires it, except that
	// the shipper's interval is an hour: only Flush can get the denial
	// to the gateway in time.
	proxy := newAgent(t, dataplane.Config{
		DevAllowLoopback: true,
		UpstreamRoots:    up.roots,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host == "orders.example.com" {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
		CallerBinary: func(net.Conn) (string, error) { return "/usr/bin/python3", nil },
		Gateway: &gatewayclient.SubscribeConfig{
			Gateway: gw.URL, Sandbox: "agent-1", Token: func() (string, error) { return created.GetToken(), nil },
			ProxyID: "p1", DataDir: t.TempDir(), MaxBackoff: 200 * time.Millisecond,
		},
		Shipper: gatewayclient.ShipperConfig{Interval: time.Hour},
	})
	proxyURL := dataplanetest.Serve(t, proxy)

	waitFor(t, "the proxy to apply version 1", func() bool { return proxy.PolicyVersion() == "1" })
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(proxy.CACertPEM()) {
		t.Fatal("no sandbox CA came with the version")
	}
	tr := &http.Transport{
		Proxy:           http.ProxyURL(proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}

	// The agent's MCP session with the orders server: lookup_order is
	// allowed, track_shipment denied (and never reaches the server).
	orders := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	cs, err := orders.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:             fmt.Sprintf("https://orders.example.com:%d/mcp", up.port),
		HTTPClient:           hc,
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect to orders through the proxy: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": "A-1042"}}); err != nil || res.IsError {
		t.Fatalf("lookup_order = %v, %v; want allowed", res, err)
	}
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "track_shipment", Arguments: map[string]any{"order_id": "A-1042"}})
	if err == nil || !strings.Contains(err.Error(), "track_shipment") {
		t.Fatalf("track_shipment = %v; want denied by policy", err)
	}
	if up.saw("track_shipment") {
		t.Fatal("the upstream saw the denied track_shipment")
	}

	// The same agent asks policy.local, through the same proxy.
	pl := connectPolicyLocal(t, hc)
	res, err := pl.CallTool(t.Context(), &mcp.CallToolParams{Name: "list_denials", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("list_denials = %v, %v", toolText(res), err)
	}
	var listed struct {
		Denials []struct {
			DenialID   string          `json:"denial_id"`
			Tool       string          `json:"tool"`
			MCPMethod  string          `json:"mcp_method"`
			Suggestion json.RawMessage `json:"suggestion"`
		} `json:"denials"`
	}
	remarshal(t, res.StructuredContent, &listed)
	if len(listed.Denials) == 0 || listed.Denials[0].Tool != "track_shipment" || listed.Denials[0].MCPMethod != "tools/call" {
		t.Fatalf("list_denials = %+v; want track_shipment first", listed)
	}
	denial := listed.Denials[0]
	sugg, err := advisor.ParseProposal(denial.Suggestion)
	if err != nil {
		t.Fatalf("suggestion %s: %v", denial.Suggestion, err)
	}
	if op := sugg.Operations[0].AddAllowRules; op == nil || op.Policy != "orders" || op.Rules[0].Allow.Method != "tools/call" || op.Rules[0].Allow.Tool == nil {
		t.Errorf("suggestion = %s; want add_allow_rules for tools/call track_shipment on orders", denial.Suggestion)
	}

	res, err = pl.CallTool(t.Context(), &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{
		"denial_id": denial.DenialID,
		"rationale": "support agents must track shipments for open orders",
	}})
	if err != nil || res.IsError {
		t.Fatalf("propose = %v, %v", toolText(res), err)
	}
	var proposed struct {
		ID       json.Number `json:"id"`
		Status   string      `json:"status"`
		Sandbox  string      `json:"sandbox"`
		DenialID string      `json:"denial_id"`
		Findings []struct {
			Kind           string `json:"kind"`
			Counterexample struct {
				Binary string `json:"binary"`
				Host   string `json:"host"`
				Port   int    `json:"port"`
				Tool   string `json:"tool"`
			} `json:"counterexample"`
		} `json:"findings"`
	}
	remarshal(t, res.StructuredContent, &proposed)
	if proposed.ID == "" || proposed.Status != "pending" || proposed.Sandbox != "agent-1" || proposed.DenialID != denial.DenialID {
		t.Fatalf("propose answered %+v; want a pending proposal of agent-1 from the denial", proposed)
	}
	if len(proposed.Findings) == 0 || proposed.Findings[0].Kind != "new_mcp_tool" || proposed.Findings[0].Counterexample.Tool != "track_shipment" {
		t.Errorf("findings = %+v; want new_mcp_tool track_shipment", proposed.Findings)
	}
	// Nothing wider than the denial: every finding is that request.
	for _, f := range proposed.Findings {
		ce := f.Counterexample
		if ce.Binary != "/usr/bin/python3" || ce.Host != "orders.example.com" || ce.Port != up.port || ce.Tool != "track_shipment" {
			t.Errorf("finding %s is wider than the denial: %+v", f.Kind, ce)
		}
	}

	id, _ := strconv.ParseUint(string(proposed.ID), 10, 64)
	res, err = pl.CallTool(t.Context(), &mcp.CallToolParams{Name: "proposal_status", Arguments: map[string]any{"id": id}})
	if err != nil || res.IsError {
		t.Fatalf("proposal_status = %v, %v", toolText(res), err)
	}
	var st struct {
		ID     json.Number `json:"id"`
		Status string      `json:"status"`
	}
	remarshal(t, res.StructuredContent, &st)
	if st.ID != proposed.ID || st.Status != "pending" {
		t.Errorf("proposal_status = %+v; want %s pending", st, proposed.ID)
	}

	// REST sees the same, and a short wait answers it still pending.
	rest, err := hc.Get(fmt.Sprintf("http://policy.local/v1/proposals/%d/wait?timeout=200ms", id))
	if err != nil {
		t.Fatal(err)
	}
	defer rest.Body.Close()
	var got struct {
		Status          string          `json:"status"`
		ResultingPolicy json.RawMessage `json:"resulting_policy"`
	}
	if err := json.NewDecoder(rest.Body).Decode(&got); err != nil || rest.StatusCode != http.StatusOK || got.Status != "pending" {
		t.Errorf("GET wait = %d %+v %v; want 200 pending", rest.StatusCode, got, err)
	}
	// The resulting policy allows exactly the denied request (and the
	// findings above show nothing wider).
	result, _, err := policy.Parse(got.ResultingPolicy)
	if err != nil {
		t.Fatalf("resulting policy: %v", err)
	}
	denied := policy.Request{Binary: "/usr/bin/python3", Host: "orders.example.com", Port: up.port, HTTPMethod: "POST", Path: "/mcp",
		Addr: netip.MustParseAddr("127.0.0.1"), DevAllowLoopback: true,
		MCP: &policy.MCPMessage{Method: "tools/call", Tool: "track_shipment", Arguments: json.RawMessage(`{"order_id":"A-1042"}`), ProtocolVersion: version}}
	if d := policy.Decide(result, denied); !d.Allow {
		t.Errorf("the resulting policy denies the request it was proposed for: %s", d.Reason)
	}
}

// waitFor polls cond until it holds, failing the test after 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}
