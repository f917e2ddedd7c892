package prover

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// benchDoc is an n-rule policy: n entries, each one REST endpoint with one
// allow rule and a named binary. wide makes it a boundary (GET and POST on
// every path).
func benchDoc(n int, wide bool) string {
	var sb strings.Builder
	sb.WriteString("version: 1\nnetwork_policies:\n")
	for i := range n {
		rule := fmt.Sprintf(`{ method: GET, path: "/v1/items/%d/*" }`, i)
		if wide {
			rule = `{ method: "*", path: "/**" }`
		}
		fmt.Fprintf(&sb, "  svc%d:\n    endpoints:\n      - host: svc%d.example.com\n        port: 443\n        protocol: rest\n        rules:\n          - allow: %s\n        deny_rules:\n          - { method: DELETE, path: /admin/** }\n    binaries: [ { path: /usr/bin/python3 } ]\n", i, i, rule)
	}
	return sb.String()
}

// BenchmarkProveOneRule proves a one-rule proposal (a POST beside a GET on
// one endpoint) against n-rule policies with a 1,000-rule boundary, and
// reports it beside parsing and validating the same two policies.
func BenchmarkProveOneRule(b *testing.B) {
	boundaryDoc := benchDoc(1000, true)
	boundary := parse(b, boundaryDoc)
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			curDoc := benchDoc(n, false)
			cur := parse(b, curDoc)
			prop := cur.Clone()
			ep := prop.NetworkPolicies["svc0"].Endpoints[0]
			ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "POST", Path: "/v1/items/0/notes"}})
			propDoc := string(prop.CanonicalJSON())
			opts := Options{Boundary: boundary, Now: now}

			// Baseline, same run: parse and validate both documents.
			const baseRuns = 20
			start := time.Now()
			for range baseRuns {
				for _, doc := range []string{curDoc, propDoc} {
					p, _, err := policy.Parse([]byte(doc))
					if err != nil {
						b.Fatal(err)
					}
					if _, err := policy.Validate(p); err != nil {
						b.Fatal(err)
					}
				}
			}
			base := time.Since(start) / baseRuns

			durs := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				rep, err := Prove(context.Background(), cur, prop, opts)
				durs = append(durs, time.Since(t0))
				if err != nil || len(rep.Findings) == 0 {
					b.Fatalf("findings %v, err %v", rep, err)
				}
			}
			b.StopTimer()
			slices.Sort(durs)
			p99 := durs[len(durs)*99/100]
			var sum time.Duration
			for _, d := range durs {
				sum += d
			}
			mean := sum / time.Duration(len(durs))
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(base.Microseconds())/1000, "parse+validate-ms")
			b.ReportMetric(float64(mean)/float64(base), "prove/parse")
		})
	}
}
