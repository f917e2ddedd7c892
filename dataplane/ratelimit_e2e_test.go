package dataplane_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/ca"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// rate_limit through the real proxy, between the official Go SDK's client
// and server. The proxy's clock is fixed (and moved by hand), so what
// passes depends on the calls made, never on how fast the machine is.

// limitedPolicy is the orders policy with lookup_order limited to 6 calls
// a minute (a token every 10 s), at most 3 at once. It is rules[4], its
// position in the file (the canonical form keeps it).
var limitedPolicy = strings.Replace(ordersPolicy, "              tool: lookup_order\n",
	"              tool: lookup_order\n              rate_limit: { requests_per_minute: 6, burst: 3 }\n", 1)

// countingServer is an MCP server (go-sdk) whose lookup_order counts the
// calls that reach it.
func countingServer(calls *atomic.Int64) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "orders", Version: "v1"}, nil)
	type args struct {
		OrderID string `json:"order_id"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "lookup_order"}, func(_ context.Context, _ *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
		calls.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: a.OrderID + ": shipped"}}}, nil, nil
	})
	return s
}

// advance moves the clock (proxy_test.go) on by d.
func (c *clock) advance(d time.Duration) { c.set(c.Now().Add(d)) }

// startClockedProxy is startProxy with the proxy's clock given.
func startClockedProxy(t *testing.T, doc string, up *upstream, now func() time.Time) *testProxy {
	t.Helper()
	proxyCA, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, u := startAgent(t, dataplane.Config{
		DevAllowLoopback: true,
		UpstreamRoots:    up.roots,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host == "orders.example.com" {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
		CallerBinary: func(net.Conn) (string, error) { return "/usr/bin/python3", nil },
		CA:           proxyCA,
		Now:          now,
		// Traced, so that a rate-limited call's record carries its trace.
		Tracer: sdktrace.NewTracerProvider(),
	}, strings.ReplaceAll(doc, "PORT", strconv.Itoa(up.port)), "test-1")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(proxyCA.CertPEM())
	tp := &testProxy{proxy: p, url: u, roots: roots}
	tr := &http.Transport{Proxy: http.ProxyURL(tp.url), TLSClientConfig: &tls.Config{RootCAs: roots}}
	tp.client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return tp
}

// captured is a response the client received: status, Retry-After and body.
type captured struct {
	status     int
	retryAfter string
	body       string
}

// capturing is the client's transport, keeping every error answer to a
// POST.
type capturing struct {
	next http.RoundTripper
	mu   sync.Mutex
	got  []captured
}

func (c *capturing) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := c.next.RoundTrip(r)
	if err != nil || r.Method != http.MethodPost || res.StatusCode < 400 {
		return res, err // 200s stream; calls are counted on the server
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(body))
	c.mu.Lock()
	c.got = append(c.got, captured{res.StatusCode, res.Header.Get("Retry-After"), string(body)})
	c.mu.Unlock()
	return res, nil
}

func (c *capturing) responses() []captured {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]captured(nil), c.got...)
}

// rateLimitedError is the JSON-RPC error of a 429.
type rateLimitedError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    struct {
			RetryAfterSeconds *int   `json:"retry_after_seconds"`
			Rule              string `json:"rule"`
			Entry             string `json:"entry"`
			PolicyVersion     string `json:"policy_version"`
			DenialID          string `json:"denial_id"`
		} `json:"data"`
	} `json:"error"`
}

// The acceptance: burst 3, eight calls in a row — three reach the
// server, five get 429 with retry_after_seconds; ten seconds later (one
// token at 6/min) one more passes.
func TestRateLimitThroughProxy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stateless bool
		version   string
	}{
		{"2025-11-25 with sessions", false, "2025-11-25"},
		{"2026-07-28 stateless", true, "2026-07-28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			srv := countingServer(&calls)
			up := startUpstream(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
				&mcp.StreamableHTTPOptions{Stateless: tc.stateless, DisableLocalhostProtection: true}))
			clk := &clock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
			tp := startClockedProxy(t, limitedPolicy, up, clk.Now)
			capture := &capturing{next: tp.client.Transport}
			tp.client = &http.Client{Transport: capture}
			cs := connectMCP(t, tp, up, tc.version, nil)

			call := func() error {
				_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": "A-1042"}})
				return err
			}
			var refused []error
			for range 8 {
				if err := call(); err != nil {
					refused = append(refused, err)
				}
			}
			if n := calls.Load(); n != 3 {
				t.Fatalf("the server ran lookup_order %d times, want 3 (the burst)", n)
			}
			if len(refused) != 5 {
				t.Fatalf("%d calls failed, want 5: %v", len(refused), refused)
			}
			for _, err := range refused {
				if !strings.Contains(err.Error(), "Too Many Requests") {
					t.Errorf("refused call: %v, want the SDK's Too Many Requests", err)
				}
			}
			got := capture.responses()
			if len(got) != 5 {
				t.Fatalf("the client received %d error answers, want 5: %+v", len(got), got)
			}
			for _, res := range got {
				var e rateLimitedError
				if err := json.Unmarshal([]byte(res.body), &e); err != nil {
					t.Fatalf("429 body %q: %v", res.body, err)
				}
				d := e.Error.Data
				if res.status != http.StatusTooManyRequests || res.retryAfter != "10" || e.Error.Code != -32029 ||
					d.RetryAfterSeconds == nil || *d.RetryAfterSeconds != 10 || d.Rule != "rules[4]" || d.Entry != "orders" ||
					d.PolicyVersion != "test-1" || !strings.HasPrefix(d.DenialID, "dn_") || !strings.Contains(e.Error.Message, "rate limited") {
					t.Errorf("answer %d, Retry-After %q, %s; want 429, 10 s, -32029 naming rules[4] of orders", res.status, res.retryAfter, res.body)
				}
			}
			var limited []decision.Record
			for _, r := range tp.proxy.Decisions() {
				if r.Decision == decision.RateLimited {
					limited = append(limited, r)
				}
			}
			if len(limited) != 5 {
				t.Fatalf("%d rate_limited records, want 5: %+v", len(limited), tp.proxy.Decisions())
			}
			for _, r := range limited {
				if r.Tool != "lookup_order" || r.MCPMethod != "tools/call" || r.Entry != "orders" || r.Rule != "rules[4]" ||
					r.PolicyVersion != "test-1" || r.DenialID == "" || !strings.Contains(r.Reason, "rate_limit of rules[4]") || !strings.Contains(r.Reason, "retry after 10 s") ||
					len(r.TraceID) != 32 {
					t.Errorf("record %+v", r)
				}
			}

			// One token comes back every 10 s: one more call, then none.
			clk.advance(10 * time.Second)
			if err := call(); err != nil {
				t.Fatalf("a call 10 s later: %v", err)
			}
			if err := call(); err == nil {
				t.Fatal("a second call 10 s later passed; the bucket held one token")
			}
			if n := calls.Load(); n != 4 {
				t.Fatalf("the server ran lookup_order %d times, want 4", n)
			}
		})
	}
}

// batchOf is a 2025-03-26 batch of n lookup_order calls.
func batchOf(n int) string {
	var msgs []string
	for i := range n {
		msgs = append(msgs, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`, i+1))
	}
	return "[" + strings.Join(msgs, ",") + "]"
}

// A batch takes a token per call, all or nothing: two calls against one
// token are refused whole, nothing forwarded, and the token stays for a
// single call. A batch larger than the burst can never pass, and says so.
func TestRateLimitBatchAllOrNothing(t *testing.T) {
	var calls atomic.Int64
	srv := countingServer(&calls)
	up := startUpstream(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true}))
	clk := &clock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	tp := startClockedProxy(t, limitedPolicy, up, clk.Now)
	h := http.Header{"Mcp-Protocol-Version": {"2025-03-26"}}

	if res, body := rawMCP(t, tp, up, h, batchOf(2)); res.StatusCode != http.StatusOK {
		t.Fatalf("a batch of 2 with 3 tokens: %d %s", res.StatusCode, body)
	}
	before := up.count()
	res, body := rawMCP(t, tp, up, h, batchOf(2))
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "10" || up.count() != before {
		t.Fatalf("a batch of 2 with 1 token: %d (Retry-After %q) %s, upstream saw %d more; want 429 after 10 s, nothing forwarded",
			res.StatusCode, res.Header.Get("Retry-After"), body, up.count()-before)
	}
	var answers []rateLimitedError
	if err := json.Unmarshal([]byte(body), &answers); err != nil || len(answers) != 2 {
		t.Fatalf("batch answer %s: %v; want one error per call", body, err)
	}
	if res, body := rawMCP(t, tp, up, h, batchOf(1)); res.StatusCode != http.StatusOK {
		t.Fatalf("the refused batch took the last token: a single call got %d %s", res.StatusCode, body)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("the server ran lookup_order %d times, want 3", n)
	}

	clk.advance(time.Hour)
	before = up.count()
	res, body = rawMCP(t, tp, up, h, batchOf(4))
	if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "more than its burst") || up.count() != before {
		t.Fatalf("a batch of 4 against burst 3: %d %s; want 429 saying it exceeds the burst", res.StatusCode, body)
	}
	// No wait makes it pass: no Retry-After for an agent to obey forever.
	if res.Header.Get("Retry-After") != "" || strings.Contains(body, "retry_after_seconds") || strings.Contains(body, "retry after") {
		t.Fatalf("a batch of 4 against burst 3: Retry-After %q, %s; want no retry after", res.Header.Get("Retry-After"), body)
	}
}

// A new version keeps the bucket of a rule it keeps unchanged (wherever
// the rule moved), and a changed limit starts with a full bucket.
func TestRateLimitAcrossReloads(t *testing.T) {
	var calls atomic.Int64
	srv := countingServer(&calls)
	up := startUpstream(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true}))
	clk := &clock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	tp := startClockedProxy(t, limitedPolicy, up, clk.Now)
	h := http.Header{"Mcp-Protocol-Version": {"2025-03-26"}}
	status := func() int {
		res, _ := rawMCP(t, tp, up, h, batchOf(1))
		return res.StatusCode
	}
	for range 3 {
		if s := status(); s != http.StatusOK {
			t.Fatalf("call within the burst: %d", s)
		}
	}
	if s := status(); s != http.StatusTooManyRequests {
		t.Fatalf("fourth call: %d, want 429", s)
	}
	port := strconv.Itoa(up.port)
	reload := func(doc, version string) {
		setPolicy(t, tp.proxy, strings.ReplaceAll(doc, "PORT", port), version)
	}

	// The same rule, moved after a new one: still out of tokens.
	moved := strings.Replace(limitedPolicy, "          - allow: { method: initialize }\n",
		"          - allow: { method: initialize }\n          - allow: { method: ping }\n", 1)
	reload(moved, "test-2")
	if s := status(); s != http.StatusTooManyRequests {
		t.Fatalf("after a reload keeping the rule: %d, want 429 (the bucket kept)", s)
	}

	// A changed limit is a new bucket, full.
	reload(strings.Replace(moved, "burst: 3", "burst: 2", 1), "test-3")
	for range 2 {
		if s := status(); s != http.StatusOK {
			t.Fatalf("after the limit changed: %d, want a full bucket of 2", s)
		}
	}
	if s := status(); s != http.StatusTooManyRequests {
		t.Fatalf("third call on burst 2: %d, want 429", s)
	}

	// No limit: every call passes.
	reload(ordersPolicy, "test-4")
	for range 5 {
		if s := status(); s != http.StatusOK {
			t.Fatalf("without a rate_limit: %d", s)
		}
	}
}

// On an audit endpoint a call over the limit is forwarded and recorded as
// audit, naming the limit.
func TestRateLimitAuditForwards(t *testing.T) {
	var calls atomic.Int64
	srv := countingServer(&calls)
	up := startUpstream(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true}))
	clk := &clock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	audit := strings.Replace(limitedPolicy, "enforcement: enforce", "enforcement: audit", 1)
	tp := startClockedProxy(t, audit, up, clk.Now)
	h := http.Header{"Mcp-Protocol-Version": {"2025-03-26"}}
	for i := range 5 {
		if res, body := rawMCP(t, tp, up, h, batchOf(1)); res.StatusCode != http.StatusOK {
			t.Fatalf("audit call %d: %d %s", i, res.StatusCode, body)
		}
	}
	if n := calls.Load(); n != 5 {
		t.Fatalf("the server ran lookup_order %d times, want all 5", n)
	}
	var audited int
	for _, r := range tp.proxy.Decisions() {
		switch {
		case r.Decision == decision.RateLimited:
			t.Errorf("an audit endpoint recorded %+v", r)
		case r.Decision == decision.Audit && strings.Contains(r.Reason, "over the rate_limit") && strings.Contains(r.Reason, "enforcement: audit"):
			audited++
		}
	}
	if audited != 2 {
		t.Fatalf("%d audit records over the limit, want 2: %+v", audited, tp.proxy.Decisions())
	}
}

// limitedLocalPolicy is an MCP endpoint (plain HTTP) whose lookup_order
// passes once per hour.
const limitedLocalPolicy = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: orders.example.com
        port: PORT
        protocol: mcp
        rules:
          - allow: { method: tools/call, tool: lookup_order, rate_limit: { requests_per_minute: 1, burst: 1 } }
`

// Through policy.local, as an agent would: a proposal from a rate_limited
// record's id is refused by the gateway (not_offered, naming the
// rate_limit), and nothing is stored. The record reached the gateway as
// rate_limited, with its id.
func TestRateLimitedNotProposedThroughPolicyLocal(t *testing.T) {
	lp, cfg := newLocalProxy(t)
	lp.gw = gatewaytest.Start(t, "sqlite")
	lp.admin = dataplanetest.NewAdmin(lp.gw.URL)
	doc := strings.ReplaceAll(limitedLocalPolicy, "PORT", strconv.Itoa(lp.upPort))
	created, err := lp.admin.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: doc})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Gateway = &gatewayclient.SubscribeConfig{
		Gateway: lp.gw.URL, Sandbox: "agent-1", Token: func() (string, error) { return created.GetToken(), nil },
		ProxyID: "p1", DataDir: t.TempDir(), MaxBackoff: 200 * time.Millisecond,
	}
	cfg.Shipper = gatewayclient.ShipperConfig{Interval: time.Hour}
	lp.agent = newAgent(t, cfg)
	lp.serve(t)
	waitFor(t, "the proxy to apply version 1", func() bool { return lp.agent.PolicyVersion() == "1" })

	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`
	target := fmt.Sprintf("http://orders.example.com:%d/", lp.upPort)
	if res, body := lp.do(t, http.MethodPost, target, call); res.StatusCode != http.StatusOK {
		t.Fatalf("first call: %d %v", res.StatusCode, body)
	}
	res, body := lp.do(t, http.MethodPost, target, call)
	if res.StatusCode != http.StatusTooManyRequests || lp.upstream.Load() != 1 {
		t.Fatalf("second call: %d %v, upstream saw %d; want 429, one call forwarded", res.StatusCode, body, lp.upstream.Load())
	}
	id, _ := body["error"].(map[string]any)["data"].(map[string]any)["denial_id"].(string)
	if id == "" {
		t.Fatalf("429 without an id: %v", body)
	}

	// Not a denial: policy.local does not list it.
	_, denials := lp.do(t, http.MethodGet, "http://policy.local/v1/denials", "")
	if list, _ := denials["denials"].([]any); len(list) != 0 {
		t.Fatalf("policy.local lists the rate-limited call as a denial: %v", list)
	}
	res, body = lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", `{"denial_id":"`+id+`","rationale":"I need more calls"}`)
	refusal, _ := body["refusal"].(map[string]any)
	if res.StatusCode != http.StatusBadRequest || refusal["rule"] != advisor.RuleNotOffered || !strings.Contains(fmt.Sprint(refusal["reason"]), "rate_limit") {
		t.Fatalf("proposal from the rate_limited id: %d %v; want 400 not_offered naming the rate_limit", res.StatusCode, body)
	}
	if ps := lp.proposals(t); len(ps) != 0 {
		t.Fatalf("proposals stored: %v", ps)
	}
	dc := portcullisv1connect.NewDecisionServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, lp.gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	recs, err := dc.ListDecisions(t.Context(), &portcullisv1.ListDecisionsRequest{Sandbox: "agent-1", DenialId: id})
	if err != nil || len(recs.GetDecisions()) != 1 || recs.GetDecisions()[0].GetRecord().GetDecision() != "rate_limited" {
		t.Fatalf("the gateway's record of %s: %v, %v", id, recs, err)
	}
}

// Two rules for lookup_order that differ only in the arguments they admit
// (as a schema denial's proposal adds one beside its guard) share one
// bucket: eight calls alternating between them still reach the server
// three times.
func TestRateLimitSharedByRulesDifferingInSchema(t *testing.T) {
	second := `          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema: { const: { order_id: "x" } }
              rate_limit: { requests_per_minute: 6, burst: 3 }
        deny_rules:`
	doc := strings.Replace(limitedPolicy, "        deny_rules:", second, 1)
	var calls atomic.Int64
	srv := countingServer(&calls)
	up := startUpstream(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true}))
	clk := &clock{now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	tp := startClockedProxy(t, doc, up, clk.Now)
	cs := connectMCP(t, tp, up, "2025-11-25", nil)
	refused := 0
	for i := range 8 {
		id := "A-1042"
		if i%2 == 1 {
			id = "x" // admitted by the second rule only
		}
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": id}}); err != nil {
			if !strings.Contains(err.Error(), "Too Many Requests") {
				t.Fatalf("call %d (%s): %v, want allowed or Too Many Requests", i, id, err)
			}
			refused++
		}
	}
	if n := calls.Load(); n != 3 || refused != 5 {
		t.Fatalf("the server ran lookup_order %d times and %d calls were refused; want 3 and 5 (one bucket of burst 3)", n, refused)
	}
}
