package match

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// mcp.oauth: the declared OAuth paths pass as plain HTTP beside the MCP
// path (and on a whole-host MCP endpoint, where POST /register would
// otherwise be read as JSON-RPC), undeclared ones do not, and MCPLimits
// does not read them as MCP; the matcher agrees with policy.Decide.
func TestMatcherMCPOAuthPaths(t *testing.T) {
	doc := func(path, oauth string) string {
		return `
version: 1
network_policies:
  m:
    binaries: [{path: /usr/bin/python3}]
    endpoints:
      - host: orders.example.net
        port: 443
` + path + `
        protocol: mcp
        mcp: {` + oauth + `}
        rules: [{allow: {method: tools/list}}]
`
	}
	type req struct {
		method, path string
		allow        bool
	}
	for _, tc := range []struct {
		name, path, oauth string
		reqs              []req
	}{
		{"scoped, both", "        path: /mcp", "oauth: {resource_metadata: true, authorization_server: true}", []req{
			{"GET", "/.well-known/oauth-protected-resource", true},
			{"GET", "/.well-known/oauth-protected-resource/mcp", true},
			{"HEAD", "/.well-known/oauth-authorization-server", true},
			{"GET", "/.well-known/openid-configuration", true},
			{"GET", "/authorize", true},
			{"POST", "/token", true},
			{"POST", "/register", true},
			{"POST", "/authorize", false},
			{"GET", "/token", false},
			{"GET", "/.well-known/oauth-protected-resourcex", false},
			{"GET", "/admin", false},
		}},
		{"scoped, metadata only", "        path: /mcp", "oauth: {resource_metadata: true}", []req{
			{"GET", "/.well-known/oauth-protected-resource/mcp", true},
			{"POST", "/register", false},
			{"GET", "/authorize", false},
		}},
		{"scoped, none", "        path: /mcp", "", []req{
			{"GET", "/.well-known/oauth-protected-resource/mcp", false},
		}},
		{"whole host, authorization server", "", "oauth: {authorization_server: true}", []req{
			{"POST", "/register", true},
			{"POST", "/token", true},
		}},
	} {
		p := parse(t, doc(tc.path, tc.oauth))
		m := mustCompile(t, p)
		for _, q := range tc.reqs {
			r := policy.Request{Binary: python, Host: "orders.example.net", Addr: pubIP, Port: 443, HTTPMethod: q.method, Path: q.path, Time: when}
			d := m.Decide(&r)
			if d.Allow != q.allow || q.allow && !strings.HasPrefix(d.Rule, "mcp.oauth.") {
				t.Errorf("%s: %s %s = %+v, want allow %v", tc.name, q.method, q.path, d, q.allow)
			}
			if want := policy.Decide(p, r); d != want {
				t.Errorf("%s: %s %s: matcher %+v, policy.Decide %+v", tc.name, q.method, q.path, d, want)
			}
			if _, mcp := m.MCPLimits(r.Host, r.Port, q.method, q.path); q.allow && mcp {
				t.Errorf("%s: %s %s is read as MCP", tc.name, q.method, q.path)
			}
		}
	}
}
