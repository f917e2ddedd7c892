package dataplane_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/hold"
	"github.com/portcullis-dev/portcullis/demo"
	"github.com/portcullis-dev/portcullis/policy"
)

// Held calls through a real proxy, with a real MCP client and server; the
// gateway's side is an in-test filer here (dataplanetest.Reviewer), the real gateway's
// in held_gateway_e2e_test.go.

// heldPolicy is ordersPolicy with refund_order allowed after review
// instead of denied.
var heldPolicy = strings.Replace(ordersPolicy, `        deny_rules:
          - { method: tools/call, tool: refund_order }`, `          - allow: { method: tools/call, tool: refund_order, review: { required: true, timeout: TIMEOUT } }`, 1)

// heldRESTPolicy reviews payouts on a REST endpoint.
const heldRESTPolicy = `
version: 1
network_policies:
  payouts:
    endpoints:
      - host: orders.example.com
        port: PORT
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: POST, path: /v1/payouts/**, review: { required: true, timeout: TIMEOUT } }
    binaries:
      - path: /usr/bin/python3
`

// startHeld is a proxy enforcing heldPolicy as version 7, filing with rv.
func startHeld(t *testing.T, up *upstream, timeout string, options ...func(*dataplane.Config)) (*testProxy, *dataplanetest.Reviewer) {
	return startHeldDoc(t, heldPolicy, up, timeout, options...)
}

func startHeldDoc(t *testing.T, doc string, up *upstream, timeout string, options ...func(*dataplane.Config)) (*testProxy, *dataplanetest.Reviewer) {
	rv := dataplanetest.NewReviewer()
	options = append([]func(*dataplane.Config){func(c *dataplane.Config) { c.Hold.Filer = rv }}, options...)
	doc = strings.ReplaceAll(doc, "TIMEOUT", timeout)
	tp := startProxy(t, doc, up, options...)
	setPolicy(t, tp.proxy, strings.ReplaceAll(doc, "PORT", fmt.Sprint(up.port)), "7")
	return tp, rv
}

type callResult struct {
	res *mcp.CallToolResult
	err error
}

func callAsync(cs *mcp.ClientSession, params *mcp.CallToolParams) <-chan callResult {
	done := make(chan callResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), params)
		done <- callResult{res, err}
	}()
	return done
}

func result(t *testing.T, done <-chan callResult) callResult {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("the held call never answered")
		return callResult{}
	}
}

func lastRecord(tp *testProxy, tool string) decision.Record {
	var last decision.Record
	for _, r := range tp.proxy.Decisions() {
		if r.Tool == tool {
			last = r
		}
	}
	return last
}

// A held tools/call reaches the server only once approved, exactly once,
// and the agent's own request gets the server's answer; progress
// notifications reach a client that gave a token while it waits.
func TestHeldCallApproved(t *testing.T) {
	for _, tc := range []struct {
		name            string
		withToken, json bool
	}{
		{"progress token, the server streams", true, false},
		{"progress token, the server answers JSON", true, true},
		{"no progress token", false, false},
	} {
		withToken := tc.withToken
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, demo.OrdersHandler(&mcp.StreamableHTTPOptions{JSONResponse: tc.json, DisableLocalhostProtection: true}))
			tp, rv := startHeld(t, up, "2m")
			progress := make(chan string, 8)
			cs := connectMCP(t, tp, up, "2025-11-25", &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					progress <- req.Params.Message
				},
			})
			params := &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "A-1042"}}
			if withToken {
				params.SetProgressToken("p1")
			}
			done := callAsync(cs, params)
			r := rv.Next(t)
			if r.Call.Tool != "refund_order" || r.Call.ArgumentsJSON != `{"order_id":"A-1042"}` || r.Call.PolicyVersion != 7 || !strings.HasPrefix(r.Call.ArgumentsDigest, "sha256:") {
				t.Errorf("filed %+v", r.Call)
			}
			r.File(41)
			if withToken {
				select {
				case m := <-progress:
					if !strings.Contains(m, "41") || !strings.Contains(m, "review") {
						t.Errorf("progress while held: %q", m)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("no progress notification while held")
				}
			}
			if up.saw("refund_order") {
				t.Fatal("the server saw the held call before it was approved")
			}
			if n, _ := tp.proxy.HeldCalls(); n != 1 {
				t.Errorf("the proxy holds %d calls, want 1", n)
			}
			r.Decide(41, "approved")
			got := result(t, done)
			if got.err != nil || got.res.IsError || !strings.Contains(fmt.Sprint(got.res.StructuredContent), "refunded") {
				t.Fatalf("approved call = %+v, %v; want the server's answer", got.res, got.err)
			}
			if seen := up.times("refund_order"); seen != 1 {
				t.Errorf("the server saw the call %d times, want once", seen)
			}
			rec := lastRecord(tp, "refund_order")
			if rec.Decision != decision.Allow || !strings.Contains(rec.Reason, "approved by review (call 41, by alice)") || rec.ArgumentsDigest != r.Call.ArgumentsDigest {
				t.Errorf("record = %+v", rec)
			}
		})
	}
}

// Refusals: the agent gets a JSON-RPC error naming the review, the server
// sees nothing, and the record is a denial with the reason code.
func TestHeldCallRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout string
		act     func(t *testing.T, tp *testProxy, up *upstream, r *dataplanetest.Review)
		code    string
	}{
		{"denied", "2m", func(_ *testing.T, _ *testProxy, _ *upstream, r *dataplanetest.Review) { r.Decide(41, "denied") }, hold.ReviewDenied},
		{"timeout", "1s", func(*testing.T, *testProxy, *upstream, *dataplanetest.Review) {}, hold.ReviewTimeout},
		{"stale", "2m", func(t *testing.T, tp *testProxy, up *upstream, _ *dataplanetest.Review) {
			setPolicy(t, tp.proxy, strings.ReplaceAll(ordersPolicy, "PORT", fmt.Sprint(up.port)), "8")
		}, hold.ReviewStale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, ordersHandler(false))
			tp, rv := startHeld(t, up, tc.timeout)
			cs := connectMCP(t, tp, up, "2025-11-25", nil)
			done := callAsync(cs, &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "A-1042"}})
			r := rv.Next(t)
			r.File(41)
			tc.act(t, tp, up, r)
			got := result(t, done)
			if got.err == nil || !strings.Contains(got.err.Error(), tc.code) {
				t.Fatalf("refused call = %+v, %v; want an error naming %s", got.res, got.err, tc.code)
			}
			if up.saw("refund_order") {
				t.Fatal("the server saw a refused held call")
			}
			rec := lastRecord(tp, "refund_order")
			if rec.Decision != decision.Deny || rec.ReasonCode != tc.code || !strings.HasPrefix(rec.DenialID, "dn_") || rec.ArgumentsDigest == "" {
				t.Errorf("record = %+v", rec)
			}
			if tc.code != hold.ReviewDenied {
				if why := <-r.Ended; !strings.HasPrefix(why, tc.code) {
					t.Errorf("the gateway was told %q", why)
				}
			}
		})
	}
}

// The refusal's JSON-RPC error carries what an agent acts on.
func TestHeldCallRefusalBody(t *testing.T) {
	up := startUpstream(t, ordersHandler(true))
	tp, rv := startHeld(t, up, "2m")
	type answer struct {
		res  *http.Response
		body string
	}
	done := make(chan answer, 1)
	go func() {
		res, body := rawMCP(t, tp, up, http.Header{"Mcp-Protocol-Version": {"2025-11-25"}},
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":"A-1"}}}`)
		done <- answer{res, body}
	}()
	r := rv.Next(t)
	r.File(12)
	r.Decide(12, "denied")
	a := <-done
	var msg struct {
		ID    int `json:"id"`
		Error struct {
			Code int            `json:"code"`
			Data map[string]any `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(a.body), &msg); err != nil || a.res.StatusCode != http.StatusForbidden {
		t.Fatalf("answer %d %s: %v", a.res.StatusCode, a.body, err)
	}
	d := msg.Error.Data
	if msg.ID != 5 || msg.Error.Code != hold.RefusedCode || d["reason_code"] != hold.ReviewDenied || d["call_id"] != float64(12) || d["policy_version"] != "7" || !strings.HasPrefix(fmt.Sprint(d["denial_id"]), "dn_") {
		t.Errorf("answer %s", a.body)
	}
}

// A batch holding a reviewed call is refused whole, naming why.
func TestHeldCallInBatchRefused(t *testing.T) {
	up := startUpstream(t, ordersHandler(true))
	tp, _ := startHeld(t, up, "2m")
	res, body := rawMCP(t, tp, up, http.Header{"Mcp-Protocol-Version": {"2025-03-26"}},
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}},`+
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":"A-1"}}}]`)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "alone, not in a JSON-RPC batch") || up.count() != 0 {
		t.Errorf("batch: %d %s, server saw %d", res.StatusCode, body, up.count())
	}
}

// Past the proxy's bound a call is refused at once, review_busy, and a
// proxy without a gateway refuses review_unavailable saying why.
func TestHeldCallBusyAndUnavailable(t *testing.T) {
	up := startUpstream(t, ordersHandler(false))
	tp, rv := startHeld(t, up, "2m", func(c *dataplane.Config) { c.Hold.MaxCalls = 1 })
	cs := connectMCP(t, tp, up, "2025-11-25", nil)
	first := callAsync(cs, &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "A-1"}})
	r := rv.Next(t)
	r.File(1)
	_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "A-2"}})
	if err == nil || !strings.Contains(err.Error(), hold.ReviewBusy) {
		t.Errorf("a call past the bound: %v, want review_busy", err)
	}
	// Other traffic of the sandbox passes while a call is held.
	if res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": "A-1042"}}); err != nil || res.IsError {
		t.Errorf("lookup_order while a call is held: %v, %v", res, err)
	}
	r.Decide(1, "denied")
	result(t, first)

	up2 := startUpstream(t, ordersHandler(false))
	tp2 := startProxy(t, strings.ReplaceAll(heldPolicy, "TIMEOUT", "2m"), up2)
	cs2 := connectMCP(t, tp2, up2, "2025-11-25", nil)
	_, err = cs2.CallTool(t.Context(), &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "A-1"}})
	if err == nil || !strings.Contains(err.Error(), hold.ReviewUnavailable) || !strings.Contains(err.Error(), "policy file") {
		t.Errorf("no gateway: %v, want review_unavailable saying why", err)
	}
}

// A REST call is held with its body, forwarded once approved and refused
// with a 403 otherwise.
func TestHeldRESTCall(t *testing.T) {
	for _, status := range []string{"approved", "denied"} {
		t.Run(status, func(t *testing.T) {
			up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"paid":true}`)
			}))
			tp, rv := startHeldDoc(t, heldRESTPolicy, up, "2m")
			done := payout(tp.httpClient(), up)
			r := rv.Next(t)
			if r.Call.ArgumentsJSON != `{"amount": 12}` || r.Call.Method != http.MethodPost || r.Call.Path != "/v1/payouts/1" {
				t.Errorf("filed %+v", r.Call)
			}
			r.File(3)
			if up.count() != 0 {
				t.Fatal("the server saw the held call before it was decided")
			}
			r.Decide(3, status)
			a := <-done
			switch status {
			case "approved":
				if a.status != http.StatusOK || a.body != `{"paid":true}` || !up.saw(`{"amount": 12}`) || up.count() != 1 {
					t.Errorf("approved: %d %s, server saw %d", a.status, a.body, up.count())
				}
			default:
				if a.status != http.StatusForbidden || !strings.Contains(a.body, `"reason_code":"review_denied"`) || up.count() != 0 {
					t.Errorf("denied: %d %s, server saw %d", a.status, a.body, up.count())
				}
			}
		})
	}
}

// A REST call needing review whose body is larger than a person may be
// shown (policy.MaxReviewedArguments) is refused at once, with the bound
// named: nothing is filed, nothing forwarded, and no more of the body is
// kept than the bound and one byte.
func TestHeldRESTCallTooLarge(t *testing.T) {
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"paid":true}`) }))
	tp, rv := startHeldDoc(t, heldRESTPolicy, up, "2m")
	body := `{"note":"` + strings.Repeat("x", policy.MaxReviewedArguments) + `"}`
	res, err := tp.httpClient().Post(fmt.Sprintf("https://orders.example.com:%d/v1/payouts/1", up.port), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(b), fmt.Sprintf("over the %d a call held for review may show", policy.MaxReviewedArguments)) {
		t.Errorf("a body over the bound: %d %s", res.StatusCode, b)
	}
	select {
	case r := <-rv.Filed:
		t.Errorf("filed %d bytes of arguments", len(r.Call.ArgumentsJSON))
	default:
	}
	if up.count() != 0 {
		t.Errorf("the server saw %d requests", up.count())
	}
}

// times counts the requests the server saw that hold substr.
func (u *upstream) times(substr string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, b := range u.bodies {
		if strings.Contains(b, substr) {
			n++
		}
	}
	return n
}

// The request's span spans the wait: it has the held and decided events,
// and the call was filed with its trace id.
func TestHeldCallTraced(t *testing.T) {
	col := startCollector(t)
	tracing := startTracing(t, col, "test-proxy")
	up := startUpstream(t, ordersHandler(true))
	tp, rv := startHeld(t, up, "2m", func(c *dataplane.Config) { c.Tracer = tracing.Provider() })
	done := make(chan struct{})
	go func() {
		defer close(done)
		rawMCP(t, tp, up, http.Header{"Mcp-Protocol-Version": {"2025-11-25"}},
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":"A-1"}}}`)
	}()
	r := rv.Next(t)
	r.File(12)
	r.Decide(12, "approved")
	<-done
	if r.Call.TraceID == "" {
		t.Fatal("the call was filed without its trace id")
	}
	waitFor(t, "the held call's span", func() bool {
		tracing.ForceFlush(t.Context())
		for _, s := range col.find("test-proxy", "proxy.request") {
			if s.traceID() != r.Call.TraceID {
				continue
			}
			var names []string
			for _, e := range s.span.GetEvents() {
				names = append(names, e.GetName())
			}
			return strings.Join(names, ",") == "held,decided"
		}
		return false
	})
}

// A proxy that stops ends the calls it holds: their agents are answered
// review_unavailable, and the gateway is told.
func TestHeldCallEndsAtShutdown(t *testing.T) {
	up := startUpstream(t, ordersHandler(true))
	var cfg dataplane.Config
	tp, rv := startHeld(t, up, "2m", func(c *dataplane.Config) { cfg = *c })
	a := newAgent(t, cfg)
	setPolicy(t, a, strings.ReplaceAll(strings.ReplaceAll(heldPolicy, "TIMEOUT", "2m"), "PORT", fmt.Sprint(up.port)), "7")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- a.Run(ctx, ln) }()
	client := &testProxy{proxy: a, url: &url.URL{Scheme: "http", Host: ln.Addr().String()}, roots: tp.roots}
	tr := &http.Transport{Proxy: http.ProxyURL(client.url), TLSClientConfig: &tls.Config{RootCAs: tp.roots}}
	defer tr.CloseIdleConnections()
	client.client = &http.Client{Transport: tr}
	done := make(chan string, 1)
	go func() {
		_, body := rawMCP(t, client, up, http.Header{"Mcp-Protocol-Version": {"2025-11-25"}},
			`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":"A-1"}}}`)
		done <- body
	}()
	r := rv.Next(t)
	r.File(3)
	stop()
	if body := <-done; !strings.Contains(body, hold.ReviewUnavailable) || !strings.Contains(body, "stopping") {
		t.Errorf("the agent was answered %s", body)
	}
	if why := <-r.Ended; !strings.HasPrefix(why, hold.ReviewUnavailable) {
		t.Errorf("the gateway was told %q", why)
	}
	if err := <-stopped; err != nil {
		t.Error(err)
	}
	if up.saw("refund_order") {
		t.Error("the server saw the call")
	}
}

// restAnswer is a REST call's answer: its status and body.
type restAnswer struct {
	status int
	body   string
}

// payout posts a payout through c, the agent's client, on its own
// goroutine; the channel gives the answer.
func payout(c *http.Client, up *upstream) <-chan restAnswer {
	done := make(chan restAnswer, 1)
	go func() {
		res, err := c.Post(fmt.Sprintf("https://orders.example.com:%d/v1/payouts/1", up.port), "application/json", strings.NewReader(`{"amount": 12}`))
		if err != nil {
			done <- restAnswer{0, err.Error()}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		done <- restAnswer{res.StatusCode, string(b)}
	}()
	return done
}

// A held call whose grant ends (expires_at) while it waits is refused
// review_stale: held calls are judged again as time passes.
func TestHeldCallGrantEnds(t *testing.T) {
	up := startUpstream(t, ordersHandler(false))
	end := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &clock{now: end.Add(-time.Minute)}
	doc := strings.Replace(heldPolicy, "timeout: TIMEOUT } }", `timeout: TIMEOUT }, expires_at: "2030-01-01T00:00:00Z" }`, 1)
	tp, rv := startHeldDoc(t, doc, up, "2m", func(c *dataplane.Config) { c.Now = clk.Now })
	cs := connectMCP(t, tp, up, "2025-11-25", nil)
	done := callAsync(cs, &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "A-1042"}})
	r := rv.Next(t)
	r.File(4)
	clk.set(end.Add(time.Second))
	if got := result(t, done); got.err == nil || !strings.Contains(got.err.Error(), hold.ReviewStale) {
		t.Fatalf("held call past its grant = %+v, %v; want review_stale", got.res, got.err)
	}
	if up.saw("refund_order") {
		t.Error("the server saw the call")
	}
}
