package lifecycle

import (
	"context"
	"os"
	"reflect"
	"testing"

	"github.com/portcullis-dev/portcullis/approval"
	"github.com/portcullis-dev/portcullis/store"
)

// storedProposal is a proposal as the store keeps it, its findings in the
// JSON earlier versions wrote (protojson of the API's ProveResponse).
func storedProposal() store.Proposal {
	return store.Proposal{
		ID: 12, Sandbox: "orders", Rationale: "track shipments", Proposer: "orders-proxy", DenialID: "dn_1",
		Document: []byte(`{"rationale":"track shipments","operations":[{"add_allow_rules":{"policy":"web","host":"api.example.com","port":443,` +
			`"rules":[{"allow":{"method":"GET","path":"/v1/shipments/**"}}]}}]}`),
		BaseVersion: 4, ResultingHash: "abcd",
		Findings: []byte(`{"findings":[` +
			`{"kind":"new_path","entry":"web","endpoint":"api.example.com:443","rule":"rules[1]","detail":"GET was allowed on other paths only",` +
			`"counterexample":{"binary":"/usr/bin/curl","host":"api.example.com","port":443,"httpMethod":"GET","path":"/v1/shipments/x","query":"a=b"}},` +
			`{"kind":"new_credentialed_reach","entry":"gh","detail":"d","credentialed":true,` +
			`"counterexample":{"host":"api.github.com","port":443,"httpMethod":"POST","mcpMethod":"tools/call","tool":"t"}},` +
			`{"kind":"enforcement_weakened","entry":"web","detail":"tls: skip"}]}`),
		Approvals: []store.Approval{{Approver: "alice"}, {Approver: "bob"}, {Approver: "alice"}, {Approver: ""}},
	}
}

func TestApprovalInput(t *testing.T) {
	p := storedProposal()
	findings, err := DecodeFindings(p.Findings)
	if err != nil {
		t.Fatal(err)
	}
	sb := store.Sandbox{Name: "orders", CurrentVersion: 5, CredentialedHosts: []string{"api.github.com:443"}, Providers: []string{"github"}, Boundary: []byte(`{}`)}
	got, err := approvalInput(p, findings, sb)
	if err != nil {
		t.Fatal(err)
	}
	want := approval.Input{
		Kind: approval.KindProposal,
		Proposal: approval.ProposalInput{ID: 12, Sandbox: "orders", Rationale: "track shipments", Proposer: "orders-proxy",
			BaseVersion: 4, ResultingHash: "abcd", DenialID: "dn_1", Operations: []any{map[string]any{"add_allow_rules": map[string]any{
				"policy": "web", "host": "api.example.com", "port": float64(443),
				"rules": []any{map[string]any{"allow": map[string]any{"method": "GET", "path": "/v1/shipments/**"}}},
			}}}},
		Findings: []approval.FindingInput{
			{Kind: "new_path", Blocking: false, Entry: "web", Endpoint: "api.example.com:443", Rule: "rules[1]", Detail: "GET was allowed on other paths only",
				Counterexample: approval.RequestInput{Binary: "/usr/bin/curl", Host: "api.example.com", Port: 443, HTTPMethod: "GET", Path: "/v1/shipments/x"}},
			{Kind: "new_credentialed_reach", Blocking: true, Credentialed: true, Entry: "gh", Detail: "d",
				Counterexample: approval.RequestInput{Host: "api.github.com", Port: 443, HTTPMethod: "POST", MCPMethod: "tools/call", Tool: "t"}},
			{Kind: "enforcement_weakened", Blocking: true, Entry: "web", Detail: "tls: skip"},
		},
		Sandbox:   approval.SandboxInput{Name: "orders", CurrentVersion: 5, CredentialedHosts: []string{"api.github.com:443"}, Providers: []string{"github"}, HasBoundary: true},
		Approvers: []string{"alice", "bob"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("approvalInput:\n got %+v\nwant %+v", got, want)
	}

	// A bare proposal and sandbox: no nil lists.
	bare, err := approvalInput(store.Proposal{Sandbox: "s", Document: []byte(`{}`)}, nil, store.Sandbox{Name: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if bare.Sandbox.Name != "s" || bare.Sandbox.HasBoundary || bare.Findings == nil || bare.Approvers == nil ||
		bare.Proposal.Operations == nil || bare.Sandbox.CredentialedHosts == nil {
		t.Errorf("approvalInput(bare) = %+v", bare)
	}
}

// docs/approvals.md's rules decide on the input built from a stored proposal:
// the new_credentialed_reach needs two approvers.
func TestApprovalInputDecides(t *testing.T) {
	b, err := os.ReadFile("../approval/testdata/examples.rego")
	if err != nil {
		t.Fatal(err)
	}
	rules, err := approval.Compile(string(b))
	if err != nil {
		t.Fatal(err)
	}
	p := storedProposal()
	findings, err := DecodeFindings(p.Findings)
	if err != nil {
		t.Fatal(err)
	}
	in, err := approvalInput(p, findings, store.Sandbox{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if d := rules.Decide(context.Background(), in); d.Required != 2 || d.AutoApprove || d.Fallback {
		t.Errorf("%+v, want two approvers", d)
	}
	in, err = approvalInput(p, findings[:1], store.Sandbox{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if d := rules.Decide(context.Background(), in); !d.AutoApprove || d.Fallback {
		t.Errorf("new GET path only: %+v, want auto-approved", d)
	}
}

// Findings stored by earlier versions and by this one compare equal when
// they say the same, so an upgrade re-bases nothing and sends no approved
// proposal back to review.
func TestSameFindingsAcrossSpellings(t *testing.T) {
	old := storedProposal().Findings
	findings, err := DecodeFindings(old)
	if err != nil {
		t.Fatal(err)
	}
	if findings[0].Counterexample == nil || findings[0].Counterexample.HTTPMethod != "GET" || findings[0].Counterexample.Query != "a=b" {
		t.Fatalf("decoded %+v", findings[0])
	}
	now, err := encodeStored(findings)
	if err != nil {
		t.Fatal(err)
	}
	if !sameFindings(old, now) {
		t.Errorf("same findings differ:\n%s\n%s", old, now)
	}
	findings[1].Detail = "other"
	changed, err := encodeStored(findings)
	if err != nil {
		t.Fatal(err)
	}
	if sameFindings(old, changed) {
		t.Error("different findings compare equal")
	}
}
