package match

import (
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// Issue 11 follow-up: the compiled matcher expands a deny path glob's
// `{a,b}` alternatives as policy.MatchDenyPath does, and reads an allow
// glob's braces literally, agreeing with policy.Decide.
func TestMatcherPathBraces(t *testing.T) {
	m := mustCompile(t, parse(t, `
version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: full
        deny_rules:
          - { method: GET, path: "/{admin,internal}/**" }
          - { method: "*", path: "/v1/{a,b{c,d}}/x" }
      - host: lit.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        path: "/{s,t}/**"
        rules:
          - allow: { method: GET, path: "/{a,b}/**" }
    binaries: []
`))
	for _, tc := range []struct {
		host, path string
		allow      bool
	}{
		{"api.example.com", "/admin/keys", false},
		{"api.example.com", "/internal/x", false},
		{"api.example.com", "/Internal/x", false},
		{"api.example.com", "/internal%3Bx/y", false},
		{"api.example.com", "/v1/bd/x", false},
		{"api.example.com", "/v1/b/x", true},
		{"api.example.com", "/public/x", true},
		{"lit.example.com", "/a/x", false},
		{"lit.example.com", "/s/a/x", false},
	} {
		d := agree(t, m, policy.Request{Host: tc.host, Addr: pubIP, Port: 443, HTTPMethod: "GET", Path: tc.path})
		if d.Allow != tc.allow {
			t.Errorf("GET %s%s: allow=%v, want %v (%s)", tc.host, tc.path, d.Allow, tc.allow, d.Reason)
		}
	}
}
