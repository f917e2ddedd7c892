package openshell

import "testing"

// Validation cases from crates/openshell-supervisor-network/src/l7/mod.rs
// (validate_l7_policies): the supervisor's endpoint checks, written as the
// documents its JSON fixtures describe (each one entry "test" for curl).

const l7ModRS = "crates/openshell-supervisor-network/src/l7/mod.rs: "

// l7ep is a document whose single endpoint is fields (a YAML flow mapping
// body, without braces).
func l7ep(fields string) string {
	return "network_policies:\n  test:\n    name: test\n    endpoints:\n      - { " + fields + " }\n    binaries:\n      - { path: /usr/bin/curl }\n"
}

func restQuery(query string) string {
	return l7ep(`host: api.example.com, port: 8080, protocol: rest, rules: [ { allow: { method: GET, path: /download, query: ` + query + ` } } ]`)
}

func denyQuery(query string) string {
	return l7ep(`host: api.example.com, port: 443, protocol: rest, access: full, deny_rules: [ { method: POST, path: "/admin/**", query: ` + query + ` } ]`)
}

var l7ModCases = []validateCase{
	{Source: l7ModRS + "validate_wildcard_host_star_only_error", Policy: l7ep(`host: "*", port: 443`), OpenShell: deny, Contains: "host"},
	{Source: l7ModRS + "validate_wildcard_host_double_star_only_error", Policy: l7ep(`host: "**", port: 443`), OpenShell: deny, Contains: "host"},
	{Source: l7ModRS + "validate_wildcard_host_middle_label_star_valid_no_error", Policy: l7ep(`host: "*.s3.*.amazonaws.com", port: 443`), OpenShell: allow},
	{Source: l7ModRS + "validate_wildcard_host_middle_label_partial_star_error", Policy: l7ep(`host: "*.s3.us-*.amazonaws.com", port: 443`), OpenShell: deny, Contains: "host"},
	{Source: l7ModRS + "validate_wildcard_host_middle_label_double_star_error", Policy: l7ep(`host: "*.s3.**.amazonaws.com", port: 443`), OpenShell: deny, Contains: "host"},
	{Source: l7ModRS + "validate_wildcard_host_single_label_error", Policy: l7ep(`host: "*com", port: 443`), OpenShell: deny, Contains: "host"},
	{Source: l7ModRS + "validate_wildcard_host_recursive_intra_label_error", Policy: l7ep(`host: "foo**.example.com", port: 443`), OpenShell: deny, Contains: "host"},
	{Source: l7ModRS + "validate_wildcard_host_tld_rejected", Policy: l7ep(`host: "*.com", port: 443`), OpenShell: deny, Contains: "host"},
	{Source: l7ModRS + "validate_wildcard_host_double_star_tld_rejected", Policy: l7ep(`host: "**.org", port: 443`), OpenShell: deny, Contains: "host"},
	{Source: l7ModRS + "validate_wildcard_host_valid_no_error", Policy: l7ep(`host: "*.example.com", port: 443`), OpenShell: allow},
	{Source: l7ModRS + "validate_wildcard_host_double_star_valid_no_error", Policy: l7ep(`host: "**.example.com", port: 443`), OpenShell: allow},
	{Source: l7ModRS + "validate_wildcard_host_intra_label_valid_no_error", Policy: l7ep(`host: "*-aiplatform.googleapis.com", port: 443`), OpenShell: allow},
	{Source: l7ModRS + "validate_port_and_ports_mutually_exclusive", Policy: l7ep(`host: api.example.com, port: 443, ports: [443, 8443]`), OpenShell: deny, Contains: "port"},
	{Source: l7ModRS + "validate_ports_array_rest_443_no_warning", Policy: l7ep(`host: api.example.com, ports: [443], protocol: rest, access: read-only`), OpenShell: allow},
	{Source: l7ModRS + "validate_query_any_requires_non_empty_array", Policy: restQuery(`{ tag: { any: [] } }`), OpenShell: deny, Contains: "query.tag"},
	{Source: l7ModRS + "validate_query_object_rejects_unknown_keys", Policy: restQuery(`{ tag: { mode: "foo-*" } }`), OpenShell: deny, Contains: "query.tag"},
	{Source: l7ModRS + "validate_query_glob_warns_on_unclosed_bracket", Policy: restQuery(`{ tag: "[unclosed" }`), OpenShell: allow, Warn: "query.tag"},
	{Source: l7ModRS + "validate_query_glob_warns_on_unclosed_brace", Policy: restQuery(`{ format: { glob: "{json,xml" } }`), OpenShell: allow, Warn: "query.format"},
	{Source: l7ModRS + "validate_query_any_warns_on_malformed_glob_item", Policy: restQuery(`{ tag: { any: ["valid-*", "[bad"] } }`), OpenShell: allow, Warn: "query.tag"},
	{Source: l7ModRS + "validate_query_string_and_any_matchers_are_accepted", Policy: restQuery(`{ slug: "my-*", tag: { any: ["foo-*", "bar-*"] }, owner: { glob: "org-*" } }`), OpenShell: allow},
	{Source: l7ModRS + "validate_rules_empty_list_rejected", Policy: l7ep(`host: api.example.com, port: 443, protocol: rest, access: full, rules: []`), OpenShell: deny, Contains: "rules"},
	{Source: l7ModRS + "validate_deny_rules_empty_list_rejected", Policy: l7ep(`host: api.example.com, port: 443, protocol: rest, access: full, deny_rules: []`), OpenShell: deny, Contains: "deny_rules"},
	{Source: l7ModRS + "validate_deny_rules_valid_config_accepted", Policy: l7ep(`host: api.example.com, port: 443, protocol: rest, access: read-write, deny_rules: [ { method: POST, path: "/repos/*/pulls/*/reviews" }, { method: PUT, path: "/repos/*/branches/*/protection" } ]`), OpenShell: allow},
	{Source: l7ModRS + "validate_deny_rules_query_empty_any_rejected", Policy: denyQuery(`{ type: { any: [] } }`), OpenShell: deny, Contains: "query.type"},
	{Source: l7ModRS + "validate_deny_rules_query_non_string_rejected", Policy: denyQuery(`{ force: 123 }`), OpenShell: deny, Contains: "query.force"},
	{Source: l7ModRS + "validate_deny_rules_query_valid_matchers_accepted", Policy: denyQuery(`{ force: "true", type: { any: ["admin-*", "root-*"] } }`), OpenShell: allow},
}

func TestL7Mod(t *testing.T) { runValidate(t, l7ModCases) }

// mcpep is an MCP endpoint on mcp.example.com:443/mcp with extra fields.
func mcpep(fields string) string {
	return l7ep(`host: mcp.example.com, port: 443, path: /mcp, protocol: mcp, ` + fields)
}

var l7ModMCPCases = []validateCase{
	{Source: l7ModRS + "validate_rules_and_access_mutual_exclusion", Policy: l7ep(`host: api.example.com, port: 443, protocol: rest, access: read-only, rules: [ { allow: { method: GET, path: "**" } } ]`), OpenShell: deny},
	{Source: l7ModRS + "validate_jsonrpc_rejects_access_presets", Policy: l7ep(`host: jsonrpc.example.com, port: 443, path: /rpc, protocol: json-rpc, access: full`), OpenShell: deny, Contains: "access"},
	{Source: l7ModRS + "validate_jsonrpc_requires_method_rules", Policy: l7ep(`host: jsonrpc.example.com, port: 443, path: /rpc, protocol: json-rpc, rules: [ { allow: { path: /rpc } } ]`), OpenShell: deny, Contains: "rules[0].allow"},
	{Source: l7ModRS + "validate_mcp_tool_selectors_use_endpoint_method_profile_and_reject_arguments", Policy: mcpep(`mcp: { allow_all_known_mcp_methods: true }, rules: [ { allow: { method: tools/call, tool: submit_report, params: { arguments: { scope: workspace/main } } } } ]`), OpenShell: deny, Contains: "rules[0].allow"},
	{Source: l7ModRS + "validate_mcp_tool_selectors_use_endpoint_method_profile_and_reject_arguments", Policy: mcpep(`mcp: { allow_all_known_mcp_methods: true }, rules: [ { allow: { method: initialize } }, { allow: { method: tools/call, tool: list_reports } } ], deny_rules: [ { method: tools/call, tool: "delete_*" } ]`), OpenShell: allow},
	{Source: l7ModRS + "validate_mcp_tool_selectors_require_method_by_default", Policy: mcpep(`rules: [ { allow: { tool: read_status } } ]`), OpenShell: deny, Contains: "rules[0].allow"},
	{Source: l7ModRS + "validate_mcp_tool_selectors_require_method_by_default", Policy: mcpep(`rules: [ { allow: { method: initialize } } ], deny_rules: [ { tool: "delete_*" } ]`), OpenShell: deny, Contains: "deny_rules[0]"},
	{Source: l7ModRS + "validate_mcp_method_globs_are_tools_family_only", Policy: mcpep(`rules: [ { allow: { method: vendor/extension } }, { allow: { method: "tools/*" } } ]`), OpenShell: allow},
	{Source: l7ModRS + "validate_mcp_method_globs_are_tools_family_only", Policy: mcpep(`rules: [ { allow: { method: "vendor/*" } } ]`), OpenShell: deny, Contains: "rules[0].allow.method"},
	{Source: l7ModRS + "validate_mcp_method_globs_are_tools_family_only", Policy: mcpep(`rules: [ { allow: { method: "*" } } ]`), OpenShell: deny, Contains: "rules[0].allow.method"},
	{Source: l7ModRS + "validate_mcp_wildcard_tool_requires_strict_tool_names", Policy: mcpep(`mcp: { strict_tool_names: false }, rules: [ { allow: { method: tools/call, tool: "read_*" } } ]`), OpenShell: deny, Contains: "rules[0].allow"},
	{Source: l7ModRS + "validate_mcp_wildcard_tool_requires_strict_tool_names", Policy: mcpep(`mcp: { strict_tool_names: false }, rules: [ { allow: { method: tools/call, params: { name: { any: [safe_tool, "list_*"] } } } } ]`), OpenShell: deny, Contains: "rules[0].allow"},
	{Source: l7ModRS + "validate_mcp_protocol_requires_endpoint_target", Policy: l7ep(`protocol: mcp, mcp: { allow_all_known_mcp_methods: true }`), OpenShell: deny},
	{Source: l7ModRS + "validate_mcp_broad_tools_call_deny_rejects_tool_allow_rules", Policy: mcpep(`rules: [ { allow: { method: tools/call, tool: read_status } } ], deny_rules: [ { method: tools/call } ]`), OpenShell: deny, Contains: "deny_rules[0]"},
	{Source: l7ModRS + "validate_mcp_broad_tools_call_allow_rejects_tool_allow_rules", Policy: mcpep(`rules: [ { allow: { method: "tools/*" } }, { allow: { method: tools/call, tool: read_status } } ]`), OpenShell: deny, Contains: "rules"},
	{Source: l7ModRS + "validate_mcp_strict_tool_names_is_mcp_only", Policy: l7ep(`host: api.example.com, port: 443, protocol: rest, access: full, mcp: { strict_tool_names: false }`), OpenShell: deny, Contains: "mcp"},
	{Source: l7ModRS + "validate_jsonrpc_rejects_params_matchers", Policy: l7ep(`host: jsonrpc.example.com, port: 443, path: /rpc, protocol: json-rpc, rules: [ { allow: { method: reports.search } } ], deny_rules: [ { method: reports.archive, params: { report_id: rpt-123 } } ]`), OpenShell: deny, Contains: "deny_rules[0]"},
}

func TestL7ModMCP(t *testing.T) { runValidate(t, l7ModMCPCases) }

var l7ModMoreCases = []validateCase{
	{Source: l7ModRS + "validate_mcp_options_require_bool", Policy: mcpep(`mcp: { strict_tool_names: "false", allow_all_known_mcp_methods: "false" }, rules: [ { allow: { method: tools/call } } ]`), OpenShell: deny, Contains: "mcp"},
	{Source: l7ModRS + "validate_mcp_requires_rules_by_default", Policy: mcpep(`enforcement: enforce`), OpenShell: deny},
	{Source: l7ModRS + "validate_jsonrpc_deny_rules_require_method", Policy: l7ep(`host: jsonrpc.example.com, port: 443, path: /rpc, protocol: json-rpc, rules: [ { allow: { method: "*" } } ], deny_rules: [ { params: { name: delete_resource } } ]`), OpenShell: deny, Contains: "deny_rules[0]"},
	{Source: l7ModRS + "validate_jsonrpc_method_rejects_globs_except_allow_all", Policy: l7ep(`host: jsonrpc.example.com, port: 443, path: /rpc, protocol: json-rpc, rules: [ { allow: { method: "*" } } ]`), OpenShell: allow},
	{Source: l7ModRS + "validate_jsonrpc_method_rejects_globs_except_allow_all", Policy: l7ep(`host: jsonrpc.example.com, port: 443, path: /rpc, protocol: json-rpc, rules: [ { allow: { method: "reports.*" } } ]`), OpenShell: deny, Contains: "rules[0].allow.method"},
	{Source: l7ModRS + "validate_jsonrpc_method_rejects_globs_except_allow_all", Policy: l7ep(`host: jsonrpc.example.com, port: 443, path: /rpc, protocol: json-rpc, rules: [ { allow: { method: "*" } } ], deny_rules: [ { method: "reports/{archive,delete}" } ]`), OpenShell: deny, Contains: "deny_rules[0].method",
		Divergence: divUninspected, Ours: allow},
	{Source: l7ModRS + "validate_protocol_requires_rules_or_access", Policy: l7ep(`host: api.example.com, port: 443, protocol: rest`), OpenShell: deny},
	{Source: l7ModRS + "validate_sql_enforce_blocked", Policy: l7ep(`host: db.internal, port: 5432, protocol: sql, enforcement: enforce, rules: [ { allow: { command: SELECT } } ]`), OpenShell: deny,
		Divergence: divUninspected, Ours: allow},
	{Source: l7ModRS + "validate_tls_terminate_deprecated_warning", Policy: l7ep(`host: api.example.com, port: 443, tls: terminate, protocol: rest, access: full`), OpenShell: allow, Warn: "tls"},
	{Source: l7ModRS + "validate_tls_skip_with_l7_on_443_warns", Policy: l7ep(`host: api.example.com, port: 443, tls: skip, protocol: rest, access: read-only`), OpenShell: allow, Warn: "tls"},
	{Source: l7ModRS + "validate_port_443_rest_no_tls_no_warning", Policy: l7ep(`host: api.example.com, port: 443, protocol: rest, access: read-only`), OpenShell: allow},
	{Source: l7ModRS + "expand_unsupported_access_preset_warns_and_leaves_rules_unexpanded", Policy: l7ep(`host: my-service.example.com, port: 80, protocol: rest, access: allow`), OpenShell: allow, Warn: "access"},
	{Source: l7ModRS + "validate_graphql_rule_requires_operation_type", Policy: l7ep(`host: api.example.com, port: 443, protocol: graphql, rules: [ { allow: { fields: [viewer] } } ]`), OpenShell: deny, Contains: "operation_type"},
	{Source: l7ModRS + "validate_graphql_persisted_query_mode", Policy: l7ep(`host: api.example.com, port: 443, protocol: graphql, access: full, persisted_queries: allow_all`), OpenShell: deny, Contains: "persisted_queries"},
	{Source: l7ModRS + "validate_deny_rules_require_protocol", Policy: l7ep(`host: api.example.com, port: 443, deny_rules: [ { method: POST, path: /admin } ]`), OpenShell: deny, Contains: "deny_rules"},
	{Source: l7ModRS + "validate_deny_rules_require_allow_base", Policy: l7ep(`host: api.example.com, port: 443, protocol: rest, deny_rules: [ { method: POST, path: /admin } ]`), OpenShell: deny, Contains: "rules"},
	{Source: l7ModRS + "validate_rules_deny_all_with_empty_allow_object", Policy: l7ep(`host: api.example.com, port: 443, protocol: rest, rules: [ { allow: { method: "", path: "" } } ]`), OpenShell: deny},
	{Source: l7ModRS + "validate_mcp_params_selector_not_classified_as_deny_all", Policy: l7ep(`host: mcp.example.com, port: 443, protocol: mcp, mcp: { allow_all_known_mcp_methods: true }, rules: [ { allow: { params: { name: "read_*" } } } ]`), OpenShell: allow},
	{Source: l7ModRS + "validate_mcp_tool_selector_not_classified_as_deny_all", Policy: l7ep(`host: mcp.example.com, port: 443, protocol: mcp, mcp: { allow_all_known_mcp_methods: true }, rules: [ { allow: { tool: my-tool } } ]`), OpenShell: allow},
	{Source: l7ModRS + "validate_mcp_allow_all_with_empty_allow_not_denied", Policy: l7ep(`host: mcp.example.com, port: 443, protocol: mcp, mcp: { allow_all_known_mcp_methods: true }, rules: [ { allow: {} } ]`), OpenShell: allow},
	{Source: l7ModRS + "l4_only_endpoint_untouched", Policy: l7ep(`host: api.example.com, port: 443`), OpenShell: allow},
}

func TestL7ModMore(t *testing.T) { runValidate(t, l7ModMoreCases) }
