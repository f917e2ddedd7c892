package match

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// BenchmarkArgumentGate measures the argument gate in the compiled matcher
// (issue 11, finding 4) on schemaPolicy's tally tool, timing two calls
// alternately in one loop so noise hits both alike.
//
// 2KB: a normal allowed call (16 numbers, an email) against the issue's
// 2 KB call, 220 × 1e999999 past maxItems (before the fix: tens of seconds).
//
//	normal-ns/call, adversarial-ns/call, adversarial/normal
//
// 64KB: the costliest call within the number limits we found — 64 KB
// (mcp.max_body_bytes) of distinct numbers near 1.8e308 under uniqueItems —
// against the same 64 KB of distinct small integers: the cost of any
// numeric body that size.
//
//	heavy-ns/call, plain-ns/call, heavy/plain
//
// Run: go test ./dataplane/ -run '^$' -bench ArgumentGate -benchtime 3s
func BenchmarkArgumentGate(b *testing.B) {
	p := parse(b, schemaPolicy)
	m := mustCompile(b, p)
	normal := tallyCall(normalArguments)
	adversarial := tallyCall(adversarialArguments["huge integers past maxItems"])
	heavy := tallyCall(heavyArguments("1.79769313486", "e308"))
	plain := tallyCall(heavyArguments("", ""))
	if !m.Decide(&normal).Allow || m.Decide(&adversarial).Allow {
		b.Fatal("the normal call must be allowed, the adversarial one denied")
	}
	if len(heavy.MCP.Arguments) > 65536-200 || m.Decide(&heavy).Allow {
		b.Fatalf("heavy call: %d bytes, %+v", len(heavy.MCP.Arguments), m.Decide(&heavy))
	}
	pair := func(b *testing.B, x, y *policy.Request, xName, yName string) {
		var xT, yT time.Duration
		for b.Loop() {
			t0 := time.Now()
			m.Decide(x)
			t1 := time.Now()
			m.Decide(y)
			xT, yT = xT+t1.Sub(t0), yT+time.Since(t1)
		}
		xNs, yNs := float64(xT.Nanoseconds())/float64(b.N), float64(yT.Nanoseconds())/float64(b.N)
		b.ReportMetric(xNs, xName+"-ns/call")
		b.ReportMetric(yNs, yName+"-ns/call")
		b.ReportMetric(yNs/xNs, yName+"/"+xName)
	}
	b.Run("2KB", func(b *testing.B) { pair(b, &normal, &adversarial, "normal", "adversarial") })
	b.Run("64KB", func(b *testing.B) { pair(b, &plain, &heavy, "plain", "heavy") })
}

// heavyArguments fills a 64 KB body (mcp.max_body_bytes) with distinct
// numbers prefix+i+suffix; with "1.79769313486" and "e308" they are near
// float64's largest, each costing the library a 10^292 power for every
// keyword that looks at it.
func heavyArguments(prefix, suffix string) string {
	var sb strings.Builder
	sb.WriteString(`{"set":[`)
	for i := 0; sb.Len() < 65000; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(prefix + strconv.Itoa(10000+i) + suffix)
	}
	sb.WriteString(`],"ids":[1e308,1e307]}`)
	return sb.String()
}

// lookupPolicy is bench/proxyload's lookup_order rule: a simple schema,
// of the shape fastschema.go admits without the schema library.
const lookupPolicy = `
version: 1
network_policies:
  m:
    binaries: [{path: /usr/bin/python3}]
    endpoints:
      - host: orders.example.net
        port: 443
        path: /mcp
        protocol: mcp
        enforcement: enforce
        rules:
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema:
                type: object
                properties:
                  order_id: { type: string, pattern: "^[A-Z]-\\d{4}$" }
                required: [order_id]
                additionalProperties: false
`

// BenchmarkLookupOrderGate measures judging one tools/call of
// lookup_order through its arguments_schema: allowed (the usual call) and
// denied (a bad order_id, which the schema library explains).
//
// Run: go test ./dataplane/match/ -run '^$' -bench LookupOrderGate -benchmem
func BenchmarkLookupOrderGate(b *testing.B) {
	m := mustCompile(b, parse(b, lookupPolicy))
	for _, bc := range []struct {
		name, args string
		allow      bool
	}{
		{"allowed", `{"order_id":"A-1042"}`, true},
		{"denied", `{"order_id":"x"}`, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := tallyCall(bc.args)
			req.MCP.Tool = "lookup_order"
			if d := m.Decide(&req); d.Allow != bc.allow {
				b.Fatalf("%s: %+v", bc.args, d)
			}
			b.ReportAllocs()
			for b.Loop() {
				m.Decide(&req)
			}
		})
	}
}
