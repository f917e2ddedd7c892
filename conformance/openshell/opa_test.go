package openshell

import (
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// Cases from crates/openshell-supervisor-network/src/opa.rs: the Rego
// engine's network (L4) and request (L7) decisions.

const globBinaryPolicy = `
network_policies:
  glob_test:
    name: glob_test
    endpoints:
      - { host: example.com, port: 443 }
    binaries:
      - { path: "BIN" }
`

const scriptPolicy = `
network_policies:
  script_test:
    name: script_test
    endpoints:
      - { host: example.com, port: 443 }
    binaries:
      - { path: /usr/local/bin/my-tool }
`

// testProto is opa.rs's test_proto(), in YAML.
const testProto = `
network_policies:
  claude_code:
    name: claude_code
    endpoints:
      - { host: api.anthropic.com, port: 443 }
      - { host: statsig.anthropic.com, port: 443 }
    binaries:
      - { path: /usr/local/bin/claude }
  gitlab:
    name: gitlab
    endpoints:
      - { host: gitlab.com, port: 443 }
    binaries:
      - { path: /usr/bin/glab }
`

func sub(doc, old, new string) string { return replaceAll(doc, old, new) }

var opaL4Cases = []decideCase{
	{Source: opaRS + "allowed_binary_and_endpoint", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/node", Host: "api.anthropic.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "wrong_binary_denied", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/python3", Host: "api.anthropic.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "wrong_endpoint_denied", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/node", Host: "evil.example.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "unknown_binary_default_deny", Policy: sandboxPolicyYAML,
		Binary: "/tmp/malicious", Host: "api.anthropic.com", Port: 443, OpenShell: deny},
	// github.com is both an L7 endpoint (github_ssh_over_https, git) and an
	// L4 one (copilot, not git): the L4 decision for git is allow, the
	// requests are then judged by the rules.
	{Source: opaRS + "github_policy_allows_git", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/git", Host: "github.com", Port: 443, Method: "GET", Path: "/org/repo.git/info/refs", OpenShell: allow},
	{Source: opaRS + "case_insensitive_host_matching", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/node", Host: "API.ANTHROPIC.COM", Port: 443, OpenShell: allow},
	{Source: opaRS + "wrong_port_denied", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/node", Host: "api.anthropic.com", Port: 80, OpenShell: deny},
	{Source: opaRS + "wildcard_host_nul_byte_causes_opa_error", Policy: wildcardHostPolicy,
		Binary: "/usr/bin/test", Host: "sub\x00.example.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "wildcard_host_nul_byte_extra_label_causes_opa_error", Policy: wildcardHostPolicy,
		Binary: "/usr/bin/test", Host: "evil.com\x00.example.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "wildcard_host_percent_encoded_dot_no_match", Policy: wildcardHostPolicy,
		Binary: "/usr/bin/test", Host: "evil%2eexample.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "from_strings_and_from_files_produce_same_results", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/node", Host: "api.anthropic.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "reload_replaces_policy", Policy: "network_policies: {}\n",
		Binary: "/usr/bin/node", Host: "api.anthropic.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "ancestor_binary_allowed", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/python3", Ancestors: []string{"/usr/bin/git"}, Host: "github.com", Port: 443,
		Method: "GET", Path: "/org/repo.git/info/refs", OpenShell: allow},
	{Source: opaRS + "no_ancestor_match_denied", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/python3", Ancestors: []string{"/usr/bin/bash"}, Host: "github.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "deep_ancestor_chain_matches", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/python3", Ancestors: []string{"/usr/bin/sh", "/usr/bin/git"}, Host: "github.com", Port: 443,
		Method: "GET", Path: "/org/repo.git/info/refs", OpenShell: allow},
	{Source: opaRS + "empty_ancestors_falls_back_to_direct", Policy: sandboxPolicyYAML,
		Binary: "/usr/local/bin/claude", Host: "api.anthropic.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "glob_pattern_matches_binary", Policy: sub(globBinaryPolicy, "BIN", "/usr/bin/*"),
		Binary: "/usr/bin/node", Host: "example.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "glob_pattern_matches_ancestor", Policy: sub(globBinaryPolicy, "BIN", "/usr/local/bin/*"),
		Binary: "/usr/bin/node", Ancestors: []string{"/usr/local/bin/claude"}, Host: "example.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "glob_pattern_no_cross_segment", Policy: sub(globBinaryPolicy, "BIN", "/usr/bin/*"),
		Binary: "/usr/bin/subdir/node", Host: "example.com", Port: 443, OpenShell: deny},
	// cmdline paths are never consulted: the request carries the executable only.
	{Source: opaRS + "cmdline_path_does_not_grant_access", Policy: scriptPolicy,
		Binary: "/usr/bin/node", Host: "example.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "cmdline_path_no_match_denied", Policy: scriptPolicy,
		Binary: "/usr/bin/node", Host: "example.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "cmdline_glob_pattern_does_not_grant_access", Policy: sub(globBinaryPolicy, "BIN", "/usr/local/bin/*"),
		Binary: "/usr/bin/node", Host: "example.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "from_proto_allows_matching_request", Policy: testProto,
		Binary: "/usr/local/bin/claude", Host: "api.anthropic.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "from_proto_denies_unmatched_request", Policy: testProto,
		Binary: "/usr/bin/curl", Host: "evil.example.com", Port: 443, OpenShell: deny},
}

func TestOPAL4(t *testing.T) { runDecide(t, opaL4Cases) }

// wildcardHostPolicy is opa.rs's wildcard_host_engine().
const wildcardHostPolicy = `
network_policies:
  wildcard_test:
    name: wildcard_test
    endpoints:
      - host: "*.example.com"
        port: 443
    binaries:
      - path: /usr/bin/test
`

const jsonrpcInitPolicy = `
network_policies:
  NAME:
    name: NAME
    endpoints:
      - host: HOST
        port: 8000
        path: PATH
        protocol: PROTO
        enforcement: enforce
        rules:
          - allow:
              method: initialize
    binaries:
      - { path: /usr/bin/curl }
`

func initPolicy(name, host, path, proto string) string {
	r := replaceAll(jsonrpcInitPolicy, "NAME", name)
	r = replaceAll(r, "HOST", host)
	r = replaceAll(r, "PATH", path)
	return replaceAll(r, "PROTO", proto)
}

const mcpParamsPolicy = `
network_policies:
  mcp_params:
    name: mcp_params
    endpoints:
      - host: mcp.params.test
        port: 8000
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          max_body_bytes: 131072
        rules:
          - allow:
              method: tools/call
              tool:
                any: [read_status, submit_*]
        deny_rules:
          - method: tools/call
            tool: blocked_action
    binaries:
      - { path: /usr/bin/curl }
`

const mcpDefaultPolicy = `
network_policies:
  mcp_default:
    name: mcp_default
    endpoints:
      - host: mcp.default.test
        port: 8000
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          allow_all_known_mcp_methods: true
    binaries:
      - { path: /usr/bin/curl }
`

const githubGitPolicy = `
network_policies:
  github:
    name: github
    endpoints:
      - host: github.com
        port: 443
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "**" }
          - allow: { method: HEAD, path: "**" }
          - allow: { method: OPTIONS, path: "**" }
          - allow: { method: POST, path: "/**/git-upload-pack" }
    binaries:
      - { path: /usr/bin/curl }
`

const mixedAPIPolicy = `
network_policies:
  mixed_api:
    name: mixed_api
    endpoints:
      - host: api.github.test
        port: 443
        path: "/repos/**"
        protocol: rest
        enforcement: enforce
        rules:
          - allow:
              method: "*"
              path: "/**"
      - host: api.github.test
        port: 443
        path: "/graphql"
        protocol: graphql
        enforcement: enforce
        rules:
          - allow:
              operation_type: query
    binaries:
      - { path: /usr/bin/curl }
`

const curl = "/usr/bin/curl"

var opaL7Cases = []decideCase{
	{Source: opaRS + "l7_get_allowed_by_rules", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "GET", Path: "/repos/myorg/foo", OpenShell: allow},
	{Source: opaRS + "l7_post_allowed_by_rules", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "POST", Path: "/repos/myorg/issues", OpenShell: allow},
	{Source: opaRS + "l7_delete_denied_by_rules", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "DELETE", Path: "/repos/myorg/foo", OpenShell: deny},
	{Source: opaRS + "l7_get_wrong_path_denied", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "GET", Path: "/admin/settings", OpenShell: deny},
	{Source: opaRS + "l7_readonly_preset_allows_get", Policy: l7TestData,
		Binary: curl, Host: "api.readonly.com", Port: 8080, Method: "GET", Path: "/anything", OpenShell: allow},
	{Source: opaRS + "l7_readonly_preset_allows_head", Policy: l7TestData,
		Binary: curl, Host: "api.readonly.com", Port: 8080, Method: "HEAD", Path: "/anything", OpenShell: allow},
	{Source: opaRS + "l7_readonly_preset_allows_options", Policy: l7TestData,
		Binary: curl, Host: "api.readonly.com", Port: 8080, Method: "OPTIONS", Path: "/anything", OpenShell: allow},
	{Source: opaRS + "l7_readonly_preset_denies_post", Policy: l7TestData,
		Binary: curl, Host: "api.readonly.com", Port: 8080, Method: "POST", Path: "/anything", OpenShell: deny},
	{Source: opaRS + "l7_readonly_preset_denies_delete", Policy: l7TestData,
		Binary: curl, Host: "api.readonly.com", Port: 8080, Method: "DELETE", Path: "/anything", OpenShell: deny},
	{Source: opaRS + "l7_full_preset_allows_everything", Policy: l7TestData,
		Binary: curl, Host: "api.full.com", Port: 8080, Method: "PATCH", Path: "/any/path", OpenShell: allow},
	// GraphQL: the proxy does not inspect it yet, so every request is denied.
	{Source: opaRS + "l7_graphql_query_allowed_by_field_rule", Policy: l7TestData,
		Binary: curl, Host: "api.graphql.com", Port: 443, Method: "POST", Path: "/graphql", OpenShell: allow,
		Divergence: divUninspected, Ours: deny},
	{Source: opaRS + "l7_graphql_unlisted_field_denied", Policy: l7TestData,
		Binary: curl, Host: "api.graphql.com", Port: 443, Method: "POST", Path: "/graphql", OpenShell: deny},
	{Source: opaRS + "l7_graphql_registered_hash_only_query_allowed", Policy: l7TestData,
		Binary: curl, Host: "api.graphql.com", Port: 443, Method: "POST", Path: "/graphql", OpenShell: allow,
		Divergence: divUninspected, Ours: deny},
	{Source: opaRS + "l7_websocket_graphql_subscription_allowed_by_field_rule", Policy: l7TestData,
		Binary: curl, Host: "realtime.graphql.com", Port: 443, Method: "GET", Path: "/graphql", OpenShell: allow,
		Divergence: divUninspected, Ours: deny},
	{Source: opaRS + "l7_endpoint_path_scopes_rest_and_graphql_on_same_host", Policy: mixedAPIPolicy,
		Binary: curl, Host: "api.github.test", Port: 443, Method: "POST", Path: "/repos/org/repo/issues", OpenShell: allow},
	{Source: opaRS + "l7_method_matching_case_insensitive", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "get", Path: "/repos/myorg/foo", OpenShell: allow},
	{Source: opaRS + "l7_path_glob_matching", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "GET", Path: "/repos/org/repo", OpenShell: allow},
	{Source: opaRS + "l7_query_glob_allows_matching_duplicate_values", Policy: l7TestData,
		Binary: curl, Host: "api.query.com", Port: 8080, Method: "GET", Path: "/download", Query: "tag=foo-a&tag=foo-b&extra=ignored", OpenShell: allow},
	{Source: opaRS + "l7_query_glob_denies_on_mismatched_duplicate_value", Policy: l7TestData,
		Binary: curl, Host: "api.query.com", Port: 8080, Method: "GET", Path: "/download", Query: "tag=foo-a&tag=evil", OpenShell: deny},
	{Source: opaRS + "l7_query_any_allows_if_every_value_matches_any_pattern", Policy: l7TestData,
		Binary: curl, Host: "api.query.com", Port: 8080, Method: "GET", Path: "/search", Query: "tag=foo-a&tag=bar-b", OpenShell: allow},
	{Source: opaRS + "l7_rest_request_ignores_null_jsonrpc_metadata", Policy: l7TestData,
		Binary: curl, Host: "api.query.com", Port: 8080, Method: "GET", Path: "/download", Query: "tag=foo-a", OpenShell: allow},
	{Source: opaRS + "l7_query_missing_required_key_denied", Policy: l7TestData,
		Binary: curl, Host: "api.query.com", Port: 8080, Method: "GET", Path: "/download", OpenShell: deny},
	// The proto shape of a query matcher, {glob: …}, written in YAML.
	{Source: opaRS + "l7_query_rules_from_proto_are_enforced", Policy: `
network_policies:
  query_proto:
    name: query_proto
    endpoints:
      - host: api.proto.com
        port: 8080
        protocol: rest
        enforcement: enforce
        rules:
          - allow:
              method: GET
              path: /download
              query:
                tag: { glob: "foo-*" }
    binaries:
      - { path: /usr/bin/curl }
`, Binary: curl, Host: "api.proto.com", Port: 8080, Method: "GET", Path: "/download", Query: "tag=foo-a", OpenShell: allow},
	{Source: opaRS + "l7_method_from_proto_is_enforced", Policy: initPolicy("jsonrpc_proto", "jsonrpc.proto.com", "/rpc", "json-rpc"),
		Binary: curl, Host: "jsonrpc.proto.com", Port: 8000, Method: "POST", Path: "/rpc", MCP: rpc("initialize"), OpenShell: allow,
		Divergence: divUninspected, Ours: deny},
	{Source: opaRS + "l7_mcp_tool_params_from_proto_are_enforced", Policy: `
network_policies:
  mcp_proto:
    name: mcp_proto
    endpoints:
      - host: mcp.proto.com
        port: 8000
        path: /mcp
        protocol: mcp
        enforcement: enforce
        rules:
          - allow:
              method: tools/call
              params:
                name: { any: [read_status, "submit_*"] }
    binaries:
      - { path: /usr/bin/curl }
`, Binary: curl, Host: "mcp.proto.com", Port: 8000, Method: "POST", Path: "/mcp", MCP: call("blocked_action"), OpenShell: deny},
	{Source: opaRS + "l7_jsonrpc_endpoint_ignores_rest_shaped_allow_rules", Policy: `
network_policies:
  jsonrpc_rest_bypass:
    name: jsonrpc_rest_bypass
    endpoints:
      - host: jsonrpc.rest-bypass.test
        ports: [8000]
        path: /rpc
        protocol: json-rpc
        rules:
          - allow: { method: POST, path: "**" }
    binaries:
      - { path: /usr/bin/curl }
`, Binary: curl, Host: "jsonrpc.rest-bypass.test", Port: 8000, Method: "POST", Path: "/rpc", MCP: rpc("reports.list"), OpenShell: deny, RawData: true},
	{Source: opaRS + "l7_jsonrpc_receive_stream_get_is_denied_for_matching_endpoint", Policy: initPolicy("jsonrpc_stream", "jsonrpc.stream.test", "/rpc", "json-rpc"),
		Binary: curl, Host: "jsonrpc.stream.test", Port: 8000, Method: "GET", Path: "/rpc", OpenShell: deny},
	{Source: opaRS + "l7_mcp_receive_stream_get_is_allowed_for_matching_endpoint", Policy: initPolicy("mcp_stream", "mcp.stream.test", "/mcp", "mcp"),
		Binary: curl, Host: "mcp.stream.test", Port: 8000, Method: "GET", Path: "/mcp", OpenShell: allow},
	{Source: opaRS + "l7_mcp_receive_stream_get_is_allowed_for_matching_endpoint", Policy: initPolicy("mcp_stream", "mcp.stream.test", "/mcp", "mcp"),
		Binary: curl, Host: "mcp.stream.test", Port: 8000, Method: "GET", Path: "/other", OpenShell: deny},
	{Source: opaRS + "l7_jsonrpc_response_post_is_denied_for_matching_endpoint", Policy: initPolicy("jsonrpc_response", "jsonrpc.response.test", "/rpc", "json-rpc"),
		Binary: curl, Host: "jsonrpc.response.test", Port: 8000, Method: "POST", Path: "/rpc",
		MCP: &policy.MCPMessage{Response: true, ProtocolVersion: "2025-11-25"}, OpenShell: deny},
	{Source: opaRS + "l7_mcp_response_post_is_allowed_for_matching_endpoint", Policy: initPolicy("mcp_response", "mcp.response.test", "/mcp", "mcp"),
		Binary: curl, Host: "mcp.response.test", Port: 8000, Method: "POST", Path: "/mcp",
		MCP: &policy.MCPMessage{Response: true, ProtocolVersion: "2025-11-25"}, OpenShell: allow},
	{Source: opaRS + "l7_jsonrpc_unlisted_method_is_denied", Policy: initPolicy("jsonrpc_methods", "jsonrpc.methods.test", "/rpc", "json-rpc"),
		Binary: curl, Host: "jsonrpc.methods.test", Port: 8000, Method: "POST", Path: "/rpc", MCP: rpc("reports.progress"), OpenShell: deny},
	{Source: opaRS + "l7_github_git_transport_allows_clone_blocks_push", Policy: githubGitPolicy,
		Binary: curl, Host: "github.com", Port: 443, Method: "POST", Path: "/NVIDIA/OpenShell.git/git-upload-pack", OpenShell: allow},
	{Source: opaRS + "l7_github_git_transport_allows_clone_blocks_push", Policy: githubGitPolicy,
		Binary: curl, Host: "github.com", Port: 443, Method: "POST", Path: "/NVIDIA/OpenShell.git/git-receive-pack", OpenShell: deny},
	{Source: opaRS + "l7_mcp_rules_filter_tools_call", Policy: mcpParamsPolicy,
		Binary: curl, Host: "mcp.params.test", Port: 8000, Method: "POST", Path: "/mcp", MCP: call("submit_report"), OpenShell: allow},
	{Source: opaRS + "l7_mcp_rules_filter_tools_call", Policy: mcpParamsPolicy,
		Binary: curl, Host: "mcp.params.test", Port: 8000, Method: "POST", Path: "/mcp", MCP: call("blocked_action"), OpenShell: deny},
	{Source: opaRS + "l7_mcp_rules_filter_tools_call", Policy: mcpParamsPolicy,
		Binary: curl, Host: "mcp.params.test", Port: 8000, Method: "POST", Path: "/mcp", MCP: rpc("tools/list"), OpenShell: deny},
	{Source: opaRS + "l7_mcp_method_profile_allows_all_tools", Policy: mcpDefaultPolicy,
		Binary: curl, Host: "mcp.default.test", Port: 8000, Method: "POST", Path: "/mcp", MCP: call("any_tool"), OpenShell: allow},
	{Source: opaRS + "l7_mcp_method_profile_allows_all_tools", Policy: mcpDefaultPolicy,
		Binary: curl, Host: "mcp.default.test", Port: 8000, Method: "POST", Path: "/mcp", MCP: rpc("tools/list"), OpenShell: allow},
	{Source: opaRS + "l7_mcp_null_params_non_matches_without_opa_error", Policy: `
network_policies:
  mcp_null_params:
    name: mcp_null_params
    endpoints:
      - host: mcp.null-params.test
        port: 8000
        path: /mcp
        protocol: mcp
        enforcement: enforce
        rules:
          - allow:
              method: tools/call
              tool: read_status
    binaries:
      - { path: /usr/bin/curl }
`, Binary: curl, Host: "mcp.null-params.test", Port: 8000, Method: "POST", Path: "/mcp",
		MCP: &policy.MCPMessage{Method: "tools/call", ProtocolVersion: "2025-11-25"}, OpenShell: deny},
	{Source: opaRS + "l7_wrong_binary_denied_even_with_matching_rules", Policy: l7TestData,
		Binary: "/usr/bin/python3", Host: "api.example.com", Port: 8080, Method: "GET", Path: "/repos/myorg/foo", OpenShell: deny},
	{Source: opaRS + "l7_deny_reason_populated", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "DELETE", Path: "/repos/myorg/foo", OpenShell: deny},
	{Source: opaRS + "explicit_tcp_authorizes_as_l4_without_endpoint_config", Policy: l7TestData,
		Binary: curl, Host: "explicit-tcp.example.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "l7_clone_engine_for_tunnel", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "GET", Path: "/repos/myorg/foo", OpenShell: allow},
	{Source: opaRS + "l7_deny_rule_blocks_allowed_method_path", Policy: l7DenyTestData,
		Binary: curl, Host: "api.github.com", Port: 443, Method: "POST", Path: "/repos/myorg/pulls/123/reviews", OpenShell: deny},
	{Source: opaRS + "l7_deny_rule_allows_non_matching_requests", Policy: l7DenyTestData,
		Binary: curl, Host: "api.github.com", Port: 443, Method: "GET", Path: "/repos/myorg/issues", OpenShell: allow},
	{Source: opaRS + "l7_deny_rule_allows_same_method_different_path", Policy: l7DenyTestData,
		Binary: curl, Host: "api.github.com", Port: 443, Method: "POST", Path: "/repos/myorg/issues", OpenShell: allow},
	{Source: opaRS + "l7_deny_rule_blocks_wildcard_method", Policy: l7DenyTestData,
		Binary: curl, Host: "api.github.com", Port: 443, Method: "GET", Path: "/repos/myorg/rulesets", OpenShell: deny},
	{Source: opaRS + "l7_deny_rule_blocks_put_protection", Policy: l7DenyTestData,
		Binary: curl, Host: "api.github.com", Port: 443, Method: "PUT", Path: "/repos/myorg/branches/main/protection", OpenShell: deny},
	{Source: opaRS + "l7_deny_reason_populated_when_deny_rule_matches", Policy: l7DenyTestData,
		Binary: curl, Host: "api.github.com", Port: 443, Method: "POST", Path: "/repos/myorg/pulls/123/reviews", OpenShell: deny},
	{Source: opaRS + "l7_deny_rule_with_query_blocks_matching_params", Policy: l7DenyTestData,
		Binary: curl, Host: "api.restricted.com", Port: 443, Method: "POST", Path: "/admin/settings", Query: "force=true", OpenShell: deny},
	{Source: opaRS + "l7_deny_rule_with_query_allows_non_matching_params", Policy: l7DenyTestData,
		Binary: curl, Host: "api.restricted.com", Port: 443, Method: "POST", Path: "/admin/settings", Query: "force=false", OpenShell: allow},
	{Source: opaRS + "l7_deny_rule_with_query_blocks_when_any_value_matches", Policy: l7DenyTestData,
		Binary: curl, Host: "api.restricted.com", Port: 443, Method: "POST", Path: "/admin/settings", Query: "force=true&force=false", OpenShell: deny},
	{Source: opaRS + "l7_deny_rule_without_matching_query_key_allows", Policy: l7DenyTestData,
		Binary: curl, Host: "api.restricted.com", Port: 443, Method: "POST", Path: "/admin/settings", OpenShell: allow},
	{Source: opaRS + "l7_overlapping_policies_allow_request_does_not_crash", Policy: overlappingL7TestData,
		Binary: curl, Host: "192.168.1.100", Addr: "192.168.1.100", Port: 8567, Method: "GET", Path: "/test", OpenShell: allow},
	{Source: opaRS + "l7_overlapping_policies_deny_request_does_not_crash", Policy: overlappingL7TestData,
		Binary: curl, Host: "192.168.1.100", Addr: "192.168.1.100", Port: 8567, Method: "DELETE", Path: "/test", OpenShell: deny},
	// provider_credentialed is set by OpenShell's gateway, not part of the
	// YAML format (serde deny_unknown_fields), so it is left out here.
	{Source: opaRS + "credential_guard_does_not_shadow_inspected_endpoint_config", Policy: `
network_policies:
  telemetry_l4:
    name: telemetry_l4
    endpoints:
      - host: api.example.com
        port: 443
        allow_uninspected_credentials: true
    binaries:
      - { path: /usr/bin/curl }
  inspected_api:
    name: inspected_api
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        access: full
        tls: skip
        allowed_ips: ["10.0.5.0/24"]
    binaries:
      - { path: /usr/bin/curl }
`, Binary: curl, Host: "api.example.com", Addr: "10.0.5.9", Port: 443, Method: "DELETE", Path: "/x", OpenShell: allow},
}

func TestOPAL7(t *testing.T) { runDecide(t, opaL7Cases) }

var opaActionCases = []decideCase{
	{Source: opaRS + "overlapping_policy_outputs_are_snapshotted_independently", Policy: overlappingL7TestData,
		Binary: curl, Host: "192.168.1.100", Addr: "192.168.1.100", Port: 8567, Method: "GET", Path: "/", OpenShell: allow, Entry: "allow_192_168_1_100_8567"},
	{Source: opaRS + "explicitly_allowed_endpoint_binary_returns_allow", Policy: inferenceTestData,
		Binary: "/usr/local/bin/claude", Host: "api.anthropic.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "unknown_endpoint_returns_deny", Policy: inferenceTestData,
		Binary: "/usr/bin/python3", Host: "api.openai.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "unknown_endpoint_without_inference_returns_deny", Policy: noInferenceTestData,
		Binary: "/usr/bin/python3", Host: "api.openai.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "endpoint_in_policy_binary_not_allowed_returns_deny", Policy: inferenceTestData,
		Binary: "/usr/bin/python3", Host: "api.anthropic.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "endpoint_in_policy_binary_not_allowed_without_inference_returns_deny", Policy: noInferenceTestData,
		Binary: "/usr/bin/python3", Host: "gitlab.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "from_proto_explicitly_allowed_returns_allow", Policy: testProto,
		Binary: "/usr/local/bin/claude", Host: "api.anthropic.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "from_proto_unknown_endpoint_returns_deny", Policy: testProto,
		Binary: "/usr/bin/python3", Host: "api.openai.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "network_action_with_dev_policy", Policy: sandboxPolicyYAML,
		Binary: "/usr/local/bin/claude", Host: "api.anthropic.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "allowed_ips_mode2_host_plus_ips_allows", Policy: allowedIPsTestData,
		Binary: curl, Host: "my-service.corp.net", Addr: "10.0.5.7", Port: 8080, OpenShell: allow},
	{Source: opaRS + "egress_authorization_returns_one_generation_consistent_snapshot", Policy: allowedIPsTestData,
		Binary: curl, Host: "my-service.corp.net", Addr: "10.0.5.7", Port: 8080, OpenShell: allow},
	{Source: opaRS + "egress_authorization_preserves_explicit_tcp_endpoint_identity", Policy: `
network_policies:
  native_tcp:
    name: native_tcp
    endpoints:
      - host: database.example.com
        port: 5432
        protocol: tcp
    binaries:
      - path: /usr/bin/client
`, Binary: "/usr/bin/client", Host: "database.example.com", Port: 5432, OpenShell: allow},
	{Source: opaRS + "allowed_ips_mode3_hostless_allows_any_domain", Policy: allowedIPsTestData,
		Binary: curl, Host: "anything.example.com", Addr: "192.168.1.1", Port: 9443, OpenShell: allow},
	{Source: opaRS + "exact_declared_endpoint_host_true_for_l4_host_only", Policy: allowedIPsTestData,
		Binary: curl, Host: "api.github.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "exact_declared_endpoint_host_false_for_wildcard_host", Policy: allowedIPsTestData,
		Binary: curl, Host: "api.corp.net", Port: 443, OpenShell: allow},
}

func TestOPANetworkAction(t *testing.T) { runDecide(t, opaActionCases) }

// one is a document with one entry holding the given endpoints (YAML list
// items, already indented) and one binary.
func one(endpoints, binary string) string {
	return "network_policies:\n  test:\n    name: test\n    endpoints:\n" + endpoints + "    binaries:\n      - { path: " + binary + " }\n"
}

func hostEP(host, ports string) string {
	return "      - { host: \"" + host + "\", " + ports + " }\n"
}

const wildcardL7 = `      - host: "*.example.com"
        port: 8080
        protocol: rest
        enforcement: enforce
        tls: terminate
        rules:
          - allow:
              method: GET
              path: "/api/**"
`

const multiL7 = `      - host: api.example.com
        ports: [8080, 9090]
        protocol: rest
        enforcement: enforce
        tls: terminate
        rules:
          - allow:
              method: GET
              path: "**"
`

const pythonPolicy = `
network_policies:
  python_policy:
    name: python_policy
    endpoints:
      - { host: pypi.org, port: 443 }
    binaries:
      - { path: /usr/bin/python3 }
      - { path: /usr/bin/python3.11 }
`

var opaHostCases = []decideCase{
	{Source: opaRS + "allowed_ips_mode3_wrong_port_denied", Policy: allowedIPsTestData,
		Binary: curl, Host: "anything.example.com", Addr: "192.168.1.1", Port: 12345, OpenShell: deny},
	{Source: opaRS + "allowed_ips_proto_round_trip", Policy: `
network_policies:
  internal:
    name: internal
    endpoints:
      - host: internal.corp.net
        port: 8080
        allowed_ips: ["10.0.5.0/24", "10.0.6.0/24"]
    binaries:
      - { path: /usr/bin/curl }
`, Binary: curl, Host: "internal.corp.net", Addr: "10.0.6.1", Port: 8080, OpenShell: allow},
	{Source: opaRS + "multi_port_endpoint_matches_first_port", Policy: one(hostEP("api.example.com", "ports: [443, 8443]"), curl),
		Binary: curl, Host: "api.example.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "multi_port_endpoint_matches_second_port", Policy: one(hostEP("api.example.com", "ports: [443, 8443]"), curl),
		Binary: curl, Host: "api.example.com", Port: 8443, OpenShell: allow},
	{Source: opaRS + "multi_port_endpoint_rejects_unlisted_port", Policy: one(hostEP("api.example.com", "ports: [443, 8443]"), curl),
		Binary: curl, Host: "api.example.com", Port: 80, OpenShell: deny},
	{Source: opaRS + "single_port_backwards_compat", Policy: one(hostEP("api.example.com", "port: 443"), curl),
		Binary: curl, Host: "api.example.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "hostless_endpoint_multi_port", Policy: one("      - ports: [80, 443]\n        allowed_ips: [\"10.0.0.0/8\"]\n", curl),
		Binary: curl, Host: "anything.internal", Addr: "10.1.2.3", Port: 443, OpenShell: allow},
	{Source: opaRS + "from_proto_multi_port_allows_matching", Policy: one(hostEP("api.example.com", "ports: [443, 8443]"), curl),
		Binary: curl, Host: "api.example.com", Port: 8443, OpenShell: allow},
	{Source: opaRS + "wildcard_host_matches_subdomain", Policy: one(hostEP("*.example.com", "port: 443"), curl),
		Binary: curl, Host: "api.example.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "wildcard_host_rejects_deep_subdomain", Policy: one(hostEP("*.example.com", "port: 443"), curl),
		Binary: curl, Host: "deep.sub.example.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "wildcard_host_rejects_exact_domain", Policy: one(hostEP("*.example.com", "port: 443"), curl),
		Binary: curl, Host: "example.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "wildcard_host_case_insensitive", Policy: one(hostEP("*.EXAMPLE.COM", "port: 443"), curl),
		Binary: curl, Host: "api.example.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "wildcard_host_plus_port", Policy: one(hostEP("*.example.com", "port: 443"), curl),
		Binary: curl, Host: "api.example.com", Port: 80, OpenShell: deny},
	{Source: opaRS + "wildcard_host_intra_label_matches", Policy: one(hostEP("*-aiplatform.googleapis.com", "port: 443"), curl),
		Binary: curl, Host: "us-central1-aiplatform.googleapis.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "wildcard_host_intra_label_does_not_cross_dot", Policy: one(hostEP("*-aiplatform.googleapis.com", "port: 443"), curl),
		Binary: curl, Host: "us-central1.aiplatform.googleapis.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "wildcard_host_middle_label_matches_one_region_label", Policy: one(hostEP("*.s3.*.amazonaws.com", "port: 443"), curl),
		Binary: curl, Host: "my-bucket.s3.us-east-1.amazonaws.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "wildcard_host_middle_label_does_not_match_missing_bucket_label", Policy: one(hostEP("*.s3.*.amazonaws.com", "port: 443"), curl),
		Binary: curl, Host: "s3.us-east-1.amazonaws.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "wildcard_host_middle_label_does_not_skip_dualstack_label", Policy: one(hostEP("*.s3.*.amazonaws.com", "port: 443"), curl),
		Binary: curl, Host: "my-bucket.s3.dualstack.us-east-1.amazonaws.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "wildcard_host_multi_port", Policy: one(hostEP("*.example.com", "ports: [443, 8443]"), curl),
		Binary: curl, Host: "api.example.com", Port: 8443, OpenShell: allow},
	{Source: opaRS + "wildcard_host_l7_rules_apply", Policy: one(wildcardL7, curl),
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "GET", Path: "/api/foo", OpenShell: allow},
	{Source: opaRS + "wildcard_host_l7_rules_apply", Policy: one(wildcardL7, curl),
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "DELETE", Path: "/api/foo", OpenShell: deny},
	{Source: opaRS + "l7_multi_port_request_evaluation", Policy: one(multiL7, curl),
		Binary: curl, Host: "api.example.com", Port: 9090, Method: "GET", Path: "/anything", OpenShell: allow},
	{Source: opaRS + "symlink_expanded_binary_allows_resolved_path", Policy: pythonPolicy,
		Binary: "/usr/bin/python3.11", Host: "pypi.org", Port: 443, OpenShell: allow},
	{Source: opaRS + "symlink_expanded_binary_still_allows_original_path", Policy: pythonPolicy,
		Binary: "/usr/bin/python3", Host: "pypi.org", Port: 443, OpenShell: allow},
	{Source: opaRS + "symlink_expanded_binary_does_not_weaken_security", Policy: pythonPolicy,
		Binary: curl, Host: "pypi.org", Port: 443, OpenShell: deny},
	{Source: opaRS + "symlink_expansion_works_with_ancestors", Policy: pythonPolicy,
		Binary: curl, Ancestors: []string{"/usr/bin/python3.11"}, Host: "pypi.org", Port: 443, OpenShell: allow},
	{Source: opaRS + "symlink_expansion_via_proto_with_pid_zero", Policy: testProto,
		Binary: "/usr/local/bin/claude", Host: "api.anthropic.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "reload_from_proto_with_pid_zero_works", Policy: testProto,
		Binary: "/usr/local/bin/claude", Host: "api.anthropic.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "deny_reason_includes_symlink_hint", Policy: sandboxPolicyYAML,
		Binary: "/usr/bin/python3.11", Host: "api.anthropic.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "deny_reason_collapses_endpoint_misses", Policy: sandboxPolicyYAML,
		Binary: "/usr/local/bin/claude", Host: "not-configured.example.com", Port: 443, OpenShell: deny},
	{Source: opaRS + "l7_head_allowed_where_get_is_allowed", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "HEAD", Path: "/repos/myorg/foo", OpenShell: allow},
	{Source: opaRS + "l7_head_denied_when_only_post_allowed", Policy: "network_policies:\n  p:\n    name: p\n    endpoints:\n      - host: h.test\n        port: 80\n        protocol: rest\n        enforcement: enforce\n        rules:\n          - allow: {method: POST, path: \"/\"}\n    binaries:\n      - {path: /usr/bin/curl}\n",
		Binary: curl, Host: "h.test", Port: 80, Method: "HEAD", Path: "/", OpenShell: deny},
	{Source: opaRS + "l7_options_not_implicitly_allowed_by_get", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "OPTIONS", Path: "/repos/myorg/foo", OpenShell: deny},
	{Source: opaRS + "l7_head_blocked_by_deny_rule_targeting_get", Policy: "network_policies:\n  p:\n    name: p\n    endpoints:\n      - host: h.test\n        port: 80\n        protocol: rest\n        enforcement: enforce\n        access: full\n        deny_rules:\n          - method: GET\n            path: \"/protected\"\n    binaries:\n      - {path: /usr/bin/curl}\n",
		Binary: curl, Host: "h.test", Port: 80, Method: "HEAD", Path: "/protected", OpenShell: deny},
}

func TestOPAHosts(t *testing.T) { runDecide(t, opaHostCases) }

// GraphQL and generic JSON-RPC endpoints: the proxy does not inspect these
// protocols yet, so every request to them is denied; OpenShell's denials
// agree, its allows follow the divergence.
func gql(test, host string, v verdict) decideCase {
	c := decideCase{Source: opaRS + test, Policy: l7TestData, Binary: curl, Host: host, Port: 443, Method: "POST", Path: "/graphql", OpenShell: v}
	if v == allow {
		c.Divergence, c.Ours = divUninspected, deny
	}
	return c
}

func jrpc(test, policy, host, method, path string, msg *policy.MCPMessage, v verdict) decideCase {
	c := decideCase{Source: opaRS + test, Policy: policy, Binary: curl, Host: host, Port: 8000, Method: method, Path: path, MCP: msg, OpenShell: v}
	if v == allow {
		c.Divergence, c.Ours = divUninspected, deny
	}
	return c
}

func raw(c decideCase) decideCase { c.RawData = true; return c }

const jsonrpcPostPolicy = `
network_policies:
  jsonrpc_post:
    name: jsonrpc_post
    endpoints:
      - host: jsonrpc.post.test
        port: 8000
        path: /rpc
        protocol: json-rpc
        enforcement: enforce
        rules:
          - allow:
              method: initialize
        deny_rules:
          - method: reports.archive
    binaries:
      - { path: /usr/bin/curl }
`

const jsonrpcAllowAllPolicy = `
network_policies:
  jsonrpc_allow_all:
    name: jsonrpc_allow_all
    endpoints:
      - host: jsonrpc.allow-all.test
        port: 8000
        path: /rpc
        protocol: json-rpc
        enforcement: enforce
        rules:
          - allow:
              method: "*"
    binaries:
      - { path: /usr/bin/curl }
`

const jsonrpcGlobLiteralPolicy = `
network_policies:
  jsonrpc_glob_literal:
    name: jsonrpc_glob_literal
    endpoints:
      - host: jsonrpc.glob-literal.test
        ports: [8000]
        path: /rpc
        protocol: json-rpc
        rules:
          - allow:
              method: "reports.*"
    binaries:
      - { path: /usr/bin/curl }
`

const jsonrpcParamsPolicy = `
network_policies:
  jsonrpc_params:
    name: jsonrpc_params
    endpoints:
      - host: jsonrpc.params.test
        port: 8000
        path: /rpc
        protocol: json-rpc
        enforcement: enforce
        rules:
          - allow:
              method: reports.search
        deny_rules:
          - method: reports.archive
    binaries:
      - { path: /usr/bin/curl }
`

var opaUninspectedCases = []decideCase{
	gql("l7_graphql_batch_denied_if_any_operation_unallowed", "api.graphql.com", deny),
	gql("l7_graphql_deny_rule_takes_precedence", "api.graphql.com", deny),
	gql("l7_graphql_unregistered_hash_only_query_denied", "api.graphql.com", deny),
	gql("l7_graphql_unregistered_hash_only_query_has_deny_reason", "api.graphql.com", deny),
	gql("l7_graphql_parse_error_denied", "api.graphql.com", deny),
	gql("l7_graphql_readonly_access_allows_query_and_denies_mutation", "gql.readonly.com", allow),
	gql("l7_graphql_readonly_access_allows_query_and_denies_mutation", "gql.readonly.com", deny),
	gql("l7_websocket_graphql_unlisted_field_denied", "realtime.graphql.com", deny),
	gql("l7_websocket_graphql_deny_rule_takes_precedence", "realtime.graphql.com", deny),
	{Source: opaRS + "l7_endpoint_path_scopes_rest_and_graphql_on_same_host", Policy: mixedAPIPolicy,
		Binary: curl, Host: "api.github.test", Port: 443, Method: "POST", Path: "/graphql", OpenShell: allow,
		Divergence: divUninspected, Ours: deny},
	jrpc("l7_method_rules_require_post", jsonrpcPostPolicy, "jsonrpc.post.test", "POST", "/rpc", rpc("initialize"), allow),
	jrpc("l7_method_rules_require_post", jsonrpcPostPolicy, "jsonrpc.post.test", "PUT", "/rpc", rpc("initialize"), deny),
	jrpc("l7_method_rules_require_post", jsonrpcPostPolicy, "jsonrpc.post.test", "GET", "/rpc", nil, deny),
	jrpc("l7_jsonrpc_request_params_do_not_affect_method_policy", jsonrpcParamsPolicy, "jsonrpc.params.test", "POST", "/rpc", rpc("reports.search"), allow),
	// OpenShell's test feeds this policy to Rego unvalidated.
	raw(jrpc("l7_jsonrpc_method_globs_are_exact_literals_in_rego", jsonrpcGlobLiteralPolicy, "jsonrpc.glob-literal.test", "POST", "/rpc", rpc("reports.list"), deny)),
	raw(jrpc("l7_jsonrpc_method_globs_are_exact_literals_in_rego", jsonrpcGlobLiteralPolicy, "jsonrpc.glob-literal.test", "POST", "/rpc", rpc("reports.*"), allow)),
	jrpc("l7_jsonrpc_allow_all_still_allows_any_method", jsonrpcAllowAllPolicy, "jsonrpc.allow-all.test", "POST", "/rpc", rpc("reports.archive"), allow),
	jrpc("l7_jsonrpc_null_metadata_non_matches_without_opa_error", initPolicy("jsonrpc_null", "jsonrpc.null.test", "/rpc", "json-rpc"), "jsonrpc.null.test", "POST", "/rpc", nil, deny),
}

func TestOPAUninspected(t *testing.T) { runDecide(t, opaUninspectedCases) }

// Endpoint configuration queries, as the requests they govern: allowed_ips
// returned for an endpoint bound the addresses it reaches; an L7 config
// means requests are inspected, none means they are not.
var opaConfigCases = []decideCase{
	{Source: opaRS + "allowed_ips_mode2_returns_allowed_ips", Policy: allowedIPsTestData,
		Binary: curl, Host: "my-service.corp.net", Addr: "10.0.6.1", Port: 8080, OpenShell: deny},
	{Source: opaRS + "allowed_ips_mode3_returns_allowed_ips", Policy: allowedIPsTestData,
		Binary: curl, Host: "anything.example.com", Addr: "172.20.0.1", Port: 9443, OpenShell: allow},
	{Source: opaRS + "allowed_ips_mode1_no_ips_returns_empty", Policy: allowedIPsTestData,
		Binary: curl, Host: "api.github.com", Addr: "140.82.112.6", Port: 443, OpenShell: allow},
	{Source: opaRS + "exact_declared_endpoint_host_true_for_host_with_allowed_ips", Policy: allowedIPsTestData,
		Binary: curl, Host: "my-service.corp.net", Addr: "10.0.5.9", Port: 8080, OpenShell: allow},
	{Source: opaRS + "exact_declared_endpoint_host_false_for_hostless_allowed_ips", Policy: allowedIPsTestData,
		Binary: curl, Host: "anything.example.com", Addr: "192.168.1.1", Port: 9443, OpenShell: allow},
	{Source: opaRS + "l7_endpoint_config_returned_for_l7_endpoint", Policy: l7TestData,
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "DELETE", Path: "/repos/org/repo", OpenShell: deny},
	{Source: opaRS + "l7_endpoint_config_none_for_l4_only", Policy: l7TestData,
		Binary: curl, Host: "l4only.example.com", Port: 443, OpenShell: allow},
	{Source: opaRS + "wildcard_host_l7_endpoint_config_returned", Policy: one(wildcardL7, curl),
		Binary: curl, Host: "api.example.com", Port: 8080, Method: "POST", Path: "/api/foo", OpenShell: deny},
	{Source: opaRS + "l7_websocket_graphql_not_bypassed_by_generic_text_rule", Policy: `
network_policies:
  graphql_ws:
    name: graphql_ws
    endpoints:
      - host: realtime.graphql.com
        ports: [443]
        path: "/graphql"
        protocol: websocket
        enforcement: enforce
        rules:
          - allow:
              method: GET
              path: "/graphql"
          - allow:
              method: WEBSOCKET_TEXT
              path: "/graphql"
          - allow:
              operation_type: query
              fields: [viewer]
    binaries:
      - { path: /usr/bin/curl }
`, Binary: curl, Host: "realtime.graphql.com", Port: 443, Method: "POST", Path: "/graphql", OpenShell: deny},
}

func TestOPAConfig(t *testing.T) { runDecide(t, opaConfigCases) }
