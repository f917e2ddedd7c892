package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

const operatorToken = "operator-secret-token"

// fakeQueue is the decision side of a gateway: ApprovalService for
// operators, AdvisorService for the sandbox, and the sandbox kill switch.
// Like the gateway it refuses ApprovalService to a sandbox token and
// AdvisorService to anyone else. It records every call.
type fakeQueue struct {
	portcullisv1connect.UnimplementedApprovalServiceHandler
	portcullisv1connect.UnimplementedSandboxServiceHandler

	url string

	mu     sync.Mutex
	calls  []fakeCall
	errs   map[string]error
	answer *portcullisv1.Proposal
	// approved is ApproveProposal's answer (nil: answer's clone, one
	// more approval).
	approved *portcullisv1.Proposal
	module   *portcullisv1.ApprovalPolicy
	frozen   *portcullisv1.Sandbox
}

func newFakeQueue(t *testing.T) *fakeQueue {
	t.Helper()
	f := &fakeQueue{errs: map[string]error{}, answer: reviewedProposal()}
	server := connect.NewServer()
	portcullisv1connect.RegisterApprovalServiceHandler(server, f)
	portcullisv1connect.RegisterAdvisorServiceHandler(server, advisorHandler{f: f})
	portcullisv1connect.RegisterSandboxServiceHandler(server, f)
	mux := http.NewServeMux()
	connecthttp.Mount(mux, server)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	f.url = ts.URL
	return f
}

// reviewedProposal is the track_shipment proposal as ApprovalService
// answers it: one approval of the current hash, one of an earlier one, two
// needed.
func reviewedProposal() *portcullisv1.Proposal {
	p := trackShipmentProposal()
	p.ApprovalsRequired = 2
	p.ApprovalNotes = []string{"credentialed destination: two approvers"}
	p.ExpiresAt = timestamppb.New(mustTime("2026-01-03T03:04:05Z"))
	p.Approvals = []*portcullisv1.Approval{
		{Approver: "carol", Reason: "saw the old one", ResultingHash: strings.Repeat("9", 64), Time: timestamppb.New(mustTime("2026-01-02T04:00:00Z"))},
		{Approver: "olive", Reason: "narrow,\nticket 8812", ResultingHash: p.GetResultingHash(), Time: timestamppb.New(mustTime("2026-01-02T05:00:00Z"))},
	}
	return p
}

func (f *fakeQueue) cli(t *testing.T, token string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLI(t, append([]string{"--gateway", f.url, "--token", token}, args...)...)
}

// record notes a call; sandbox says whether the method is the sandbox's
// (AdvisorService) or not, and the token must match.
func (f *fakeQueue) record(ctx context.Context, method string, req proto.Message, sandbox bool) error {
	info, _ := connect.CallInfoForServerContext(ctx)
	auth := info.RequestHeader().Get("Authorization")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fakeCall{method: method, req: req, auth: auth})
	if isSandbox := auth == "Bearer "+sandboxToken; isSandbox != sandbox {
		return connect.NewError(connect.CodePermissionDenied, "not for this token")
	}
	return f.errs[method]
}

// took returns the calls since the last took, by method name.
func (f *fakeQueue) took() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// methods are the calls' method names, in order.
func methods(calls []fakeCall) string {
	var out []string
	for _, c := range calls {
		out = append(out, c.method)
	}
	return strings.Join(out, ",")
}

func (f *fakeQueue) fail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.errs, method)
		return
	}
	f.errs[method] = err
}

func (f *fakeQueue) ListProposals(ctx context.Context, req *portcullisv1.ApprovalServiceListProposalsRequest) (*portcullisv1.ListProposalsResponse, error) {
	if err := f.record(ctx, "approval.ListProposals", req, false); err != nil {
		return nil, err
	}
	return &portcullisv1.ListProposalsResponse{Proposals: []*portcullisv1.Proposal{f.answer}}, nil
}

func (f *fakeQueue) GetProposal(ctx context.Context, req *portcullisv1.GetProposalRequest) (*portcullisv1.Proposal, error) {
	if err := f.record(ctx, "approval.GetProposal", req, false); err != nil {
		return nil, err
	}
	return f.answer, nil
}

func (f *fakeQueue) ApproveProposal(ctx context.Context, req *portcullisv1.ApproveProposalRequest) (*portcullisv1.Proposal, error) {
	if err := f.record(ctx, "approval.ApproveProposal", req, false); err != nil {
		return nil, err
	}
	if f.approved != nil {
		return f.approved, nil
	}
	p := proto.CloneOf(f.answer)
	p.Approvals = append(p.Approvals, &portcullisv1.Approval{Approver: "admin", Reason: req.GetReason(), ResultingHash: req.GetResultingHash(), Time: created})
	p.ApprovalsRequired = 3
	return p, nil
}

func (f *fakeQueue) RejectProposal(ctx context.Context, req *portcullisv1.RejectProposalRequest) (*portcullisv1.Proposal, error) {
	if err := f.record(ctx, "approval.RejectProposal", req, false); err != nil {
		return nil, err
	}
	p := proto.CloneOf(f.answer)
	p.Status, p.StatusReason, p.DecidedBy, p.DecidedAt = "rejected", req.GetReason(), "olive", created
	return p, nil
}

func (f *fakeQueue) GetApprovalPolicy(ctx context.Context, req *portcullisv1.GetApprovalPolicyRequest) (*portcullisv1.ApprovalPolicy, error) {
	if err := f.record(ctx, "approval.GetApprovalPolicy", req, false); err != nil {
		return nil, err
	}
	return f.module, nil
}

func (f *fakeQueue) SetApprovalPolicy(ctx context.Context, req *portcullisv1.SetApprovalPolicyRequest) (*portcullisv1.ApprovalPolicy, error) {
	if err := f.record(ctx, "approval.SetApprovalPolicy", req, false); err != nil {
		return nil, err
	}
	return &portcullisv1.ApprovalPolicy{Version: 2, Module: req.GetModule(), Hash: strings.Repeat("d", 64), Author: "admin", CreatedAt: created}, nil
}

// The sandbox's view: AdvisorService, which has no quorum.
func (f *fakeQueue) advisorView() *portcullisv1.Proposal {
	p := proto.CloneOf(f.answer)
	p.ApprovalsRequired, p.AutoApprovable, p.ApprovalNotes = 0, false, nil
	return p
}

func (f *fakeQueue) advisorList(ctx context.Context, req *portcullisv1.ListProposalsRequest) (*portcullisv1.ListProposalsResponse, error) {
	if err := f.record(ctx, "advisor.ListProposals", req, true); err != nil {
		return nil, err
	}
	return &portcullisv1.ListProposalsResponse{Proposals: []*portcullisv1.Proposal{f.advisorView()}}, nil
}

func (f *fakeQueue) advisorGet(ctx context.Context, req *portcullisv1.GetProposalRequest) (*portcullisv1.Proposal, error) {
	if err := f.record(ctx, "advisor.GetProposal", req, true); err != nil {
		return nil, err
	}
	return f.advisorView(), nil
}

func (f *fakeQueue) FreezeSandbox(ctx context.Context, req *portcullisv1.FreezeSandboxRequest) (*portcullisv1.Sandbox, error) {
	if err := f.record(ctx, "sandbox.FreezeSandbox", req, false); err != nil {
		return nil, err
	}
	f.frozen = &portcullisv1.Sandbox{Name: req.GetName(), CurrentVersion: 5, CreatedAt: created, Frozen: true,
		FrozenReason: req.GetReason(), FrozenBy: "olive", FrozenAt: created}
	return f.frozen, nil
}

func (f *fakeQueue) UnfreezeSandbox(ctx context.Context, req *portcullisv1.UnfreezeSandboxRequest) (*portcullisv1.Sandbox, error) {
	if err := f.record(ctx, "sandbox.UnfreezeSandbox", req, false); err != nil {
		return nil, err
	}
	f.frozen = nil
	return &portcullisv1.Sandbox{Name: req.GetName(), CurrentVersion: 6, CreatedAt: created}, nil
}

func (f *fakeQueue) GetSandbox(ctx context.Context, req *portcullisv1.GetSandboxRequest) (*portcullisv1.Sandbox, error) {
	if err := f.record(ctx, "sandbox.GetSandbox", req, false); err != nil {
		return nil, err
	}
	if f.frozen != nil {
		return f.frozen, nil
	}
	return &portcullisv1.Sandbox{Name: req.GetName(), CurrentVersion: 4, CreatedAt: created}, nil
}

// advisorHandler serves the fake's AdvisorService methods under their
// own names (the two services share ListProposals and GetProposal).
type advisorHandler struct {
	portcullisv1connect.UnimplementedAdvisorServiceHandler
	f *fakeQueue
}

func (a advisorHandler) ListProposals(ctx context.Context, req *portcullisv1.ListProposalsRequest) (*portcullisv1.ListProposalsResponse, error) {
	return a.f.advisorList(ctx, req)
}

func (a advisorHandler) GetProposal(ctx context.Context, req *portcullisv1.GetProposalRequest) (*portcullisv1.Proposal, error) {
	return a.f.advisorGet(ctx, req)
}

func containsAll(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s does not contain %q:\n%s", what, want, out)
		}
	}
}

func TestProposalsOperatorView(t *testing.T) {
	f := newFakeQueue(t)

	t.Run("list", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, operatorToken, "proposals", "list", "--status", "pending", "--sandbox", "orders", "--finding", "new_mcp_tool")
		ok(t, code, stderr)
		calls := f.took()
		if methods(calls) != "approval.ListProposals" {
			t.Fatalf("calls %s, want ApprovalService alone", methods(calls))
		}
		req := calls[0].req.(*portcullisv1.ApprovalServiceListProposalsRequest)
		if req.GetStatus() != "pending" || req.GetSandbox() != "orders" || req.GetFinding() != "new_mcp_tool" {
			t.Errorf("request = %v", req)
		}
		if calls[0].auth != "Bearer "+operatorToken {
			t.Errorf("Authorization %q", calls[0].auth)
		}
		ls := lines(stdout)
		if len(ls) != 2 || strings.Join(strings.Fields(ls[0]), " ") != "ID SANDBOX STATUS APPROVALS CREATED FINDINGS RATIONALE" {
			t.Fatalf("want the operator's header and one row:\n%s", stdout)
		}
		// One of the two approvals is of an earlier hash: it does not count.
		if got := strings.Fields(ls[1]); len(got) < 5 || got[0] != "7" || got[1] != "orders" || got[2] != "pending" || got[3] != "1/2" {
			t.Errorf("row = %q; want id, sandbox, status, approvals 1/2", ls[1])
		}
	})

	t.Run("show", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, operatorToken, "proposals", "show", "7")
		ok(t, code, stderr)
		if m := methods(f.took()); m != "approval.GetProposal" {
			t.Fatalf("calls %s", m)
		}
		containsAll(t, "show", stdout,
			"changes (1):", "+ network_policies.orders.endpoints[0].rules[5]: allow tools/call track_shipment",
			"request: any binary → demo-mcp:8081 POST /mcp mcp tools/call track_shipment",
			"approvals: 1 of 2 needed\n",
			"  olive  2026-01-02T05:00:00Z  narrow, ticket 8812\n",
			"  carol  2026-01-02T04:00:00Z  saw the old one  (of an earlier resulting hash 999999999999…: does not count)\n",
			"approval notes:\n  credentialed destination: two approvers\n",
		)
		if field(t, stdout, "auto-approvable") != "no" || field(t, stdout, "expires") != "2026-01-03T03:04:05Z" || field(t, stdout, "grant ends") != "never" {
			t.Errorf("decision fields wrong:\n%s", stdout)
		}
		if strings.Contains(stdout, "decided by") || strings.Contains(stdout, "applied version") {
			t.Errorf("a pending proposal shows a decision:\n%s", stdout)
		}
	})

	t.Run("show applied", func(t *testing.T) {
		f.answer.Status, f.answer.AppliedVersion, f.answer.DecidedBy, f.answer.DecidedAt = "applied", 4, "olive", created
		f.answer.GrantExpiresAt = timestamppb.New(mustTime("2026-01-02T11:04:05Z"))
		defer func() { f.answer = reviewedProposal() }()
		stdout, stderr, code := f.cli(t, operatorToken, "proposals", "show", "7")
		ok(t, code, stderr)
		f.took()
		for k, want := range map[string]string{
			"applied version": "4", "decided by": "olive", "decided at": "2026-01-02T03:04:05Z", "grant ends": "2026-01-02T11:04:05Z",
		} {
			if got := field(t, stdout, k); got != want {
				t.Errorf("%s: %q, want %q", k, got, want)
			}
		}
		if strings.Contains(stdout, "expires:") {
			t.Errorf("an applied proposal shows when it would have expired:\n%s", stdout)
		}
	})

	t.Run("show json", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, operatorToken, "proposals", "show", "7", "-o", "json")
		ok(t, code, stderr)
		f.took()
		m := decodeJSON(t, stdout)
		hasKeys(t, m, "id", "sandbox", "resulting_hash", "approvals", "approvals_required", "approval_notes", "expires_at")
	})
}

func TestProposalsSandboxFallback(t *testing.T) {
	f := newFakeQueue(t)

	t.Run("list", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, sandboxToken, "proposals", "list", "--status", "pending")
		ok(t, code, stderr)
		calls := f.took()
		if methods(calls) != "approval.ListProposals,advisor.ListProposals" {
			t.Fatalf("calls %s; want ApprovalService refused, then AdvisorService", methods(calls))
		}
		if req := calls[1].req.(*portcullisv1.ListProposalsRequest); req.GetStatus() != "pending" {
			t.Errorf("advisor request = %v", req)
		}
		ls := lines(stdout)
		if len(ls) != 2 || strings.Contains(ls[0], "SANDBOX") || !strings.HasPrefix(ls[1], "7 ") {
			t.Errorf("want the sandbox's table, without a sandbox column:\n%s", stdout)
		}
	})

	t.Run("list filters", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			rows int
		}{
			{[]string{"--finding", "new_reach"}, 1},
			{[]string{"--finding", "private_network"}, 0},
			{[]string{"--sandbox", "orders"}, 1},
			{[]string{"--sandbox", "other"}, 0},
		} {
			stdout, stderr, code := f.cli(t, sandboxToken, append([]string{"proposals", "list"}, tt.args...)...)
			ok(t, code, stderr)
			f.took()
			if n := len(lines(stdout)) - 1; n != tt.rows {
				t.Errorf("%v: %d rows, want %d:\n%s", tt.args, n, tt.rows, stdout)
			}
		}
	})

	t.Run("show", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, sandboxToken, "proposals", "show", "7")
		ok(t, code, stderr)
		if m := methods(f.took()); m != "approval.GetProposal,advisor.GetProposal" {
			t.Fatalf("calls %s", m)
		}
		containsAll(t, "show", stdout, "approvals: 2\n", "  olive  ", "changes (1):")
		if strings.Contains(stdout, "needed") || strings.Contains(stdout, "auto-approvable") {
			t.Errorf("the sandbox's view shows a quorum it was not sent:\n%s", stdout)
		}
	})

	t.Run("other refusals are not a fallback", func(t *testing.T) {
		f.fail("approval.GetProposal", connect.NewError(connect.CodeUnauthenticated, "token revoked"))
		defer f.fail("approval.GetProposal", nil)
		_, stderr, code := f.cli(t, operatorToken, "proposals", "show", "7")
		if m := methods(f.took()); m != "approval.GetProposal" || code != exitNo || !strings.Contains(stderr, "token revoked") {
			t.Errorf("calls %s, exit %d, stderr %q; want one call and exit 1", m, code, stderr)
		}
	})

	t.Run("approve is never a fallback", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, sandboxToken, "proposals", "approve", "7", "--reason", "mine")
		if m := methods(f.took()); m != "approval.GetProposal" || code != exitNo || stdout != "" || !strings.Contains(stderr, "error: ") {
			t.Errorf("calls %s, exit %d, stdout %q, stderr %q; want refused at the first call, exit 1", m, code, stdout, stderr)
		}
	})
}

func TestProposalsApprove(t *testing.T) {
	f := newFakeQueue(t)
	hash := f.answer.GetResultingHash()

	t.Run("shows then approves what it showed", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, adminToken, "proposals", "approve", "7", "--reason", "narrow; ticket 8812")
		ok(t, code, stderr)
		calls := f.took()
		if methods(calls) != "approval.GetProposal,approval.ApproveProposal" {
			t.Fatalf("calls %s", methods(calls))
		}
		req := calls[1].req.(*portcullisv1.ApproveProposalRequest)
		if req.GetId() != 7 || req.GetReason() != "narrow; ticket 8812" || req.GetResultingHash() != hash || req.GetGrantExpiresAt() != nil {
			t.Errorf("approve request = %v; want the hash shown, no grant end", req)
		}
		containsAll(t, "approve", stdout,
			"resulting hash: "+hash,
			"+ network_policies.orders.endpoints[0].rules[5]: allow tools/call track_shipment",
			"new_mcp_tool [credentialed]",
			"request: any binary → demo-mcp:8081 POST /mcp mcp tools/call track_shipment",
			"approvals: 1 of 2 needed",
		)
		outcome := "proposal 7 approved by you; 1 more approval needed\n"
		if !strings.HasSuffix(stdout, outcome) {
			t.Errorf("stdout does not end with %q:\n%s", outcome, stdout)
		}
		if strings.Index(stdout, "request: ") > strings.Index(stdout, outcome) {
			t.Errorf("the outcome comes before what was approved:\n%s", stdout)
		}
		if stderr != "" {
			t.Errorf("stderr = %q", stderr)
		}
	})

	t.Run("more approvals", func(t *testing.T) {
		f.approved = proto.CloneOf(f.answer)
		f.approved.ApprovalsRequired = 4
		defer func() { f.approved = nil }()
		stdout, stderr, code := f.cli(t, adminToken, "proposals", "approve", "7", "--reason", "ok")
		ok(t, code, stderr)
		f.took()
		if !strings.HasSuffix(stdout, "proposal 7 approved by you; 3 more approvals needed\n") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("applied", func(t *testing.T) {
		f.approved = proto.CloneOf(f.answer)
		f.approved.Status, f.approved.AppliedVersion = "applied", 4
		f.approved.GrantExpiresAt = timestamppb.New(mustTime("2026-01-02T11:04:05Z"))
		defer func() { f.approved = nil }()
		stdout, stderr, code := f.cli(t, adminToken, "proposals", "approve", "7", "--reason", "ok", "--until", "2099-01-02T11:04:05Z")
		ok(t, code, stderr)
		req := f.took()[1].req.(*portcullisv1.ApproveProposalRequest)
		if !req.GetGrantExpiresAt().AsTime().Equal(mustTime("2099-01-02T11:04:05Z")) {
			t.Errorf("grant_expires_at = %v", req.GetGrantExpiresAt())
		}
		if !strings.HasSuffix(stdout, "proposal 7 applied: sandbox orders is at version 4 (the grant ends 2026-01-02T11:04:05Z)\n") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("until a duration", func(t *testing.T) {
		before := time.Now()
		_, stderr, code := f.cli(t, adminToken, "proposals", "approve", "7", "--reason", "ok", "--until", "8h")
		ok(t, code, stderr)
		end := f.took()[1].req.(*portcullisv1.ApproveProposalRequest).GetGrantExpiresAt().AsTime()
		if end.Before(before.Add(8*time.Hour-time.Second)) || end.After(time.Now().Add(8*time.Hour)) {
			t.Errorf("grant_expires_at %v, want 8h from %v", end, before)
		}
	})

	t.Run("hash given", func(t *testing.T) {
		other := strings.Repeat("e", 64)
		_, stderr, code := f.cli(t, adminToken, "proposals", "approve", "7", "--reason", "ok", "--hash", other)
		ok(t, code, stderr)
		if got := f.took()[1].req.(*portcullisv1.ApproveProposalRequest).GetResultingHash(); got != other {
			t.Errorf("sent %s, want the --hash", got)
		}
		if !strings.Contains(stderr, "warning: --hash "+other+" is not the resulting hash shown above ("+hash+")") {
			t.Errorf("stderr = %q; want a warning", stderr)
		}
		_, stderr, code = f.cli(t, adminToken, "proposals", "approve", "7", "--reason", "ok", "--hash", hash)
		ok(t, code, stderr)
		f.took()
		if stderr != "" {
			t.Errorf("the shown hash given: stderr %q", stderr)
		}
	})

	t.Run("json", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, adminToken, "proposals", "approve", "7", "--reason", "ci", "--hash", hash, "-o", "json")
		ok(t, code, stderr)
		calls := f.took()
		if methods(calls) != "approval.ApproveProposal" {
			t.Fatalf("calls %s; want the approval alone", methods(calls))
		}
		m := decodeJSON(t, stdout)
		if as, _ := m["approvals"].([]any); len(as) != 3 || m["id"] != "7" {
			t.Errorf("json = %v", m)
		}
	})

	t.Run("exit codes", func(t *testing.T) {
		for _, tt := range []struct {
			method string
			err    *connect.Error
			want   int
			calls  string
		}{
			{"approval.ApproveProposal", connect.NewError(connect.CodeAborted, "proposal 7 changed since it was shown (it is now based on version 5, resulting hash abc)"), exitConflict, "approval.GetProposal,approval.ApproveProposal"},
			{"approval.ApproveProposal", connect.NewError(connect.CodeFailedPrecondition, "olive already approved proposal 7: another approver is needed"), exitConflict, "approval.GetProposal,approval.ApproveProposal"},
			{"approval.ApproveProposal", connect.NewError(connect.CodeFailedPrecondition, `sandbox "orders" is frozen (incident): unfreeze it first`), exitConflict, "approval.GetProposal,approval.ApproveProposal"},
			{"approval.ApproveProposal", connect.NewError(connect.CodePermissionDenied, "the proposer can never approve its own proposal"), exitNo, "approval.GetProposal,approval.ApproveProposal"},
			{"approval.ApproveProposal", connect.NewError(connect.CodeInvalidArgument, "grant_expires_at: operation 0 adds a binary"), exitInvalid, "approval.GetProposal,approval.ApproveProposal"},
			{"approval.GetProposal", connect.NewError(connect.CodeNotFound, "proposal 7 not found"), exitNo, "approval.GetProposal"},
			{"approval.GetProposal", connect.NewError(connect.CodeUnavailable, "shutting down"), exitUnavailable, "approval.GetProposal"},
		} {
			f.fail(tt.method, tt.err)
			stdout, stderr, code := f.cli(t, adminToken, "proposals", "approve", "7", "--reason", "ok")
			f.fail(tt.method, nil)
			if m := methods(f.took()); m != tt.calls {
				t.Errorf("%v: calls %s, want %s", tt.err, m, tt.calls)
			}
			if code != tt.want || !strings.Contains(stderr, "error: ") || !strings.Contains(stderr, tt.err.Message()) {
				t.Errorf("%v: exit %d, stderr %q; want %d with the gateway's message", tt.err, code, stderr, tt.want)
			}
			if strings.Contains(stdout, "approved by you") {
				t.Errorf("%v: stdout claims an approval:\n%s", tt.err, stdout)
			}
		}
	})
}

func TestProposalsReject(t *testing.T) {
	f := newFakeQueue(t)
	stdout, stderr, code := f.cli(t, operatorToken, "proposals", "reject", "7", "--reason", "use the carrier's API")
	ok(t, code, stderr)
	calls := f.took()
	if methods(calls) != "approval.RejectProposal" {
		t.Fatalf("calls %s", methods(calls))
	}
	if req := calls[0].req.(*portcullisv1.RejectProposalRequest); req.GetId() != 7 || req.GetReason() != "use the carrier's API" {
		t.Errorf("request = %v", req)
	}
	if stdout != "proposal 7 rejected\n" {
		t.Errorf("stdout = %q", stdout)
	}
	stdout, stderr, code = f.cli(t, operatorToken, "proposals", "reject", "7", "--reason", "no", "-o", "json")
	ok(t, code, stderr)
	f.took()
	if m := decodeJSON(t, stdout); m["status"] != "rejected" || m["status_reason"] != "no" || m["decided_by"] != "olive" {
		t.Errorf("json = %v", m)
	}
	for _, tt := range []struct {
		err  error
		want int
	}{
		{connect.NewError(connect.CodeAborted, "proposal 7 is applied"), exitConflict},
		{connect.NewError(connect.CodeFailedPrecondition, "proposal 7 is rejected"), exitConflict},
		{connect.NewError(connect.CodeNotFound, "proposal 7 not found"), exitNo},
	} {
		f.fail("approval.RejectProposal", tt.err)
		_, stderr, code := f.cli(t, operatorToken, "proposals", "reject", "7", "--reason", "no")
		f.took()
		if code != tt.want {
			t.Errorf("%v: exit %d, want %d; stderr %s", tt.err, code, tt.want, stderr)
		}
	}
}

func TestApprovalPolicyAgainstFake(t *testing.T) {
	f := newFakeQueue(t)
	module := "package portcullis.approval\n\ndefault approvals_required := 2\n"

	t.Run("get prints the module alone", func(t *testing.T) {
		f.module = &portcullisv1.ApprovalPolicy{Version: 3, Module: module, Hash: strings.Repeat("a", 64), Author: "admin", CreatedAt: created}
		stdout, stderr, code := f.cli(t, operatorToken, "approval-policy", "get")
		ok(t, code, stderr)
		if m := methods(f.took()); m != "approval.GetApprovalPolicy" {
			t.Fatalf("calls %s", m)
		}
		if stdout != module {
			t.Errorf("stdout = %q, want the module exactly", stdout)
		}
		if stderr != "approval rules version 3 (sha256 aaaaaaaaaaaa…) by admin at 2026-01-02T03:04:05Z\n" {
			t.Errorf("stderr = %q", stderr)
		}
	})

	t.Run("get built-in", func(t *testing.T) {
		f.module = &portcullisv1.ApprovalPolicy{Module: module, Hash: strings.Repeat("b", 64), Author: "built-in"}
		stdout, stderr, code := f.cli(t, operatorToken, "approval-policy", "get")
		ok(t, code, stderr)
		f.took()
		if stdout != module || !strings.Contains(stderr, "version 0 (built-in, sha256 bbbbbbbbbbbb…)") {
			t.Errorf("stdout %q, stderr %q", stdout, stderr)
		}
	})

	t.Run("get json", func(t *testing.T) {
		f.module = &portcullisv1.ApprovalPolicy{Version: 3, Module: module, Hash: strings.Repeat("a", 64), Author: "admin", CreatedAt: created}
		stdout, stderr, code := f.cli(t, operatorToken, "approval-policy", "get", "-o", "json")
		ok(t, code, stderr)
		f.took()
		m := decodeJSON(t, stdout)
		if m["version"] != float64(3) || m["module"] != module || m["hash"] != strings.Repeat("a", 64) {
			t.Errorf("json = %v", m)
		}
	})

	t.Run("set", func(t *testing.T) {
		path := writeFile(t, "rules.rego", module)
		stdout, stderr, code := f.cli(t, adminToken, "approval-policy", "set", "-f", path)
		ok(t, code, stderr)
		calls := f.took()
		if methods(calls) != "approval.SetApprovalPolicy" || calls[0].req.(*portcullisv1.SetApprovalPolicyRequest).GetModule() != module {
			t.Fatalf("calls %v; want the file sent unchanged", calls)
		}
		if stdout != "approval rules version 2 (sha256 dddddddddddd…) by admin at 2026-01-02T03:04:05Z\n" {
			t.Errorf("stdout = %q", stdout)
		}
		stdout, stderr, code = runCLIWith(t, cliInput{stdin: module}, "--gateway", f.url, "--token", adminToken, "approval-policy", "set", "-f", "-", "-o", "json")
		ok(t, code, stderr)
		f.took()
		if m := decodeJSON(t, stdout); m["version"] != float64(2) || m["module"] != module {
			t.Errorf("json = %v", m)
		}
	})

	t.Run("set refused", func(t *testing.T) {
		path := writeFile(t, "rules.rego", "package elsewhere\n")
		for _, tt := range []struct {
			err  *connect.Error
			want int
		}{
			{connect.NewError(connect.CodeInvalidArgument, "module: invalid approval rules: package must be portcullis.approval"), exitInvalid},
			{connect.NewError(connect.CodePermissionDenied, "admin only"), exitNo},
		} {
			f.fail("approval.SetApprovalPolicy", tt.err)
			stdout, stderr, code := f.cli(t, adminToken, "approval-policy", "set", "-f", path)
			f.fail("approval.SetApprovalPolicy", nil)
			f.took()
			if code != tt.want || stdout != "" || !strings.Contains(stderr, "error: "+tt.err.Message()) {
				t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d", tt.err, code, stdout, stderr, tt.want)
			}
		}
	})

	t.Run("set empty file", func(t *testing.T) {
		_, stderr, code := runCLIWith(t, cliInput{stdin: " \n"}, "--gateway", f.url, "--token", adminToken, "approval-policy", "set", "-f", "-")
		if code != exitInvalid || !strings.Contains(stderr, "stdin is empty") || len(f.took()) != 0 {
			t.Errorf("exit %d, stderr %q; want 2 without a call", code, stderr)
		}
	})
}

func TestSandboxFreezeAgainstFake(t *testing.T) {
	f := newFakeQueue(t)

	stdout, stderr, code := f.cli(t, operatorToken, "sandbox", "get", "orders")
	ok(t, code, stderr)
	f.took()
	if field(t, stdout, "frozen") != "no" || strings.Contains(stdout, "frozen reason") {
		t.Errorf("an unfrozen sandbox:\n%s", stdout)
	}

	stdout, stderr, code = f.cli(t, operatorToken, "sandbox", "freeze", "orders", "--reason", "exfiltration suspected")
	ok(t, code, stderr)
	calls := f.took()
	if methods(calls) != "sandbox.FreezeSandbox" {
		t.Fatalf("calls %s", methods(calls))
	}
	if req := calls[0].req.(*portcullisv1.FreezeSandboxRequest); req.GetName() != "orders" || req.GetReason() != "exfiltration suspected" {
		t.Errorf("request = %v", req)
	}
	if stdout != "sandbox orders frozen: deny-all is version 5\n" {
		t.Errorf("stdout = %q", stdout)
	}

	stdout, stderr, code = f.cli(t, operatorToken, "sandbox", "get", "orders")
	ok(t, code, stderr)
	f.took()
	for k, want := range map[string]string{
		"frozen": "yes", "frozen reason": "exfiltration suspected", "frozen by": "olive", "frozen at": "2026-01-02T03:04:05Z", "version": "5",
	} {
		if got := field(t, stdout, k); got != want {
			t.Errorf("sandbox get %s = %q, want %q", k, got, want)
		}
	}

	f.fail("sandbox.FreezeSandbox", connect.NewError(connect.CodeAborted, `sandbox "orders" is already frozen`))
	_, stderr, code = f.cli(t, operatorToken, "sandbox", "freeze", "orders", "--reason", "again")
	f.fail("sandbox.FreezeSandbox", nil)
	f.took()
	if code != exitConflict || !strings.Contains(stderr, "already frozen") {
		t.Errorf("freezing a frozen sandbox: exit %d, stderr %q; want 3", code, stderr)
	}

	stdout, stderr, code = f.cli(t, adminToken, "sandbox", "unfreeze", "orders", "--reason", "incident closed", "-o", "json")
	ok(t, code, stderr)
	calls = f.took()
	if req := calls[0].req.(*portcullisv1.UnfreezeSandboxRequest); req.GetName() != "orders" || req.GetReason() != "incident closed" {
		t.Errorf("request = %v", req)
	}
	if m := decodeJSON(t, stdout); m["current_version"] != float64(6) || m["frozen"] != nil {
		t.Errorf("unfreeze json = %v", m)
	}
	stdout, stderr, code = f.cli(t, adminToken, "sandbox", "unfreeze", "orders", "--reason", "closed")
	ok(t, code, stderr)
	f.took()
	if stdout != "sandbox orders unfrozen: the policy from before the freeze is version 6\n" {
		t.Errorf("stdout = %q", stdout)
	}
}

func TestParseUntil(t *testing.T) {
	now := mustTime("2026-01-02T03:04:05Z")
	for _, tt := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{"8h", now.Add(8 * time.Hour), ""},
		{"90m", now.Add(90 * time.Minute), ""},
		{"7d", now.Add(7 * 24 * time.Hour), ""},
		{"2026-01-03T00:00:00Z", mustTime("2026-01-03T00:00:00Z"), ""},
		{"2026-01-03T01:00:00+01:00", mustTime("2026-01-03T00:00:00Z"), ""},
		{"2026-01-01T00:00:00Z", time.Time{}, "in the past"},
		{"0s", time.Time{}, "in the future"},
		{"-2h", time.Time{}, "in the future"},
		{"0d", time.Time{}, "RFC 3339 time or a duration"},
		{"1.5d", time.Time{}, "RFC 3339 time or a duration"},
		{"tomorrow", time.Time{}, "RFC 3339 time or a duration"},
		{"2026-01-03", time.Time{}, "RFC 3339 time or a duration"},
	} {
		got, err := parseUntil(tt.in, now)
		switch {
		case tt.err != "":
			if err == nil || !strings.Contains(err.Error(), tt.err) || exitCode(err) != exitInvalid {
				t.Errorf("%q: err %v, want a usage error saying %q", tt.in, err, tt.err)
			}
		case err != nil || !got.Equal(tt.want):
			t.Errorf("%q = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// field is the value of a "key: value" line.
func field(t *testing.T, out, key string) string {
	t.Helper()
	for _, l := range lines(out) {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	t.Errorf("no %q line in:\n%s", key, out)
	return ""
}
