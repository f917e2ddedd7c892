package dataplane_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/demo"
	"github.com/portcullis-dev/portcullis/internal/ca"
)

// The article's orders policy, with the argument gate on lookup_order.
// PORT is the upstream's port; versions lists the revisions the tests use.
const ordersPolicy = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: orders.example.com
        port: PORT
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          versions: ["2025-11-25", "2026-07-28", "2025-03-26"]
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
          - allow: { method: server/discover }
          - allow: { method: tools/list }
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema:
                type: object
                properties:
                  order_id: { type: string, pattern: "^[A-Z]-\\d{4}$" }
                required: [order_id]
                additionalProperties: false
        deny_rules:
          - { method: tools/call, tool: refund_order }
    binaries:
      - path: /usr/bin/python3
`

// upstream is a real MCP server (the demo orders server) behind TLS for
// orders.example.com, recording every request body it receives.
type upstream struct {
	port  int
	roots *x509.CertPool

	mu     sync.Mutex
	bodies []string
}

func (u *upstream) saw(substr string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, b := range u.bodies {
		if strings.Contains(b, substr) {
			return true
		}
	}
	return false
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.bodies)
}

func startUpstream(t *testing.T, handler http.Handler) *upstream {
	t.Helper()
	ca, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{roots: x509.NewCertPool()}
	u.roots.AppendCertsFromPEM(ca.CertPEM())
	recording := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies = append(u.bodies, r.Method+" "+r.URL.Path+" "+string(body))
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		handler.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: recording, TLSConfig: ca.TLSConfig()}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return u
}

// testProxy is a proxy on 127.0.0.1:0 enforcing one policy, resolving
// orders.example.com to loopback.
type testProxy struct {
	proxy  *dataplane.Agent
	url    *url.URL
	roots  *x509.CertPool // the proxy's CA, which clients trust
	client *http.Client
}

func startProxy(t *testing.T, doc string, up *upstream, options ...func(*dataplane.Config)) *testProxy {
	t.Helper()
	proxyCA, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := dataplane.Config{
		DevAllowLoopback: true,
		UpstreamRoots:    up.roots,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host == "orders.example.com" {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
		// The policy names the article's binary; binary identity through
		// /proc is tested on its own (procid_test.go).
		CallerBinary: func(net.Conn) (string, error) { return "/usr/bin/python3", nil },
		CA:           proxyCA,
	}
	for _, o := range options {
		o(&cfg)
	}
	p, u := startAgent(t, cfg, strings.ReplaceAll(doc, "PORT", strconv.Itoa(up.port)), "test-1")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(proxyCA.CertPEM())
	tp := &testProxy{proxy: p, url: u, roots: roots}
	tr := &http.Transport{Proxy: http.ProxyURL(tp.url), TLSClientConfig: &tls.Config{RootCAs: roots}}
	tp.client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return tp
}

// httpClient goes through the proxy and trusts only the proxy's CA, as a
// sandboxed agent does.
func (tp *testProxy) httpClient() *http.Client { return tp.client }

func connectMCP(t *testing.T, tp *testProxy, up *upstream, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, opts)
	endpoint := fmt.Sprintf("https://orders.example.com:%d/mcp", up.port)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:             endpoint,
		HTTPClient:           tp.httpClient(),
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect through the proxy: %v\ndecisions: %+v", err, tp.proxy.Decisions())
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestMCPThroughProxy is the acceptance test: a real MCP client and
// server (official Go SDK) with the proxy between them, enforcing the
// article's policy with the argument gate.
func TestMCPThroughProxy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stateless bool
		version   string
	}{
		{"2025-11-25 with sessions", false, "2025-11-25"},
		{"2026-07-28 stateless", true, "2026-07-28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, ordersHandler(tc.stateless))
			tp := startProxy(t, ordersPolicy, up)
			progress := make(chan string, 8)
			cs := connectMCP(t, tp, up, tc.version, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					progress <- req.Params.Message
				},
			})
			ctx := t.Context()

			tools, err := cs.ListTools(ctx, nil)
			// refund_order is denied: the agent is not shown it.
			if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "lookup_order" {
				t.Fatalf("tools/list through the proxy = %v, %v; want lookup_order alone", tools, err)
			}

			params := &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": "A-1042"}}
			params.SetProgressToken("p1")
			res, err := cs.CallTool(ctx, params)
			if err != nil || res.IsError {
				t.Fatalf("lookup_order A-1042 = %v, %v; want a result", res, err)
			}
			// The client hands notifications to the handler asynchronously:
			// wait for both, with a deadline.
			var got []string
			for len(got) < 2 {
				select {
				case m := <-progress:
					got = append(got, m)
				case <-time.After(10 * time.Second):
					t.Fatalf("progress notifications streamed through = %q; want the server's two", got)
				}
			}
			if !strings.Contains(got[0], "A-1042") {
				t.Errorf("first progress notification = %q", got[0])
			}

			// Denied by the deny rule: a JSON-RPC error, and the server never sees it.
			before := up.count()
			_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "refund_order", Arguments: map[string]any{"order_id": "A-1042"}})
			if err == nil || !strings.Contains(err.Error(), "refund_order") {
				t.Fatalf("refund_order: got %v, want a JSON-RPC error naming the tool", err)
			}
			if up.saw("refund_order") || up.count() != before {
				t.Fatalf("the upstream saw the denied refund_order")
			}

			// The argument gate: a malformed id, and an extra field.
			for _, args := range []map[string]any{
				{"order_id": "x"},
				{"order_id": "A-1042", "refund": true},
				{},
			} {
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup_order", Arguments: args})
				if err == nil || !strings.Contains(err.Error(), "arguments") {
					t.Errorf("lookup_order %v: got %v, want refused by the schema gate", args, err)
				}
				recs := tp.proxy.Decisions()
				if last := recs[len(recs)-1]; !strings.HasPrefix(last.Rule, "rules[") {
					t.Errorf("schema refusal record names rule %q, want the rule whose schema refused", last.Rule)
				}
			}
			if up.count() != before {
				t.Fatalf("the upstream saw a call the schema gate refused")
			}

			// Every decision is recorded; denials carry an id.
			var allowed, denied int
			for _, r := range tp.proxy.Decisions() {
				switch r.Decision {
				case decision.Allow:
					allowed++
				case decision.Deny:
					denied++
					if !strings.HasPrefix(r.DenialID, "dn_") || r.PolicyVersion != "test-1" || r.Binary != "/usr/bin/python3" {
						t.Errorf("denial record = %+v", r)
					}
				}
			}
			if allowed < 3 || denied != 4 {
				t.Errorf("decision log: %d allowed, %d denied; want >= 3 and 4", allowed, denied)
			}
		})
	}
}

// rawMCP posts a raw body to the MCP endpoint through the proxy.
func rawMCP(t *testing.T, tp *testProxy, up *upstream, header http.Header, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, fmt.Sprintf("https://orders.example.com:%d/mcp", up.port), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := tp.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// A batch mixing an allowed lookup and a denied refund is refused whole,
// in the one revision that has batches; nothing of it reaches the server.
func TestMCPBatchRefusedWhole(t *testing.T) {
	up := startUpstream(t, ordersHandler(false))
	tp := startProxy(t, ordersPolicy, up)
	batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}},
	           {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":"A-1042"}}}]`
	res, body := rawMCP(t, tp, up, http.Header{"Mcp-Protocol-Version": {"2025-03-26"}}, batch)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(body, `"id":1`) || !strings.Contains(body, `"id":2`) || !strings.Contains(body, "-32001") {
		t.Fatalf("mixed batch: %d %s; want 403 with a JSON-RPC error per id", res.StatusCode, body)
	}
	// In a revision without batches, even an all-allowed batch is refused.
	ok := `[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`
	if res, body := rawMCP(t, tp, up, http.Header{"Mcp-Protocol-Version": {"2025-11-25"}}, ok); res.StatusCode != http.StatusForbidden || !strings.Contains(body, "batch") {
		t.Fatalf("batch in 2025-11-25: %d %s; want refused", res.StatusCode, body)
	}
	if up.count() != 0 {
		t.Fatalf("the upstream received %d requests", up.count())
	}
}

// Every strict-parsing case is denied before policy — even in audit
// mode — and the upstream receives nothing.
func TestMCPStrictParsingDeniesBeforePolicy(t *testing.T) {
	audit := strings.Replace(ordersPolicy, "enforcement: enforce", "enforcement: audit", 1)
	up := startUpstream(t, ordersHandler(false))
	tp := startProxy(t, audit, up)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`
	v := http.Header{"Mcp-Protocol-Version": {"2025-11-25"}}
	with := func(k, val string) http.Header {
		h := v.Clone()
		h.Set(k, val)
		return h
	}
	cases := []struct {
		name   string
		header http.Header
		body   string
	}{
		{"duplicate key", v, `{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":{"name":"lookup_order"}}`},
		{"duplicate key in arguments", v, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042","order_id":"B-1"}}}`},
		{"invalid UTF-8", v, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"lookup_order\xff\"}}"},
		{"trailing data", v, call + ` {"jsonrpc":"2.0"}`},
		{"gzip content encoding", with("Content-Encoding", "gzip"), call},
		{"wrong jsonrpc version", v, strings.Replace(call, `"2.0"`, `"1.0"`, 1)},
		{"non-string method", v, `{"jsonrpc":"2.0","id":1,"method":7}`},
		{"non-string tool name", v, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["lookup_order"]}}`},
		{"empty batch", v, `[]`},
		{"body over the limit", v, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"` + strings.Repeat("A", 70000) + `"}}}`},
		{"Mcp-Method disagrees", with("Mcp-Method", "tools/list"), call},
		{"Mcp-Name disagrees", with("Mcp-Name", "refund_order"), call},
		{"Mcp_Method disagrees", with("Mcp_Method", "tools/list"), call},
		{"mcp_name disagrees", with("mcp_name", "refund_order"), call},
		{"Mcp_Protocol_Version besides Mcp-Protocol-Version", with("Mcp_Protocol_Version", "2025-11-25"), call},
		{"versions disagree", with("Mcp-Protocol-Version", "2025-03-26"), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, body := rawMCP(t, tp, up, tc.header, tc.body)
			if res.StatusCode != http.StatusForbidden {
				t.Fatalf("got %d %s, want 403", res.StatusCode, body)
			}
			if up.count() != 0 {
				t.Fatalf("the upstream received the request")
			}
		})
	}
	var audits int
	for _, r := range tp.proxy.Decisions() {
		if r.Decision == decision.Audit || r.Decision == decision.Allow {
			audits++
		}
	}
	if audits != 0 {
		t.Fatalf("%d malformed requests were let through in audit mode", audits)
	}
}

// Content-Length together with Transfer-Encoding is refused: the proxy
// and the upstream could read different bodies.
func TestMCPContentLengthWithTransferEncoding(t *testing.T) {
	up := startUpstream(t, ordersHandler(false))
	tp := startProxy(t, ordersPolicy, up)
	// A raw request on a CONNECT tunnel, so both headers reach the proxy.
	conn, err := net.Dial("tcp", tp.url.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	authority := fmt.Sprintf("orders.example.com:%d", up.port)
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	br := bufioReader(conn)
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT = %v, %v", res, err)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: tp.roots, ServerName: "orders.example.com"})
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	fmt.Fprintf(tc, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nMcp-Protocol-Version: 2025-11-25\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", authority, len(body), len(body), body)
	res, err := http.ReadResponse(bufioReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusOK || up.count() != 0 {
		t.Fatalf("CL+TE request: status %d, upstream saw %d requests; want refused, nothing forwarded", res.StatusCode, up.count())
	}
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// ordersHandler is the demo server; the upstream listens on loopback but is
// reached as orders.example.com, so the SDK's rebinding guard is off.
func ordersHandler(stateless bool) http.Handler {
	return demo.OrdersHandler(&mcp.StreamableHTTPOptions{Stateless: stateless, DisableLocalhostProtection: true})
}

// Inside a CONNECT tunnel, the TLS server name and the inner Host must be
// the CONNECT authority.
func TestTunnelNamesMustMatchConnect(t *testing.T) {
	up := startUpstream(t, ordersHandler(false))
	tp := startProxy(t, ordersPolicy, up)
	authority := fmt.Sprintf("orders.example.com:%d", up.port)
	open := func(serverName string) (*tls.Conn, *bufio.Reader) {
		t.Helper()
		conn, err := net.Dial("tcp", tp.url.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		if res, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || res.StatusCode != 200 {
			t.Fatalf("CONNECT = %v, %v", res, err)
		}
		tc := tls.Client(conn, &tls.Config{RootCAs: tp.roots, ServerName: serverName, InsecureSkipVerify: serverName != "orders.example.com"})
		return tc, bufio.NewReader(tc)
	}
	// Another SNI: the proxy closes the tunnel.
	tc, br := open("evil.example.com")
	fmt.Fprintf(tc, "POST /mcp HTTP/1.1\r\nHost: %s\r\n\r\n", authority)
	if res, err := http.ReadResponse(br, nil); err == nil && res.StatusCode == 200 {
		t.Fatalf("a tunnel with another SNI served a request")
	}
	// Another inner Host: 403.
	tc, br = open("orders.example.com")
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	fmt.Fprintf(tc, "POST /mcp HTTP/1.1\r\nHost: other.example.com\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || up.count() != 0 {
		t.Fatalf("inner Host mismatch = %d, upstream saw %d", res.StatusCode, up.count())
	}
}

// A request refused only because its protocol version is not listed is
// recorded as a version probe (not offered to the advisor).
func TestVersionProbeRecorded(t *testing.T) {
	up := startUpstream(t, ordersHandler(false))
	tp := startProxy(t, ordersPolicy, up)
	res, body := rawMCP(t, tp, up, http.Header{"Mcp-Protocol-Version": {"2025-06-18"}}, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("unlisted version = %d %s", res.StatusCode, body)
	}
	recs := tp.proxy.Decisions()
	if last := recs[len(recs)-1]; !last.VersionProbe || last.Decision != decision.Deny {
		t.Fatalf("record = %+v, want a denial marked as a version probe", last)
	}
}

// GET (the SSE receive stream) and DELETE (session end) follow the
// endpoint's match; other methods are denied.
func TestMCPGetAndDelete(t *testing.T) {
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	tp := startProxy(t, ordersPolicy, up)
	u := fmt.Sprintf("https://orders.example.com:%d/mcp", up.port)
	for _, tc := range []struct {
		method string
		want   int
	}{{http.MethodGet, http.StatusNoContent}, {http.MethodDelete, http.StatusNoContent}, {http.MethodPut, http.StatusForbidden}} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, u, nil)
		res, err := tp.httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s /mcp = %d, want %d", tc.method, res.StatusCode, tc.want)
		}
	}
	if up.count() != 2 {
		t.Fatalf("upstream saw %d requests, want GET and DELETE", up.count())
	}
	// A GET carrying a body would smuggle an unjudged message.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, u, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund_order"}}`))
	res, err := tp.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || up.count() != 2 {
		t.Fatalf("GET with a body = %d, upstream saw %d", res.StatusCode, up.count())
	}
}

// enforcement: audit forwards what policy would deny and records it as
// audit.
func TestAuditModeForwardsAndRecords(t *testing.T) {
	audit := strings.Replace(ordersPolicy, "enforcement: enforce", "enforcement: audit", 1)
	up := startUpstream(t, ordersHandler(true))
	tp := startProxy(t, audit, up)
	// A well-formed call no rule allows (the argument gate refuses "x").
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}}}`
	h := http.Header{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"lookup_order"}}
	res, body := rawMCP(t, tp, up, h, call)
	if res.StatusCode != http.StatusOK || !up.saw(`"order_id":"x"`) {
		t.Fatalf("audit mode = %d %s; want forwarded", res.StatusCode, body)
	}
	recs := tp.proxy.Decisions()
	if last := recs[len(recs)-1]; last.Decision != decision.Audit {
		t.Fatalf("record = %+v, want audit", last)
	}
}
