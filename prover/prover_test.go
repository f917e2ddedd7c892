package prover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func load(t testing.TB, file string) *policy.Policy {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := policy.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func parse(t testing.TB, doc string) *policy.Policy {
	t.Helper()
	p, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tb is what the helpers need of a *testing.T, *testing.B or *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func prove(t tb, cur, prop *policy.Policy, opts Options) *Report {
	t.Helper()
	rep, err := proveOrRefuse(t, cur, prop, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// proveOrRefuse is prove, except that a refusal as too complex is
// returned (with no report) rather than failing the test.
func proveOrRefuse(t tb, cur, prop *policy.Policy, opts Options) (*Report, error) {
	t.Helper()
	if opts.Now.IsZero() {
		opts.Now = now
	}
	rep, err := Prove(context.Background(), cur, prop, opts)
	if errors.Is(err, ErrTooComplex) {
		if rep != nil {
			t.Fatalf("a refused proof returned a report: %+v", rep)
		}
		return nil, err
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		if f.Counterexample == nil {
			continue
		}
		r := *f.Counterexample
		if len(f.atoms) > 0 && !f.Covers(r) {
			t.Fatalf("%s does not cover its own counterexample %+v", f.Kind, r)
		}
		p := policy.Decide(prop, r)
		if f.Kind == ReviewRemoved || f.Kind == ReviewAdded {
			if c := policy.Decide(cur, r); reviewKind(c, p) != f.Kind {
				t.Fatalf("%s counterexample %+v: current %+v, proposed %+v", f.Kind, r, c, p)
			}
			continue
		}
		other, against := cur, "current"
		if f.Kind == ExceedsBoundary {
			other, against = opts.Boundary, "boundary"
		}
		if o := policy.Decide(other, r); !p.Allow || o.Allow {
			t.Fatalf("%s counterexample %+v: proposed allows %v, %s allows %v", f.Kind, r, p.Allow, against, o.Allow)
		}
	}
	return rep, nil
}

func kinds(rep *Report) map[string][]Finding {
	m := map[string][]Finding{}
	for _, f := range rep.Findings {
		m[f.Kind] = append(m[f.Kind], f)
	}
	return m
}

func TestOrdersTrackShipment(t *testing.T) {
	for _, file := range []string{"../examples/orders.yaml", "../examples/orders-local.yaml"} {
		t.Run(file, func(t *testing.T) {
			cur := load(t, file)
			prop := cur.Clone()
			ep := prop.NetworkPolicies["orders"].Endpoints[0]
			ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{"track_shipment"}}}})
			rep := prove(t, cur, prop, Options{DevAllowLoopback: true})
			k := kinds(rep)
			if len(rep.Findings) != 1 || len(k[NewMCPTool]) != 1 {
				t.Fatalf("want one new_mcp_tool, got %+v", rep.Findings)
			}
			f := k[NewMCPTool][0]
			if f.Counterexample.MCP == nil || f.Counterexample.MCP.Tool != "track_shipment" {
				t.Fatalf("counterexample does not name track_shipment: %+v", f.Counterexample)
			}
			if f.Entry != "orders" || f.Rule != "rules[5]" {
				t.Fatalf("finding location: %+v", f)
			}
			// Proving a policy against itself finds nothing.
			if rep := prove(t, cur, cur, Options{DevAllowLoopback: true}); len(rep.Findings) != 0 {
				t.Fatalf("self proof: %+v", rep.Findings)
			}
		})
	}
}

const credCurrent = `
version: 1
network_policies:
  github:
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        rules:
          - allow: { method: GET, path: "/repos/**" }
    binaries: [ { path: /usr/bin/gh } ]
`

func TestCredentialedNewMethod(t *testing.T) {
	cur := parse(t, credCurrent)
	prop := cur.Clone()
	ep := prop.NetworkPolicies["github"].Endpoints[0]
	ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "POST", Path: "/repos/acme/app/issues"}})
	rep := prove(t, cur, prop, Options{Credentialed: []HostPort{{"api.github.com", 443}}})
	k := kinds(rep)
	if len(rep.Findings) != 1 || len(k[NewHTTPMethod]) != 1 {
		t.Fatalf("want one new_http_method, got %+v", rep.Findings)
	}
	f := k[NewHTTPMethod][0]
	if f.Counterexample.HTTPMethod != "POST" || f.Counterexample.Path != "/repos/acme/app/issues" {
		t.Fatalf("counterexample %+v", f.Counterexample)
	}
	if want := "credentialed destination api.github.com:443"; !contains(f.Detail, want) {
		t.Fatalf("detail %q does not mention %q", f.Detail, want)
	}
	if !f.Credentialed {
		t.Fatalf("finding not marked credentialed: %+v", f)
	}
	// Without the credential the same finding carries no mark.
	rep = prove(t, cur, prop, Options{})
	if len(rep.Findings) != 1 || rep.Findings[0].Credentialed {
		t.Fatalf("want one unmarked finding, got %+v", rep.Findings)
	}
}

func TestCredentialedNewReach(t *testing.T) {
	cur := parse(t, credCurrent)
	prop := cur.Clone()
	prop.NetworkPolicies["github"].Binaries = append(prop.NetworkPolicies["github"].Binaries, policy.Binary{Path: "/usr/bin/python3"})
	rep := prove(t, cur, prop, Options{Credentialed: []HostPort{{"API.github.com.", 443}}})
	k := kinds(rep)
	if len(rep.Findings) != 1 || len(k[NewCredentialedReach]) != 1 {
		t.Fatalf("want one new_credentialed_reach, got %+v", rep.Findings)
	}
	if b := k[NewCredentialedReach][0].Counterexample.Binary; b != "/usr/bin/python3" {
		t.Fatalf("counterexample binary %q", b)
	}
	// Without the credential the same change is new_reach.
	rep = prove(t, cur, prop, Options{})
	if k := kinds(rep); len(rep.Findings) != 1 || len(k[NewReach]) != 1 {
		t.Fatalf("want one new_reach, got %+v", rep.Findings)
	}
}

func TestToolStillDenied(t *testing.T) {
	cur := load(t, "../examples/orders.yaml")
	prop := cur.Clone()
	ep := prop.NetworkPolicies["orders"].Endpoints[0]
	ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{"refund_order"}}}})
	if rep := prove(t, cur, prop, Options{}); len(rep.Findings) != 0 {
		t.Fatalf("a tool the deny rules still deny: %+v", rep.Findings)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestQueryMatchedRule(t *testing.T) {
	cur := parse(t, credCurrent)
	prop := cur.Clone()
	ep := prop.NetworkPolicies["github"].Endpoints[0]
	ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "GET", Path: "/search/**",
		Query: map[string]*policy.Matcher{"q": {Any: []string{"repo:acme/*"}}}}})
	rep := prove(t, cur, prop, Options{})
	k := kinds(rep)
	if len(k[NewPath]) != 1 {
		t.Fatalf("want new_path, got %s", show(rep.Findings))
	}
	if q := k[NewPath][0].Counterexample.Query; q == "" {
		t.Fatalf("counterexample without a query: %+v", k[NewPath][0].Counterexample)
	}
}

const webCurrent = `
version: 1
network_policies:
  web:
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/v1/items" }
      - host: mcp.example.com
        port: 443
        protocol: mcp
        rules:
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema: { type: object, required: [order_id] }
              rate_limit: { requests_per_minute: 10, burst: 3 }
    binaries: [ { path: /usr/bin/curl } ]
`

func TestKinds(t *testing.T) {
	cases := []struct {
		name   string
		change func(p *policy.Policy)
		opts   Options
		want   []string
	}{
		{"wildcard path", func(p *policy.Policy) {
			ep := p.NetworkPolicies["web"].Endpoints[0]
			ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "GET", Path: "/v1/*"}})
		}, Options{}, []string{NewPath, WildcardWidening}},
		{"wildcard host", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints[0].Host = "*.example.com"
			// (it also reaches mcp.example.com, where a GET with a
			// JSON-RPC body was refused, and HEAD, which the GET rule
			// now allows too, was not allowed at all)
		}, Options{}, []string{NewHTTPMethod, NewPath, NewReach, WildcardWidening}},
		{"binary glob", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Binaries = []policy.Binary{{Path: "/usr/bin/*"}}
		}, Options{}, []string{NewReach, WildcardWidening}},
		{"private network", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints[0].AllowedIPs = []string{"10.0.0.0/8"}
		}, Options{}, []string{NewReach, PrivateNetwork}},
		{"beyond the boundary", func(p *policy.Policy) {
			ep := p.NetworkPolicies["web"].Endpoints[0]
			ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "DELETE", Path: "/v1/items"}})
		}, Options{Boundary: parse(t, webCurrent)}, []string{ExceedsBoundary, NewHTTPMethod}},
		{"audit", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints[0].Enforcement = policy.EnforcementAudit
		}, Options{}, []string{EnforcementWeakened, NewHTTPMethod, NewPath}},
		{"schema removed", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints[1].Rules[0].Allow.ArgumentsSchema = nil
		}, Options{}, []string{ArgumentsWidened}},
		{"schema tightened (conservatively reported)", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints[1].Rules[0].Allow.ArgumentsSchema = map[string]any{"type": "object", "required": []any{"order_id"}, "additionalProperties": false}
		}, Options{}, []string{ArgumentsWidened}},
		{"rate limit removed", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints[1].Rules[0].Allow.RateLimit = nil
		}, Options{}, []string{RateLimitWidened}},
		{"rate limit raised", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints[1].Rules[0].Allow.RateLimit = &policy.RateLimit{RequestsPerMinute: 11, Burst: 3}
		}, Options{}, []string{RateLimitWidened}},
		{"burst raised", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints[1].Rules[0].Allow.RateLimit = &policy.RateLimit{RequestsPerMinute: 10, Burst: 4}
		}, Options{}, []string{RateLimitWidened}},
		{"rate limit lowered", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints[1].Rules[0].Allow.RateLimit = &policy.RateLimit{RequestsPerMinute: 5, Burst: 1}
		}, Options{}, nil},
		{"limited rule dropped beside an unlimited glob", func(p *policy.Policy) {
			ep := p.NetworkPolicies["web"].Endpoints[1]
			ep.Rules = []policy.Rule{{Allow: &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{"lookup_*"}}}}}
		}, Options{}, []string{ArgumentsWidened, NewMCPTool, RateLimitWidened, WildcardWidening}},
		{"another tool added beside the limit", func(p *policy.Policy) {
			ep := p.NetworkPolicies["web"].Endpoints[1]
			ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{"track_shipment"}}}})
		}, Options{}, []string{NewMCPTool}},
		{"pin added", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints[1].Rules[0].Allow.Definition = pinA
		}, Options{}, nil},
		{"pinned tool added", func(p *policy.Policy) {
			ep := p.NetworkPolicies["web"].Endpoints[1]
			ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{"track_shipment"}}, Definition: pinA}})
		}, Options{}, []string{NewMCPTool}},
		{"tcp endpoint", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints = append(p.NetworkPolicies["web"].Endpoints, &policy.Endpoint{Host: "cache.example.com", Port: 6379, Protocol: policy.ProtocolTCP})
		}, Options{}, []string{NewReach}},
		{"tcp endpoint on private addresses", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints = append(p.NetworkPolicies["web"].Endpoints,
				&policy.Endpoint{Host: "redis.example.com", Port: 6379, Protocol: policy.ProtocolTCP, AllowedIPs: []string{"10.0.0.0/8"}})
		}, Options{}, []string{NewReach, PrivateNetwork}},
		{"metadata", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints = append(p.NetworkPolicies["web"].Endpoints, &policy.Endpoint{Host: "0xA9FEA9FE", Port: 80})
		}, Options{}, []string{CloudMetadata}},
		{"metadata name", func(p *policy.Policy) {
			p.NetworkPolicies["web"].Endpoints = append(p.NetworkPolicies["web"].Endpoints, &policy.Endpoint{Host: "metadata.google.internal.", Port: 80})
		}, Options{}, []string{CloudMetadata}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cur := parse(t, webCurrent)
			prop := cur.Clone()
			c.change(prop)
			rep := prove(t, cur, prop, c.opts)
			var got []string
			for _, f := range rep.Findings {
				if len(got) == 0 || got[len(got)-1] != f.Kind {
					got = append(got, f.Kind)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("kinds %v, want %v:%s", got, c.want, show(rep.Findings))
			}
		})
	}
}

func TestCredentialedThroughWildcard(t *testing.T) {
	cur := parse(t, credCurrent)
	prop := cur.Clone()
	prop.NetworkPolicies["py"] = &policy.NetworkPolicy{
		Endpoints: []*policy.Endpoint{{Host: "*.github.com", Port: 443}},
		Binaries:  []policy.Binary{{Path: "/usr/bin/python3"}},
	}
	rep := prove(t, cur, prop, Options{Credentialed: []HostPort{{"api.github.com", 443}}})
	k := kinds(rep)
	if len(k[NewCredentialedReach]) != 1 || k[NewCredentialedReach][0].Counterexample.Host != "api.github.com" {
		t.Fatalf("want new_credentialed_reach to api.github.com:%s", show(rep.Findings))
	}
	if len(k[NewReach]) != 1 || len(k[WildcardWidening]) != 1 {
		t.Fatalf("want new_reach elsewhere under *.github.com and wildcard_widening:%s", show(rep.Findings))
	}
}

func TestRateLimitWidenedDetail(t *testing.T) {
	cur := parse(t, webCurrent)
	prop := cur.Clone()
	prop.NetworkPolicies["web"].Endpoints[1].Rules[0].Allow.RateLimit = nil
	rep := prove(t, cur, prop, Options{})
	if len(rep.Findings) != 1 {
		t.Fatalf("findings:%s", show(rep.Findings))
	}
	f := rep.Findings[0]
	want := Finding{Kind: RateLimitWidened, Entry: "web", Endpoint: "mcp.example.com:443", Rule: "rules[0]",
		Detail: "tools/call lookup_order gets no rate_limit where the current policy limits it to 10/min, burst 3"}
	if f.Kind != want.Kind || f.Entry != want.Entry || f.Endpoint != want.Endpoint || f.Rule != want.Rule || f.Detail != want.Detail || f.Counterexample != nil {
		t.Errorf("finding %+v\nwant    %+v", f, want)
	}
}

const (
	pinA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	pinB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// A re-pin, or a pin dropped, is tool_definition_changed (and nothing
// else: the calls it admits are the pinned rule's); pinning needs nothing.
func TestToolDefinitionChanged(t *testing.T) {
	cur := parse(t, webCurrent)
	cur.NetworkPolicies["web"].Endpoints[1].Rules[0].Allow.Definition = pinA
	for _, tc := range []struct{ name, pin, detail string }{
		{"re-pinned", pinB, "tools/call lookup_order gets definition " + pinB + " where the current policy pins " + pinA},
		{"unpinned", "", "tools/call lookup_order gets no pinned definition where the current policy pins " + pinA},
	} {
		prop := cur.Clone()
		prop.NetworkPolicies["web"].Endpoints[1].Rules[0].Allow.Definition = tc.pin
		rep := prove(t, cur, prop, Options{})
		if len(rep.Findings) != 1 {
			t.Fatalf("%s: findings:%s", tc.name, show(rep.Findings))
		}
		f := rep.Findings[0]
		if f.Kind != ToolDefinitionChanged || f.Rule != "rules[0]" || f.Detail != tc.detail || f.Counterexample != nil {
			t.Errorf("%s: finding %+v; want tool_definition_changed: %s", tc.name, f, tc.detail)
		}
	}
}

// Declaring OAuth paths on an MCP endpoint is mcp_oauth_opened, naming
// what is newly served; declaring what was declared already is nothing.
func TestMCPOAuthOpened(t *testing.T) {
	cur := parse(t, webCurrent)
	prop := cur.Clone()
	prop.NetworkPolicies["web"].Endpoints[1].MCP = &policy.MCPOptions{OAuth: &policy.MCPOAuth{ResourceMetadata: true}}
	rep := prove(t, cur, prop, Options{})
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != MCPOAuthOpened || !strings.Contains(rep.Findings[0].Detail, "resource_metadata") ||
		strings.Contains(rep.Findings[0].Detail, "authorization_server") {
		t.Fatalf("findings:%s", show(rep.Findings))
	}
	again := prop.Clone()
	if rep := prove(t, prop, again, Options{}); len(rep.Findings) != 0 {
		t.Fatalf("an unchanged declaration:%s", show(rep.Findings))
	}
	// A further metadata path or issuer path is newly served too.
	paths := prop.Clone()
	paths.NetworkPolicies["web"].Endpoints[1].MCP.OAuth = &policy.MCPOAuth{ResourceMetadata: true,
		ResourceMetadataPaths: []string{"/custom/meta.json"}, AuthorizationServer: true, IssuerPaths: []string{"/tenant1"}}
	rep = prove(t, prop, paths, Options{})
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != MCPOAuthOpened || !strings.Contains(rep.Findings[0].Detail, "GET /custom/meta.json") ||
		!strings.Contains(rep.Findings[0].Detail, "under /tenant1") || strings.Contains(rep.Findings[0].Detail, "resource_metadata (") {
		t.Fatalf("declared paths, findings:%s", show(rep.Findings))
	}
}

// TestTCPEndpointIsL4: the prover reports what a tcp endpoint adds exactly
// as what an L4 endpoint adds: a tcp endpoint in place of an L4 one adds
// nothing, in place of an endpoint that denied everything (graphql, not
// inspected yet) it adds the reach, beside a REST endpoint it opens what
// the REST rules did not allow.
func TestTCPEndpointIsL4(t *testing.T) {
	const doc = `
version: 1
network_policies:
  db:
    endpoints:
      - { host: db.example.com, port: 5432 }
      - { host: api.example.com, port: 443, protocol: rest, enforcement: enforce, rules: [ { allow: { method: GET, path: /v1/items } } ] }
    binaries: [ { path: /usr/bin/psql } ]
`
	cur := parse(t, doc)
	db := func(p *policy.Policy) *policy.Endpoint {
		for _, ep := range p.NetworkPolicies["db"].Endpoints {
			if ep.Host == "db.example.com" {
				return ep
			}
		}
		t.Fatal("no db.example.com endpoint")
		return nil
	}
	tcp := cur.Clone()
	db(tcp).Protocol = policy.ProtocolTCP
	if rep := prove(t, cur, tcp, Options{}); len(rep.Findings) != 0 {
		t.Errorf("L4 to tcp: %s", show(rep.Findings))
	}
	if rep := prove(t, tcp, cur, Options{}); len(rep.Findings) != 0 {
		t.Errorf("tcp to L4: %s", show(rep.Findings))
	}

	graphql := cur.Clone()
	db(graphql).Protocol = policy.ProtocolGraphQL
	rep := prove(t, graphql, tcp, Options{})
	if k := kinds(rep); len(rep.Findings) != 1 || len(k[NewReach]) != 1 {
		t.Fatalf("graphql to tcp: %s", show(rep.Findings))
	}
	if c := rep.Findings[0].Counterexample; c == nil || c.Host != "db.example.com" || c.Port != 5432 {
		t.Errorf("graphql to tcp: counterexample %+v", c)
	}

	wide := tcp.Clone()
	wide.NetworkPolicies["db"].Endpoints = append(wide.NetworkPolicies["db"].Endpoints, &policy.Endpoint{Host: "api.example.com", Port: 443, Protocol: policy.ProtocolTCP})
	k := kinds(prove(t, tcp, wide, Options{}))
	if len(k[NewHTTPMethod]) == 0 || len(k[NewPath]) == 0 {
		t.Errorf("tcp beside rest: %v", k)
	}
	for _, f := range k[NewReach] {
		if !strings.Contains(f.Detail, "uninspected (L4) requests were not allowed") {
			t.Errorf("tcp beside rest: %s", show([]Finding{f}))
		}
	}
}
