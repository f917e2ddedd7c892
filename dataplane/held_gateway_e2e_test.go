package dataplane_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/dataplane/hold"
	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// heldThroughGateway is a real proxy following a real gateway, the
// sandbox's policy heldPolicy (refund_order held for review), a real MCP
// client connected through it, and an operator deciding with CallService.
type heldThroughGateway struct {
	up    *upstream
	admin dataplanetest.Admin
	calls portcullisv1connect.CallServiceClient // an operator's
	proxy *dataplane.Agent
	cs    *mcp.ClientSession
	hc    *http.Client
	doc   string
}

func startHeldThroughGateway(t *testing.T, timeout string, options ...func(*gateway.Config)) *heldThroughGateway {
	gw := gatewaytest.Start(t, "sqlite", options...)
	h := &heldThroughGateway{up: startUpstream(t, ordersHandler(false)), admin: dataplanetest.NewAdmin(gw.URL)}
	h.doc = strings.ReplaceAll(strings.ReplaceAll(heldPolicy, "PORT", strconv.Itoa(h.up.port)), "TIMEOUT", timeout)
	created, err := h.admin.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: h.doc})
	if err != nil {
		t.Fatal(err)
	}
	op, err := h.admin.Tokens.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: "olive", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	h.calls = portcullisv1connect.NewCallServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, gw.URL), gatewaytest.Bearer(op.GetToken())))
	h.proxy = newAgent(t, dataplane.Config{
		DevAllowLoopback: true,
		UpstreamRoots:    h.up.roots,
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
	})
	proxyURL := dataplanetest.Serve(t, h.proxy)
	waitFor(t, "the proxy to apply version 1", func() bool { return h.proxy.PolicyVersion() == "1" })
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(h.proxy.CACertPEM()) {
		t.Fatal("no sandbox CA came with the version")
	}
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	h.hc = &http.Client{Transport: tr}
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	h.cs, err = client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: fmt.Sprintf("https://orders.example.com:%d/mcp", h.up.port), HTTPClient: h.hc, DisableStandaloneSSE: true, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.cs.Close() })
	return h
}

// held waits until the gateway lists one call held, and returns it.
func (h *heldThroughGateway) held(t *testing.T) *portcullisv1.HeldCall {
	t.Helper()
	var call *portcullisv1.HeldCall
	waitFor(t, "the call to be held at the gateway", func() bool {
		res, err := h.calls.ListCalls(t.Context(), &portcullisv1.ListCallsRequest{Sandbox: "agent-1", Status: "held"})
		if err != nil || len(res.GetCalls()) == 0 {
			return false
		}
		call = res.GetCalls()[0]
		return true
	})
	return call
}

// status waits until the gateway lists call id with status.
func (h *heldThroughGateway) status(t *testing.T, id uint64, status string) {
	t.Helper()
	waitFor(t, "call "+strconv.FormatUint(id, 10)+" to be "+status, func() bool {
		c, err := h.calls.GetCall(t.Context(), &portcullisv1.GetCallRequest{Id: id})
		return err == nil && c.GetStatus() == status
	})
}

func (h *heldThroughGateway) refund(order string) <-chan callResult {
	return callAsync(h.cs, &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": order}})
}

// The acceptance: a held tools/call is listed with its arguments
// before anything reaches the server; approved by an operator, the
// agent's own request gets the server's answer and the server saw it
// once; an approval of one call never releases another.
func TestHeldCallThroughGatewayApproved(t *testing.T) {
	h := startHeldThroughGateway(t, "2m")
	done := h.refund("A-1042")
	call := h.held(t)
	if call.GetTool() != "refund_order" || !strings.Contains(call.GetArgumentsJson(), "A-1042") || call.GetProxy() != "p1" || call.GetPolicyVersion() != 1 {
		t.Errorf("held call %v", call)
	}
	if h.up.saw("refund_order") {
		t.Fatal("the server saw the held call before it was approved")
	}
	other := h.refund("B-2042")
	waitFor(t, "two calls held", func() bool {
		res, err := h.calls.ListCalls(t.Context(), &portcullisv1.ListCallsRequest{Sandbox: "agent-1", Status: "held"})
		return err == nil && len(res.GetCalls()) == 2
	})
	if _, err := h.calls.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: call.GetId(), Reason: "refund agreed", ArgumentsDigest: call.GetArgumentsDigest()}); err != nil {
		t.Fatal(err)
	}
	got := result(t, done)
	if got.err != nil || got.res.IsError || !strings.Contains(fmt.Sprint(got.res.StructuredContent), "refunded") {
		t.Fatalf("approved call = %+v, %v; want the server's answer", got.res, got.err)
	}
	if n := h.up.times("refund_order"); n != 1 || !h.up.saw("A-1042") || h.up.saw("B-2042") {
		t.Errorf("the server saw refund_order %d times (B-2042: %v); want A-1042 once", n, h.up.saw("B-2042"))
	}
	h.status(t, call.GetId(), "approved")
	rec := lastRecord(&testProxy{proxy: h.proxy}, "refund_order")
	if !strings.Contains(rec.Reason, fmt.Sprintf("approved by review (call %d, by olive)", call.GetId())) {
		t.Errorf("record %+v", rec)
	}
	// The other call waits still; denied, its agent hears so.
	res, err := h.calls.ListCalls(t.Context(), &portcullisv1.ListCallsRequest{Sandbox: "agent-1", Status: "held"})
	if err != nil || len(res.GetCalls()) != 1 {
		t.Fatalf("held after one approval: %v, %v", res, err)
	}
	if _, err := h.calls.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: res.GetCalls()[0].GetId(), Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	if got := result(t, other); got.err == nil || !strings.Contains(got.err.Error(), hold.ReviewDenied) {
		t.Errorf("denied call = %+v, %v", got.res, got.err)
	}
	if h.up.saw("B-2042") {
		t.Error("the server saw the denied call")
	}
}

// Refused: denied by an operator, unanswered past its timeout (listed as
// expired), or stale after a policy change that removes the rule
// (listed as failed); the server sees nothing.
func TestHeldCallThroughGatewayRefused(t *testing.T) {
	for _, tc := range []struct {
		name, timeout string
		act           func(t *testing.T, h *heldThroughGateway, id uint64)
		code, status  string
	}{
		{"denied", "2m", func(t *testing.T, h *heldThroughGateway, id uint64) {
			if _, err := h.calls.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: id, Reason: "not this one"}); err != nil {
				t.Fatal(err)
			}
		}, hold.ReviewDenied, "denied"},
		{"timeout", "1s", func(*testing.T, *heldThroughGateway, uint64) {}, hold.ReviewTimeout, "expired"},
		{"stale", "2m", func(t *testing.T, h *heldThroughGateway, _ uint64) {
			doc := strings.ReplaceAll(ordersPolicy, "PORT", strconv.Itoa(h.up.port))
			if _, err := h.admin.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: doc}); err != nil {
				t.Fatal(err)
			}
		}, hold.ReviewStale, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHeldThroughGateway(t, tc.timeout)
			done := h.refund("A-1042")
			call := h.held(t)
			tc.act(t, h, call.GetId())
			got := result(t, done)
			if got.err == nil || !strings.Contains(got.err.Error(), tc.code) {
				t.Fatalf("refused call = %+v, %v; want an error naming %s", got.res, got.err, tc.code)
			}
			if h.up.saw("refund_order") {
				t.Fatal("the server saw a refused held call")
			}
			h.status(t, call.GetId(), tc.status)
		})
	}
}

// A REST call held at the gateway, approved: its body reaches the server
// once, and the agent gets the answer.
func TestHeldRESTCallThroughGateway(t *testing.T) {
	h := startHeldThroughGateway(t, "2m")
	h.cs.Close() // while the policy still lets it end its session
	doc := strings.ReplaceAll(strings.ReplaceAll(heldRESTPolicy, "PORT", strconv.Itoa(h.up.port)), "TIMEOUT", "2m")
	if _, err := h.admin.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: doc}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the proxy to apply version 2", func() bool { return h.proxy.PolicyVersion() == "2" })
	done := payout(h.hc, h.up)
	call := h.held(t)
	if call.GetArgumentsJson() != `{"amount": 12}` || call.GetMethod() != http.MethodPost || call.GetPath() != "/v1/payouts/1" {
		t.Errorf("held call %v", call)
	}
	if _, err := h.calls.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: call.GetId(), Reason: "ok"}); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.status == http.StatusForbidden || !h.up.saw(`{"amount": 12}`) || h.up.times("/v1/payouts/1") != 1 {
		t.Errorf("approved: %d %s, server saw %d", a.status, a.body, h.up.times("/v1/payouts/1"))
	}
}

// A gateway that holds as many of the sandbox's calls as it may refuses
// the next: the agent hears review_busy at once, and the server sees
// nothing.
func TestHeldCallThroughGatewayBusy(t *testing.T) {
	h := startHeldThroughGateway(t, "2m", func(c *gateway.Config) { c.MaxHeldCalls = 1 })
	first := h.refund("A-1042")
	call := h.held(t)
	_, err := h.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "B-2042"}})
	if err == nil || !strings.Contains(err.Error(), hold.ReviewBusy) {
		t.Errorf("a call past the gateway's bound: %v, want review_busy", err)
	}
	if _, err := h.calls.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: call.GetId(), Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	result(t, first)
	if h.up.saw("refund_order") {
		t.Error("the server saw a refused call")
	}
}
