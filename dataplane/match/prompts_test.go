package match

import (
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// TestPromptAndResourceRulesAgreeWithDecide judges every prompt name and
// resource URI of the generator's vocabulary, under every method that
// carries one, against allow and deny rules of both kinds, on an enforcing
// and an audit endpoint.
func TestPromptAndResourceRulesAgreeWithDecide(t *testing.T) {
	for _, enforcement := range []string{"enforce", "audit"} {
		p := parse(t, `version: 1
network_policies:
  m:
    endpoints:
      - host: mcp.example.net
        port: 443
        protocol: mcp
        enforcement: `+enforcement+`
        rules:
          - allow: {method: prompts/get, prompt: {any: [summarize, "sum*", "admin/*", "a b"]}}
          - allow: {method: resources/read, resource: {any: ["file:///docs/**", "https://api.example.com/v1/*.json", "file:///a%20b"]}}
          - allow: {method: resources/subscribe, resource: "file:///docs/*"}
          - allow: {method: resources/unsubscribe}
        deny_rules:
          - {method: prompts/get, prompt: "admin/*"}
          - {method: resources/read, resource: "file:///secrets/**"}
          - {method: resources/subscribe, resource: "file:///docs/b*"}
`)
		m := mustCompile(t, p)
		base := policy.Request{Host: "mcp.example.net", Addr: pubIP, Port: 443, HTTPMethod: "POST", Path: "/", Time: when}
		for _, method := range []string{"prompts/get", "resources/read", "resources/subscribe", "resources/unsubscribe", "tools/call"} {
			for _, name := range append(append([]string{}, reqPrompts...), reqResources...) {
				r := base
				r.MCP = &policy.MCPMessage{Method: method, Prompt: name, Resource: name, Tool: "t"}
				agree(t, m, r)
			}
		}
	}
}
