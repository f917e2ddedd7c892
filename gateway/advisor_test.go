package gateway_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectproto"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/store"
)

// advisorPolicy is the article's orders server beside a credentialed API.
const advisorPolicy = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
          - allow: { method: tools/call, tool: lookup_order }
        deny_rules:
          - { method: tools/call, tool: refund_order }
    binaries: [ { path: /usr/bin/python3 } ]
  github:
    name: github
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        rules:
          - allow: { method: GET, path: "/repos/acme/app/**" }
    binaries: [ { path: /usr/bin/git } ]
`

const trackShipment = `
rationale: support agents must track shipments for open orders
operations:
  - add_allow_rules:
      policy: orders
      host: orders.example.com
      port: 443
      rules:
        - allow: { method: tools/call, tool: track_shipment }
`

// advisorEnv is a gateway with one sandbox on advisorPolicy, its
// credentialed API named, and the clients a test needs.
type advisorEnv struct {
	gw      *gatewaytest.Gateway
	admin   api
	advisor portcullisv1connect.AdvisorServiceClient
	token   string
}

func newAdvisorClient(baseURL, token string) portcullisv1connect.AdvisorServiceClient {
	return portcullisv1connect.NewAdvisorServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL), gatewaytest.Bearer(token)))
}

func startAdvisor(t *testing.T, engine string, configure ...func(*gateway.Config)) *advisorEnv {
	t.Helper()
	gw := gatewaytest.Start(t, engine, configure...)
	admin := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	sb, err := admin.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "support", Policy: advisorPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.sandbox.SetCredentialedHosts(t.Context(), &portcullisv1.SetCredentialedHostsRequest{Name: "support", Add: []string{"API.GitHub.com:443"}}); err != nil {
		t.Fatal(err)
	}
	return &advisorEnv{gw: gw, admin: admin, advisor: newAdvisorClient(gw.URL, sb.GetToken()), token: sb.GetToken()}
}

func (e *advisorEnv) submit(t *testing.T, doc string) (*portcullisv1.Proposal, error) {
	t.Helper()
	return e.advisor.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: doc})
}

func (e *advisorEnv) mustSubmit(t *testing.T, doc string) *portcullisv1.Proposal {
	t.Helper()
	p, err := e.submit(t, doc)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return p
}

func (e *advisorEnv) list(t *testing.T) []*portcullisv1.Proposal {
	t.Helper()
	res, err := e.advisor.ListProposals(t.Context(), &portcullisv1.ListProposalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetProposals()
}

// addedRequest turns a finding's counterexample back into the request
// the proxy would judge.
func addedRequest(ce *portcullisv1.ProvedRequest) policy.Request {
	r := policy.Request{Binary: ce.GetBinary(), Host: ce.GetHost(), Port: int(ce.GetPort()), HTTPMethod: ce.GetHttpMethod(), Path: ce.GetPath(), Query: ce.GetQuery()}
	if ce.GetMcpMethod() != "" {
		r.MCP = &policy.MCPMessage{Method: ce.GetMcpMethod(), Tool: ce.GetTool(), ProtocolVersion: ce.GetMcpProtocolVersion()}
		if ce.GetArguments() != "" {
			r.MCP.Arguments = []byte(ce.GetArguments())
		}
	}
	return r
}

func parseStruct(t *testing.T, st interface{ MarshalJSON() ([]byte, error) }) *policy.Policy {
	t.Helper()
	b, err := st.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := policy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAdvisorFindings(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startAdvisor(t, engine)
			base := mustPolicy(t, advisorPolicy)

			// The article's case: track_shipment beside lookup_order.
			p := e.mustSubmit(t, trackShipment)
			if p.GetStatus() != "pending" || p.GetId() == 0 || p.GetSandbox() != "support" || p.GetBaseVersion() != 1 {
				t.Fatalf("proposal: %v", p)
			}
			if len(p.GetFindings()) != 1 || p.GetFindings()[0].GetKind() != prover.NewMCPTool {
				t.Fatalf("want one new_mcp_tool, got %v", p.GetFindings())
			}
			ce := p.GetFindings()[0].GetCounterexample()
			if ce.GetTool() != "track_shipment" || ce.GetHost() != "orders.example.com" {
				t.Fatalf("counterexample %v", ce)
			}
			result := parseStruct(t, p.GetResultingPolicy())
			if result.Hash() != p.GetResultingHash() {
				t.Fatalf("resulting hash %s does not match the resulting policy's %s", p.GetResultingHash(), result.Hash())
			}
			if r := addedRequest(ce); !policy.Decide(result, r).Allow || policy.Decide(base, r).Allow {
				t.Fatalf("counterexample %v is not allowed by the result and denied by the base", ce)
			}
			if len(p.GetChanges()) == 0 || p.GetProposer() == "" {
				t.Fatalf("want a diff and a proposer: %v", p)
			}

			// A POST on a credentialed destination already reachable.
			p = e.mustSubmit(t, `
rationale: file issues
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: POST, path: /repos/acme/app/issues } } ] }
`)
			if len(p.GetFindings()) != 1 || p.GetFindings()[0].GetKind() != prover.NewHTTPMethod || !p.GetFindings()[0].GetCredentialed() {
				t.Fatalf("want one credentialed new_http_method, got %v", p.GetFindings())
			}

			// Python reaching the credentialed API it could not reach.
			p = e.mustSubmit(t, `
rationale: read releases from python
operations:
  - add_rule:
      name: releases
      rule:
        endpoints: [ { host: api.github.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /repos/acme/app/releases } } ] } ]
        binaries: [ { path: /usr/bin/python3 } ]
`)
			kinds := map[string]*portcullisv1.Finding{}
			for _, f := range p.GetFindings() {
				kinds[f.GetKind()] = f
			}
			if f := kinds[prover.NewCredentialedReach]; f == nil || f.GetCounterexample().GetBinary() != "/usr/bin/python3" {
				t.Fatalf("want new_credentialed_reach for python3, got %v", p.GetFindings())
			}
		})
	}
}

func mustPolicy(t *testing.T, doc string) *policy.Policy {
	t.Helper()
	p, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// refusal returns the ProposalRefusal detail of an InvalidArgument error.
func refusal(t *testing.T, err error) *portcullisv1.ProposalRefusal {
	t.Helper()
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeInvalidArgument {
		t.Fatalf("want InvalidArgument, got %v", err)
	}
	for _, d := range cerr.Details() {
		v, derr := connectproto.UnmarshalErrorDetail(d)
		if r, ok := v.(*portcullisv1.ProposalRefusal); derr == nil && ok {
			return r
		}
	}
	t.Fatalf("no ProposalRefusal detail in %v", err)
	return nil
}

func TestAdvisorRefusals(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	newEntry := func(host, binary string) string {
		return `
rationale: reach it
operations:
  - add_rule:
      name: extra
      rule:
        endpoints: [ { host: "` + host + `", port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /x } } ] } ]
        binaries: [ { path: "` + binary + `" } ]
`
	}
	cases := []struct {
		name, doc, rule, field string
	}{
		{"still denied", `
rationale: refunds
operations:
  - add_allow_rules: { policy: orders, host: orders.example.com, port: 443, rules: [ { allow: { method: tools/call, tool: refund_order } } ] }
`, advisor.RuleChangesNothing, "operations[0].add_allow_rules"},
		{"metadata ip", newEntry("169.254.169.254", "/usr/bin/python3"), advisor.RuleCloudMetadata, "host"},
		{"metadata hex", newEntry("0xA9FEA9FE", "/usr/bin/python3"), advisor.RuleCloudMetadata, "host"},
		{"metadata name", newEntry("metadata.google.internal.", "/usr/bin/python3"), advisor.RuleCloudMetadata, "host"},
		{"public suffix wildcard", newEntry("*.github.io", "/usr/bin/python3"), advisor.RulePublicSuffix, "host"},
		{"binary glob", newEntry("api.example.com", "/usr/bin/*"), advisor.RuleBinary, "binaries"},
		{"allow everything", `
rationale: all of it
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: {} } ] }
`, advisor.RuleEmptyAllow, "rules[0]"},
		{"any binary", `
rationale: anyone
operations:
  - add_rule:
      name: extra
      rule:
        endpoints: [ { host: api.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /x } } ] } ]
        binaries: []
`, advisor.RuleBinary, "binaries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.submit(t, tc.doc)
			r := refusal(t, err)
			if r.GetRule() != tc.rule || !strings.Contains(r.GetField(), tc.field) || r.GetReason() == "" {
				t.Fatalf("refusal %v: want rule %s on a field containing %q", r, tc.rule, tc.field)
			}
		})
	}
	if got := e.list(t); len(got) != 0 {
		t.Fatalf("refused proposals were stored: %v", got)
	}
	// A malformed document is InvalidArgument with its field path, and
	// stores nothing either.
	_, err := e.submit(t, "rationale: x\noperations: [ { add_rule: { name: a, bogus: 1 } } ]\n")
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeInvalidArgument || !strings.Contains(cerr.Message(), "bogus") {
		t.Fatalf("want InvalidArgument naming the field, got %v", err)
	}
	if got := e.list(t); len(got) != 0 {
		t.Fatalf("refused proposals were stored: %v", got)
	}
}

// A broad proposal is refused in one answer naming every violation: one
// ProposalRefusal detail each (in the proposal's order), every field path
// in ValidationProblems and in the message; nothing is stored.
func TestAdvisorRefusalsAllAtOnce(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	_, err := e.submit(t, `
rationale: broad
operations:
  - add_rule:
      name: extra
      rule:
        endpoints: [ { host: "*.github.io", port: 443, protocol: rest, rules: [ { allow: { method: "*", path: "/**" } } ] } ]
        binaries: [ { path: "/usr/bin/*" } ]
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: {} } ] }
`)
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeInvalidArgument {
		t.Fatalf("want InvalidArgument, got %v", err)
	}
	want := []struct{ field, rule string }{
		{"operations[0].add_rule.rule.binaries[0].path", advisor.RuleBinary},
		{"operations[0].add_rule.rule.endpoints[0].host", advisor.RulePublicSuffix},
		{"operations[0].add_rule.rule.endpoints[0].rules[0].allow.method", advisor.RuleMethod},
		{"operations[0].add_rule.rule.endpoints[0].rules[0].allow.path", advisor.RulePath},
		{"operations[1].add_allow_rules.rules[0].allow", advisor.RuleEmptyAllow},
	}
	var refusals []*portcullisv1.ProposalRefusal
	var problems []*portcullisv1.Problem
	for _, d := range cerr.Details() {
		v, derr := connectproto.UnmarshalErrorDetail(d)
		if derr != nil {
			continue
		}
		switch m := v.(type) {
		case *portcullisv1.ProposalRefusal:
			refusals = append(refusals, m)
		case *portcullisv1.ValidationProblems:
			problems = append(problems, m.GetProblems()...)
		}
	}
	if len(refusals) != len(want) || len(problems) != len(want) {
		t.Fatalf("%d refusals and %d problems, want %d each: %v", len(refusals), len(problems), len(want), err)
	}
	for i, w := range want {
		if refusals[i].GetField() != w.field || refusals[i].GetRule() != w.rule || refusals[i].GetReason() == "" || problems[i].GetPath() != w.field {
			t.Errorf("refusal %d = %v, problem %v; want %s (%s)", i, refusals[i], problems[i], w.field, w.rule)
		}
		if !strings.Contains(cerr.Message(), w.field) {
			t.Errorf("the message does not name %s: %s", w.field, cerr.Message())
		}
	}
	if got := e.list(t); len(got) != 0 {
		t.Fatalf("a refused proposal was stored: %v", got)
	}
}

// TestAdvisorScope: a sandbox sees and touches only its own proposals,
// and cannot reach the other services' writes.
func TestAdvisorScope(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	mine := e.mustSubmit(t, trackShipment)

	other, err := e.admin.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "other", Policy: advisorPolicy})
	if err != nil {
		t.Fatal(err)
	}
	theirs := newAdvisorClient(e.gw.URL, other.GetToken())
	if res, err := theirs.ListProposals(t.Context(), &portcullisv1.ListProposalsRequest{}); err != nil || len(res.GetProposals()) != 0 {
		t.Fatalf("another sandbox lists %v, %v", res.GetProposals(), err)
	}
	for name, call := range map[string]func() error{
		"get": func() error {
			_, err := theirs.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: mine.GetId()})
			return err
		},
		"withdraw": func() error {
			_, err := theirs.WithdrawProposal(t.Context(), &portcullisv1.WithdrawProposalRequest{Id: mine.GetId()})
			return err
		},
	} {
		if err := call(); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s another sandbox's proposal: got %v, want NotFound", name, err)
		}
	}
	// Its own submission lands in its own sandbox, whatever it names.
	p, err := theirs.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: trackShipment})
	if err != nil || p.GetSandbox() != "other" {
		t.Fatalf("submit as other: %v, %v", p, err)
	}
	if got, err := e.advisor.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: mine.GetId()}); err != nil || got.GetStatus() != "pending" {
		t.Fatalf("own proposal after the other sandbox's attempts: %v, %v", got, err)
	}
	// The sandbox token cannot approve by writing policy or sandboxes.
	sandboxAPI := newConnectAPI(t, e.gw.URL, e.token)
	if _, err := sandboxAPI.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: advisorPolicy}); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("sandbox SetPolicy: %v", err)
	}
	// And an operator cannot submit as a sandbox.
	if _, err := newAdvisorClient(e.gw.URL, gatewaytest.AdminToken).SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: trackShipment}); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("admin SubmitProposal: %v", err)
	}
}

func TestAdvisorIdempotencyDedupeSupersede(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	keyed := trackShipment + "idempotency_key: ticket-8812\n"
	first := e.mustSubmit(t, keyed)
	second := e.mustSubmit(t, keyed)
	if second.GetId() != first.GetId() || !second.GetDeduplicated() || first.GetDeduplicated() {
		t.Fatalf("same key twice: %d (dedup %v) then %d (dedup %v)", first.GetId(), first.GetDeduplicated(), second.GetId(), second.GetDeduplicated())
	}
	// Identical operations, another rationale, no key: the pending one.
	again := e.mustSubmit(t, strings.Replace(trackShipment, "support agents", "agents", 1))
	if again.GetId() != first.GetId() || !again.GetDeduplicated() {
		t.Fatalf("identical proposal stored twice: %d vs %d", again.GetId(), first.GetId())
	}
	if n := len(e.list(t)); n != 1 {
		t.Fatalf("%d proposals stored, want 1", n)
	}

	// A newer proposal for the same endpoint and binary supersedes it.
	newer := e.mustSubmit(t, `
rationale: track shipments and list carriers
operations:
  - add_allow_rules:
      policy: orders
      host: orders.example.com
      port: 443
      rules:
        - allow: { method: tools/call, tool: track_shipment }
        - allow: { method: tools/call, tool: list_carriers }
`)
	old, err := e.advisor.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: first.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if old.GetStatus() != "superseded" || old.GetSupersededBy() != newer.GetId() || newer.GetStatus() != "pending" {
		t.Fatalf("old %s superseded_by %d; newer %d %s", old.GetStatus(), old.GetSupersededBy(), newer.GetId(), newer.GetStatus())
	}

	// Withdraw: only pending, only once.
	w, err := e.advisor.WithdrawProposal(t.Context(), &portcullisv1.WithdrawProposalRequest{Id: newer.GetId(), Reason: "not needed"})
	if err != nil || w.GetStatus() != "withdrawn" || w.GetStatusReason() != "not needed" {
		t.Fatalf("withdraw: %v, %v", w, err)
	}
	for _, id := range []uint64{newer.GetId(), first.GetId()} {
		if _, err := e.advisor.WithdrawProposal(t.Context(), &portcullisv1.WithdrawProposalRequest{Id: id}); connect.CodeOf(err) != connect.CodeAborted {
			t.Fatalf("withdraw a %d that is not pending: got %v, want Aborted", id, err)
		}
	}
	// The key still names the first proposal, whatever became of it.
	if p := e.mustSubmit(t, keyed); p.GetId() != first.GetId() {
		t.Fatalf("idempotency key answered %d, want %d", p.GetId(), first.GetId())
	}
}

func TestAdvisorRateLimit(t *testing.T) {
	e := startAdvisor(t, "sqlite", func(c *gateway.Config) { c.ProposalRateMax, c.ProposalRateWindow = 2, time.Hour })
	tools := []string{"track_shipment", "list_carriers", "get_invoice"}
	doc := func(tool string) string {
		return `
rationale: r
operations:
  - add_allow_rules: { policy: orders, host: orders.example.com, port: 443, rules: [ { allow: { method: tools/call, tool: ` + tool + ` } } ] }
`
	}
	e.mustSubmit(t, doc(tools[0]))
	e.mustSubmit(t, doc(tools[1]))
	_, err := e.submit(t, doc(tools[2]))
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeResourceExhausted {
		t.Fatalf("want ResourceExhausted, got %v", err)
	}
	var hint *portcullisv1.ProposalRateLimit
	for _, d := range cerr.Details() {
		if v, err := connectproto.UnmarshalErrorDetail(d); err == nil {
			hint, _ = v.(*portcullisv1.ProposalRateLimit)
		}
	}
	if hint == nil || hint.GetRetryAfterSeconds() < 1 || hint.GetRetryAfterSeconds() > 3600 {
		t.Fatalf("retry hint %v", hint)
	}
	if n := len(e.list(t)); n != 2 {
		t.Fatalf("%d proposals stored, want 2", n)
	}
}

// TestAdvisorRebase: when the current version moves, a pending proposal
// is applied to the new one and re-proved; its resulting hash changes.
func TestAdvisorRebase(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startAdvisor(t, engine)
			p := e.mustSubmit(t, trackShipment)
			moved := strings.Replace(advisorPolicy, "/repos/acme/app/**", "/repos/acme/**", 1)
			if _, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: moved}); err != nil {
				t.Fatal(err)
			}
			got, err := e.advisor.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: p.GetId()})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetBaseVersion() != 2 || got.GetResultingHash() == p.GetResultingHash() || got.GetRebaseError() != "" {
				t.Fatalf("after a move: base %d hash %s (was %s) error %q", got.GetBaseVersion(), got.GetResultingHash(), p.GetResultingHash(), got.GetRebaseError())
			}
			result := parseStruct(t, got.GetResultingPolicy())
			if result.Hash() != got.GetResultingHash() {
				t.Fatal("re-based hash does not match the re-based policy")
			}
			if len(got.GetFindings()) != 1 || got.GetFindings()[0].GetKind() != prover.NewMCPTool {
				t.Fatalf("re-proved findings %v", got.GetFindings())
			}

			// A version that already allows the tool: the proposal no
			// longer applies, and says so.
			allowed := strings.Replace(moved, "tool: lookup_order }", "tool: lookup_order }\n          - allow: { method: tools/call, tool: track_shipment }", 1)
			if _, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: allowed}); err != nil {
				t.Fatal(err)
			}
			got, err = e.advisor.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: p.GetId()})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetBaseVersion() != 3 || !strings.Contains(got.GetRebaseError(), "change nothing") {
				t.Fatalf("after the tool was allowed: base %d, rebase_error %q", got.GetBaseVersion(), got.GetRebaseError())
			}
		})
	}
}

// TestAdvisorBoundary: the boundary and credentialed hosts are stored,
// shown, and what proposals are proved against.
func TestAdvisorBoundary(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	p := e.mustSubmit(t, trackShipment)
	if len(p.GetFindings()) != 1 {
		t.Fatalf("findings before the boundary: %v", p.GetFindings())
	}
	sb, err := e.admin.sandbox.SetSandboxBoundary(t.Context(), &portcullisv1.SetSandboxBoundaryRequest{Name: "support", Document: advisorPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if sb.GetBoundaryHash() != mustPolicy(t, advisorPolicy).Hash() || sb.GetBoundary() == nil {
		t.Fatalf("boundary not shown: %v", sb)
	}
	got, err := e.admin.sandbox.GetSandbox(t.Context(), &portcullisv1.GetSandboxRequest{Name: "support"})
	if err != nil || got.GetBoundaryHash() != sb.GetBoundaryHash() || len(got.GetCredentialedHosts()) != 1 || got.GetCredentialedHosts()[0] != "api.github.com:443" {
		t.Fatalf("get sandbox: %v, %v", got, err)
	}
	// The pending proposal is re-proved against the boundary (in the
	// background: poll).
	deadline := time.Now().Add(10 * time.Second)
	for {
		cur, err := e.advisor.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: p.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		has := false
		for _, f := range cur.GetFindings() {
			has = has || f.GetKind() == prover.ExceedsBoundary
		}
		if has {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no exceeds_boundary after the boundary was set: %v", cur.GetFindings())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Audited, both.
	audit, err := e.gw.Store.ListAudit(t.Context(), store.AuditFilter{Sandbox: "support"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range audit {
		seen[a.Action] = true
	}
	if !seen[store.ActionBoundarySet] || !seen[store.ActionCredentials] || !seen[store.ActionProposalNew] {
		t.Fatalf("audit actions %v", seen)
	}
	// Bad input names its field and stores nothing.
	if _, err := e.admin.sandbox.SetCredentialedHosts(t.Context(), &portcullisv1.SetCredentialedHostsRequest{Name: "support", Add: []string{"ok.example.com:443", "*.example.com:443"}}); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "add[1]") {
		t.Fatalf("glob credentialed host: %v", err)
	}
	if _, err := e.admin.sandbox.SetSandboxBoundary(t.Context(), &portcullisv1.SetSandboxBoundaryRequest{Name: "support", Document: "version: 1\nbogus: 1\n"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("invalid boundary: %v", err)
	}
	got, _ = e.admin.sandbox.GetSandbox(t.Context(), &portcullisv1.GetSandboxRequest{Name: "support"})
	if got.GetBoundaryHash() != sb.GetBoundaryHash() || len(got.GetCredentialedHosts()) != 1 {
		t.Fatalf("refused input changed the sandbox: %v", got)
	}
	// Clearing.
	if sb, err := e.admin.sandbox.SetSandboxBoundary(t.Context(), &portcullisv1.SetSandboxBoundaryRequest{Name: "support"}); err != nil || sb.GetBoundary() != nil || sb.GetBoundaryHash() != "" {
		t.Fatalf("clear boundary: %v, %v", sb, err)
	}
}

func TestAdvisorWatch(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	p := e.mustSubmit(t, trackShipment)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	stream, err := e.advisor.WatchProposal(ctx, &portcullisv1.WatchProposalRequest{Id: p.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Receive(); err != nil || m.GetStatus() != "pending" {
		t.Fatalf("first message: %v %v", m, err)
	}
	if _, err := e.advisor.WithdrawProposal(t.Context(), &portcullisv1.WithdrawProposalRequest{Id: p.GetId()}); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Receive(); err != nil || m.GetStatus() != "withdrawn" {
		t.Fatalf("after withdraw: %v %v", m, err)
	}
	if m, err := stream.Receive(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream went on after the decision: %v %v", m, err)
	}
}

// TestAdvisorFromDenial: a denial the proxy recorded becomes the proposal
// that allows exactly that request.
func TestAdvisorFromDenial(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	denied := store.Decision{ProxyID: "p1", Record: decision.Record{
		Time: time.Now(), Sandbox: "support", Decision: "deny", Binary: "/usr/bin/python3",
		Host: "orders.example.com", Port: 443, HTTPMethod: "POST", Path: "/mcp", MCPMethod: "tools/call", Tool: "track_shipment",
		Entry: "orders", Reason: "tools/call track_shipment is not allowed", PolicyVersion: "1", DenialID: "d-0001"}}
	probe := denied
	probe.DenialID, probe.VersionProbe, probe.Tool = "d-0002", true, ""
	if _, err := e.gw.Store.AppendDecisions(t.Context(), []store.Decision{denied, probe}); err != nil {
		t.Fatal(err)
	}
	res, err := e.advisor.ListDenials(t.Context(), &portcullisv1.ListDenialsRequest{Last: 10})
	if err != nil || len(res.GetDenials()) != 2 {
		t.Fatalf("denials %v, %v", res.GetDenials(), err)
	}
	if d := res.GetDenials()[0]; d.GetDenialId() != "d-0002" || d.GetSuggestion() != nil || d.GetNotOffered() == "" {
		t.Fatalf("a version probe is offered: %v", d)
	}
	if d := res.GetDenials()[1]; d.GetDenialId() != "d-0001" || d.GetSuggestion() == nil {
		t.Fatalf("no suggestion for a denial: %v", d)
	}

	p, err := e.advisor.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{DenialId: "d-0001"})
	if err != nil {
		t.Fatal(err)
	}
	if p.GetDenialId() != "d-0001" || p.GetStatus() != "pending" {
		t.Fatalf("proposal %v", p)
	}
	result := parseStruct(t, p.GetResultingPolicy())
	req := policy.Request{Binary: denied.Binary, Host: denied.Host, Port: denied.Port, HTTPMethod: "POST", Path: "/mcp",
		MCP: &policy.MCPMessage{Method: "tools/call", Tool: "track_shipment"}}
	if !policy.Decide(result, req).Allow {
		t.Fatal("the proposal from the denial does not allow the denied request")
	}
	// Nothing wider: every finding's counterexample is that request.
	for _, f := range p.GetFindings() {
		ce := f.GetCounterexample()
		if ce == nil || ce.GetHost() != denied.Host || ce.GetPort() != 443 || ce.GetTool() != "track_shipment" || ce.GetBinary() != denied.Binary {
			t.Fatalf("finding wider than the denial: %v", f)
		}
	}
	for _, id := range []string{"d-0002", "d-9999"} {
		_, err := e.advisor.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{DenialId: id})
		want := connect.CodeNotFound
		if id == "d-0002" {
			want = connect.CodeInvalidArgument
		}
		if connect.CodeOf(err) != want {
			t.Fatalf("denial %s: got %v, want %v", id, err, want)
		}
	}
}

func TestProverService(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	admin := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	sb := mustCreateSandbox(t, admin, "any")
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, gw.URL), gatewaytest.Bearer(sb.GetToken()))
	pc := portcullisv1connect.NewProverServiceClient(c)
	proposed := strings.Replace(advisorPolicy, "tool: lookup_order }", "tool: lookup_order }\n          - allow: { method: tools/call, tool: track_shipment }", 1)
	res, err := pc.Prove(t.Context(), &portcullisv1.ProveRequest{Current: advisorPolicy, Proposed: proposed, Credentialed: []string{"orders.example.com:443"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GetFindings()) != 1 || res.GetFindings()[0].GetKind() != prover.NewMCPTool || !res.GetFindings()[0].GetCredentialed() {
		t.Fatalf("findings %v", res.GetFindings())
	}
	if res, err := pc.Prove(t.Context(), &portcullisv1.ProveRequest{Current: advisorPolicy, Proposed: advisorPolicy}); err != nil || len(res.GetFindings()) != 0 {
		t.Fatalf("same policy: %v, %v", res, err)
	}
	_, err = pc.Prove(t.Context(), &portcullisv1.ProveRequest{Current: advisorPolicy, Proposed: "version: 1\nbogus: 1\n"})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "proposed") {
		t.Fatalf("invalid proposed policy: %v", err)
	}
}
