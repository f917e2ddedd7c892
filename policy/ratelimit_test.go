package policy

import (
	"strings"
	"testing"
)

// rate_limit: where it may stand, its numbers, its canonical form and how
// Diff reports it.

const limitedRule = "{allow: {method: tools/call, tool: lookup_order, rate_limit: {requests_per_minute: 10, burst: 3}}}"

func TestParseRateLimit(t *testing.T) {
	p, _, err := Parse([]byte(mcpEndpoint("", limitedRule)))
	if err != nil {
		t.Fatal(err)
	}
	rl := p.NetworkPolicies["p"].Endpoints[0].Rules[0].Allow.RateLimit
	if rl == nil || *rl != (RateLimit{RequestsPerMinute: 10, Burst: 3}) {
		t.Fatalf("rate_limit = %+v, want 10/min burst 3", rl)
	}

	// burst defaults to requests_per_minute, written out by the canonical
	// form: the two spellings hash alike.
	short, _, err := Parse([]byte(mcpEndpoint("", "{allow: {method: tools/call, tool: lookup_order, rate_limit: {requests_per_minute: 10}}}")))
	if err != nil {
		t.Fatal(err)
	}
	long, _, err := Parse([]byte(mcpEndpoint("", "{allow: {method: tools/call, tool: lookup_order, rate_limit: {requests_per_minute: 10, burst: 10}}}")))
	if err != nil {
		t.Fatal(err)
	}
	if got := short.NetworkPolicies["p"].Endpoints[0].Rules[0].Allow.RateLimit.Burst; got != 10 {
		t.Errorf("omitted burst = %d, want requests_per_minute (10)", got)
	}
	if short.Hash() != long.Hash() {
		t.Errorf("burst omitted and burst = requests_per_minute hash differently:\n%s\n%s", short.CanonicalJSON(), long.CanonicalJSON())
	}
	if !strings.Contains(string(short.CanonicalJSON()), `"rate_limit":{"requests_per_minute":10,"burst":10}`) {
		t.Errorf("canonical JSON does not spell the limit out: %s", short.CanonicalJSON())
	}
	if p.Hash() == long.Hash() {
		t.Error("a different burst hashes alike")
	}

	// Under allow_all_known_mcp_methods a tool rule without method is a
	// tools/call rule, and may carry a limit.
	if _, _, err := Parse([]byte(mcpEndpoint(", mcp: {allow_all_known_mcp_methods: true}",
		"{allow: {tool: lookup_order, rate_limit: {requests_per_minute: 5}}}"))); err != nil {
		t.Errorf("tool rule under allow_all_known_mcp_methods: %v", err)
	}
}

func TestParseRateLimitErrors(t *testing.T) {
	r0 := ep0 + ".rules[0].allow.rate_limit"
	withLimit := func(limit string) string {
		return mcpEndpoint("", "{allow: {method: tools/call, tool: lookup_order, rate_limit: "+limit+"}}")
	}
	tests := []parseErrorCase{
		{"unknown key", withLimit("{requests_per_minute: 10, per_second: 1}"), r0 + ".per_second", "unknown field"},
		{"missing rate", withLimit("{burst: 3}"), r0 + ".requests_per_minute", "is required"},
		{"empty mapping", withLimit("{}"), r0 + ".requests_per_minute", "is required"},
		{"zero rate", withLimit("{requests_per_minute: 0}"), r0 + ".requests_per_minute", "from 1 to 1000000"},
		{"negative rate", withLimit("{requests_per_minute: -5}"), r0 + ".requests_per_minute", "from 1 to 1000000"},
		{"rate too large", withLimit("{requests_per_minute: 1000001}"), r0 + ".requests_per_minute", "from 1 to 1000000"},
		{"zero burst", withLimit("{requests_per_minute: 10, burst: 0}"), r0 + ".burst", "from 1 to 1000000"},
		{"negative burst", withLimit("{requests_per_minute: 10, burst: -1}"), r0 + ".burst", "from 1 to 1000000"},
		{"burst too large", withLimit("{requests_per_minute: 10, burst: 2000000}"), r0 + ".burst", "from 1 to 1000000"},
		{"fractional rate", withLimit("{requests_per_minute: 1.5}"), r0 + ".requests_per_minute", "must be an integer, not a number"},
		{"string rate", withLimit(`{requests_per_minute: "10"}`), r0 + ".requests_per_minute", "must be an integer, not a string"},
		{"not a mapping", withLimit("10"), r0, "must be a mapping"},
		{"deny rule", withEndpoint("{host: m.example.com, port: 443, protocol: mcp, rules: [{allow: {method: tools/call, tool: a}}], " +
			"deny_rules: [{method: tools/call, tool: b, rate_limit: {requests_per_minute: 1}}]}"),
			ep0 + ".deny_rules[0].rate_limit", "only valid on allow rules"},
		{"other method", mcpEndpoint("", "{allow: {method: tools/list, rate_limit: {requests_per_minute: 1}}}"),
			ep0 + ".rules[0].allow.rate_limit", "needs method: tools/call"},
		{"method glob", mcpEndpoint("", "{allow: {method: tools/*, rate_limit: {requests_per_minute: 1}}}"),
			ep0 + ".rules[0].allow.rate_limit", "needs method: tools/call"},
		{"rest endpoint", withEndpoint("{host: a.example.com, port: 443, protocol: rest, rules: [{allow: {method: GET, path: /x, rate_limit: {requests_per_minute: 1}}}]}"),
			ep0 + ".rules[0].allow.rate_limit", "is not valid on protocol rest"},
		{"sql endpoint", withEndpoint("{host: a.example.com, port: 5432, protocol: sql, rules: [{allow: {command: SELECT, rate_limit: {requests_per_minute: 1}}}]}"),
			ep0 + ".rules[0].allow.rate_limit", "is not valid on protocol sql"},
	}
	runParseErrors(t, tests)
}

func TestValidateRateLimitBuiltInGo(t *testing.T) {
	// A policy built in Go skips the decoder: the validator alone checks
	// the numbers.
	p := ordersPolicy()
	p.NetworkPolicies["orders"].Endpoints[0].Rules[1].Allow.RateLimit = &RateLimit{RequestsPerMinute: -1, Burst: MaxRateLimit + 1}
	_, err := Validate(p)
	if err == nil {
		t.Fatal("accepted")
	}
	ps := problemsOf(t, err)
	base := "network_policies.orders.endpoints[0].rules[1].allow.rate_limit"
	for _, f := range []string{".requests_per_minute", ".burst"} {
		if !hasProblem(ps, base+f, "from 1 to 1000000") {
			t.Errorf("problems %v lack %s", ps, base+f)
		}
	}
}

func TestDiffRateLimit(t *testing.T) {
	limited := func(rl *RateLimit) *Policy {
		p := ordersPolicy()
		p.NetworkPolicies["orders"].Endpoints[0].Rules = []Rule{
			allow(L7Rule{Method: "initialize"}),
			allow(L7Rule{Method: "tools/call", Tool: anyOf("get_order"), RateLimit: rl}),
		}
		return p
	}
	const at = "changed network_policies.orders.endpoints[orders.example.com:443/mcp].rules: "
	tests := []struct {
		name   string
		before *RateLimit
		after  *RateLimit
		want   []string
	}{
		{"raised", &RateLimit{10, 3}, &RateLimit{20, 3}, []string{at + "changed tool get_order (tools/call): rate_limit 10/min, burst 3 → 20/min, burst 3"}},
		{"removed", &RateLimit{10, 3}, nil, []string{at + "changed tool get_order (tools/call): rate_limit 10/min, burst 3 → none"}},
		{"added, burst defaulted", nil, &RateLimit{RequestsPerMinute: 6}, []string{at + "changed tool get_order (tools/call): rate_limit none → 6/min, burst 6"}},
		{"same after defaults", &RateLimit{RequestsPerMinute: 6}, &RateLimit{6, 6}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := Diff(limited(tc.before), limited(tc.after))
			if got := summaries(cs); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("Diff = %q\nwant %q", got, tc.want)
			}
		})
	}

	// An added rule names its limit.
	a, b := ordersPolicy(), ordersPolicy()
	ep := b.NetworkPolicies["orders"].Endpoints[0]
	ep.Rules = append(ep.Rules, allow(L7Rule{Method: "tools/call", Tool: anyOf("lookup_order"), RateLimit: &RateLimit{30, 5}}))
	want := "added network_policies.orders.endpoints[orders.example.com:443/mcp].rules: added tool lookup_order (tools/call) with rate_limit 30/min, burst 5"
	if got := summaries(Diff(a, b)); len(got) != 1 || got[0] != want {
		t.Errorf("Diff = %q, want %q", got, want)
	}
}
