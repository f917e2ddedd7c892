package dataplane_test

import (
	"bufio"
	"context"
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

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/dataplane/policylocal"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// localPolicy allows one REST API (GET only) on api.example.com, and,
// on purpose, policy.local:PORT itself: the proxy must answer policy.local
// even where a policy would let it through.
const localPolicy = `
version: 1
network_policies:
  api:
    name: api
    endpoints:
      - host: api.example.com
        port: 80
        protocol: rest
        rules:
          - allow: { method: GET, path: "/v1/items/*" }
  trap:
    name: trap
    endpoints:
      - host: policy.local
        port: PORT
        protocol: rest
        access: full
`

// localProxy is a proxy serving localPolicy, with an upstream that would
// see anything forwarded to policy.local and a resolver that records
// every host it is asked for. In gateway mode it follows sandbox agent-1
// of a real gateway (gw), which its policy.local relays to.
type localProxy struct {
	agent    *dataplane.Agent
	client   *http.Client
	addr     string
	upPort   int
	upstream atomic.Int64 // requests the upstream received
	resolved sync.Map     // host → true

	gw    *gatewaytest.Gateway // gateway mode only
	admin dataplanetest.Admin
}

// startLocalProxy runs a file-mode proxy whose policy is localPolicy,
// version 7.
func startLocalProxy(t *testing.T) *localProxy {
	t.Helper()
	lp, cfg := newLocalProxy(t)
	lp.agent = newAgent(t, cfg)
	setPolicy(t, lp.agent, strings.ReplaceAll(localPolicy, "PORT", strconv.Itoa(lp.upPort)), "7")
	lp.serve(t)
	return lp
}

// startGatewayProxy runs a gateway-mode proxy of sandbox agent-1, created
// with localPolicy on a real gateway, as `portcullis proxy --sandbox`
// wires it, except that the shipper's interval is an hour: only a Flush
// gets decision records to the gateway in time.
func startGatewayProxy(t *testing.T) *localProxy {
	t.Helper()
	lp, cfg := newLocalProxy(t)
	lp.gw = gatewaytest.Start(t, "sqlite")
	lp.admin = dataplanetest.NewAdmin(lp.gw.URL)
	created, err := lp.admin.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: strings.ReplaceAll(localPolicy, "PORT", strconv.Itoa(lp.upPort))})
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
	return lp
}

// newLocalProxy starts the upstream and returns the proxy's configuration.
func newLocalProxy(t *testing.T) (*localProxy, dataplane.Config) {
	t.Helper()
	lp := &localProxy{}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lp.upstream.Add(1)
		io.WriteString(w, `{"upstream":"reached"}`)
	})}
	go upSrv.Serve(upLn)
	t.Cleanup(func() { upSrv.Close() })
	lp.upPort = upLn.Addr().(*net.TCPAddr).Port
	return lp, dataplane.Config{
		Sandbox:          "agent-1",
		DevAllowLoopback: true,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			lp.resolved.Store(host, true)
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		CallerBinary: func(net.Conn) (string, error) { return "/usr/bin/curl", nil },
	}
}

// serve runs the proxy and points the client at it.
func (lp *localProxy) serve(t *testing.T) {
	t.Helper()
	u := dataplanetest.Serve(t, lp.agent)
	lp.addr = u.Host
	tr := &http.Transport{Proxy: http.ProxyURL(u)}
	lp.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(tr.CloseIdleConnections)
}

// proposals returns the sandbox's proposals as the gateway stored them.
func (lp *localProxy) proposals(t *testing.T) []*portcullisv1.Proposal {
	t.Helper()
	res, err := lp.admin.Approval.ListProposals(t.Context(), &portcullisv1.ApprovalServiceListProposalsRequest{Sandbox: "agent-1"})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetProposals()
}

// stored returns proposal id as the gateway stored it.
func (lp *localProxy) stored(t *testing.T, id string) *portcullisv1.Proposal {
	t.Helper()
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		t.Fatalf("proposal id %q: %v", id, err)
	}
	p, err := lp.admin.Approval.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: n})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// do sends one request through the proxy and decodes the JSON answer.
func (lp *localProxy) do(t *testing.T, method, rawURL, body string) (*http.Response, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, rawURL, rd)
	if err != nil {
		t.Fatal(err)
	}
	res, err := lp.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s %s: %d, body %q is not a JSON object", method, rawURL, res.StatusCode, data)
	}
	return res, v
}

// deny makes the proxy deny one request, and returns its denial id.
func (lp *localProxy) deny(t *testing.T, path string) string {
	t.Helper()
	res, body := lp.do(t, http.MethodPost, "http://api.example.com"+path, "{}")
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("POST %s = %d %v; want 403", path, res.StatusCode, body)
	}
	return body["denial_id"].(string)
}

// noneForwarded fails the test if anything for policy.local left the proxy.
func (lp *localProxy) noneForwarded(t *testing.T) {
	t.Helper()
	if n := lp.upstream.Load(); n != 0 {
		t.Errorf("the upstream received %d requests meant for policy.local", n)
	}
	if _, ok := lp.resolved.Load(policylocal.Host); ok {
		t.Errorf("the proxy resolved policy.local: it was about to dial it")
	}
}

// The endpoints that need no gateway work in file mode; those that do
// answer 503 saying so. Nothing is forwarded.
func TestPolicyLocalFileMode(t *testing.T) {
	lp := startLocalProxy(t)
	id := lp.deny(t, "/v1/items/42")

	for _, u := range []string{"http://policy.local/v1/policy", "http://POLICY.LOCAL./v1/policy", "http://policy.local:80/v1/policy"} {
		res, body := lp.do(t, http.MethodGet, u, "")
		if res.StatusCode != http.StatusOK || body["version"] != float64(7) || body["sandbox"] != "agent-1" {
			t.Fatalf("GET %s = %d %v", u, res.StatusCode, body)
		}
		doc, _ := json.Marshal(body["policy"])
		parsed, _, err := policy.Parse(doc)
		if err != nil {
			t.Fatalf("GET %s: policy does not parse: %v", u, err)
		}
		if body["hash"] != parsed.Hash() {
			t.Errorf("GET %s: hash %v, the policy's is %s", u, body["hash"], parsed.Hash())
		}
	}

	res, body := lp.do(t, http.MethodGet, "http://policy.local/v1/denials?last=5", "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("denials = %d %v", res.StatusCode, body)
	}
	denials := body["denials"].([]any)
	if len(denials) != 1 {
		t.Fatalf("denials = %v; want the one denial", denials)
	}
	d := denials[0].(map[string]any)
	if d["denial_id"] != id || d["host"] != "api.example.com" || d["http_method"] != "POST" || d["path"] != "/v1/items/42" || d["binary"] != nil {
		t.Errorf("denial = %v", d)
	}
	// The suggestion is a proposal the advisor takes, allowing exactly
	// that request.
	sugg, _ := json.Marshal(d["suggestion"])
	prop, err := advisor.ParseProposal(sugg)
	if err != nil {
		t.Fatalf("suggestion %s: %v", sugg, err)
	}
	if op := prop.Operations[0].AddAllowRules; op == nil || op.Host != "api.example.com" || op.Rules[0].Allow.Method != "POST" || op.Rules[0].Allow.Path != "/v1/items/42" {
		t.Errorf("suggestion = %s; want add_allow_rules POST /v1/items/42 on api.example.com", sugg)
	}

	for _, tc := range []struct{ method, url, body string }{
		{http.MethodPost, "http://policy.local/v1/proposals", `{"denial_id":"` + id + `","rationale":"need it"}`},
		{http.MethodGet, "http://policy.local/v1/proposals/1", ""},
		{http.MethodGet, "http://policy.local/v1/proposals/1/wait?timeout=1s", ""},
	} {
		res, body := lp.do(t, tc.method, tc.url, tc.body)
		if res.StatusCode != http.StatusServiceUnavailable || body["code"] != "no_gateway" || !strings.Contains(body["error"].(string), "no gateway") {
			t.Errorf("%s %s in file mode = %d %v; want 503 no gateway", tc.method, tc.url, res.StatusCode, body)
		}
	}
	lp.noneForwarded(t)
}

// policy.local is the proxy's own: any other port, CONNECT, https, bad
// paths, methods, bodies and query parameters are refused, and nothing
// reaches the upstream a policy would let policy.local through to.
func TestPolicyLocalIsNeverForwarded(t *testing.T) {
	lp := startLocalProxy(t)
	for _, tc := range []struct {
		method, url, body string
		status            int
		code              string
	}{
		// The port the policy's trap entry allows, where the upstream
		// listens: without the proxy answering, this would reach it.
		{http.MethodGet, fmt.Sprintf("http://policy.local:%d/v1/policy", lp.upPort), "", 400, "policy_local_port"},
		{http.MethodGet, "http://policy.local:8080/v1/policy", "", 400, "policy_local_port"},
		{http.MethodDelete, "http://policy.local/v1/policy", "", 405, "method_not_allowed"},
		{http.MethodHead + "X", "http://policy.local/v1/denials", "", 405, "method_not_allowed"},
		{http.MethodGet, "http://policy.local/v1/proposals", "", 405, "method_not_allowed"},
		{http.MethodPut, "http://policy.local/mcp", "{}", 405, "method_not_allowed"},
		{http.MethodGet, "http://policy.local/mcp", "", 405, "method_not_allowed"},
		{http.MethodDelete, "http://policy.local/mcp", "", 405, "method_not_allowed"},
		{http.MethodGet, "http://policy.local/", "", 404, "not_found"},
		{http.MethodGet, "http://policy.local/v1/policy/", "", 404, "not_found"},
		{http.MethodGet, "http://policy.local/v1/x/../policy", "", 404, "not_found"},
		{http.MethodGet, "http://policy.local/v1/proposals/abc", "", 404, "not_found"},
		{http.MethodGet, "http://policy.local/v1/proposals/0", "", 404, "not_found"},
		{http.MethodGet, "http://policy.local/v1/proposals/1/wait/x", "", 404, "not_found"},
		{http.MethodGet, "http://policy.local/v1/denials?last=x", "", 400, "invalid_query"},
		{http.MethodGet, "http://policy.local/v1/denials?limit=3", "", 400, "invalid_query"},
		{http.MethodGet, "http://policy.local/v1/policy?x=1", "", 400, "invalid_query"},
		{http.MethodGet, "http://policy.local/v1/policy", "a body", 400, "unexpected_body"},
		{http.MethodPost, "http://policy.local/v1/proposals", strings.Repeat("x", advisor.MaxProposalBytes+1), 503, "no_gateway"},
	} {
		res, body := lp.do(t, tc.method, tc.url, tc.body)
		if res.StatusCode != tc.status || body["code"] != tc.code || body["error"] == "" {
			t.Errorf("%s %s = %d %v; want %d %s", tc.method, tc.url, res.StatusCode, body, tc.status, tc.code)
		}
		if tc.status == 405 && res.Header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", tc.method, tc.url)
		}
	}

	// A web page in the sandbox cannot post in the agent's name.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://policy.local/v1/proposals", strings.NewReader(`{"denial_id":"dn_x"}`))
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if res, err := lp.client.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST = %v, %v; want 403", res, err)
	} else {
		res.Body.Close()
	}

	// CONNECT, on any port, is refused with a pointer to http://.
	for _, authority := range []string{"policy.local:443", "Policy.Local.:80"} {
		conn, err := net.Dial("tcp", lp.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
		res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(res.Body)
		conn.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), "http://policy.local") {
			t.Errorf("CONNECT %s = %d %s; want 400 pointing at http://policy.local", authority, res.StatusCode, data)
		}
	}
	// So an https:// client fails, and is told why.
	if _, err := lp.client.Get("https://policy.local/v1/policy"); err == nil || !strings.Contains(err.Error(), "Bad Request") {
		t.Errorf("https://policy.local: %v; want the CONNECT refused", err)
	}
	lp.noneForwarded(t)
}

// A POST body over the advisor's limit is refused before any relay.
func TestPolicyLocalBodyLimit(t *testing.T) {
	lp := startGatewayProxy(t)
	res, body := lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", strings.Repeat("x", advisor.MaxProposalBytes+1))
	if res.StatusCode != http.StatusRequestEntityTooLarge || body["code"] != "body_too_large" {
		t.Errorf("oversized proposal = %d %v; want 413", res.StatusCode, body)
	}
	if got := lp.proposals(t); len(got) != 0 {
		t.Errorf("an oversized proposal was relayed: %v", got)
	}
	res, body = lp.do(t, http.MethodPost, "http://policy.local/mcp", strings.Repeat(" ", advisor.MaxProposalBytes+64<<10+1))
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized MCP body = %d %v; want 413", res.StatusCode, body)
	}
}

// itemsProposal adds POST /v1/items/* to the api entry.
const itemsProposal = `{"rationale":"post items","operations":[{"add_allow_rules":{"policy":"api","host":"api.example.com","port":80,"rules":[{"allow":{"method":"POST","path":"/v1/items/*"}}]}}]}`

// Proposals are relayed with the proxy's token; the answer is the stored
// proposal, 201 when new and 200 when deduplicated; a proposal from a
// denial waits for the decision records to be shipped first.
func TestPolicyLocalRelaysProposals(t *testing.T) {
	lp := startGatewayProxy(t)
	// A denial waits in the shipper (its interval is an hour).
	id := lp.deny(t, "/v1/items/9")
	if n, _ := lp.agent.Shipper().Pending(); n != 1 {
		t.Fatalf("%d records waiting to be shipped; want the denial", n)
	}

	res, body := lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", itemsProposal)
	if res.StatusCode != http.StatusCreated || body["status"] != "pending" || body["base_version"] != float64(1) {
		t.Fatalf("POST proposal = %d %v; want 201 with the stored proposal", res.StatusCode, body)
	}
	pid := fmt.Sprint(body["id"]) // a JSON number
	stored := lp.stored(t, pid)
	if res.Header.Get("Location") != "http://policy.local/v1/proposals/"+pid {
		t.Errorf("Location = %q", res.Header.Get("Location"))
	}
	findings, _ := body["findings"].([]any)
	if len(findings) == 0 || len(findings) != len(stored.GetFindings()) || findings[0].(map[string]any)["kind"] != stored.GetFindings()[0].GetKind() || stored.GetFindings()[0].GetKind() != "new_http_method" {
		t.Errorf("findings = %v; want the stored ones, new_http_method first (%v)", findings, stored.GetFindings())
	}
	// Relayed as sent, with the proxy's sandbox token: the gateway took
	// it from sandbox agent-1's token.
	if stored.GetSandbox() != "agent-1" || !strings.HasPrefix(stored.GetProposer(), "sandbox-agent-1") || stored.GetRationale() != "post items" || stored.GetDenialId() != "" ||
		!strings.Contains(stored.GetProposal().String(), "/v1/items/*") {
		t.Errorf("stored %v; want the document as sent, from agent-1", stored)
	}
	if n, _ := lp.agent.Shipper().Pending(); n != 1 {
		t.Error("a document proposal waited for the shipper")
	}

	// From a denial: shipped first, relayed as such; a deduplicated
	// answer is 200.
	fromDenial := `{"denial_id":"` + id + `","rationale":"post items","idempotency_key":"k-1"}`
	res, body = lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", fromDenial)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("POST denial proposal = %d %v; want 201", res.StatusCode, body)
	}
	if n, _ := lp.agent.Shipper().Pending(); n != 0 {
		t.Errorf("%d records still waiting; want the denial shipped before the proposal", n)
	}
	if got := lp.stored(t, fmt.Sprint(body["id"])); got.GetDenialId() != id || got.GetRationale() != "post items" || got.GetIdempotencyKey() != "k-1" {
		t.Errorf("relayed %v; want the denial id, rationale and key", got)
	}
	res, body = lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", fromDenial)
	if res.StatusCode != http.StatusOK || body["deduplicated"] != true {
		t.Fatalf("POST denial proposal again = %d %v; want 200 deduplicated", res.StatusCode, body)
	}
	// Unknown fields beside denial_id are refused locally.
	res, body = lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", `{"denial_id":"`+id+`","operations":[]}`)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body["error"].(string), "operations") {
		t.Errorf("denial_id with operations = %d %v; want 400", res.StatusCode, body)
	}

	res, body = lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/"+pid, "")
	if res.StatusCode != http.StatusOK || fmt.Sprint(body["id"]) != pid {
		t.Errorf("GET proposal = %d %v", res.StatusCode, body)
	}

	// Records not shipped (the gateway is gone): 503 with Retry-After,
	// saying the gateway is unreachable; nothing relayed.
	id = lp.deny(t, "/v1/items/10")
	before := len(lp.proposals(t))
	lp.gw.Stop()
	res, body = lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", `{"denial_id":"`+id+`"}`)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || body["code"] != "gateway_unavailable" {
		t.Errorf("unshipped denial = %d %v; want 503 gateway_unavailable", res.StatusCode, body)
	}
	lp.gw.Restart() // the same store, on a port the proxy does not know
	lp.admin = dataplanetest.NewAdmin(lp.gw.URL)
	if after := len(lp.proposals(t)); after != before {
		t.Errorf("%d proposals stored, %d before: a proposal was relayed before its denial was shipped", after, before)
	}
	lp.noneForwarded(t)
}

// AdvisorService errors reach the agent as HTTP statuses with JSON bodies
// that carry the details (every code is mapped in the policylocal
// package's tests).
func TestPolicyLocalErrorMapping(t *testing.T) {
	lp := startGatewayProxy(t)
	for _, tc := range []struct {
		name   string
		method string
		url    string
		body   string
		status int
		check  func(http.Header, map[string]any) bool
	}{
		{"refused", http.MethodPost, "http://policy.local/v1/proposals", `{"rationale":"x","operations":[{"add_allow_rules":{"policy":"api","host":"api.example.com","port":80,"rules":[{"allow":{"method":"*","path":"/v1/items/*"}}]}}]}`, 400, func(_ http.Header, b map[string]any) bool {
			r, _ := b["refusal"].(map[string]any)
			return b["code"] == "invalid_argument" && r["rule"] == "method" && r["operation"] == float64(0) && r["field"] != "" && r["reason"] != ""
		}},
		{"unknown denial", http.MethodPost, "http://policy.local/v1/proposals", `{"denial_id":"dn_x","rationale":"x"}`, 404, func(_ http.Header, b map[string]any) bool {
			return b["code"] == "not_found" && strings.Contains(b["error"].(string), "dn_x")
		}},
		{"unknown proposal", http.MethodGet, "http://policy.local/v1/proposals/99", "", 404, func(_ http.Header, b map[string]any) bool { return b["code"] == "not_found" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := lp.do(t, tc.method, tc.url, tc.body)
			if res.StatusCode != tc.status || !tc.check(res.Header, body) {
				t.Errorf("%s %s = %d %v %v; want %d", tc.method, tc.url, res.StatusCode, res.Header, body, tc.status)
			}
		})
	}
	// A frozen sandbox takes no proposals.
	if _, err := lp.admin.Sandbox.FreezeSandbox(t.Context(), &portcullisv1.FreezeSandboxRequest{Name: "agent-1", Reason: "incident"}); err != nil {
		t.Fatal(err)
	}
	res, body := lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", itemsProposal)
	if res.StatusCode != http.StatusConflict || body["code"] != "conflict" {
		t.Errorf("POST to a frozen sandbox = %d %v; want 409", res.StatusCode, body)
	}

	// The gateway unreachable altogether.
	lp.gw.Stop()
	res, body = lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/1", "")
	if res.StatusCode < 500 || body["error"] == "" {
		t.Errorf("gateway gone = %d %v; want a 5xx JSON error", res.StatusCode, body)
	}
	lp.noneForwarded(t)
}

// wait follows the proposal until it is decided, or answers its latest
// state when the timeout passes.
func TestPolicyLocalWait(t *testing.T) {
	lp := startGatewayProxy(t)
	_, body := lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", itemsProposal)
	pid := fmt.Sprint(body["id"]) // a JSON number

	start := time.Now()
	res, body := lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/"+pid+"/wait?timeout=300ms", "")
	if res.StatusCode != http.StatusOK || body["status"] != "pending" || time.Since(start) < 300*time.Millisecond {
		t.Errorf("wait timed out = %d %v after %s; want pending after 300ms", res.StatusCode, body, time.Since(start))
	}

	stored := lp.stored(t, pid)
	if _, err := lp.admin.Approval.ApproveProposal(t.Context(), &portcullisv1.ApproveProposalRequest{Id: stored.GetId(), Reason: "reviewed", ResultingHash: stored.GetResultingHash()}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	res, body = lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/"+pid+"/wait?timeout=1m", "")
	if res.StatusCode != http.StatusOK || body["status"] != "applied" || time.Since(start) > 30*time.Second {
		t.Errorf("wait for a decided proposal = %d %v; want applied at once", res.StatusCode, body)
	}
	// Applied means enforced here: the call the agent retries at once
	// meets the new version.
	if got, want := lp.agent.PolicyVersion(), fmt.Sprint(body["applied_version"]); got != want || want == "<nil>" {
		t.Errorf("when the wait answered applied (version %s) the proxy enforced version %s", want, got)
	}
	for _, bad := range []string{"x", "-1s"} {
		res, body = lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/"+pid+"/wait?timeout="+bad, "")
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("timeout=%s = %d %v; want 400", bad, res.StatusCode, body)
		}
	}
}

// The MCP server at policy.local: tools answer what the REST endpoints
// do, and refusals are tool errors (isError) with the same JSON body.
func TestPolicyLocalMCPTools(t *testing.T) {
	ctx := t.Context()
	// File mode: propose is a tool error saying there is no gateway.
	file := startLocalProxy(t)
	fileID := file.deny(t, "/v1/items/1")
	res, err := connectPolicyLocal(t, file.client).CallTool(ctx, &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{"denial_id": fileID, "rationale": "x"}})
	if err != nil || !res.IsError || !strings.Contains(toolText(res), "no gateway") {
		t.Errorf("propose in file mode = %v, %v; want a tool error", toolText(res), err)
	}

	lp := startGatewayProxy(t)
	id := lp.deny(t, "/v1/items/1")
	cs := connectPolicyLocal(t, lp.client)
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "list_denials,proposal_status,propose" {
		t.Errorf("tools = %v", names)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_denials", Arguments: map[string]any{"last": 3}})
	if err != nil || res.IsError {
		t.Fatalf("list_denials = %v, %v", res, err)
	}
	var listed struct {
		Denials []struct {
			DenialID   string          `json:"denial_id"`
			Suggestion json.RawMessage `json:"suggestion"`
		} `json:"denials"`
	}
	remarshal(t, res.StructuredContent, &listed)
	if len(listed.Denials) != 1 || listed.Denials[0].DenialID != id || len(listed.Denials[0].Suggestion) == 0 {
		t.Fatalf("list_denials = %+v", listed)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{
		"rationale":  "post items",
		"operations": []any{map[string]any{"add_allow_rules": map[string]any{"policy": "api", "host": "api.example.com", "port": 80, "rules": []any{map[string]any{"allow": map[string]any{"method": "POST", "path": "/v1/items/*"}}}}}},
	}})
	if err != nil || res.IsError {
		t.Fatalf("propose = %v, %v", toolText(res), err)
	}
	var got map[string]any
	remarshal(t, res.StructuredContent, &got)
	pid := fmt.Sprint(got["id"]) // a JSON number
	if got["status"] != "pending" {
		t.Errorf("propose answered %v", got)
	}
	if p := lp.stored(t, pid); p.GetRationale() != "post items" || !strings.Contains(p.GetProposal().String(), "/v1/items/*") {
		t.Errorf("relayed proposal %v", p)
	}

	// The id as propose answers it: a string.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "proposal_status", Arguments: map[string]any{"id": pid}})
	if err != nil || res.IsError {
		t.Fatalf("proposal_status = %v, %v", toolText(res), err)
	}
	remarshal(t, res.StructuredContent, &got)
	if got["status"] != "pending" {
		t.Errorf("proposal_status = %v", got)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{"denial_id": id, "operations": []any{map[string]any{}}}})
	if err != nil || !res.IsError || !strings.Contains(toolText(res), "not both") {
		t.Errorf("propose with both = %v, %v; want a tool error", toolText(res), err)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{
		"rationale":  "any method",
		"operations": []any{map[string]any{"add_allow_rules": map[string]any{"policy": "api", "host": "api.example.com", "port": 80, "rules": []any{map[string]any{"allow": map[string]any{"method": "*", "path": "/v1/items/*"}}}}}},
	}})
	if err != nil || !res.IsError || !strings.Contains(toolText(res), `"rule":"method"`) || !strings.Contains(toolText(res), "refused") {
		t.Errorf("refused propose = %v, %v; want a tool error with the refusal", toolText(res), err)
	}

	// A second proposal (it supersedes the first), rejected: waiting on
	// it answers the decision at once.
	other := lp.deny(t, "/v1/other/1")
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{"denial_id": other, "rationale": "post other 1"}})
	if err != nil || res.IsError {
		t.Fatalf("propose from a denial = %v, %v", toolText(res), err)
	}
	remarshal(t, res.StructuredContent, &got)
	rejected, _ := strconv.ParseUint(fmt.Sprint(got["id"]), 10, 64)
	if _, err := lp.admin.Approval.RejectProposal(ctx, &portcullisv1.RejectProposalRequest{Id: rejected, Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "proposal_status", Arguments: map[string]any{"id": rejected, "wait_seconds": 5}})
	if err != nil || res.IsError {
		t.Fatalf("proposal_status = %v, %v", toolText(res), err)
	}
	remarshal(t, res.StructuredContent, &got)
	if got["status"] != "rejected" {
		t.Errorf("proposal_status waited = %v", got)
	}
	for _, bad := range []any{0, "x", -1} {
		res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "proposal_status", Arguments: map[string]any{"id": bad}})
		if err != nil || !res.IsError {
			t.Errorf("proposal_status id %v = %v, %v; want a tool error", bad, toolText(res), err)
		}
	}

	// A client of the 2025-11-25 revision, with its standalone stream
	// (refused: the server is stateless), works too.
	old, err := mcp.NewClient(&mcp.Implementation{Name: "old-agent", Version: "v1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: "http://policy.local/mcp", HTTPClient: lp.client, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("2025-11-25 client: %v", err)
	}
	defer old.Close()
	res, err = old.CallTool(ctx, &mcp.CallToolParams{Name: "list_denials"})
	if err != nil || res.IsError || !strings.Contains(toolText(res), id) {
		t.Errorf("list_denials from a 2025-11-25 client = %v, %v", toolText(res), err)
	}
	lp.noneForwarded(t)
}

// connectPolicyLocal connects a real MCP client to http://policy.local/mcp
// through the proxy client hc.
func connectPolicyLocal(t *testing.T, hc *http.Client) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:             "http://policy.local/mcp",
		HTTPClient:           hc,
		DisableStandaloneSSE: true,
		MaxRetries:           -1,
	}, nil)
	if err != nil {
		t.Fatalf("connect to policy.local/mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func remarshal(t *testing.T, from, to any) {
	t.Helper()
	b, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

func toolText(res *mcp.CallToolResult) string {
	if res == nil {
		return ""
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// With its gateway down, policy.local says so at once: a proposal (from a
// denial, whose records cannot be shipped first, or a document) answers
// 503 gateway_unavailable with Retry-After, well within 2 s (the
// request's deadline), rather than waiting out the shipping bound and
// asking to retry. The proxy keeps enforcing; nothing is forwarded.
func TestPolicyLocalGatewayUnreachable(t *testing.T) {
	lp := startGatewayProxy(t)
	lp.gw.Stop()
	id := lp.deny(t, "/v1/items/7")
	for name, body := range map[string]string{
		"from a denial": `{"denial_id":"` + id + `","rationale":"post items"}`,
		"a document":    itemsProposal,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://policy.local/v1/proposals", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			res, err := lp.client.Do(req)
			if err != nil {
				t.Fatalf("no answer within 2 s: %v", err)
			}
			defer res.Body.Close()
			var got map[string]any
			if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			msg, _ := got["error"].(string)
			if res.StatusCode != http.StatusServiceUnavailable || got["code"] != "gateway_unavailable" || !strings.Contains(msg, "gateway is unreachable") || res.Header.Get("Retry-After") == "" {
				t.Errorf("POST proposal = %d %v (Retry-After %q); want 503 gateway_unavailable saying the gateway is unreachable", res.StatusCode, got, res.Header.Get("Retry-After"))
			}
		})
	}
	lp.noneForwarded(t)
}
