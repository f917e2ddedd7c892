package prover

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// BenchmarkProveOneRuleCold is BenchmarkProveOneRule with the pattern
// cache (automata.go) emptied before every proof: the cost of a proof
// whose patterns were never seen before (the first proposal against a
// policy). It reports the mean (ns/op) and p99; parse+validate is in
// BenchmarkProveOneRule.
func BenchmarkProveOneRuleCold(b *testing.B) {
	boundary := parse(b, benchDoc(1000, true))
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			cur := parse(b, benchDoc(n, false))
			prop := cur.Clone()
			ep := prop.NetworkPolicies["svc0"].Endpoints[0]
			ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "POST", Path: "/v1/items/0/notes"}})
			opts := Options{Boundary: boundary, Now: now}
			durs := make([]time.Duration, 0, b.N)
			for b.Loop() {
				patternCache.Lock()
				patternCache.m = nil
				patternCache.Unlock()
				t0 := time.Now()
				rep, err := Prove(context.Background(), cur, prop, opts)
				durs = append(durs, time.Since(t0))
				if err != nil || len(rep.Findings) == 0 {
					b.Fatalf("findings %v, err %v", rep, err)
				}
			}
			slices.Sort(durs)
			b.ReportMetric(float64(durs[len(durs)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}
