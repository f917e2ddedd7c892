package match

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/portcullis-dev/portcullis/policy"
)

// BenchmarkMatcher1000Rules is issue 3's acceptance benchmark (a): allowed
// REST requests spread over a 1,000-rule policy, decided by the compiled
// matcher and, interleaved in the same run on the same requests, by OPA
// evaluating the equivalent Rego policy the way OpenShell's proxy decides
// (one prepared query, input {method, path, host, port, binary}, the rules
// as data). One op is one decision by each; the metrics split them:
//
//	matcher-ns/decision, opa-ns/decision   time per decision
//	opa/matcher                            how many times slower OPA is
//	matcher-allocs/decision, opa-allocs/decision
//
// Run: go test ./dataplane/ -run '^$' -bench Matcher1000Rules -benchmem
func BenchmarkMatcher1000Rules(b *testing.B) {
	const nRules = 1000
	methods := []string{"GET", "POST", "PUT", "DELETE"}
	ep := &policy.Endpoint{Host: "api.example.com", Port: 443, Protocol: policy.ProtocolREST}
	var data []any
	var reqs []policy.Request
	for i := range nRules {
		method := methods[i%len(methods)]
		// Half the rules end in a one-segment `*`, half are literal paths.
		path, reqPath := fmt.Sprintf("/v1/svc%d/items/*", i), fmt.Sprintf("/v1/svc%d/items/%d", i, i*7)
		if i%2 == 1 {
			path, reqPath = fmt.Sprintf("/v1/svc%d/items", i), fmt.Sprintf("/v1/svc%d/items", i)
		}
		ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: method, Path: path}})
		data = append(data, map[string]any{"host": "api.example.com", "port": 443, "method": method, "path": path, "binary": curl})
		reqs = append(reqs, policy.Request{Binary: curl, Host: "api.example.com", Addr: pubIP, Port: 443,
			HTTPMethod: method, Path: reqPath, Time: when})
	}
	p := &policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{
		"api": {Endpoints: []*policy.Endpoint{ep}, Binaries: []policy.Binary{{Path: curl}}},
	}}
	m, err := Compile(p)
	if err != nil {
		b.Fatal(err)
	}

	ctx := context.Background()
	query, err := rego.New(
		rego.Query("data.portcullis.allow"),
		rego.Module("portcullis.rego", regoPolicy),
		rego.Store(inmem.NewFromObject(map[string]any{"rules": data})),
	).PrepareForEval(ctx)
	if err != nil {
		b.Fatal(err)
	}
	inputs := make([]map[string]any, len(reqs))
	for i, r := range reqs {
		inputs[i] = map[string]any{"method": r.HTTPMethod, "path": r.Path, "host": r.Host, "port": r.Port, "binary": r.Binary}
	}
	opaAllow := func(i int) bool {
		rs, err := query.Eval(ctx, rego.EvalInput(inputs[i]))
		if err != nil {
			b.Fatal(err)
		}
		return rs.Allowed()
	}

	// Both must agree with policy.Decide on every sample, and refuse a
	// request no rule allows.
	for i := range reqs {
		want := policy.Decide(p, reqs[i])
		if got := m.Decide(&reqs[i]); got != want || !got.Allow {
			b.Fatalf("request %d: matcher %+v, policy.Decide %+v", i, got, want)
		}
		if !opaAllow(i) {
			b.Fatalf("request %d: OPA denies %s %s", i, reqs[i].HTTPMethod, reqs[i].Path)
		}
	}
	denied := reqs[0]
	denied.HTTPMethod = "PATCH"
	if m.Decide(&denied).Allow {
		b.Fatal("matcher allows PATCH")
	}
	if rs, _ := query.Eval(ctx, rego.EvalInput(map[string]any{"method": "PATCH", "path": denied.Path, "host": denied.Host, "port": 443, "binary": curl})); rs.Allowed() {
		b.Fatal("OPA allows PATCH")
	}

	next := 0
	matcherAllocs := testing.AllocsPerRun(len(reqs), func() { m.Decide(&reqs[next%len(reqs)]); next++ })
	opaAllocs := testing.AllocsPerRun(len(reqs), func() { opaAllow(next % len(reqs)); next++ })

	// Interleave in batches, so both see the same requests under the same
	// machine conditions and the clock is read rarely.
	const batch = 100
	var matcherTime, opaTime time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(batch, b.N-done)
		start := time.Now()
		for j := range n {
			m.Decide(&reqs[(done+j)%len(reqs)])
		}
		mid := time.Now()
		for j := range n {
			opaAllow((done + j) % len(reqs))
		}
		matcherTime += mid.Sub(start)
		opaTime += time.Since(mid)
		done += n
	}
	b.StopTimer()
	mNs := float64(matcherTime.Nanoseconds()) / float64(b.N)
	oNs := float64(opaTime.Nanoseconds()) / float64(b.N)
	b.ReportMetric(mNs, "matcher-ns/decision")
	b.ReportMetric(oNs, "opa-ns/decision")
	b.ReportMetric(oNs/mNs, "opa/matcher")
	b.ReportMetric(matcherAllocs, "matcher-allocs/decision")
	b.ReportMetric(opaAllocs, "opa-allocs/decision")
}

// regoPolicy is the straightforward Rego an OpenShell-style proxy
// evaluates: allow when some rule names the destination, the binary and
// the method, and its path glob matches (`*` within a segment, `**`
// across, as policy.MatchGlob reads allow rules).
const regoPolicy = `package portcullis

default allow := false

allow if {
	some r in data.rules
	r.host == input.host
	r.port == input.port
	r.binary == input.binary
	r.method == input.method
	glob.match(r.path, ["/"], input.path)
}
`

// BenchmarkWantsAddress is the check the proxy makes before it resolves a
// name: a policy's own name (which is then resolved) and a name no
// endpoint matches (denied without DNS).
//
// Run: go test ./dataplane/ -run '^$' -bench WantsAddress -benchmem
func BenchmarkWantsAddress(b *testing.B) {
	p := &policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{
		"api":  {Endpoints: []*policy.Endpoint{{Host: "api.example.com", Port: 443, Protocol: policy.ProtocolREST, Access: "read-only"}}, Binaries: []policy.Binary{{Path: curl}}},
		"wild": {Endpoints: []*policy.Endpoint{{Host: "*.example.org", Port: 443}}},
	}}
	m, err := Compile(p)
	if err != nil {
		b.Fatal(err)
	}
	for _, host := range []string{"api.example.com", "s3cr3t.exfil.attacker.test"} {
		b.Run(host, func(b *testing.B) {
			r := policy.Request{Binary: curl, Host: host, Port: 443, HTTPMethod: "GET", Path: "/", Time: when}
			for b.Loop() {
				m.WantsAddress(&r)
			}
		})
	}
}
