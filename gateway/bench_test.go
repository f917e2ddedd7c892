package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// BenchmarkPolicySetAPI measures `policy set` end to end — a Connect call
// over loopback, authentication, parse and validation, canonical hash,
// compare-and-swap commit — on a gateway over Postgres and one over SQLite
// in the same run, interleaved so machine noise hits both alike. It reports
// versions/s for each and their ratio.
//
//	go test -run '^$' -bench PolicySetAPI -benchtime 1000x ./gateway/
func BenchmarkPolicySetAPI(b *testing.B) {
	type engine struct {
		name    string
		api     api
		version uint32
		spent   time.Duration
	}
	var engines []*engine
	for _, name := range []string{"postgres", "sqlite"} {
		gw := gatewaytest.Start(b, name)
		c := newConnectAPI(b, gw.URL, gatewaytest.AdminToken)
		if _, err := c.sandbox.CreateSandbox(b.Context(), &portcullisv1.CreateSandboxRequest{Name: "bench"}); err != nil {
			b.Fatalf("%s: create sandbox: %v", name, err)
		}
		engines = append(engines, &engine{name: name, api: c})
	}
	// The article's orders policy with one more tool per version, so each
	// set is a real change.
	base := strings.TrimSpace(strings.Replace(readFile(b, "testdata/orders-v2.yaml"), "tool: track_shipment", "tool: tool_%d", 1))

	for n := 0; b.Loop(); n++ {
		doc := fmt.Sprintf(base, n)
		for _, e := range engines {
			start := time.Now()
			res, err := e.api.policy.SetPolicy(b.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "bench", Document: doc, ExpectedVersion: &e.version})
			e.spent += time.Since(start)
			if err != nil {
				b.Fatalf("%s: set: %v", e.name, err)
			}
			e.version = res.GetVersion()
		}
	}
	pg := float64(engines[0].version) / engines[0].spent.Seconds()
	lite := float64(engines[1].version) / engines[1].spent.Seconds()
	b.ReportMetric(pg, "pg-versions/s")
	b.ReportMetric(lite, "sqlite-versions/s")
	b.ReportMetric(pg/lite, "pg/sqlite")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkDecisionFlood measures what a flood of denials costs the
// store: each iteration ships 10,000 denials (10 ShipDecisions messages of
// 1,000, as fast as the RPC takes them) to a gateway without the ingest
// limit and to one with the default limit, same engine, same run. It
// reports the decisions table's growth (table and indexes, pages in use)
// on each and their ratio.
//
//	go test -run '^$' -bench DecisionFlood -benchtime 1x ./gateway/
func BenchmarkDecisionFlood(b *testing.B) {
	for _, engine := range []string{"sqlite", "postgres"} {
		b.Run(engine, func(b *testing.B) {
			type side struct {
				gw     *gatewaytest.Gateway
				ship   func(from int) uint64
				base   int64
				stored uint64
				spent  time.Duration
			}
			start := func(rate float64) *side {
				gw := gatewaytest.Start(b, engine, func(c *gateway.Config) { c.DecisionRate = rate })
				c := newConnectAPI(b, gw.URL, gatewaytest.AdminToken)
				created, err := c.sandbox.CreateSandbox(b.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent"})
				if err != nil {
					b.Fatal(err)
				}
				conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { conn.Close() })
				ctx := metadata.AppendToOutgoingContext(b.Context(), "authorization", "Bearer "+created.Token)
				client := portcullisv1.NewDistributionServiceClient(conn)
				return &side{gw: gw, base: gw.DecisionBytes(), ship: func(from int) uint64 {
					st, err := client.ShipDecisions(ctx)
					if err != nil {
						b.Fatal(err)
					}
					for m := range 10 {
						req := &portcullisv1.ShipDecisionsRequest{ProxyId: "proxy-7f3a"}
						for i := range 1000 {
							n := from + m*1000 + i
							req.Records = append(req.Records, floodDenial(n))
						}
						if err := st.Send(req); err != nil {
							b.Fatal(err)
						}
					}
					res, err := st.CloseAndRecv()
					if err != nil {
						b.Fatal(err)
					}
					return res.GetStored()
				}}
			}
			unlimited, limited := start(-1), start(0)
			sent := 0
			for b.Loop() {
				for _, s := range []*side{unlimited, limited} {
					t0 := time.Now()
					s.stored += s.ship(sent)
					s.spent += time.Since(t0)
				}
				sent += 10_000
			}
			grew := func(s *side) float64 { return float64(s.gw.DecisionBytes() - s.base) }
			u, l := grew(unlimited), grew(limited)
			b.ReportMetric(float64(sent), "sent")
			b.ReportMetric(float64(unlimited.stored), "unlimited-stored")
			b.ReportMetric(u/(1<<20), "unlimited-MiB")
			b.ReportMetric(u/float64(unlimited.stored), "B/record")
			b.ReportMetric(float64(limited.stored), "limited-stored")
			b.ReportMetric(l/(1<<20), "limited-MiB")
			b.ReportMetric(u/l, "unlimited/limited")
			b.ReportMetric(unlimited.spent.Seconds()/float64(b.N), "unlimited-s/flood")
			b.ReportMetric(limited.spent.Seconds()/float64(b.N), "limited-s/flood")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// floodDenial is a denial as a proxy records one for a request to a
// name it refuses (an exfiltration attempt: a new name each time).
func floodDenial(n int) *portcullisv1.DecisionRecord {
	host := fmt.Sprintf("c%08x.exfil.attacker.test", n*2654435761)
	return &portcullisv1.DecisionRecord{
		Time: timestamppb.Now(), Decision: "deny", Binary: "/usr/bin/python3.12", Host: host, Port: 443,
		HttpMethod: "CONNECT", Reason: "no network policy allows " + host + ":443 for /usr/bin/python3.12",
		PolicyVersion: "7", DenialId: fmt.Sprintf("dn_01JD%020d", n),
	}
}
