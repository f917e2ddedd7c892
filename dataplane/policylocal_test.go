package dataplane_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// fakeAdvisor is an AdvisorService on a real gRPC server: it records what
// the proxy relays and answers what the test sets.
type fakeAdvisor struct {
	portcullisv1.UnimplementedAdvisorServiceServer

	mu      sync.Mutex
	submits []*portcullisv1.SubmitProposalRequest
	auth    []string // authorization metadata of every call
	err     error    // returned by every unary call when set
	answer  *portcullisv1.Proposal
	// watch: the states WatchProposal sends, in order; after the last it
	// waits for the caller to go away.
	watch []*portcullisv1.Proposal
}

func (f *fakeAdvisor) note(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.auth = append(f.auth, strings.Join(md.Get("authorization"), ","))
}

func (f *fakeAdvisor) SubmitProposal(ctx context.Context, req *portcullisv1.SubmitProposalRequest) (*portcullisv1.Proposal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(ctx)
	f.submits = append(f.submits, req)
	if f.err != nil {
		return nil, f.err
	}
	return f.answer, nil
}

func (f *fakeAdvisor) GetProposal(ctx context.Context, req *portcullisv1.GetProposalRequest) (*portcullisv1.Proposal, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note(ctx)
	if f.err != nil {
		return nil, f.err
	}
	if req.GetId() != f.answer.GetId() {
		return nil, status.Errorf(codes.NotFound, "proposal %d not found", req.GetId())
	}
	return f.answer, nil
}

func (f *fakeAdvisor) WatchProposal(req *portcullisv1.WatchProposalRequest, st grpc.ServerStreamingServer[portcullisv1.Proposal]) error {
	f.mu.Lock()
	f.note(st.Context())
	watch := f.watch
	f.mu.Unlock()
	for _, p := range watch {
		if err := st.Send(p); err != nil {
			return err
		}
	}
	<-st.Context().Done()
	return st.Context().Err()
}

func (f *fakeAdvisor) set(fn func(*fakeAdvisor)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeAdvisor) lastSubmit() *portcullisv1.SubmitProposalRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.submits) == 0 {
		return nil
	}
	return f.submits[len(f.submits)-1]
}

// startFakeAdvisor serves f on 127.0.0.1:0 and returns a Subscriber
// pointed at it: the proxy reaches it through Subscriber.AdvisorClient,
// with the sandbox token, as in production.
func startFakeAdvisor(t *testing.T, f *fakeAdvisor) *dataplane.Subscriber {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	portcullisv1.RegisterAdvisorServiceServer(srv, f)
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	sub, err := dataplane.NewSubscriber(dataplane.SubscribeConfig{
		Gateway: "http://" + ln.Addr().String(), Sandbox: "agent-1",
		Token:   func() (string, error) { return "pcs_sandbox-token", nil },
		ProxyID: "p1", DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
	}, dataplane.New(dataplane.Config{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

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
// every host it is asked for.
type localProxy struct {
	proxy    *dataplane.Proxy
	client   *http.Client
	addr     string
	upPort   int
	upstream atomic.Int64 // requests the upstream received
	resolved sync.Map     // host → true
}

func startLocalProxy(t *testing.T) *localProxy {
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
	upPort := upLn.Addr().(*net.TCPAddr).Port
	lp.upPort = upPort

	lp.proxy = dataplane.New(dataplane.Config{
		Sandbox:          "agent-1",
		DevAllowLoopback: true,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			lp.resolved.Store(host, true)
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		CallerBinary: func(net.Conn) (string, error) { return "/usr/bin/curl", nil },
		Logger:       slog.New(slog.DiscardHandler),
	}, nil)
	pol, _, err := policy.Parse([]byte(strings.ReplaceAll(localPolicy, "PORT", strconv.Itoa(upPort))))
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.proxy.SetPolicy(pol, "7"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lp.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { lp.proxy.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: lp.addr})}
	lp.client = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(tr.CloseIdleConnections)
	return lp
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
	if _, ok := lp.resolved.Load(dataplane.PolicyLocalHost); ok {
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
		if res.StatusCode != http.StatusOK || body["version"] != "7" || body["sandbox"] != "agent-1" {
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
	lp := startLocalProxy(t)
	f := &fakeAdvisor{answer: &portcullisv1.Proposal{Id: 1, Status: "pending"}}
	lp.proxy.SetAdvisor(startFakeAdvisor(t, f).AdvisorClient(), nil)
	res, body := lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", strings.Repeat("x", advisor.MaxProposalBytes+1))
	if res.StatusCode != http.StatusRequestEntityTooLarge || body["code"] != "body_too_large" {
		t.Errorf("oversized proposal = %d %v; want 413", res.StatusCode, body)
	}
	if f.lastSubmit() != nil {
		t.Error("an oversized proposal was relayed")
	}
	res, body = lp.do(t, http.MethodPost, "http://policy.local/mcp", strings.Repeat(" ", advisor.MaxProposalBytes+64<<10+1))
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized MCP body = %d %v; want 413", res.StatusCode, body)
	}
}

// Proposals are relayed with the proxy's token; the answer is the stored
// proposal, 201 when new and 200 when deduplicated; a proposal from a
// denial waits for the decision records to be shipped first.
func TestPolicyLocalRelaysProposals(t *testing.T) {
	lp := startLocalProxy(t)
	f := &fakeAdvisor{answer: &portcullisv1.Proposal{Id: 12, Sandbox: "agent-1", Status: "pending", BaseVersion: 7,
		Findings: []*portcullisv1.Finding{{Kind: "new_http_method", Counterexample: &portcullisv1.ProvedRequest{Host: "api.example.com", Port: 80, HttpMethod: "POST"}}}}}
	var flushes atomic.Int64
	var flushErr atomic.Value
	flushErr.Store(errors.New(""))
	lp.proxy.SetAdvisor(startFakeAdvisor(t, f).AdvisorClient(), func(ctx context.Context) error {
		flushes.Add(1)
		if err := flushErr.Load().(error); err.Error() != "" {
			return err
		}
		return nil
	})

	doc := `{"rationale":"post items","operations":[{"add_allow_rules":{"policy":"api","host":"api.example.com","port":80,"rules":[{"allow":{"method":"POST","path":"/v1/items/*"}}]}}]}`
	res, body := lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", doc)
	if res.StatusCode != http.StatusCreated || body["id"] != "12" || body["status"] != "pending" || body["base_version"] != float64(7) {
		t.Fatalf("POST proposal = %d %v; want 201 with the stored proposal", res.StatusCode, body)
	}
	if res.Header.Get("Location") != "http://policy.local/v1/proposals/12" {
		t.Errorf("Location = %q", res.Header.Get("Location"))
	}
	if findings := body["findings"].([]any); findings[0].(map[string]any)["kind"] != "new_http_method" {
		t.Errorf("findings = %v", findings)
	}
	if got := f.lastSubmit(); got.GetDocument() != doc || got.GetDenialId() != "" {
		t.Errorf("relayed %v; want the document as sent", got)
	}
	if flushes.Load() != 0 {
		t.Error("a document proposal waited for the shipper")
	}
	f.mu.Lock()
	auth := f.auth[0]
	f.mu.Unlock()
	if auth != "Bearer pcs_sandbox-token" {
		t.Errorf("the gateway saw authorization %q; want the proxy's sandbox token", auth)
	}

	// From a denial: flushed first, relayed as such; a deduplicated
	// answer is 200.
	id := lp.deny(t, "/v1/items/9")
	f.set(func(f *fakeAdvisor) { f.answer.Deduplicated = true })
	res, body = lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", `{"denial_id":"`+id+`","rationale":"post items","idempotency_key":"k-1"}`)
	if res.StatusCode != http.StatusOK || body["deduplicated"] != true {
		t.Fatalf("POST denial proposal = %d %v; want 200 deduplicated", res.StatusCode, body)
	}
	if got := f.lastSubmit(); got.GetDenialId() != id || got.GetRationale() != "post items" || got.GetIdempotencyKey() != "k-1" || got.GetDocument() != "" {
		t.Errorf("relayed %v; want the denial id, rationale and key", got)
	}
	if flushes.Load() != 1 {
		t.Errorf("flushes = %d; want 1 before the denial proposal", flushes.Load())
	}
	// Unknown fields beside denial_id are refused locally.
	res, body = lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", `{"denial_id":"`+id+`","operations":[]}`)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body["error"].(string), "operations") {
		t.Errorf("denial_id with operations = %d %v; want 400", res.StatusCode, body)
	}
	// Records not shipped: 503 with Retry-After, nothing relayed.
	before := f.lastSubmit()
	flushErr.Store(errors.New("gateway down"))
	res, body = lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", `{"denial_id":"`+id+`"}`)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" || body["code"] != "denials_not_shipped" {
		t.Errorf("unshipped denial = %d %v; want 503 denials_not_shipped", res.StatusCode, body)
	}
	if f.lastSubmit() != before {
		t.Error("a proposal was relayed before its denial was shipped")
	}

	res, body = lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/12", "")
	if res.StatusCode != http.StatusOK || body["id"] != "12" {
		t.Errorf("GET proposal = %d %v", res.StatusCode, body)
	}
	lp.noneForwarded(t)
}

// AdvisorService errors map to HTTP statuses with JSON bodies that carry
// the details.
func TestPolicyLocalErrorMapping(t *testing.T) {
	lp := startLocalProxy(t)
	f := &fakeAdvisor{answer: &portcullisv1.Proposal{Id: 3, Status: "pending"}}
	lp.proxy.SetAdvisor(startFakeAdvisor(t, f).AdvisorClient(), nil)
	withDetail := func(code codes.Code, msg string, detail *portcullisv1.ProposalRefusal, rl *portcullisv1.ProposalRateLimit) error {
		st := status.New(code, msg)
		var err error
		if detail != nil {
			st, err = st.WithDetails(detail)
		}
		if rl != nil {
			st, err = st.WithDetails(rl)
		}
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	refusal := &portcullisv1.ProposalRefusal{Operation: 0, Field: "operations[0].add_rule.rule.endpoints[0].host", Rule: "public_suffix_wildcard", Reason: "*.github.io is below a public suffix"}
	for _, tc := range []struct {
		name   string
		err    error
		status int
		check  func(http.Header, map[string]any) bool
	}{
		{"refused", withDetail(codes.InvalidArgument, "proposal refused: *.github.io is below a public suffix", refusal, nil), 400, func(_ http.Header, b map[string]any) bool {
			r, _ := b["refusal"].(map[string]any)
			return strings.Contains(b["error"].(string), "github.io") && r["rule"] == "public_suffix_wildcard" && r["field"] == refusal.Field && r["operation"] == float64(0) && r["reason"] == refusal.Reason
		}},
		{"rate limited", withDetail(codes.ResourceExhausted, "too many proposals", nil, &portcullisv1.ProposalRateLimit{RetryAfterSeconds: 42}), 429, func(h http.Header, b map[string]any) bool {
			return h.Get("Retry-After") == "42" && b["retry_after_seconds"] == float64(42)
		}},
		{"not found", status.Error(codes.NotFound, "denial dn_x not found"), 404, func(_ http.Header, b map[string]any) bool {
			return strings.Contains(b["error"].(string), "dn_x")
		}},
		{"frozen", status.Error(codes.FailedPrecondition, "the sandbox is frozen"), 409, func(_ http.Header, b map[string]any) bool { return b["code"] == "conflict" }},
		{"token revoked", status.Error(codes.Unauthenticated, "token revoked"), 502, func(_ http.Header, b map[string]any) bool {
			return b["code"] == "proxy_token_refused" && strings.Contains(b["error"].(string), "proxy's sandbox token")
		}},
		{"wrong role", status.Error(codes.PermissionDenied, "not a sandbox token"), 502, func(_ http.Header, b map[string]any) bool { return b["code"] == "proxy_token_refused" }},
		{"unavailable", status.Error(codes.Unavailable, "draining"), 503, func(_ http.Header, b map[string]any) bool { return b["code"] == "gateway_unavailable" }},
		{"internal", status.Error(codes.Internal, "boom"), 502, func(_ http.Header, b map[string]any) bool { return b["code"] == "gateway_error" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.set(func(f *fakeAdvisor) { f.err = tc.err })
			res, body := lp.do(t, http.MethodPost, "http://policy.local/v1/proposals", `{"rationale":"x","operations":[]}`)
			if res.StatusCode != tc.status || !tc.check(res.Header, body) {
				t.Errorf("POST = %d %v %v; want %d", res.StatusCode, res.Header, body, tc.status)
			}
		})
	}
	f.set(func(f *fakeAdvisor) { f.err = nil })
	res, body := lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/99", "")
	if res.StatusCode != http.StatusNotFound || body["code"] != "not_found" {
		t.Errorf("GET unknown proposal = %d %v; want 404", res.StatusCode, body)
	}

	// The gateway unreachable altogether.
	f2 := &fakeAdvisor{}
	sub := startFakeAdvisor(t, f2)
	lp.proxy.SetAdvisor(sub.AdvisorClient(), nil)
	sub.Close()
	res, body = lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/1", "")
	if res.StatusCode < 500 || body["error"] == "" {
		t.Errorf("closed connection = %d %v; want a 5xx JSON error", res.StatusCode, body)
	}
	lp.noneForwarded(t)
}

// wait follows the proposal until it is decided, or answers its latest
// state when the timeout passes.
func TestPolicyLocalWait(t *testing.T) {
	lp := startLocalProxy(t)
	f := &fakeAdvisor{answer: &portcullisv1.Proposal{Id: 5, Status: "pending"}}
	lp.proxy.SetAdvisor(startFakeAdvisor(t, f).AdvisorClient(), nil)

	f.set(func(f *fakeAdvisor) {
		f.watch = []*portcullisv1.Proposal{{Id: 5, Status: "pending"}, {Id: 5, Status: "approved"}, {Id: 5, Status: "applied"}}
	})
	start := time.Now()
	res, body := lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/5/wait?timeout=1m", "")
	if res.StatusCode != http.StatusOK || body["status"] != "applied" || time.Since(start) > 30*time.Second {
		t.Errorf("wait for a decided proposal = %d %v; want applied at once", res.StatusCode, body)
	}

	f.set(func(f *fakeAdvisor) { f.watch = []*portcullisv1.Proposal{{Id: 5, Status: "pending"}} })
	start = time.Now()
	res, body = lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/5/wait?timeout=300ms", "")
	if res.StatusCode != http.StatusOK || body["status"] != "pending" || time.Since(start) < 300*time.Millisecond {
		t.Errorf("wait timed out = %d %v after %s; want pending after 300ms", res.StatusCode, body, time.Since(start))
	}
	for _, bad := range []string{"x", "-1s"} {
		res, body = lp.do(t, http.MethodGet, "http://policy.local/v1/proposals/5/wait?timeout="+bad, "")
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("timeout=%s = %d %v; want 400", bad, res.StatusCode, body)
		}
	}
}

// The MCP server at policy.local: tools answer what the REST endpoints
// do, and refusals are tool errors (isError) with the same JSON body.
func TestPolicyLocalMCPTools(t *testing.T) {
	lp := startLocalProxy(t)
	id := lp.deny(t, "/v1/items/1")
	cs := connectPolicyLocal(t, lp.client)
	ctx := t.Context()

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

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_denials", Arguments: map[string]any{"last": 3}})
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

	// File mode: propose is a tool error saying there is no gateway.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{"denial_id": id, "rationale": "x"}})
	if err != nil || !res.IsError || !strings.Contains(toolText(res), "no gateway") {
		t.Errorf("propose in file mode = %v, %v; want a tool error", toolText(res), err)
	}

	f := &fakeAdvisor{answer: &portcullisv1.Proposal{Id: 8, Status: "pending", ResultingPolicy: nil}}
	lp.proxy.SetAdvisor(startFakeAdvisor(t, f).AdvisorClient(), nil)
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{
		"rationale":  "post items",
		"operations": []any{map[string]any{"add_allow_rules": map[string]any{"policy": "api", "host": "api.example.com", "port": 80, "rules": []any{map[string]any{"allow": map[string]any{"method": "POST", "path": "/v1/items/*"}}}}}},
	}})
	if err != nil || res.IsError {
		t.Fatalf("propose = %v, %v", toolText(res), err)
	}
	var got map[string]any
	remarshal(t, res.StructuredContent, &got)
	if got["id"] != "8" || got["status"] != "pending" {
		t.Errorf("propose answered %v", got)
	}
	doc := f.lastSubmit().GetDocument()
	if p, err := advisor.ParseProposal([]byte(doc)); err != nil || p.Rationale != "post items" || p.Operations[0].AddAllowRules.Rules[0].Allow.Path != "/v1/items/*" {
		t.Errorf("relayed document %s: %v", doc, err)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{"denial_id": id, "operations": []any{map[string]any{}}}})
	if err != nil || !res.IsError || !strings.Contains(toolText(res), "not both") {
		t.Errorf("propose with both = %v, %v; want a tool error", toolText(res), err)
	}

	st, _ := status.New(codes.InvalidArgument, "proposal refused: tool globs are not narrow").WithDetails(&portcullisv1.ProposalRefusal{Operation: 0, Field: "operations[0].add_allow_rules.rules[0].allow.tool", Rule: "tool", Reason: "globs"})
	f.set(func(f *fakeAdvisor) { f.err = st.Err() })
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "propose", Arguments: map[string]any{"denial_id": id}})
	if err != nil || !res.IsError || !strings.Contains(toolText(res), `"rule":"tool"`) || !strings.Contains(toolText(res), "not narrow") {
		t.Errorf("refused propose = %v, %v; want a tool error with the refusal", toolText(res), err)
	}

	f.set(func(f *fakeAdvisor) {
		f.err = nil
		f.watch = []*portcullisv1.Proposal{{Id: 8, Status: "rejected", StatusReason: "no"}}
	})
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "proposal_status", Arguments: map[string]any{"id": 8, "wait_seconds": 5}})
	if err != nil || res.IsError {
		t.Fatalf("proposal_status = %v, %v", toolText(res), err)
	}
	remarshal(t, res.StructuredContent, &got)
	if got["status"] != "rejected" {
		t.Errorf("proposal_status waited = %v", got)
	}
	// The id as propose answers it: a string.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "proposal_status", Arguments: map[string]any{"id": "8"}})
	if err != nil || res.IsError {
		t.Fatalf("proposal_status = %v, %v", toolText(res), err)
	}
	remarshal(t, res.StructuredContent, &got)
	if got["status"] != "pending" {
		t.Errorf("proposal_status = %v", got)
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

// Flush returns at once when nothing is buffered, and otherwise waits for
// Run: without it, until its context ends.
func TestShipperFlushWaitsForShipping(t *testing.T) {
	s := dataplane.NewShipper(dataplane.ShipperConfig{Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err := s.Flush(t.Context()); err != nil {
		t.Fatalf("Flush with nothing buffered = %v", err)
	}
	s.Offer(decision.Record{Decision: decision.Deny, DenialID: "dn_1"})
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := s.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with no Run = %v; want the context's deadline", err)
	}
	if n, _ := s.Pending(); n != 1 {
		t.Fatalf("pending = %d; want the record kept", n)
	}
}
