package advisor

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

func recRequest(rec DenialRecord) policy.Request {
	r := policy.Request{Binary: rec.Binary, Host: rec.Host, Port: rec.Port, HTTPMethod: rec.HTTPMethod, Path: rec.Path, Time: now}
	if rec.MCPMethod != "" {
		r.HTTPMethod = "POST"
		r.MCP = policy.NamedMCPMessage(rec.MCPMethod, rec.Tool)
	}
	return r
}

// For representative denied requests, the proposal from the denial allows
// exactly that request: Decide allows it, and every request-level finding
// of the proof has that request's host, port, method and path or tool.
func TestFromDenialNarrowest(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	rng := rand.New(rand.NewPCG(1, 2))
	binaries := []string{"/usr/bin/python3", "/usr/bin/gh", "/usr/bin/curl"}
	hosts := []string{"api.github.com", "orders.example.com", "shop.example.com", "ship.example.net", "pypi.org"}
	ports := []int{443, 8443}
	methods := []string{"GET", "POST", "DELETE", ""}
	paths := []string{"/repos/a/b", "/api/orders/7", "/api/orders", "/admin/status", "/v1/x*y", "/mcp"}
	mcp := [][2]string{{"tools/call", "track_shipment"}, {"tools/call", "refund_order"}, {"tools/list", ""}, {"resources/list", ""},
		{"prompts/get", "summarize"}, {"prompts/get", "a*b"}, {"resources/read", "file:///docs/a.txt"}, {"resources/subscribe", "https://x.example/q?a=1*"}}
	proposed, refusedNothing := 0, 0
	for range 300 {
		rec := DenialRecord{Binary: binaries[rng.IntN(len(binaries))], Host: hosts[rng.IntN(len(hosts))], Port: ports[rng.IntN(len(ports))]}
		if rng.IntN(3) == 0 {
			m := mcp[rng.IntN(len(mcp))]
			rec.MCPMethod, rec.Tool, rec.Path = m[0], m[1], "/mcp"
		} else {
			rec.HTTPMethod = methods[rng.IntN(len(methods))]
			if rec.HTTPMethod != "" {
				rec.Path = paths[rng.IntN(len(paths))]
			}
		}
		req := recRequest(rec)
		if policy.Decide(base, req).Allow {
			continue
		}
		p, err := FromDenial(base, rec)
		if err != nil {
			continue // e.g. a REST request to an mcp host:port, or a deny rule
		}
		result, rep, err := Evaluate(context.Background(), base, p, prover.Options{Now: now})
		if r, ok := AsRefusal(err); ok && r.Rule == RuleChangesNothing {
			// Only a deny rule may keep the request denied.
			refusedNothing++
			if d := policy.Decide(result, req); d.Allow {
				t.Fatalf("%+v: refused as changing nothing but allowed", rec)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%+v: %v", rec, err)
		}
		proposed++
		if d := policy.Decide(result, req); !d.Allow {
			t.Fatalf("%+v: the proposal does not allow the request: %s", rec, d.Reason)
		}
		for _, f := range rep.Findings {
			ce := f.Counterexample
			if ce == nil {
				t.Fatalf("%+v: rule-level finding %+v", rec, f)
			}
			if policy.NormalizeHost(ce.Host) != policy.NormalizeHost(req.Host) || ce.Port != req.Port {
				t.Fatalf("%+v: finding %s reaches %s:%d", rec, f.Kind, ce.Host, ce.Port)
			}
			if req.HTTPMethod == "" {
				continue // L4: the atom is host, port and binary
			}
			if req.MCP != nil && ce.MCP == nil && (ce.HTTPMethod == "GET" || ce.HTTPMethod == "DELETE") && ce.Path == req.Path {
				// A new mcp endpoint also opens its SSE stream and session
				// end (policy semantics), on the same exact path.
				continue
			}
			if ce.HTTPMethod != req.HTTPMethod || ce.Path != req.Path {
				t.Fatalf("%+v: finding %s is wider: %s %s", rec, f.Kind, ce.HTTPMethod, ce.Path)
			}
			if req.MCP != nil && (ce.MCP == nil || ce.MCP.Method != req.MCP.Method || ce.MCP.Name() != req.MCP.Name()) {
				t.Fatalf("%+v: finding %s is wider: %+v", rec, f.Kind, ce.MCP)
			}
		}
	}
	if proposed < 50 {
		t.Fatalf("only %d proposals built (%d changed nothing)", proposed, refusedNothing)
	}
	t.Logf("%d proposals, %d refused as changing nothing", proposed, refusedNothing)
}

func TestFromDenialVersionProbe(t *testing.T) {
	_, err := FromDenial(nil, DenialRecord{Binary: "/x", Host: "a.example.com", Port: 443, MCPMethod: "initialize", Path: "/mcp", VersionProbe: true})
	if r, ok := AsRefusal(err); !ok || r.Rule != RuleNotOffered {
		t.Fatalf("want not_offered, got %v", err)
	}
}

func TestFromDenialShapes(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	p, err := FromDenial(base, DenialRecord{Binary: "/usr/bin/python3", Host: "orders.example.com", Port: 443, MCPMethod: "tools/call", Tool: "track_shipment", Path: "/mcp"})
	if err != nil {
		t.Fatal(err)
	}
	if o := p.Operations[0].AddAllowRules; o == nil || o.Policy != "orders" || o.Path != "/mcp" {
		t.Fatalf("want add_allow_rules on orders: %+v", p.Operations[0])
	}
	p, err = FromDenial(base, DenialRecord{Binary: "/usr/bin/curl", Host: "ship.example.net", Port: 443, HTTPMethod: "get", Path: "/v1/a*b"})
	if err != nil {
		t.Fatal(err)
	}
	o := p.Operations[0].AddRule
	if o == nil || len(o.Rule.Binaries) != 1 || o.Rule.Binaries[0].Path != "/usr/bin/curl" || o.Rule.Endpoints[0].Rules[0].Allow.Path != `/v1/a\*b` {
		t.Fatalf("want add_rule for curl: %+v", p.Operations[0])
	}
	if _, err := FromDenial(base, DenialRecord{Binary: "/usr/bin/curl", Host: "169.254.169.254", Port: 80, HTTPMethod: "GET", Path: "/"}); err == nil {
		t.Fatal("metadata denial offered")
	}
}

// A denial the policy did not cause (the request is allowed, so it was
// denied for another reason) is not offered: a rule would add nothing.
func TestFromDenialAlreadyAllowed(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	_, err := FromDenial(base, DenialRecord{Binary: "/usr/bin/python3", Host: "orders.example.com", Port: 443, MCPMethod: "tools/call", Tool: "lookup_order", Path: "/mcp"})
	if r, ok := AsRefusal(err); !ok || r.Rule != RuleNotOffered {
		t.Fatalf("want not_offered for an allowed request, got %v", err)
	}
}

func TestFromDenialRationaleUnknownBinary(t *testing.T) {
	got := rationale(DenialRecord{Host: "a.example.com", Port: 443, HTTPMethod: "GET", Path: "/x"}, false)
	if want := "allow exactly the denied request: GET /x from an unidentified binary to a.example.com:443"; got != want {
		t.Fatalf("rationale %q, want %q", got, want)
	}
}

func TestFromDenialRateLimited(t *testing.T) {
	// The call was allowed; only its rule's rate_limit refused it. Even
	// against no policy at all (where a rule would be missing), nothing is
	// proposed.
	rec := DenialRecord{Binary: "/usr/bin/python3", Host: "orders.example.com", Port: 443, HTTPMethod: "POST", Path: "/mcp",
		MCPMethod: "tools/call", Tool: "lookup_order", RateLimited: true}
	p, err := FromDenial(nil, rec)
	r, ok := AsRefusal(err)
	if !ok || r.Rule != RuleNotOffered || !strings.Contains(r.Reason, "rate_limit") || p != nil {
		t.Fatalf("got %v, %v; want not_offered naming the rate_limit", p, err)
	}
	rec.RateLimited = false
	if _, err := FromDenial(nil, rec); err != nil {
		t.Fatalf("the same record as a denial: %v", err)
	}
}

// A denied prompts/get or resources call becomes a rule naming exactly
// that prompt or URI (globs escaped); once applied, another prompt or URI
// stays denied, and its own proposal is new_mcp_prompt or
// new_mcp_resource.
func TestFromDenialPromptsAndResources(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	rec := func(method, name string) DenialRecord {
		return DenialRecord{Binary: "/usr/bin/python3", Host: "orders.example.com", Port: 443, Path: "/mcp", MCPMethod: method, Tool: name}
	}
	for _, tc := range []struct {
		method, name, other, glob, kind string
	}{
		{"prompts/get", "summarize*", "summarize_all", `summarize\*`, prover.NewMCPPrompt},
		{"resources/read", "https://docs.example/a?b=*", "https://docs.example/a?b=c", `https://docs.example/a\?b=\*`, prover.NewMCPResource},
	} {
		t.Run(tc.method, func(t *testing.T) {
			p, err := FromDenial(base, rec(tc.method, tc.name))
			if err != nil {
				t.Fatal(err)
			}
			o := p.Operations[0].AddAllowRules
			if o == nil || o.Policy != "orders" || len(o.Rules) != 1 {
				t.Fatalf("want one add_allow_rules on orders: %+v", p.Operations[0])
			}
			a := o.Rules[0].Allow
			m := a.Prompt
			if tc.method != "prompts/get" {
				m = a.Resource
			}
			if a.Method != tc.method || m == nil || len(m.Any) != 1 || m.Any[0] != tc.glob {
				t.Fatalf("rule %+v, want %s naming %q", a, tc.method, tc.glob)
			}
			result, _, err := Evaluate(context.Background(), base, p, prover.Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if d := policy.Decide(result, recRequest(rec(tc.method, tc.name))); !d.Allow {
				t.Fatalf("the proposal does not allow the request: %s", d.Reason)
			}
			if d := policy.Decide(result, recRequest(rec(tc.method, tc.other))); d.Allow {
				t.Fatalf("the proposal also allows %s %s", tc.method, tc.other)
			}
			// The next denial, against the applied policy, is a new prompt
			// or resource of a method the policy already allows.
			p2, err := FromDenial(result, rec(tc.method, tc.other))
			if err != nil {
				t.Fatal(err)
			}
			_, rep, err := Evaluate(context.Background(), result, p2, prover.Options{Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Findings) != 1 || rep.Findings[0].Kind != tc.kind || rep.Findings[0].Counterexample.MCP.Name() != tc.other {
				t.Fatalf("findings %+v, want one %s for %q", rep.Findings, tc.kind, tc.other)
			}
			// The same proposal again changes nothing, and says which
			// prompt or URI is already allowed.
			_, _, err = Evaluate(context.Background(), result, p, prover.Options{Now: now})
			if r, ok := AsRefusal(err); !ok || r.Rule != RuleChangesNothing || !strings.Contains(r.Reason, tc.method+" "+tc.name+" is already allowed") {
				t.Fatalf("proposing it twice: got %v, want changes_nothing naming %s %s", err, tc.method, tc.name)
			}
		})
	}
	// Refused: a URI no resource rule can allow, a prompts/get naming
	// nothing.
	_, err := FromDenial(base, rec("resources/read", "file:///docs/../secrets"))
	if r, ok := AsRefusal(err); !ok || r.Rule != RuleResource || !strings.Contains(r.Reason, "dot segment") {
		t.Fatalf("want a resource refusal for a URI that is not plain, got %v", err)
	}
	_, err = FromDenial(base, rec("prompts/get", ""))
	if r, ok := AsRefusal(err); !ok || r.Rule != RulePrompt {
		t.Fatalf("want a prompt refusal, got %v", err)
	}
}

// Proposal files must name prompts and resources exactly, too.
func TestApplyPromptAndResourceNarrowness(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	for _, tc := range []struct {
		rule       policy.L7Rule
		field, why string
	}{
		{policy.L7Rule{Method: "prompts/get"}, "allow.prompt", "needs the prompt named"},
		{policy.L7Rule{Method: "prompts/get", Prompt: &policy.Matcher{Any: []string{"sum*"}}}, "allow.prompt", "name a prompt exactly"},
		{policy.L7Rule{Method: "resources/read"}, "allow.resource", "needs the resource URI named"},
		{policy.L7Rule{Method: "resources/read", Resource: &policy.Matcher{Any: []string{"file:///docs/**"}}}, "allow.resource", "name a resource URI exactly"},
		{policy.L7Rule{Method: "resources/read", Resource: &policy.Matcher{Any: []string{"FILE:///docs/a"}}}, "allow.resource", "not a plain URI"},
		{policy.L7Rule{Method: "tools/list", Prompt: &policy.Matcher{Any: []string{"a"}}}, "allow.prompt", "does not apply"},
	} {
		r := tc.rule
		p := &Proposal{Rationale: "x", Operations: []Operation{{AddAllowRules: &AddAllowRules{
			EndpointRef: EndpointRef{Policy: "orders", Host: "orders.example.com", Port: 443, Path: "/mcp"}, Rules: []policy.Rule{{Allow: &r}}}}}}
		_, err := Apply(base, p)
		re, ok := AsRefusal(err)
		if !ok || !strings.HasSuffix(re.Field, tc.field) || !strings.Contains(re.Reason, tc.why) {
			t.Errorf("%+v: got %v, want a refusal at %s about %q", tc.rule, err, tc.field, tc.why)
		}
	}
}
