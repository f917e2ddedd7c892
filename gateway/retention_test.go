package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestDecisionFloodIsBounded: 10,000 denials shipped at once through the
// real ShipDecisions RPC store the sandbox's burst (2,000), then its rate
// (100 a second) as the gateway's clock moves; the rest are summarised
// and counted in the metrics (not as the proxy's drops), and the stream
// carries on: every message is taken and the RPC succeeds.
func TestDecisionFloodIsBounded(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			clock := &manualClock{t: time.Now()}
			gw := gatewaytest.Start(t, engine, func(c *gateway.Config) { c.Now = clock.Now })
			c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
			ctx := context.Background()
			created, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy})
			if err != nil {
				t.Fatal(err)
			}
			// The proxy's policy stream, so that its status shows the drops.
			ps := policyStream(t, gw, created.Token)
			if err := ps.Send(hello("agent-1", "p1")); err != nil {
				t.Fatal(err)
			}
			recvPolicy(t, ps)

			conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			sctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+created.Token)
			ship := func(batches, from int) uint64 {
				t.Helper()
				st, err := portcullisv1.NewDistributionServiceClient(conn).ShipDecisions(sctx)
				if err != nil {
					t.Fatal(err)
				}
				for b := range batches {
					req := &portcullisv1.ShipDecisionsRequest{ProxyId: "p1"}
					for i := range 1000 {
						n := from + b*1000 + i
						req.Records = append(req.Records, &portcullisv1.DecisionRecord{
							Time: timestamppb.Now(), Decision: "deny", Host: fmt.Sprintf("s%d.exfil.example", n), Port: 443,
							HttpMethod: "GET", Path: "/", DenialId: fmt.Sprint("dn_", n), PolicyVersion: "1",
						})
					}
					if err := st.Send(req); err != nil {
						t.Fatalf("send batch %d: %v", b, err)
					}
				}
				res, err := st.CloseAndRecv()
				if err != nil {
					t.Fatalf("ShipDecisions: %v", err)
				}
				return res.Stored
			}
			stored := func() []store.Decision {
				ds, err := gw.Store.ListDecisions(ctx, store.DecisionFilter{Sandbox: "agent-1"})
				if err != nil {
					t.Fatal(err)
				}
				return ds
			}

			if n := ship(10, 0); n != 2000 {
				t.Fatalf("flood of 10,000: stored %d, want the burst, 2000", n)
			}
			ds := stored()
			if len(ds) != 2000 || ds[0].DenialID != "dn_0" || ds[1999].DenialID != "dn_1999" {
				t.Fatalf("stored %d records (%s … %s), want the first 2000", len(ds), ds[0].DenialID, ds[len(ds)-1].DenialID)
			}
			clock.Advance(time.Second)
			if n := ship(1, 10_000); n != 100 {
				t.Fatalf("a second later: stored %d, want the rate, 100", n)
			}
			if ds := stored(); len(ds) != 2100 {
				t.Fatalf("stored %d records in all, want 2100", len(ds))
			}
			_, metrics := get(t, gw.URL+"/metrics", gatewaytest.AdminToken)
			for _, want := range []string{"portcullis_decisions_rate_limited_total 8900", "portcullis_decisions_stored_total 2100"} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			// Summarised, not lost: the proxy's status counts no drop.
			if st := waitProxy(t, c, gw, "agent-1", "p1", func(*portcullisv1.ProxyStatus) bool { return true }); st.GetDecisionsDropped() != 0 {
				t.Errorf("proxy status: %d decisions dropped; want 0", st.GetDecisionsDropped())
			}
		})
	}
}
