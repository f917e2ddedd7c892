package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectproto"
	"google.golang.org/protobuf/proto"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// fakeAdvisor answers AdvisorService calls with a canned proposal or
// error, and records the requests it got with their Authorization header.
type fakeAdvisor struct {
	portcullisv1connect.UnimplementedAdvisorServiceHandler

	url string

	mu     sync.Mutex
	reqs   []proto.Message
	auths  []string
	answer *portcullisv1.Proposal
	err    error
}

func newFakeAdvisor(t *testing.T) *fakeAdvisor {
	t.Helper()
	f := &fakeAdvisor{answer: trackShipmentProposal()}
	server := connect.NewServer()
	portcullisv1connect.RegisterAdvisorServiceHandler(server, f)
	// As the gateway does, the approval queue refuses a sandbox token.
	portcullisv1connect.RegisterApprovalServiceHandler(server, refusingApproval{})
	mux := http.NewServeMux()
	connecthttp.Mount(mux, server)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	f.url = ts.URL
	return f
}

func (f *fakeAdvisor) cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLI(t, append([]string{"--gateway", f.url, "--token", sandboxToken}, args...)...)
}

func (f *fakeAdvisor) record(ctx context.Context, req proto.Message) error {
	info, _ := connect.CallInfoForServerContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	f.auths = append(f.auths, info.RequestHeader().Get("Authorization"))
	return f.err
}

// only returns the one request the fake got, and forgets it.
func (f *fakeAdvisor) only(t *testing.T) proto.Message {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) != 1 {
		t.Fatalf("the fake got %d requests, want 1: %v", len(f.reqs), f.reqs)
	}
	if f.auths[0] != "Bearer "+sandboxToken {
		t.Errorf("Authorization %q, want the sandbox's bearer token", f.auths[0])
	}
	req := f.reqs[0]
	f.reqs, f.auths = nil, nil
	return req
}

func (f *fakeAdvisor) SubmitProposal(ctx context.Context, req *portcullisv1.SubmitProposalRequest) (*portcullisv1.Proposal, error) {
	if err := f.record(ctx, req); err != nil {
		return nil, err
	}
	return f.answer, nil
}

func (f *fakeAdvisor) GetProposal(ctx context.Context, req *portcullisv1.GetProposalRequest) (*portcullisv1.Proposal, error) {
	if err := f.record(ctx, req); err != nil {
		return nil, err
	}
	return f.answer, nil
}

func (f *fakeAdvisor) ListProposals(ctx context.Context, req *portcullisv1.ListProposalsRequest) (*portcullisv1.ListProposalsResponse, error) {
	if err := f.record(ctx, req); err != nil {
		return nil, err
	}
	return &portcullisv1.ListProposalsResponse{Proposals: []*portcullisv1.Proposal{f.answer}}, nil
}

func (f *fakeAdvisor) WithdrawProposal(ctx context.Context, req *portcullisv1.WithdrawProposalRequest) (*portcullisv1.Proposal, error) {
	if err := f.record(ctx, req); err != nil {
		return nil, err
	}
	p := proto.CloneOf(f.answer)
	p.Status, p.StatusReason = "withdrawn", req.GetReason()
	return p, nil
}

// refusingApproval is ApprovalService as a sandbox token meets it.
type refusingApproval struct {
	portcullisv1connect.UnimplementedApprovalServiceHandler
}

func (refusingApproval) ListProposals(context.Context, *portcullisv1.ApprovalServiceListProposalsRequest) (*portcullisv1.ListProposalsResponse, error) {
	return nil, connect.NewError(connect.CodePermissionDenied, "a sandbox token cannot call ApprovalService")
}

func (refusingApproval) GetProposal(context.Context, *portcullisv1.GetProposalRequest) (*portcullisv1.Proposal, error) {
	return nil, connect.NewError(connect.CodePermissionDenied, "a sandbox token cannot call ApprovalService")
}

// trackShipmentProposal is the article's proposal as the gateway would
// store it: one new MCP tool, on a credentialed destination.
func trackShipmentProposal() *portcullisv1.Proposal {
	return &portcullisv1.Proposal{
		Id: 7, Sandbox: "orders", Status: "pending",
		Rationale:   "support agents must track shipments\nfor open orders",
		Proposer:    "sandbox:orders",
		BaseVersion: 3, BaseHash: strings.Repeat("b", 64),
		ResultingHash: strings.Repeat("c", 64),
		CreatedAt:     created,
		Changes: []*portcullisv1.PolicyChange{{
			Kind: "added", Path: "network_policies.orders.endpoints[0].rules[5]", Summary: "allow tools/call track_shipment",
		}},
		Findings: []*portcullisv1.Finding{{
			Kind: "new_mcp_tool", Entry: "orders", Endpoint: "demo-mcp:8081/mcp", Rule: "rules[5]",
			Detail:       "tools/call track_shipment was denied and is now allowed",
			Credentialed: true,
			Counterexample: &portcullisv1.ProvedRequest{
				Host: "demo-mcp", Port: 8081, HttpMethod: "POST", Path: "/mcp",
				McpMethod: "tools/call", Tool: "track_shipment",
			},
		}, {
			Kind: "new_reach", Entry: "shipping", Endpoint: "ship.example.com:443",
			Detail: "a new destination",
			Counterexample: &portcullisv1.ProvedRequest{
				Binary: "/usr/bin/python3", Host: "ship.example.com", Port: 443, HttpMethod: "GET", Path: "/v1/shipments/x",
			},
		}},
	}
}

func withDetail(t *testing.T, code connect.Code, msg string, m proto.Message) error {
	t.Helper()
	d, err := connectproto.NewErrorDetail(m)
	if err != nil {
		t.Fatal(err)
	}
	return connect.NewError(code, msg).WithDetail(d)
}

func TestProposeAgainstFake(t *testing.T) {
	f := newFakeAdvisor(t)

	t.Run("file sent unchanged", func(t *testing.T) {
		doc := "rationale: track\noperations: []\n"
		stdout, stderr, code := runCLIWith(t, cliInput{stdin: doc},
			"--gateway", f.url, "--token", sandboxToken, "propose", "-f", "-")
		ok(t, code, stderr)
		req := f.only(t).(*portcullisv1.SubmitProposalRequest)
		if req.GetDocument() != doc || req.GetDenialId() != "" {
			t.Errorf("request = %v; want the document as given", req)
		}
		for _, want := range []string{
			"id:", "7", "status:", "pending", "base version:", "3 (sha256 bbbbbbbbbbbb…)",
			"resulting hash:", strings.Repeat("c", 64),
			"findings (2):",
			"new_mcp_tool [credentialed]  entry orders endpoint demo-mcp:8081/mcp rule rules[5]",
			"tools/call track_shipment was denied and is now allowed",
			"request: any binary → demo-mcp:8081 POST /mcp mcp tools/call track_shipment\n",
			"new_reach  entry shipping endpoint ship.example.com:443",
			"request: /usr/bin/python3 → ship.example.com:443 GET /v1/shipments/x\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout does not contain %q:\n%s", want, stdout)
			}
		}
		if strings.Contains(stdout, "deduplicated") || strings.Contains(stdout, "rationale") {
			t.Errorf("propose printed what only show or a duplicate prints:\n%s", stdout)
		}
	})

	t.Run("from denial", func(t *testing.T) {
		_, stderr, code := f.cli(t, "propose", "--from-denial", "dn_0123", "--rationale", "needed", "--idempotency-key", "k1")
		ok(t, code, stderr)
		req := f.only(t).(*portcullisv1.SubmitProposalRequest)
		if req.GetDenialId() != "dn_0123" || req.GetRationale() != "needed" || req.GetIdempotencyKey() != "k1" || req.GetDocument() != "" {
			t.Errorf("request = %v", req)
		}
	})

	t.Run("json", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "propose", "--from-denial", "dn_0123", "-o", "json")
		ok(t, code, stderr)
		f.only(t)
		m := decodeJSON(t, stdout)
		hasKeys(t, m, "id", "status", "base_version", "resulting_hash", "findings", "created_at")
		findings := m["findings"].([]any)
		first := findings[0].(map[string]any)
		if first["kind"] != "new_mcp_tool" || first["counterexample"].(map[string]any)["mcp_method"] != "tools/call" {
			t.Errorf("findings[0] = %v", first)
		}
	})

	t.Run("deduplicated", func(t *testing.T) {
		f.answer.Deduplicated = true
		defer func() { f.answer.Deduplicated = false }()
		stdout, stderr, code := f.cli(t, "propose", "--from-denial", "dn_0123")
		ok(t, code, stderr)
		f.only(t)
		if !strings.Contains(stdout, "deduplicated: an identical proposal is already pending") {
			t.Errorf("stdout does not say deduplicated:\n%s", stdout)
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, tt := range []struct {
			refusal *portcullisv1.ProposalRefusal
			want    string
		}{
			{&portcullisv1.ProposalRefusal{Operation: 0, Field: "add_rule.rule.endpoints[0].host", Rule: "public_suffix", Reason: "*.github.io is below a public suffix"},
				"refused: operations[0].add_rule.rule.endpoints[0].host: *.github.io is below a public suffix (rule public_suffix)"},
			{&portcullisv1.ProposalRefusal{Operation: 1, Field: "operations[1].add_allow_rules.rules[0]", Rule: "changes_nothing", Reason: "already allowed"},
				"refused: operations[1].add_allow_rules.rules[0]: already allowed (rule changes_nothing)"},
			{&portcullisv1.ProposalRefusal{Operation: -1, Field: "operations", Rule: "too_many", Reason: "at most 32 operations"},
				"refused: operations: at most 32 operations (rule too_many)"},
		} {
			f.err = withDetail(t, connect.CodeInvalidArgument, "proposal refused", tt.refusal)
			stdout, stderr, code := f.cli(t, "propose", "--from-denial", "dn_0123")
			f.only(t)
			if code != exitInvalid || !strings.Contains(stderr, tt.want+"\n") || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, tt.want)
			}
		}
		f.err = nil
	})

	t.Run("rate limited", func(t *testing.T) {
		f.err = withDetail(t, connect.CodeResourceExhausted, "too many proposals", &portcullisv1.ProposalRateLimit{RetryAfterSeconds: 42})
		defer func() { f.err = nil }()
		_, stderr, code := f.cli(t, "propose", "--from-denial", "dn_0123")
		f.only(t)
		if code != exitNo || !strings.Contains(stderr, "rate limited: retry in 42 s") {
			t.Errorf("exit %d, stderr %q; want 1 and the wait", code, stderr)
		}
	})

	t.Run("invalid document without refusal detail", func(t *testing.T) {
		f.err = connect.NewError(connect.CodeInvalidArgument, "operations[0].add_rule.colour: unknown field")
		defer func() { f.err = nil }()
		_, stderr, code := f.cli(t, "propose", "--from-denial", "dn_0123")
		f.only(t)
		if code != exitInvalid || !strings.Contains(stderr, "error: operations[0].add_rule.colour: unknown field") {
			t.Errorf("exit %d, stderr %q; want 2 with the gateway's message", code, stderr)
		}
	})
}

func TestProposalsAgainstFake(t *testing.T) {
	f := newFakeAdvisor(t)

	t.Run("list", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "proposals", "list", "--status", "pending")
		ok(t, code, stderr)
		if req := f.only(t).(*portcullisv1.ListProposalsRequest); req.GetStatus() != "pending" {
			t.Errorf("status %q, want pending", req.GetStatus())
		}
		lines := lines(stdout)
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") {
			t.Fatalf("want a header and one row:\n%s", stdout)
		}
		for _, want := range []string{"7", "pending", "2026-01-02T03:04:05Z", "2 (new_mcp_tool, new_reach)", "support agents must track shipments for open or…"} {
			if !strings.Contains(lines[1], want) {
				t.Errorf("row does not contain %q: %s", want, lines[1])
			}
		}
	})

	t.Run("list json", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "proposals", "list", "-o", "json")
		ok(t, code, stderr)
		f.only(t)
		m := decodeJSON(t, stdout)
		if ps, _ := m["proposals"].([]any); len(ps) != 1 {
			t.Errorf("proposals = %v", m["proposals"])
		}
	})

	t.Run("show", func(t *testing.T) {
		f.answer.StatusReason, f.answer.RebaseError, f.answer.SupersededBy = "moved on", "operations[0]: no endpoint demo-mcp:8081", 9
		defer func() { f.answer = trackShipmentProposal() }()
		stdout, stderr, code := f.cli(t, "proposals", "show", "7")
		ok(t, code, stderr)
		if req := f.only(t).(*portcullisv1.GetProposalRequest); req.GetId() != 7 {
			t.Errorf("id %d, want 7", req.GetId())
		}
		for _, want := range []string{
			"rationale:", "support agents must track shipments for open orders",
			"proposer:", "sandbox:orders",
			"status reason:", "moved on",
			"rebase error:", "no endpoint demo-mcp:8081",
			"superseded by:", "9",
			"changes (1):", "+ network_policies.orders.endpoints[0].rules[5]: allow tools/call track_shipment",
			"request: any binary → demo-mcp:8081 POST /mcp mcp tools/call track_shipment",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout does not contain %q:\n%s", want, stdout)
			}
		}
	})

	t.Run("withdraw", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "proposals", "withdraw", "7", "--reason", "wrong host")
		ok(t, code, stderr)
		req := f.only(t).(*portcullisv1.WithdrawProposalRequest)
		if req.GetId() != 7 || req.GetReason() != "wrong host" {
			t.Errorf("request = %v", req)
		}
		if stdout != "proposal 7 withdrawn\n" {
			t.Errorf("stdout = %q", stdout)
		}
	})

	t.Run("exit codes", func(t *testing.T) {
		for _, tt := range []struct {
			err  error
			want int
		}{
			{connect.NewError(connect.CodeNotFound, "proposal 7 not found"), exitNo},
			{connect.NewError(connect.CodeFailedPrecondition, "proposal 7 is withdrawn, not pending"), exitConflict},
			{connect.NewError(connect.CodeAborted, "proposal 7 changed"), exitConflict},
			{connect.NewError(connect.CodePermissionDenied, "a sandbox token only"), exitNo},
		} {
			f.err = tt.err
			_, stderr, code := f.cli(t, "proposals", "withdraw", "7")
			f.only(t)
			if code != tt.want {
				t.Errorf("%v: exit %d, want %d; stderr %s", tt.err, code, tt.want, stderr)
			}
		}
		f.err = nil
	})
}

func TestProposeUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"propose"}, "needs -f FILE or --from-denial ID"},
		{[]string{"propose", "-f", "p.yaml", "--from-denial", "dn_1"}, "not both"},
		{[]string{"propose", "-f", "p.yaml", "--rationale", "r"}, "--rationale goes with --from-denial"},
		{[]string{"propose", "-f", "p.yaml", "--idempotency-key", "k"}, "--idempotency-key goes with --from-denial"},
		{[]string{"propose", "extra", "--from-denial", "dn_1"}, `unexpected argument "extra"`},
		{[]string{"propose", "-f", "testdata/does-not-exist.yaml"}, "no such file"},
		{[]string{"proposals", "bogus"}, `unknown command "bogus"`},
		{[]string{"proposals", "show"}, "needs ID"},
		{[]string{"proposals", "show", "0"}, "ID must be a proposal id"},
		{[]string{"proposals", "show", "x7"}, "ID must be a proposal id"},
		{[]string{"proposals", "withdraw", "-3"}, "unknown shorthand flag"},
		{[]string{"proposals", "list", "--status", "open"}, "--status must be one of"},
		{[]string{"proposals", "approve", "7"}, "needs --reason"},
		{[]string{"proposals", "approve", "7", "--reason", " "}, "needs --reason"},
		{[]string{"proposals", "approve", "7", "--reason", "r", "--hash", ""}, "--hash is empty"},
		{[]string{"proposals", "approve", "7", "--reason", "r", "-o", "json"}, "give --hash H"},
		{[]string{"proposals", "approve", "7", "--reason", "r", "--until", "soon"}, "--until must be an RFC 3339 time or a duration"},
		{[]string{"proposals", "approve", "7", "--reason", "r", "--until", "-1h"}, "--until must be in the future"},
		{[]string{"proposals", "approve", "7", "--reason", "r", "--until", "2001-01-01T00:00:00Z"}, "is in the past"},
		{[]string{"proposals", "approve", "x", "--reason", "r"}, "ID must be a proposal id"},
		{[]string{"proposals", "reject", "7"}, "needs --reason"},
		{[]string{"proposals", "list", "--finding", "new_everything"}, "--finding must be one of"},
		{[]string{"proposals", "list", "--sandbox", ""}, "--sandbox is empty"},
		{[]string{"approval-policy", "set"}, "needs -f FILE"},
		{[]string{"approval-policy", "set", "-f", "testdata/does-not-exist.rego"}, "no such file"},
		{[]string{"approval-policy", "get", "extra"}, `unexpected argument "extra"`},
		{[]string{"sandbox", "freeze", "orders"}, "needs --reason"},
		{[]string{"sandbox", "unfreeze", "orders"}, "needs --reason"},
		{[]string{"sandbox", "freeze"}, "needs NAME"},
		{[]string{"sandbox", "set-boundary", "orders"}, "needs -f FILE or --clear"},
		{[]string{"sandbox", "set-boundary", "orders", "-f", "b.yaml", "--clear"}, "not both"},
		{[]string{"sandbox", "credentials", "orders"}, "needs --add HOST:PORT or --remove HOST:PORT"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			// No gateway listens there: a usage error must come first.
			stdout, stderr, code := runCLI(t, append(tt.args, "--gateway", "http://127.0.0.1:1")...)
			if code != exitInvalid || !strings.Contains(stderr, "error: ") || !strings.Contains(stderr, tt.want) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 saying %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

func TestSetBoundaryEmptyFile(t *testing.T) {
	stdout, stderr, code := runCLIWith(t, cliInput{stdin: "\n  \n"}, "--gateway", "http://127.0.0.1:1", "sandbox", "set-boundary", "orders", "-f", "-")
	if code != exitInvalid || !strings.Contains(stderr, "use --clear") || stdout != "" {
		t.Errorf("empty boundary: exit %d, stderr %q; want 2 pointing at --clear", code, stderr)
	}
}
