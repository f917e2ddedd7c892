package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/apiclient"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// TestSetPolicyKeepsGrants: after a proposal is applied, setting the
// sandbox's older document again (an edit of a stale copy) would take the
// grant away. It is refused, naming the proposal, and stores nothing;
// taking the grant away on purpose (confirmed with the expected version,
// or forced) is stored and audited with the proposal's id.
func TestSetPolicyKeepsGrants(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startAdvisor(t, engine)
			p := e.mustSubmit(t, trackShipment)
			if res, err := approve(t, e.operator(t, "olive"), p); err != nil || res.GetStatus() != "applied" {
				t.Fatalf("approve: %v, %v", res.GetStatus(), err)
			}
			id := p.GetId()
			auditLen := func() int {
				entries, err := e.gw.Store.ListAudit(t.Context(), store.AuditFilter{Sandbox: "support"})
				if err != nil {
					t.Fatal(err)
				}
				return len(entries)
			}
			audits := auditLen()
			set := func(req *portcullisv1.SetPolicyRequest) (*portcullisv1.PolicyVersion, error) {
				req.Sandbox = "support"
				if req.Document == "" {
					req.Document = advisorPolicy // version 1: without the grant
				}
				return e.admin.policy.SetPolicy(t.Context(), req)
			}
			two, three := uint32(2), uint32(3)

			_, err := set(&portcullisv1.SetPolicyRequest{})
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Fatalf("stale document: %v, want FailedPrecondition", err)
			}
			for _, want := range []string{fmt.Sprintf("proposal %d (", id), "tools/call track_shipment", "nothing was stored"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q lacks %q", err, want)
				}
			}
			if g := apiclient.RemovedGrants(err); len(g) != 1 || g[0].GetProposal() != id || !strings.Contains(g[0].GetGranted(), "orders.example.com:443") {
				t.Errorf("RemovedGrants detail = %v", g)
			}
			// Confirmations that do not hold are refused too.
			if _, err := set(&portcullisv1.SetPolicyRequest{RemoveGrants: []uint64{id}}); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("remove_grants without expected_version: %v", err)
			}
			if _, err := set(&portcullisv1.SetPolicyRequest{RemoveGrants: []uint64{id}, ExpectedVersion: &three}); connect.CodeOf(err) != connect.CodeAborted {
				t.Errorf("remove_grants with a stale expected_version: %v", err)
			}
			if _, err := set(&portcullisv1.SetPolicyRequest{RemoveGrants: []uint64{id + 1}, ExpectedVersion: &two}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Errorf("remove_grants naming another proposal: %v", err)
			}
			if v := e.currentPolicy(t); v.GetVersion() != 2 || auditLen() != audits {
				t.Fatalf("refused sets stored something: version %d, %d audit entries (want 2, %d)", v.GetVersion(), auditLen(), audits)
			}

			// Confirmed with the version seen: stored, and said where.
			v3, err := set(&portcullisv1.SetPolicyRequest{RemoveGrants: []uint64{id}, ExpectedVersion: &two})
			if err != nil || v3.GetVersion() != 3 || v3.GetProvenance()["removed_grants"] != fmt.Sprint(id) {
				t.Fatalf("confirmed: %v, %v", v3, err)
			}
			// Granted again by a new proposal, taken away by force: both
			// proposals granted what goes.
			regrant := e.mustSubmit(t, trackShipment)
			if res, err := approve(t, e.operator(t, "oscar"), regrant); err != nil || res.GetStatus() != "applied" {
				t.Fatalf("approve again: %v, %v", res.GetStatus(), err)
			}
			v5, err := set(&portcullisv1.SetPolicyRequest{Force: true})
			if err != nil || v5.GetVersion() != 5 || v5.GetProvenance()["forced"] != "true" || v5.GetProvenance()["removed_grants"] != fmt.Sprintf("%d,%d", id, regrant.GetId()) {
				t.Fatalf("forced: %v, %v", v5, err)
			}
			entries, err := e.gw.Store.ListAudit(t.Context(), store.AuditFilter{Sandbox: "support", Limit: 1})
			if err != nil || len(entries) != 1 || entries[0].Detail["forced"] != "true" || entries[0].Detail["removed_grants"] != v5.GetProvenance()["removed_grants"] {
				t.Fatalf("the forced set's audit entry: %+v, %v", entries, err)
			}
		})
	}
}

// A grant that has ended is not guarded: the document that lacks it is
// stored.
func TestSetPolicyAfterTheGrantEnded(t *testing.T) {
	clock := &manualClock{t: time.Now()}
	e := startAdvisor(t, "sqlite", func(c *gateway.Config) { c.Now = clock.Now })
	p := e.mustSubmit(t, trackShipment)
	res, err := e.operator(t, "olive").ApproveProposal(t.Context(), &portcullisv1.ApproveProposalRequest{
		Id: p.GetId(), Reason: "for an hour", ResultingHash: p.GetResultingHash(), GrantExpiresAt: timestamppb.New(clock.Now().Add(time.Hour)),
	})
	if err != nil || res.GetStatus() != "applied" {
		t.Fatalf("approve: %v, %v", res.GetStatus(), err)
	}
	if _, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: advisorPolicy}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("while the grant lasts: %v, want FailedPrecondition", err)
	}
	clock.Advance(2 * time.Hour)
	v, err := e.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "support", Document: advisorPolicy})
	if err != nil || v.GetProvenance()["removed_grants"] != "" {
		t.Fatalf("after the grant ended: %v, %v", v, err)
	}
}
