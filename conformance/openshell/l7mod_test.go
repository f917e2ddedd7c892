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
