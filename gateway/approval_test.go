package gateway_test

import (
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

func newApprovalClient(baseURL, token string) portcullisv1connect.ApprovalServiceClient {
	return portcullisv1connect.NewApprovalServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL), gatewaytest.Bearer(token)))
}

// operator creates an operator token and returns an approval client.
func (e *advisorEnv) operator(t *testing.T, name string) portcullisv1connect.ApprovalServiceClient {
	t.Helper()
	tok, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: name, Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	return newApprovalClient(e.gw.URL, tok.GetToken())
}

func (e *advisorEnv) currentPolicy(t *testing.T) *portcullisv1.PolicyVersion {
	t.Helper()
	v, err := e.admin.policy.GetPolicy(t.Context(), &portcullisv1.GetPolicyRequest{Sandbox: "support"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func approve(t *testing.T, c portcullisv1connect.ApprovalServiceClient, p *portcullisv1.Proposal) (*portcullisv1.Proposal, error) {
	t.Helper()
	return c.ApproveProposal(t.Context(), &portcullisv1.ApproveProposalRequest{Id: p.GetId(), Reason: "reviewed", ResultingHash: p.GetResultingHash()})
}

const examplesRego = "../approval/testdata/examples.rego"

func (e *advisorEnv) setRules(t *testing.T, module string) {
	t.Helper()
	admin := newApprovalClient(e.gw.URL, gatewaytest.AdminToken)
	if _, err := admin.SetApprovalPolicy(t.Context(), &portcullisv1.SetApprovalPolicyRequest{Module: module}); err != nil {
		t.Fatal(err)
	}
}

func TestApproveAppliesOnce(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startAdvisor(t, engine)
			olive := e.operator(t, "olive")
			p := e.mustSubmit(t, trackShipment)

			// The default rules: one human, no auto-approval.
			got, err := olive.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: p.GetId()})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetApprovalsRequired() != 1 || got.GetAutoApprovable() || got.GetStatus() != "pending" || got.GetExpiresAt() == nil {
				t.Fatalf("review: required %d auto %v status %s expires %v", got.GetApprovalsRequired(), got.GetAutoApprovable(), got.GetStatus(), got.GetExpiresAt())
			}
			// A stale hash is a conflict, and records nothing.
			_, err = olive.ApproveProposal(t.Context(), &portcullisv1.ApproveProposalRequest{Id: p.GetId(), Reason: "ok", ResultingHash: strings.Repeat("0", 64)})
			if connect.CodeOf(err) != connect.CodeAborted {
				t.Fatalf("stale hash: %v", err)
			}
			if _, err := olive.ApproveProposal(t.Context(), &portcullisv1.ApproveProposalRequest{Id: p.GetId(), ResultingHash: p.GetResultingHash()}); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("approval without a reason: %v", err)
			}
			if v := e.currentPolicy(t); v.GetVersion() != 1 {
				t.Fatalf("refused approvals changed the policy: version %d", v.GetVersion())
			}

			// Two operators approve at once: applied exactly once.
			oscar := e.operator(t, "oscar")
			var wg sync.WaitGroup
			var ok atomic.Int32
			for _, c := range []portcullisv1connect.ApprovalServiceClient{olive, oscar} {
				wg.Go(func() {
					if res, err := approve(t, c, p); err == nil && res.GetStatus() == "applied" {
						ok.Add(1)
					}
				})
			}
			wg.Wait()
			if ok.Load() == 0 {
				t.Fatal("no approval applied the proposal")
			}
			v := e.currentPolicy(t)
			if v.GetVersion() != 2 || v.GetSource() != store.SourceProposal || v.GetHash() != p.GetResultingHash() {
				t.Fatalf("after approval: version %d source %s hash %s (want 2, proposal, %s)", v.GetVersion(), v.GetSource(), v.GetHash(), p.GetResultingHash())
			}
			if v.GetProvenance()["proposal"] == "" || v.GetProvenance()["approvers"] == "" {
				t.Fatalf("provenance %v", v.GetProvenance())
			}
			h, err := e.admin.policy.ListPolicyVersions(t.Context(), &portcullisv1.ListPolicyVersionsRequest{Sandbox: "support"})
			if err != nil || len(h.GetVersions()) != 2 {
				t.Fatalf("history: %d versions, %v (applied more than once?)", len(h.GetVersions()), err)
			}
			done, err := e.advisor.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: p.GetId()})
			if err != nil || done.GetStatus() != "applied" || done.GetAppliedVersion() != 2 || done.GetDecidedBy() == "" || len(done.GetApprovals()) == 0 {
				t.Fatalf("the sandbox sees %v, %v", done, err)
			}
			// Decided: no more approvals or rejections.
			if _, err := approve(t, olive, p); connect.CodeOf(err) != connect.CodeAborted {
				t.Fatalf("approving an applied proposal: %v", err)
			}
		})
	}
}

func TestApprovalRules(t *testing.T) {
	module, err := os.ReadFile(examplesRego)
	if err != nil {
		t.Fatal(err)
	}
	e := startAdvisor(t, "sqlite")
	e.setRules(t, string(module))
	olive, oscar := e.operator(t, "olive"), e.operator(t, "oscar")

	// A new GET path on a host the binary reaches: auto-approved.
	auto := e.mustSubmit(t, `
rationale: read releases
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: GET, path: /repos/acme/lib/releases } } ] }
`)
	if auto.GetStatus() != "applied" || auto.GetAppliedVersion() != 2 {
		t.Fatalf("a new GET path was not auto-approved: %s (findings %v)", auto.GetStatus(), auto.GetFindings())
	}
	if v := e.currentPolicy(t); v.GetVersion() != 2 || !strings.HasPrefix(v.GetAuthor(), "auto-approval") {
		t.Fatalf("auto-approved version: %d by %s", v.GetVersion(), v.GetAuthor())
	}

	// A finding blocks auto-approval: a human approves.
	human := e.mustSubmit(t, trackShipment)
	if human.GetStatus() != "pending" {
		t.Fatalf("a proposal with a blocking finding applied without a human: %s", human.GetStatus())
	}

	// New reach to a credentialed destination: two distinct approvers.
	cred := e.mustSubmit(t, `
rationale: python reads releases
operations:
  - add_rule:
      name: releases
      rule:
        endpoints: [ { host: api.github.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /repos/acme/app/releases } } ] } ]
        binaries: [ { path: /usr/bin/python3 } ]
`)
	r, err := olive.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: cred.GetId()})
	if err != nil || r.GetApprovalsRequired() != 2 {
		t.Fatalf("credentialed reach needs %d approvals (%v)", r.GetApprovalsRequired(), err)
	}
	if r, err = approve(t, olive, r); err != nil || r.GetStatus() != "pending" || len(r.GetApprovals()) != 1 {
		t.Fatalf("first approval: %v, %v", r, err)
	}
	if _, err := approve(t, olive, r); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("the same operator twice: %v", err)
	}
	if r, err = approve(t, oscar, r); err != nil || r.GetStatus() != "applied" {
		t.Fatalf("second approver: %v, %v", r, err)
	}
	if v := e.currentPolicy(t); !strings.Contains(v.GetProvenance()["approvers"], "olive") || !strings.Contains(v.GetProvenance()["approvers"], "oscar") {
		t.Fatalf("approvers recorded: %v", v.GetProvenance())
	}

	// Rules that pass validation but fail on this sandbox's proposals
	// (conflicting values): every proposal needs a human.
	e.setRules(t, `package portcullis.approval

default approvals_required := 1

default auto_approve := false

auto_approve := true if input.sandbox.name == "support"

auto_approve := false if input.sandbox.name == "support"
`)
	failing := e.mustSubmit(t, `
rationale: read tags
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: GET, path: /repos/acme/lib/tags } } ] }
`)
	if failing.GetStatus() != "pending" {
		t.Fatalf("failing rules applied a proposal: %s", failing.GetStatus())
	}
	r, err = olive.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: failing.GetId()})
	if err != nil || r.GetApprovalsRequired() < 1 || r.GetAutoApprovable() || len(r.GetApprovalNotes()) == 0 {
		t.Fatalf("with failing rules: %v, %v", r, err)
	}
	// Invalid rules are refused and the old ones stay.
	admin := newApprovalClient(e.gw.URL, gatewaytest.AdminToken)
	before, _ := admin.GetApprovalPolicy(t.Context(), &portcullisv1.GetApprovalPolicyRequest{})
	if _, err := admin.SetApprovalPolicy(t.Context(), &portcullisv1.SetApprovalPolicyRequest{Module: "package other\n"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("wrong package: %v", err)
	}
	if after, _ := admin.GetApprovalPolicy(t.Context(), &portcullisv1.GetApprovalPolicyRequest{}); after.GetVersion() != before.GetVersion() {
		t.Fatalf("refused rules were stored: version %d → %d", before.GetVersion(), after.GetVersion())
	}
	// Operators read the rules but cannot set them.
	if _, err := olive.SetApprovalPolicy(t.Context(), &portcullisv1.SetApprovalPolicyRequest{Module: string(module)}); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("operator sets rules: %v", err)
	}
}

func TestRejectAndReview(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	olive := e.operator(t, "olive")
	p := e.mustSubmit(t, trackShipment)
	if _, err := olive.RejectProposal(t.Context(), &portcullisv1.RejectProposalRequest{Id: p.GetId()}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("reject without a reason: %v", err)
	}
	r, err := olive.RejectProposal(t.Context(), &portcullisv1.RejectProposalRequest{Id: p.GetId(), Reason: "shipments are out of scope"})
	if err != nil || r.GetStatus() != "rejected" || r.GetStatusReason() != "shipments are out of scope" || r.GetDecidedBy() != "olive" {
		t.Fatalf("reject: %v, %v", r, err)
	}
	if _, err := approve(t, olive, r); connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("approving a rejected proposal: %v", err)
	}
	// The queue: filters by status, sandbox and finding.
	q := e.mustSubmit(t, `
rationale: file issues
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: POST, path: /repos/acme/app/issues } } ] }
`)
	list, err := olive.ListProposals(t.Context(), &portcullisv1.ApprovalServiceListProposalsRequest{Status: "pending", Finding: "new_http_method"})
	if err != nil || len(list.GetProposals()) != 1 || list.GetProposals()[0].GetId() != q.GetId() {
		t.Fatalf("queue by finding: %v, %v", list.GetProposals(), err)
	}
	list, err = olive.ListProposals(t.Context(), &portcullisv1.ApprovalServiceListProposalsRequest{Sandbox: "support"})
	if err != nil || len(list.GetProposals()) != 2 || list.GetProposals()[0].GetId() != q.GetId() {
		t.Fatalf("queue newest first: %v, %v", list.GetProposals(), err)
	}
}

// TestFreeze: the kill switch commits deny-all, refuses proposals and
// policy changes, and unfreezing restores the version before it.
func TestFreeze(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startAdvisor(t, engine)
			before := e.currentPolicy(t)
			opTok, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: "olive", Role: "operator"})
			if err != nil {
				t.Fatal(err)
			}
			op := newConnectAPI(t, e.gw.URL, opTok.GetToken())
			if _, err := op.sandbox.FreezeSandbox(t.Context(), &portcullisv1.FreezeSandboxRequest{Name: "support"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("freeze without a reason: %v", err)
			}
			sb, err := op.sandbox.FreezeSandbox(t.Context(), &portcullisv1.FreezeSandboxRequest{Name: "support", Reason: "exfiltration suspected"})
			if err != nil || !sb.GetFrozen() || sb.GetFrozenReason() != "exfiltration suspected" || sb.GetFrozenBy() != "olive" {
				t.Fatalf("freeze: %v, %v", sb, err)
			}
			frozen := e.currentPolicy(t)
			fp := parseStruct(t, frozen.GetPolicy())
			if frozen.GetVersion() != 2 || frozen.GetSource() != store.SourceFreeze || len(fp.NetworkPolicies) != 0 {
				t.Fatalf("frozen version %d source %s entries %d", frozen.GetVersion(), frozen.GetSource(), len(fp.NetworkPolicies))
			}
			if d := policy.Decide(fp, policy.Request{Binary: "/usr/bin/git", Host: "api.github.com", Port: 443, HTTPMethod: "GET", Path: "/repos/acme/app/x"}); d.Allow {
				t.Fatal("the frozen policy allows a request")
			}
			if _, err := e.submit(t, trackShipment); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("a frozen sandbox proposes: %v", err)
			}
			if _, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: advisorPolicy + "\n# edit\n"}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("set policy while frozen: %v", err)
			}
			if _, err := op.sandbox.FreezeSandbox(t.Context(), &portcullisv1.FreezeSandboxRequest{Name: "support", Reason: "again"}); connect.CodeOf(err) != connect.CodeAborted {
				t.Fatalf("freeze twice: %v", err)
			}
			// Only an admin unfreezes.
			if _, err := op.sandbox.UnfreezeSandbox(t.Context(), &portcullisv1.UnfreezeSandboxRequest{Name: "support", Reason: "clear"}); connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("operator unfreezes: %v", err)
			}
			sb, err = e.admin.sandbox.UnfreezeSandbox(t.Context(), &portcullisv1.UnfreezeSandboxRequest{Name: "support", Reason: "investigated: false alarm"})
			if err != nil || sb.GetFrozen() {
				t.Fatalf("unfreeze: %v, %v", sb, err)
			}
			restored := e.currentPolicy(t)
			if restored.GetVersion() != 3 || restored.GetHash() != before.GetHash() || restored.GetSource() != store.SourceUnfreeze {
				t.Fatalf("restored version %d hash %s source %s (want 3, %s, unfreeze)", restored.GetVersion(), restored.GetHash(), restored.GetSource(), before.GetHash())
			}
			if _, err := e.submit(t, trackShipment); err != nil {
				t.Fatalf("proposing after unfreeze: %v", err)
			}
		})
	}
}

// clock is a settable clock for the gateway.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestExpiry: a grant with an end carries expires_at in the pushed
// document and is removed by a clean-up version when it passes; a
// pending proposal expires after its TTL.
func TestExpiry(t *testing.T) {
	clk := &clock{t: time.Now()}
	e := startAdvisor(t, "sqlite", func(c *gateway.Config) {
		c.Now, c.VersionCheckInterval, c.ProposalTTL = clk.now, 20*time.Millisecond, time.Hour
	})
	olive := e.operator(t, "olive")
	p := e.mustSubmit(t, trackShipment)
	end := clk.now().Add(10 * time.Minute).Truncate(time.Second)
	r, err := olive.ApproveProposal(t.Context(), &portcullisv1.ApproveProposalRequest{Id: p.GetId(), Reason: "for the campaign", ResultingHash: p.GetResultingHash(), GrantExpiresAt: timestamppb.New(end)})
	if err != nil || r.GetStatus() != "applied" || !r.GetGrantExpiresAt().AsTime().Equal(end) {
		t.Fatalf("approve with an end: %v, %v", r, err)
	}
	granted := parseStruct(t, e.currentPolicy(t).GetPolicy())
	var found bool
	for _, ep := range granted.NetworkPolicies["orders"].Endpoints {
		for _, rule := range ep.Rules {
			if rule.Allow != nil && rule.Allow.Tool != nil && rule.Allow.Tool.Any[0] == "track_shipment" {
				found = rule.Allow.ExpiresAt != nil && rule.Allow.ExpiresAt.Equal(end)
			}
		}
	}
	if !found {
		t.Fatal("the applied rule does not carry expires_at")
	}
	// A pending proposal, to expire later.
	pending := e.mustSubmit(t, `
rationale: file issues
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: POST, path: /repos/acme/app/issues } } ] }
`)

	clk.advance(11 * time.Minute)
	waitFor(t, "the expired grant's clean-up version", func() bool {
		v := e.currentPolicy(t)
		return v.GetSource() == store.SourceExpiry
	})
	cleaned := parseStruct(t, e.currentPolicy(t).GetPolicy())
	req := policy.Request{Binary: "/usr/bin/python3", Host: "orders.example.com", Port: 443, HTTPMethod: "POST", Path: "/mcp",
		MCP: &policy.MCPMessage{Method: "tools/call", Tool: "track_shipment"}, Time: clk.now().Add(-time.Hour)}
	if policy.Decide(cleaned, req).Allow {
		t.Fatal("the clean-up version still grants track_shipment")
	}
	req.MCP.Tool = "lookup_order"
	if !policy.Decide(cleaned, req).Allow {
		t.Fatal("the clean-up version removed more than the expired grant")
	}

	clk.advance(time.Hour)
	waitFor(t, "the pending proposal to expire", func() bool {
		got, err := e.advisor.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: pending.GetId()})
		return err == nil && got.GetStatus() == "expired"
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
