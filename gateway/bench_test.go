package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
