package dataplane

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkArgumentGate measures the argument gate in the compiled matcher
// (issue 11, finding 4) on schemaPolicy's tally tool:
//
//	normal-ns/call        a normal allowed call (17 numbers, an email)
//	adversarial-ns/call   the 2 KB call: 220 × 1e999999, past maxItems
//	adversarial/normal    how many normal calls one adversarial call costs
//	heavy-ns/call         the costliest call within the number limits we
//	                      found: 64 KB of distinct 308-exponent numbers under
//	                      type: integer, bounds and uniqueItems
//	heavy/normal
//	plain64k-ns/call      the same 64 KB of distinct small integers, for
//	                      comparison: what any numeric body of that size costs
//
// Run: go test ./dataplane/ -run '^$' -bench ArgumentGate -benchtime 2s
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
	// One op decides each call once; each is timed on its own.
	var nT, aT, hT, pT time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		m.Decide(&normal)
		t1 := time.Now()
		m.Decide(&adversarial)
		t2 := time.Now()
		m.Decide(&heavy)
		t3 := time.Now()
		m.Decide(&plain)
		nT, aT, hT, pT = nT+t1.Sub(t0), aT+t2.Sub(t1), hT+t3.Sub(t2), pT+time.Since(t3)
	}
	n, a, h := float64(nT.Nanoseconds())/float64(b.N), float64(aT.Nanoseconds())/float64(b.N), float64(hT.Nanoseconds())/float64(b.N)
	b.ReportMetric(n, "normal-ns/call")
	b.ReportMetric(a, "adversarial-ns/call")
	b.ReportMetric(a/n, "adversarial/normal")
	b.ReportMetric(h, "heavy-ns/call")
	b.ReportMetric(h/n, "heavy/normal")
	b.ReportMetric(float64(pT.Nanoseconds())/float64(b.N), "plain64k-ns/call")
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
