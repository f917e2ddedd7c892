package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// A rate_limited record (a tools/call the policy allowed but its rule's
// rate_limit refused) ships and lists like any record, is not a denial,
// and a proposal from its id is refused by name, storing nothing.
func TestRateLimitedRecords(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	conn, err := grpc.NewClient(strings.TrimPrefix(e.gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+e.token)
	ship, err := portcullisv1.NewDistributionServiceClient(conn).ShipDecisions(sctx)
	if err != nil {
		t.Fatal(err)
	}
	limited := &portcullisv1.DecisionRecord{
		Time: timestamppb.New(time.Now()), Decision: "rate_limited", Binary: "/usr/bin/python3",
		Host: "orders.example.com", Port: 443, HttpMethod: "POST", Path: "/mcp", McpMethod: "tools/call", Tool: "lookup_order",
		Entry: "orders", Rule: "rules[1]", PolicyVersion: "1", DenialId: "dn_limited",
		Reason: "tools/call lookup_order is over the rate_limit of rules[1] of network_policies.orders (orders.example.com:443/mcp): 6/min, burst 3; retry after 10 s",
	}
	if err := ship.Send(&portcullisv1.ShipDecisionsRequest{ProxyId: "p1", Records: []*portcullisv1.DecisionRecord{limited}}); err != nil {
		t.Fatal(err)
	}
	if res, err := ship.CloseAndRecv(); err != nil || res.GetStored() != 1 {
		t.Fatalf("shipping a rate_limited record: %v, %v", res, err)
	}

	dc := portcullisv1connect.NewDecisionServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, e.gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	for _, filter := range []string{"rate_limited", ""} {
		list, err := dc.ListDecisions(t.Context(), &portcullisv1.ListDecisionsRequest{Sandbox: "support", Decision: filter})
		if err != nil || len(list.GetDecisions()) != 1 || list.GetDecisions()[0].GetRecord().GetDecision() != "rate_limited" {
			t.Fatalf("list with decision %q: %v, %v", filter, list, err)
		}
	}
	if list, err := dc.ListDecisions(t.Context(), &portcullisv1.ListDecisionsRequest{Sandbox: "support", Decision: "deny"}); err != nil || len(list.GetDecisions()) != 0 {
		t.Fatalf("the rate_limited record listed as a denial: %v, %v", list, err)
	}
	if res, err := e.advisor.ListDenials(t.Context(), &portcullisv1.ListDenialsRequest{Last: 10}); err != nil || len(res.GetDenials()) != 0 {
		t.Fatalf("ListDenials offers the rate_limited record: %v, %v", res, err)
	}

	_, err = e.advisor.SubmitProposal(t.Context(), &portcullisv1.SubmitProposalRequest{DenialId: "dn_limited", Rationale: "need more calls"})
	r := refusal(t, err)
	if r.GetRule() != advisor.RuleNotOffered || !strings.Contains(r.GetReason(), "rate_limit") || !strings.Contains(r.GetReason(), "not denied") {
		t.Fatalf("refusal %v; want not_offered naming the rate_limit", r)
	}
	if ps := e.list(t); len(ps) != 0 {
		t.Fatalf("a refused proposal from a rate_limited record was stored: %v", ps)
	}
}
