package dataplane_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/telemetry/otlp"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// collector is an in-process OTLP/HTTP receiver: every span exported to
// it, with the service that sent it.
type collector struct {
	url string

	mu    sync.Mutex
	spans []gotSpan
}

type gotSpan struct {
	service string
	span    *tracepb.Span
}

func (s gotSpan) traceID() string  { return hex.EncodeToString(s.span.GetTraceId()) }
func (s gotSpan) spanID() string   { return hex.EncodeToString(s.span.GetSpanId()) }
func (s gotSpan) parentID() string { return hex.EncodeToString(s.span.GetParentSpanId()) }

func (s gotSpan) attr(key string) string {
	for _, kv := range s.span.GetAttributes() {
		if kv.GetKey() == key {
			if v := kv.GetValue().GetStringValue(); v != "" {
				return v
			}
			return strconv.FormatInt(kv.GetValue().GetIntValue(), 10)
		}
	}
	return ""
}

func startCollector(t *testing.T) *collector {
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
			t.Errorf("collector: %s %s (%s): not an OTLP/HTTP protobuf export", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					c.spans = append(c.spans, gotSpan{service: service, span: sp})
				}
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

// find returns the spans named name (of service, when not "").
func (c *collector) find(service, name string) []gotSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []gotSpan
	for _, s := range c.spans {
		if s.span.GetName() == name && (service == "" || s.service == service) {
			out = append(out, s)
		}
	}
	return out
}

func startTracing(t *testing.T, c *collector, service string) *otlp.Tracing {
	tr, err := otlp.New(otlp.Config{Endpoint: c.url, ServiceName: service, BatchTimeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr
}

// TestTraces is the acceptance test for traces: a policy set, an
// approval and MCP calls through a real proxy following a real gateway,
// both exporting to an in-process OTLP/HTTP receiver. The approval, its
// commit, the push to the proxy and the proxy's ACK are one trace; the
// proxy's span for a call is the child of the client's traceparent, the
// upstream receives that trace, and the decision record and the denial
// body carry its id.
func TestTraces(t *testing.T) {
	col := startCollector(t)
	gwTracing := startTracing(t, col, "test-gateway")
	pxTracing := startTracing(t, col, "test-proxy")

	var upMu sync.Mutex
	var upTraceparents []string
	orders := ordersHandler(true)
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upMu.Lock()
		upTraceparents = append(upTraceparents, r.Header.Get("Traceparent"))
		upMu.Unlock()
		orders.ServeHTTP(w, r)
	}))
	gw := gatewaytest.Start(t, "sqlite", func(c *gateway.Config) {
		c.TracerProvider = gwTracing.Provider()
		c.DevAllowLoopback = true
	})
	api := dataplanetest.NewAdmin(gw.URL)
	doc := strings.ReplaceAll(ordersPolicy, "PORT", strconv.Itoa(up.port))
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: doc})
	if err != nil {
		t.Fatal(err)
	}
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
		Tracer:  pxTracing.Provider(),
	})
	proxyURL := dataplanetest.Serve(t, proxy)
	waitFor(t, "the proxy to apply version 1", func() bool { return proxy.PolicyVersion() == "1" })

	// A policy set: version 2, pushed and applied.
	set := strings.Replace(doc, "      - path: /usr/bin/python3\n", "      - path: /usr/bin/python3\n      - path: /usr/bin/node\n", 1)
	if _, err := api.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: set}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the proxy to apply version 2", func() bool { return proxy.PolicyVersion() == "2" })

	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(proxy.CACertPEM()) {
		t.Fatal("no sandbox CA")
	}
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	call := func(traceparent, orderID string) (*http.Response, []byte) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"` + orderID + `"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}}}`
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fmt.Sprintf("https://orders.example.com:%d/mcp", up.port), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = http.Header{
			"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"},
			"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"lookup_order"},
			"Traceparent": {traceparent},
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, b
	}

	// A denied call: the denial body and the record carry the client's
	// trace id.
	const deniedTrace = "0af7651916cd43dd8448eb211c80319c"
	res, body := call("00-"+deniedTrace+"-b7ad6b7169203331-01", "A-10420")
	if res.StatusCode != http.StatusForbidden || !bytes.Contains(body, []byte(`"trace_id":"`+deniedTrace+`"`)) {
		t.Fatalf("denied call = %d %s; want 403 whose body names trace %s", res.StatusCode, body, deniedTrace)
	}
	recs := proxy.Decisions()
	denial := recs[len(recs)-1]
	if denial.DenialID == "" || denial.TraceID != deniedTrace {
		t.Fatalf("denial record = %+v; want trace id %s", denial, deniedTrace)
	}
	if n := len(upTraceparents); n != 0 {
		t.Fatalf("the upstream saw %d requests; a denied call must not reach it", n)
	}

	// Proposed from the denial through policy.local, approved by an
	// operator: version 3.
	propose, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://policy.local/v1/proposals",
		strings.NewReader(`{"denial_id":"`+denial.DenialID+`","rationale":"five-digit order ids"}`))
	if err != nil {
		t.Fatal(err)
	}
	pres, err := client.Do(propose)
	if err != nil {
		t.Fatal(err)
	}
	var proposed struct {
		ID     json.Number `json:"id"`
		Status string      `json:"status"`
	}
	err = json.NewDecoder(pres.Body).Decode(&proposed)
	pres.Body.Close()
	if err != nil || proposed.Status != "pending" {
		t.Fatalf("proposal = %d %+v %v; want pending", pres.StatusCode, proposed, err)
	}
	id, _ := strconv.ParseUint(proposed.ID.String(), 10, 64)
	stored, err := api.Approval.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Approval.ApproveProposal(t.Context(), &portcullisv1.ApproveProposalRequest{Id: id, Reason: "reviewed", ResultingHash: stored.GetResultingHash()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the proxy to apply version 3", func() bool { return proxy.PolicyVersion() == "3" })

	// The allowed call: the proxy's span continues the client's trace and
	// the upstream is called within it.
	const allowedTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	res, body = call("00-"+allowedTrace+"-"+clientSpan+"-01", "A-10420")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("allowed call = %d %s", res.StatusCode, body)
	}
	recs = proxy.Decisions()
	if allowed := recs[len(recs)-1]; allowed.Decision != "allow" || allowed.TraceID != allowedTrace {
		t.Errorf("allow record = %+v; want trace id %s", allowed, allowedTrace)
	}
	upMu.Lock()
	got := append([]string(nil), upTraceparents...)
	upMu.Unlock()
	if len(got) != 1 || !strings.HasPrefix(got[0], "00-"+allowedTrace+"-") || strings.Contains(got[0], clientSpan) {
		t.Errorf("the upstream saw traceparents %q; want one in trace %s, from the proxy's span", got, allowedTrace)
	}

	flush := func() bool {
		gwTracing.ForceFlush(t.Context())
		pxTracing.ForceFlush(t.Context())
		return true
	}
	// The proxy's spans for the allowed call.
	var request, upstream gotSpan
	waitFor(t, "the proxy's spans of the allowed call", func() bool {
		flush()
		for _, s := range col.find("test-proxy", "proxy.request") {
			if s.traceID() == allowedTrace {
				request = s
			}
		}
		for _, s := range col.find("test-proxy", "proxy.upstream") {
			if s.traceID() == allowedTrace {
				upstream = s
			}
		}
		return request.span != nil && upstream.span != nil
	})
	if request.parentID() != clientSpan || request.attr("portcullis.decision") != "allow" || request.attr("portcullis.mcp.tool") != "lookup_order" {
		t.Errorf("proxy.request: parent %s, decision %q, tool %q; want the client's span %s, allow, lookup_order",
			request.parentID(), request.attr("portcullis.decision"), request.attr("portcullis.mcp.tool"), clientSpan)
	}
	if upstream.parentID() != request.spanID() || !strings.Contains(got[0], upstream.spanID()) {
		t.Errorf("proxy.upstream: parent %s, span %s; want a child of proxy.request %s named in the upstream's traceparent %q",
			upstream.parentID(), upstream.spanID(), request.spanID(), got)
	}
	// The denied call's span, a denial with its id.
	var denied []gotSpan
	waitFor(t, "the proxy's span of the denied call", func() bool {
		flush()
		denied = nil
		for _, s := range col.find("test-proxy", "proxy.request") {
			if s.traceID() == deniedTrace {
				denied = append(denied, s)
			}
		}
		return len(denied) > 0
	})
	if len(denied) != 1 || denied[0].attr("portcullis.denial_id") != denial.DenialID || denied[0].span.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("denied call's spans = %d, denial id %q; want one, %s, status error", len(denied), denied[0].attr("portcullis.denial_id"), denial.DenialID)
	}

	// The approval → commit → push → ACK: one trace, each a child of the
	// one before, from the gateway and the proxy.
	var rpc, approve, commit, push, apply gotSpan
	waitFor(t, "the approval's trace down to the proxy's ACK", func() bool {
		flush()
		rpcs := col.find("test-gateway", "portcullis.v1.ApprovalService/ApproveProposal")
		if len(rpcs) != 1 {
			return false
		}
		rpc = rpcs[0]
		var ok [4]bool
		approve, ok[0] = only(col.find("test-gateway", "proposal.approve"), func(s gotSpan) bool { return s.parentID() == rpc.spanID() })
		commit, ok[1] = only(col.find("test-gateway", "policy.commit"), func(s gotSpan) bool { return s.parentID() == approve.spanID() })
		push, ok[2] = only(col.find("test-gateway", "policy.push"), func(s gotSpan) bool { return s.parentID() == commit.spanID() })
		apply, ok[3] = only(col.find("test-proxy", "policy.apply"), func(s gotSpan) bool { return s.parentID() == push.spanID() })
		return ok[0] && ok[1] && ok[2] && ok[3]
	})
	for _, s := range []gotSpan{approve, commit, push, apply} {
		if s.traceID() != rpc.traceID() {
			t.Errorf("%s (%s) is in trace %s; want the approval's, %s", s.span.GetName(), s.service, s.traceID(), rpc.traceID())
		}
	}
	if push.attr("portcullis.policy.version") != "3" || push.attr("portcullis.proxy.id") != "p1" || push.attr("portcullis.push.answer") != "ack" {
		t.Errorf("policy.push: version %q, proxy %q, answer %q; want 3, p1, ack", push.attr("portcullis.policy.version"), push.attr("portcullis.proxy.id"), push.attr("portcullis.push.answer"))
	}
	if apply.attr("portcullis.push.answer") != "ack" || apply.attr("portcullis.policy.version") != "3" {
		t.Errorf("policy.apply: answer %q, version %q; want ack, 3", apply.attr("portcullis.push.answer"), apply.attr("portcullis.policy.version"))
	}
	// The policy set's commit is traced too, from its own RPC.
	sets := col.find("test-gateway", "portcullis.v1.PolicyService/SetPolicy")
	if len(sets) != 1 {
		t.Fatalf("%d SetPolicy spans; want 1", len(sets))
	}
	if _, ok := only(col.find("test-gateway", "policy.commit"), func(s gotSpan) bool { return s.parentID() == sets[0].spanID() }); !ok {
		t.Error("the policy set's commit is not a child of its RPC's span")
	}
}

// only returns the one span of spans that keep holds for.
func only(spans []gotSpan, keep func(gotSpan) bool) (gotSpan, bool) {
	var found []gotSpan
	for _, s := range spans {
		if keep(s) {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		return gotSpan{}, false
	}
	return found[0], true
}
