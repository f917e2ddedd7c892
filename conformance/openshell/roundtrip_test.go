package openshell

import (
	"fmt"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// Round-trip cases from crates/openshell-policy/src/lib.rs: a document
// OpenShell parses, serialises and parses back unchanged must do the same
// here: Parse, EncodeYAML, Parse again, and the two hashes agree.
// OpenShell's round-trip tests parse without its semantic validation; two
// fixtures have a rest endpoint with neither rules nor access, which its
// own validator refuses (l7_validate.rs: "protocol requires rules or
// access"), so `access: full` is added there.

type roundTripCase struct {
	Source string
	Policy string
}

var roundTripCases = []roundTripCase{
	{Source: policyLib + "round_trip_preserves_allowed_ips", Policy: `
version: 1
network_policies:
  internal:
    name: internal
    endpoints:
      - host: db.internal.corp
        port: 5432
        allowed_ips:
          - "10.0.5.0/24"
          - "10.0.6.0/24"
    binaries:
      - path: /usr/bin/curl
`},
	{Source: policyLib + "round_trip_preserves_policy_name", Policy: `
version: 1
network_policies:
  my_api:
    name: my-custom-api-name
    endpoints:
      - host: api.example.com
        port: 443
    binaries:
      - path: /usr/bin/curl
`},
	{Source: policyLib + "round_trip_preserves_network_middlewares", Policy: `
version: 1
network_middlewares:
  global-redactor:
    name: Global redactor
    middleware: openshell/regex
    order: 20
    on_error: fail_open
    endpoints:
      include: ["api.example.com", "*.service.test"]
      exclude: ["internal.example.com"]
    config:
      mode: redact
  secondary-redactor:
    middleware: openshell/regex
    endpoints:
      include: ["api.example.com"]
network_policies:
  api:
    name: api
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        access: full
    binaries:
      - path: /usr/bin/curl
`},
	{Source: policyLib + "parse_l7_query_matchers_and_round_trip", Policy: `
version: 1
network_policies:
  query_test:
    name: query_test
    endpoints:
      - host: api.example.com
        port: 8080
        protocol: rest
        rules:
          - allow:
              method: GET
              path: /download
              query:
                slug: "my-*"
                tag:
                  any: ["foo-*", "bar-*"]
    binaries:
      - path: /usr/bin/curl
`},
	{Source: policyLib + "round_trip_preserves_endpoint_path", Policy: `
version: 1
network_policies:
  test:
    name: test
    endpoints:
      - host: api.example.com
        port: 443
        path: "/graphql"
        protocol: graphql
        rules:
          - allow:
              operation_type: query
    binaries:
      - { path: /usr/bin/curl }
`},
	{Source: policyLib + "round_trip_preserves_endpoint_credential_binding", Policy: `
version: 1
network_policies:
  gcp_storage:
    endpoints:
      - host: storage.googleapis.com
        port: 443
        protocol: rest
        access: full
        credential_binding:
          provider: work-gcp
`},
	{Source: policyLib + "round_trip_preserves_multi_port", Policy: `
version: 1
network_policies:
  test:
    name: test
    endpoints:
      - host: api.example.com
        ports:
          - 80
          - 443
    binaries:
      - { path: /usr/bin/curl }
`},
	{Source: policyLib + "serialize_single_port_uses_compact_form", Policy: `
version: 1
network_policies:
  test:
    name: test
    endpoints:
      - { host: api.example.com, port: 443 }
    binaries:
      - { path: /usr/bin/curl }
`},
	{Source: policyLib + "round_trip_preserves_wildcard_host", Policy: `
version: 1
network_policies:
  test:
    name: test
    endpoints:
      - host: "*.example.com"
        port: 443
    binaries:
      - { path: /usr/bin/curl }
`},
	{Source: policyLib + "round_trip_preserves_deny_rules", Policy: `
version: 1
network_policies:
  github:
    name: github
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        access: full
        deny_rules:
          - method: POST
            path: "/repos/*/pulls/*/reviews"
          - method: DELETE
            path: "/repos/*/branches/*/protection"
            query:
              force: "true"
    binaries:
      - path: /usr/bin/curl
`},
	{Source: policyLib + "round_trip_preserves_graphql_policy_fields", Policy: `
version: 1
network_policies:
  github_graphql:
    name: github_graphql
    endpoints:
      - host: api.github.com
        port: 443
        protocol: graphql
        enforcement: enforce
        persisted_queries: allow_registered
        graphql_max_body_bytes: 131072
        graphql_persisted_queries:
          abc123:
            operation_type: query
            operation_name: Viewer
            fields: [viewer]
        rules:
          - allow:
              operation_type: query
              fields: [viewer, repository]
          - allow:
              operation_type: mutation
              operation_name: Issue*
              fields: [createIssue]
        deny_rules:
          - operation_type: mutation
            fields: [deleteRepository]
    binaries:
      - path: /usr/bin/curl
`},
	{Source: policyLib + "round_trip_preserves_json_rpc_max_body_bytes", Policy: `
version: 1
network_policies:
  jsonrpc_api:
    name: jsonrpc_api
    endpoints:
      - host: jsonrpc.example.com
        port: 443
        protocol: json-rpc
        enforcement: enforce
        json_rpc:
          max_body_bytes: 131072
        rules:
          - allow:
              method: initialize
    binaries:
      - path: /usr/bin/curl
`},
	{Source: policyLib + "round_trip_mcp_policy_serializes_mcp_expression", Policy: `
version: 1
network_policies:
  mcp:
    name: mcp
    endpoints:
      - host: mcp.example.com
        port: 443
        protocol: mcp
        mcp:
          max_body_bytes: 131072
          strict_tool_names: false
        rules:
          - allow:
              method: tools/call
              tool: search_web
        deny_rules:
          - method: tools/call
            tool:
              any: [send_email, delete_resource]
    binaries:
      - path: /usr/bin/curl
`},
	{Source: policyLib + "round_trip_preserves_websocket_credential_rewrite", Policy: `
version: 1
network_policies:
  discord_gateway:
    name: discord_gateway
    endpoints:
      - host: gateway.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: full
        websocket_credential_rewrite: true
    binaries:
      - path: /usr/bin/node
`},
	{Source: policyLib + "round_trip_preserves_request_body_credential_rewrite", Policy: `
version: 1
network_policies:
  slack_api:
    name: slack_api
    endpoints:
      - host: slack.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: read-write
        request_body_credential_rewrite: true
    binaries:
      - path: /usr/bin/node
`},
	{Source: policyLib + "round_trip_preserves_allow_uninspected_credentials", Policy: `
version: 1
network_policies:
  vendor_api:
    endpoints:
      - host: api.vendor.example
        port: 443
        tls: skip
        allow_uninspected_credentials: true
`},
}

func TestRoundTrip(t *testing.T) {
	seen := map[string]int{}
	for _, c := range roundTripCases {
		seen[c.Source]++
		t.Run(fmt.Sprintf("%s#%d", c.Source, seen[c.Source]), func(t *testing.T) {
			p, _, err := policy.Parse([]byte(c.Policy))
			if err != nil {
				t.Fatalf("%s\nwe refuse the document OpenShell round-trips: %v", c.Source, err)
			}
			out, err := policy.EncodeYAML(p)
			if err != nil {
				t.Fatalf("%s\nEncodeYAML: %v", c.Source, err)
			}
			again, _, err := policy.Parse(out)
			if err != nil {
				t.Fatalf("%s\nwe refuse our own encoding: %v\n%s", c.Source, err, out)
			}
			if p.Hash() != again.Hash() {
				t.Errorf("%s\nthe round trip changed the document:\n%s", c.Source, out)
			}
		})
	}
}
