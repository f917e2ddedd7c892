package policy

import (
	"strings"
	"testing"
	"time"
)

// review: where it may stand, its timeout, its canonical form, how Decide
// reads it and how Diff reports it.

func restEndpoint(rules string) string {
	return withEndpoint("{host: api.example.com, port: 443, protocol: rest, rules: [" + rules + "]}")
}

func TestParseReview(t *testing.T) {
	for name, doc := range map[string]string{
		"mcp tools/call": mcpEndpoint("", "{allow: {method: tools/call, tool: refund, review: {required: true, timeout: 5m}}}"),
		"rest":           restEndpoint("{allow: {method: POST, path: /refunds, review: {required: true}}}"),
		"tool rule under allow_all_known_mcp_methods": mcpEndpoint(", mcp: {allow_all_known_mcp_methods: true}",
			"{allow: {tool: refund, review: {required: true}}}"),
		"with the other tools/call options": mcpEndpoint("", "{allow: {method: tools/call, tool: refund, review: {required: true, timeout: 15m}, "+
			"rate_limit: {requests_per_minute: 5}, arguments_schema: {type: object}}}"),
	} {
		t.Run(name, func(t *testing.T) {
			p, warns, err := Parse([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range warns {
				if strings.Contains(w.Path, "review") {
					t.Errorf("warning: %v", w)
				}
			}
			rv := p.NetworkPolicies["p"].Endpoints[0].Rules[0].Allow.Review
			if rv == nil || !rv.Required {
				t.Errorf("review = %+v, want required", rv)
			}
		})
	}
}

func TestParseReviewErrors(t *testing.T) {
	r0 := ep0 + ".rules[0].allow.review"
	withReview := func(review string) string {
		return mcpEndpoint("", "{allow: {method: tools/call, tool: refund, review: "+review+"}}")
	}
	const places = "valid only on allow rules of protocol rest and on MCP allow rules of method tools/call"
	tests := []parseErrorCase{
		{"unknown key", withReview("{required: true, timout: 5m}"), r0 + ".timout", `unknown field; did you mean "timeout"?`},
		{"misspelt required", withReview("{requird: true}"), r0 + ".requird", `did you mean "required"?`},
		{"required not a boolean", withReview(`{required: "yes"}`), r0 + ".required", "must be a boolean"},
		{"timeout not a string", withReview("{required: true, timeout: 120}"), r0 + ".timeout", "must be a string, not an integer"},
		{"timeout not a duration", withReview("{required: true, timeout: 2 minutes}"), r0 + ".timeout", "is not a duration"},
		{"timeout without unit", withReview(`{required: true, timeout: "120"}`), r0 + ".timeout", "is not a duration"},
		{"timeout zero", withReview("{required: true, timeout: 0s}"), r0 + ".timeout", "must be above 0"},
		{"timeout negative", withReview("{required: true, timeout: -1m}"), r0 + ".timeout", "must be above 0"},
		{"timeout too long", withReview("{required: true, timeout: 16m}"), r0 + ".timeout", "longer than the most a call may be held, 15m"},
		{"timeout an hour", withReview("{required: true, timeout: 1h}"), r0 + ".timeout", "15m"},
		{"not a mapping", withReview("true"), r0, "must be a mapping"},
		{"deny rule", withEndpoint("{host: m.example.com, port: 443, protocol: mcp, rules: [{allow: {method: tools/call, tool: a}}], " +
			"deny_rules: [{method: tools/call, tool: b, review: {required: true}}]}"),
			ep0 + ".deny_rules[0].review", "is only valid on allow rules"},
		{"rest deny rule", withEndpoint("{host: a.example.com, port: 443, protocol: rest, access: full, " +
			"deny_rules: [{method: DELETE, path: /x, review: {required: true}}]}"),
			ep0 + ".deny_rules[0].review", places},
		{"other mcp method", mcpEndpoint("", "{allow: {method: tools/list, review: {required: true}}}"), r0, "needs method: tools/call"},
		{"mcp method glob", mcpEndpoint("", "{allow: {method: tools/*, review: {required: true}}}"), r0, places},
		{"mcp prompt", mcpEndpoint("", "{allow: {method: prompts/get, prompt: p, review: {required: true}}}"), r0, "needs method: tools/call"},
		{"websocket", withEndpoint("{host: a.example.com, port: 443, protocol: websocket, rules: [{allow: {method: GET, path: /x, review: {required: true}}}]}"),
			r0, "is not valid on protocol websocket"},
		{"graphql", withEndpoint("{host: a.example.com, port: 443, protocol: graphql, rules: [{allow: {operation_type: query, review: {required: true}}}]}"),
			r0, "is not valid on protocol graphql (review is " + places},
		{"sql", withEndpoint("{host: a.example.com, port: 5432, protocol: sql, rules: [{allow: {command: SELECT, review: {required: true}}}]}"),
			r0, "is not valid on protocol sql"},
		{"json-rpc", withEndpoint("{host: a.example.com, port: 443, protocol: json-rpc, rules: [{allow: {method: eth_call, review: {required: true}}}]}"),
			r0, "is not valid on protocol json-rpc"},
		{"access preset", withEndpoint("{host: a.example.com, port: 443, protocol: rest, access: full, review: {required: true}}"),
			ep0 + ".review", "unknown field"},
		{"l4 endpoint", withEndpoint("{host: a.example.com, port: 443, review: {required: true}}"), ep0 + ".review", "unknown field"},
	}
	runParseErrors(t, tests)
}

func TestValidateReviewBuiltInGo(t *testing.T) {
	// A policy built in Go skips the decoder: the validator alone checks
	// the timeout, and names the field's path.
	p := ordersPolicy()
	p.NetworkPolicies["orders"].Endpoints[0].Rules[1].Allow.Review = &Review{Required: true, Timeout: "20m"}
	_, err := Validate(p)
	if err == nil {
		t.Fatal("accepted")
	}
	if ps := problemsOf(t, err); !hasProblem(ps, "network_policies.orders.endpoints[0].rules[1].allow.review.timeout", "15m") {
		t.Errorf("problems %v lack rules[1].allow.review.timeout", ps)
	}
}

func TestReviewNotRequiredWarns(t *testing.T) {
	p, warns, err := Parse([]byte(mcpEndpoint("", "{allow: {method: tools/call, tool: refund, review: {required: false, timeout: 5m}}}")))
	if err != nil {
		t.Fatal(err)
	}
	if !hasProblem(warns, ep0+".rules[0].allow.review.timeout", "does nothing") {
		t.Errorf("warnings %v lack the timeout of a review that is not required", warns)
	}
	if rv := p.NetworkPolicies["p"].Endpoints[0].Rules[0].Allow.Review; rv != nil {
		t.Errorf("canonical form kept a review that is not required: %+v", rv)
	}
}

// TestCanonicalReview: one spelling per meaning. A review that is not
// required is none; a required one carries its timeout, the default
// filled in, in the shortest spelling of the duration.
func TestCanonicalReview(t *testing.T) {
	hashOf := func(review string) (string, string) {
		t.Helper()
		doc := mcpEndpoint("", "{allow: {method: tools/call, tool: refund"+review+"}}")
		p, _, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", review, err)
		}
		return p.Hash(), string(p.CanonicalJSON())
	}
	groups := [][]string{
		{"", ", review: {required: false}", ", review: {}", ", review: {required: false, timeout: 5m}"},
		{", review: {required: true}", ", review: {required: true, timeout: 2m}", ", review: {required: true, timeout: 120s}",
			", review: {required: true, timeout: 2m0s}", ", review: {required: true, timeout: 120000ms}"},
		{", review: {required: true, timeout: 90s}", ", review: {required: true, timeout: 1m30s}"},
		{", review: {required: true, timeout: 15m}", ", review: {required: true, timeout: 900s}", ", review: {required: true, timeout: 0.25h}"},
	}
	var firsts []string
	for _, g := range groups {
		h0, j0 := hashOf(g[0])
		for _, spelling := range g[1:] {
			if h, j := hashOf(spelling); h != h0 {
				t.Errorf("%q and %q hash differently:\n%s\n%s", g[0], spelling, j0, j)
			}
		}
		firsts = append(firsts, h0)
	}
	for i := range firsts {
		for j := i + 1; j < len(firsts); j++ {
			if firsts[i] == firsts[j] {
				t.Errorf("%q and %q hash alike", groups[i][0], groups[j][0])
			}
		}
	}
	for review, want := range map[string]string{
		", review: {required: true}":                 `"review":{"required":true,"timeout":"2m"}`,
		", review: {required: true, timeout: 90s}":   `"review":{"required":true,"timeout":"1m30s"}`,
		", review: {required: true, timeout: 1.5s}":  `"review":{"required":true,"timeout":"1.5s"}`,
		", review: {required: true, timeout: 500ms}": `"review":{"required":true,"timeout":"500ms"}`,
		", review: {required: false}":                `"tool":"refund"}`,
	} {
		if _, j := hashOf(review); !strings.Contains(j, want) {
			t.Errorf("canonical form of %q lacks %s: %s", review, want, j)
		}
	}
}

func TestFormatReviewTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		2 * time.Minute: "2m", 90 * time.Second: "1m30s", 15 * time.Minute: "15m", time.Second: "1s",
		1500 * time.Millisecond: "1.5s", time.Hour: "1h", time.Hour + time.Second: "1h0m1s", 61 * time.Minute: "1h1m",
	} {
		if got := FormatReviewTimeout(d); got != want {
			t.Errorf("FormatReviewTimeout(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(FormatReviewTimeout(d)); err != nil || back != d {
			t.Errorf("%q does not read back as %v: %v, %v", FormatReviewTimeout(d), d, back, err)
		}
	}
}

// TestDecideReview: a reviewed allow carries its rule's timeout; a request
// that any rule allows without review is allowed without review, whatever
// the order of the rules or of the endpoints.
func TestDecideReview(t *testing.T) {
	reviewed := func(timeout string) *Review { return &Review{Required: true, Timeout: timeout} }
	schema := map[string]any{"type": "object", "properties": map[string]any{"amount": map[string]any{"const": 5}}, "required": []any{"amount"}}
	mcp := mcpEP(nil, []Rule{
		allow(L7Rule{Method: "initialize"}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("refund"), Review: reviewed("5m")}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("refund"), ArgumentsSchema: schema}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("delete_*"), Review: reviewed("")}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("delete_*", "send_mail"), Review: reviewed("30s")}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("lookup"), Review: &Review{Required: false, Timeout: "5m"}}),
	})
	rest := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST, Rules: []Rule{
		allow(L7Rule{Method: "POST", Path: "/payouts/**", Review: reviewed("1m")}),
		allow(L7Rule{Method: "GET", Path: "/**"}),
		allow(L7Rule{Method: "*", Path: "/payouts/small", Review: reviewed("10m")}),
	}}
	restFree := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST, Rules: []Rule{
		allow(L7Rule{Method: "POST", Path: "/payouts/free"}),
	}}
	p := pol(map[string]*NetworkPolicy{
		"a":     entry([]string{python}, mcp),
		"api":   entry([]string{curl}, rest),
		"zfree": entry([]string{curl}, restFree),
	})
	m := req("orders.example.com", 443).from(python)
	r := req("api.example.com", 443)
	tests := []struct {
		name   string
		r      Request
		allow  bool
		rule   string
		entry  string
		review time.Duration
	}{
		{"unreviewed method", m.mcp("initialize", "", ""), true, "rules[0]", "a", 0},
		{"reviewed tool", m.mcp("tools/call", "refund", `{"amount":9}`), true, "rules[1]", "a", 5 * time.Minute},
		{"a later rule admits the arguments without review", m.mcp("tools/call", "refund", `{"amount":5}`), true, "rules[2]", "a", 0},
		{"default timeout", m.mcp("tools/call", "delete_user", ""), true, "rules[3]", "a", DefaultReviewTimeout},
		{"among reviewed rules, the first decides", m.mcp("tools/call", "send_mail", ""), true, "rules[4]", "a", 30 * time.Second},
		{"review not required is none", m.mcp("tools/call", "lookup", ""), true, "rules[5]", "a", 0},
		{"not allowed at all", m.mcp("tools/call", "other", ""), false, "", "", 0},
		{"rest reviewed", r.http("POST", "/payouts/big"), true, "rules[0]", "api", time.Minute},
		{"rest unreviewed rule wins over an earlier reviewed one", r.http("GET", "/payouts/small"), true, "rules[1]", "api", 0},
		{"rest first reviewed rule's timeout", r.http("POST", "/payouts/small"), true, "rules[0]", "api", time.Minute},
		{"another entry's unreviewed allow wins", r.http("POST", "/payouts/free"), true, "rules[0]", "zfree", 0},
		{"rest reviewed, second rule", r.http("DELETE", "/payouts/small"), true, "rules[2]", "api", 10 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(p, tc.r)
			if d.Allow != tc.allow || d.Review != tc.review || tc.rule != "" && d.Rule != tc.rule || tc.entry != "" && d.Entry != tc.entry {
				t.Errorf("Decide = %+v\nwant allow %v, %s of %s, review %v", d, tc.allow, tc.rule, tc.entry, tc.review)
			}
			if d.Review > 0 && !strings.Contains(d.Reason, "once a person approves") {
				t.Errorf("reviewed allow's reason %q does not say so", d.Reason)
			}
		})
	}
}

// TestDecideReviewAudit: audit mode lifts a deny rule, never a review.
func TestDecideReviewAudit(t *testing.T) {
	ep := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST, Enforcement: EnforcementAudit,
		Rules:     []Rule{allow(L7Rule{Method: "POST", Path: "/pay/**", Review: &Review{Required: true, Timeout: "3m"}})},
		DenyRules: []*L7Rule{{Method: "POST", Path: "/pay/blocked"}}}
	p := pol(map[string]*NetworkPolicy{"api": entry([]string{curl}, ep)})
	r := req("api.example.com", 443)
	for _, tc := range []struct {
		name   string
		r      Request
		audit  bool
		review time.Duration
	}{
		{"reviewed allow on an audit endpoint", r.http("POST", "/pay/x"), false, 3 * time.Minute},
		{"audited deny rule over a reviewed allow", r.http("POST", "/pay/blocked"), true, 3 * time.Minute},
		{"audited rule denial: nothing to review", r.http("PUT", "/other"), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(p, tc.r)
			if !d.Allow || d.Audit != tc.audit || d.Review != tc.review {
				t.Errorf("Decide = %+v, want audit %v review %v", d, tc.audit, tc.review)
			}
		})
	}
}

func TestDiffReview(t *testing.T) {
	withReview := func(rv *Review) *Policy {
		p := ordersPolicy()
		p.NetworkPolicies["orders"].Endpoints[0].Rules = []Rule{
			allow(L7Rule{Method: "initialize"}),
			allow(L7Rule{Method: "tools/call", Tool: anyOf("get_order"), Review: rv}),
		}
		return p
	}
	const at = "changed network_policies.orders.endpoints[orders.example.com:443/mcp].rules: "
	tests := []struct {
		name          string
		before, after *Review
		want          []string
	}{
		{"added", nil, &Review{Required: true}, []string{at + "changed tool get_order (tools/call): review added (timeout 2m)"}},
		{"removed", &Review{Required: true, Timeout: "5m"}, nil, []string{at + "changed tool get_order (tools/call): review removed"}},
		{"no longer required", &Review{Required: true}, &Review{Required: false}, []string{at + "changed tool get_order (tools/call): review removed"}},
		{"timeout changed", &Review{Required: true}, &Review{Required: true, Timeout: "10m"}, []string{at + "changed tool get_order (tools/call): review timeout 2m → 10m"}},
		{"same after defaults", &Review{Required: true}, &Review{Required: true, Timeout: "120s"}, nil},
		{"not required is none", nil, &Review{}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := Diff(withReview(tc.before), withReview(tc.after))
			if got := summaries(cs); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("Diff = %q\nwant %q", got, tc.want)
			}
		})
	}

	// An added rule names its review.
	a, b := ordersPolicy(), ordersPolicy()
	ep := b.NetworkPolicies["orders"].Endpoints[0]
	ep.Rules = append(ep.Rules, allow(L7Rule{Method: "tools/call", Tool: anyOf("refund"), Review: &Review{Required: true, Timeout: "90s"}}))
	want := "added network_policies.orders.endpoints[orders.example.com:443/mcp].rules: added tool refund (tools/call) with review (timeout 1m30s)"
	if got := summaries(Diff(a, b)); len(got) != 1 || got[0] != want {
		t.Errorf("Diff = %q, want %q", got, want)
	}
}

// parseErrorCase is a document Parse must refuse, naming path with msg.
type parseErrorCase struct {
	name, doc, path, msg string
}

// runParseErrors checks that Parse refuses each document, returns no
// policy with its error, and reports the problem at its path.
func runParseErrors(t *testing.T, tests []parseErrorCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("accepted: %s", p.CanonicalJSON())
			}
			if p != nil {
				t.Errorf("Parse returned a policy with its error")
			}
			if ps := problemsOf(t, err); !hasProblem(ps, tc.path, tc.msg) {
				t.Errorf("problems %v lack %s: %s", ps, tc.path, tc.msg)
			}
		})
	}
}
