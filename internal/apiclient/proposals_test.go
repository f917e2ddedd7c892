package apiclient_test

import (
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/apiclient"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

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

// An admin reads the approval queue; a sandbox's token, which the queue
// refuses, reads the sandbox's own proposals, filtered alike.
func TestProposalsAsTheTokenSees(t *testing.T) {
	g := gatewaytest.Start(t, "sqlite")
	doc, err := os.ReadFile("../../gateway/testdata/orders-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(g.URL)
	admin := apiclient.New(apiclient.Config{URL: u, Token: gatewaytest.AdminToken, Timeout: 10 * time.Second})
	created, err := admin.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "orders", Policy: string(doc)})
	if err != nil {
		t.Fatal(err)
	}
	sandbox := apiclient.New(apiclient.Config{URL: u, Token: created.GetToken(), Timeout: 10 * time.Second})
	filed, err := sandbox.Advisor.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{Document: trackShipment})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		c        *apiclient.Client
		operator bool
	}{{"admin", admin, true}, {"sandbox", sandbox, false}} {
		res, operator, err := tt.c.Proposals(t.Context(), apiclient.ProposalFilter{Sandbox: "orders"})
		if err != nil || operator != tt.operator || len(res.GetProposals()) != 1 || res.GetProposals()[0].GetId() != filed.GetId() {
			t.Errorf("%s: Proposals = %v, operator %v, %v; want proposal %d, operator %v", tt.name, res, operator, err, filed.GetId(), tt.operator)
		}
		res, _, err = tt.c.Proposals(t.Context(), apiclient.ProposalFilter{Finding: "no_such_kind"})
		if err != nil || len(res.GetProposals()) != 0 {
			t.Errorf("%s: Proposals with a finding none has = %v, %v; want none", tt.name, res, err)
		}
		p, operator, err := tt.c.Proposal(t.Context(), filed.GetId())
		if err != nil || operator != tt.operator || p.GetId() != filed.GetId() {
			t.Errorf("%s: Proposal = %v, operator %v, %v", tt.name, p, operator, err)
		}
	}
}
