package prover

import (
	"reflect"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
	"pgregory.net/rapid"
)

// endpointEqual is reflect.DeepEqual on endpoints.
func TestEndpointEqualIsDeepEqual(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genPolicy(t, "p")
		q := mutate(t, p)
		var eps []*policy.Endpoint
		for _, pol := range []*policy.Policy{p, q} {
			for _, r := range refsOf(pol) {
				eps = append(eps, r.ep)
			}
		}
		for _, a := range eps {
			for _, b := range eps {
				if got, want := endpointEqual(a, b), reflect.DeepEqual(a, b); got != want {
					t.Fatalf("endpointEqual = %v, reflect.DeepEqual = %v:\n%+v\n%+v", got, want, a, b)
				}
			}
		}
	})
}

func TestEndpointEqualCorners(t *testing.T) {
	tm := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tm2 := tm.In(time.FixedZone("x", 0))
	base := func() *policy.Endpoint {
		return &policy.Endpoint{Host: "a.example.com", Port: 443, Protocol: "mcp",
			Rules: []policy.Rule{{Allow: &policy.L7Rule{Method: "tools/call", Tool: &policy.Matcher{Any: []string{"x"}},
				ArgumentsSchema: map[string]any{"type": "object"}, ExpiresAt: &tm}}},
			DenyRules: []*policy.L7Rule{{Method: "x", Query: map[string]*policy.Matcher{"q": {Any: []string{"v"}}}}},
			MCP:       &policy.MCPOptions{Versions: []string{"v"}}}
	}
	variants := []func(*policy.Endpoint){
		func(*policy.Endpoint) {},
		func(e *policy.Endpoint) { e.Ports = []int{} },
		func(e *policy.Endpoint) { e.AllowedIPs = []string{} },
		func(e *policy.Endpoint) { e.Rules = []policy.Rule{} },
		func(e *policy.Endpoint) { e.Rules[0].Allow.ArgumentsSchema = map[string]any{"type": "string"} },
		func(e *policy.Endpoint) { e.Rules[0].Allow.ArgumentsSchema = nil },
		func(e *policy.Endpoint) { e.Rules[0].Allow.ExpiresAt = &tm2 },
		func(e *policy.Endpoint) {
			e.Rules[0].Allow.RateLimit = &policy.RateLimit{RequestsPerMinute: 1, Burst: 1}
		},
		func(e *policy.Endpoint) {
			e.Rules[0].Allow.RateLimit = &policy.RateLimit{RequestsPerMinute: 1, Burst: 2}
		},
		func(e *policy.Endpoint) { e.Rules[0].Allow.Params = map[string]*policy.Matcher{} },
		func(e *policy.Endpoint) { e.Rules[0].Allow.Tool = &policy.Matcher{} },
		func(e *policy.Endpoint) { e.DenyRules[0].Query["q"] = nil },
		func(e *policy.Endpoint) { e.DenyRules[0].Query = map[string]*policy.Matcher{"r": {Any: []string{"v"}}} },
		func(e *policy.Endpoint) { e.DenyRules = append(e.DenyRules, nil) },
		func(e *policy.Endpoint) { e.MCP.Versions = nil },
		func(e *policy.Endpoint) { f := false; e.MCP.StrictToolNames = &f },
		func(e *policy.Endpoint) { e.JSONRPC = &policy.JSONRPCOptions{} },
		func(e *policy.Endpoint) { e.CredentialBinding = &policy.CredentialBinding{Provider: "p"} },
		func(e *policy.Endpoint) {
			e.GraphQLPersistedQueries = map[string]*policy.PersistedQuery{"h": {OperationType: "query"}}
		},
	}
	for i, vi := range variants {
		for j, vj := range variants {
			a, b := base(), base()
			vi(a)
			vj(b)
			if got, want := endpointEqual(a, b), reflect.DeepEqual(a, b); got != want {
				t.Errorf("variants %d, %d: endpointEqual = %v, reflect.DeepEqual = %v", i, j, got, want)
			}
		}
	}
}
