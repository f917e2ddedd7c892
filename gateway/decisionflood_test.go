package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/decisions"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

// TestDenialFloodKeepsAllowed: 600 cheap denials of one kind from one
// sandbox, shipped through the real ShipDecisions RPC with allowed calls
// and a denial of another kind among them, against a small ingest limit
// (burst 20, 10 a second). Every allowed record is stored one by one; the
// denials are stored one by one up to the burst, and the rest are counted
// into summary records (one a kind, with their first and last denial
// ids) that DecisionService lists once their window has ended: the
// counts add up to every denial shipped.
func TestDenialFloodKeepsAllowed(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			clock := &manualClock{t: time.Now()}
			gw := gatewaytest.Start(t, engine, func(c *gateway.Config) {
				c.Now, c.DecisionRate, c.DecisionBurst = clock.Now, 10, 20
			})
			c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
			ctx := context.Background()
			created, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			sctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+created.Token)
			ship := func(records []*portcullisv1.DecisionRecord) {
				t.Helper()
				st, err := portcullisv1.NewDistributionServiceClient(conn).ShipDecisions(sctx)
				if err != nil {
					t.Fatal(err)
				}
				for len(records) > 0 {
					n := min(len(records), 100) // the proxy's batches
					if err := st.Send(&portcullisv1.ShipDecisionsRequest{ProxyId: "p1", Records: records[:n]}); err != nil {
						t.Fatal(err)
					}
					records = records[n:]
				}
				if _, err := st.CloseAndRecv(); err != nil {
					t.Fatalf("ShipDecisions: %v", err)
				}
			}
			var records []*portcullisv1.DecisionRecord
			const flood = 600
			for i := range flood {
				records = append(records, &portcullisv1.DecisionRecord{
					Time: timestamppb.Now(), Decision: "deny", Host: "exfil.example", Port: 443, HttpMethod: "GET",
					Path: fmt.Sprint("/", i), DenialId: fmt.Sprint("dn_", i), Reason: "no endpoint", PolicyVersion: "1",
				})
				if i%50 == 25 {
					records = append(records, &portcullisv1.DecisionRecord{
						Time: timestamppb.Now(), Decision: "allow", Host: "api.example.com", Port: 443, HttpMethod: "GET",
						Path: fmt.Sprint("/allowed/", i), Entry: "api", Rule: "read", PolicyVersion: "1",
					})
				}
				if i == 300 {
					records = append(records, &portcullisv1.DecisionRecord{
						Time: timestamppb.Now(), Decision: "deny", Host: "chosen.example.com", Port: 443, HttpMethod: "POST",
						Path: "/chosen", DenialId: "dn_chosen", Reason: "no endpoint", PolicyVersion: "1",
					})
				}
			}
			ship(records)
			// The summaries are stored once their window has ended, with the
			// sandbox's next batch.
			clock.Advance(decisions.SummaryWindow)
			ship([]*portcullisv1.DecisionRecord{{Time: timestamppb.Now(), Decision: "allow", Host: "api.example.com", Port: 443, HttpMethod: "GET", Path: "/allowed/last"}})

			dc := portcullisv1connect.NewDecisionServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
			res, err := dc.ListDecisions(ctx, &portcullisv1.ListDecisionsRequest{Sandbox: "agent-1", Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			var allowed, individual int
			var summarised uint64
			sums := map[string]*portcullisv1.DecisionRecord{}
			for _, d := range res.Decisions {
				r := d.GetRecord()
				switch {
				case r.GetSummaryCount() > 0:
					summarised += r.GetSummaryCount()
					sums[r.GetHost()] = r
				case r.GetDecision() == "allow":
					allowed++
				case r.GetDecision() == "deny":
					individual++
				}
			}
			if allowed != flood/50+1 {
				t.Errorf("%d allowed records listed; want every one, %d", allowed, flood/50+1)
			}
			if individual != 20 || summarised != flood+1-20 {
				t.Errorf("%d denials one by one and %d summarised; want the burst, 20, and the other %d", individual, summarised, flood+1-20)
			}
			if s := sums["exfil.example"]; s == nil || s.GetSummaryCount() != flood-20 || s.GetSummaryFirstDenialId() != "dn_20" ||
				s.GetSummaryLastDenialId() != fmt.Sprint("dn_", flood-1) || s.GetSummaryLast() == nil || s.GetPath() != "" {
				t.Errorf("the flood's summary = %v; want %d denials, dn_20 … dn_%d", s, flood-20, flood-1)
			}
			if s := sums["chosen.example.com"]; s == nil || s.GetSummaryCount() != 1 || s.GetSummaryFirstDenialId() != "dn_chosen" {
				t.Errorf("the chosen denial's summary = %v; want it, counted", s)
			}
		})
	}
}

// A record whose cut or summary fields are malformed is refused, naming
// the field, and nothing of its batch is stored.
func TestShipRefusesBadCutsAndSummaries(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	ctx := context.Background()
	created, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+created.Token)
	good := func() *portcullisv1.DecisionRecord {
		return &portcullisv1.DecisionRecord{Time: timestamppb.Now(), Decision: "deny", Host: "h.example.com", Port: 443, DenialId: "dn_1"}
	}
	for _, tc := range []struct {
		field string
		bad   func(r *portcullisv1.DecisionRecord)
	}{
		{"cuts", func(r *portcullisv1.DecisionRecord) {
			r.Cuts = []*portcullisv1.FieldCut{{Field: "path", Length: 61440, Sha256: "not-hex"}}
		}},
		{"cuts", func(r *portcullisv1.DecisionRecord) {
			r.Cuts = []*portcullisv1.FieldCut{{Length: 61440, Sha256: strings.Repeat("a", 64)}}
		}},
		{"summary_last", func(r *portcullisv1.DecisionRecord) { r.SummaryCount = 5 }},
		{"summary_first_denial_id", func(r *portcullisv1.DecisionRecord) {
			r.SummaryCount, r.SummaryLast, r.SummaryFirstDenialId = 5, timestamppb.Now(), strings.Repeat("x", 3000)
		}},
	} {
		bad := good()
		tc.bad(bad)
		st, err := portcullisv1.NewDistributionServiceClient(conn).ShipDecisions(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&portcullisv1.ShipDecisionsRequest{ProxyId: "p1", Records: []*portcullisv1.DecisionRecord{good(), bad}}); err != nil {
			t.Fatal(err)
		}
		_, err = st.CloseAndRecv()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: ShipDecisions = %v; want InvalidArgument naming %s", tc.field, err, tc.field)
		}
	}
	ds, err := gw.Store.ListDecisions(ctx, store.DecisionFilter{Sandbox: "agent-1"})
	if err != nil || len(ds) != 0 {
		t.Fatalf("stored %d records (%v); want none", len(ds), err)
	}
}
