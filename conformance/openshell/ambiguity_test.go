package openshell

import "testing"

// Cases from crates/openshell-policy/src/ambiguity.rs: two entries ("left"
// for curl, "right" for bash) whose endpoints overlap must agree on the
// metadata that decides how a connection is handled. OpenShell's gateway
// loader (from_proto) applies this rule; its file loader does not, and
// opa.rs's l7_overlapping_policies_* tests load and judge a document it
// refuses. We follow the file loader for tls and allowed_ips
// (divOverlapMetadata) and refuse the other conflicts. OpenShell's fixtures
// build bare endpoints; where an L7 endpoint needs rules or access to be a
// valid document, access is added (it plays no part in the ambiguity).

func leftRight(left, right string) string {
	return `
network_policies:
  left:
    name: left
    endpoints:
      - ` + left + `
    binaries:
      - { path: /usr/bin/curl }
  right:
    name: right
    endpoints:
      - ` + right + `
    binaries:
      - { path: /usr/bin/bash }
`
}

var ambiguityCases = []validateCase{
	{Source: ambiguityRS + "disjoint_ports_do_not_overlap", Policy: leftRight(
		`{ host: api.example.com, port: 443, tls: skip }`,
		`{ host: api.example.com, port: 8443 }`), OpenShell: allow},
	{Source: ambiguityRS + "compatible_request_rules_may_overlap", Policy: leftRight(
		`{ host: api.example.com, port: 443, protocol: rest, tls: skip, access: read-only }`,
		`{ host: api.example.com, port: 443, protocol: rest, tls: skip, access: read-write }`), OpenShell: allow},
	{Source: ambiguityRS + "plain_l4_endpoint_does_not_compete_with_l7_endpoint_metadata", Policy: leftRight(
		`{ host: api.example.com, port: 443 }`,
		`{ host: api.example.com, port: 443, protocol: rest, enforcement: enforce, access: full }`), OpenShell: allow},
	{Source: ambiguityRS + "disjoint_path_specific_protocols_may_overlap", Policy: leftRight(
		`{ host: api.example.com, port: 443, path: /graphql, protocol: graphql, access: read-only }`,
		`{ host: api.example.com, port: 443, path: "/repos/**", protocol: rest, access: full }`), OpenShell: allow},
	{Source: ambiguityRS + "more_specific_path_may_override_request_pipeline_metadata", Policy: leftRight(
		`{ host: api.example.com, port: 443, protocol: rest, enforcement: enforce, access: full }`,
		`{ host: api.example.com, port: 443, path: /graphql, protocol: graphql, enforcement: enforce, access: read-only }`), OpenShell: allow},
	{Source: ambiguityRS + "question_mark_path_overlap_is_detected", Policy: leftRight(
		`{ host: api.example.com, port: 443, path: "/v?", protocol: rest, access: full }`,
		`{ host: api.example.com, port: 443, path: /v1, protocol: graphql, access: read-only }`), OpenShell: deny,
		Divergence: divUninspected, Ours: allow},
	{Source: ambiguityRS + "disjoint_character_class_paths_may_overlap_by_host_and_port", Policy: leftRight(
		`{ host: api.example.com, port: 443, path: "/v[12]", protocol: rest, access: full }`,
		`{ host: api.example.com, port: 443, path: "/v[34]", protocol: graphql, access: read-only }`), OpenShell: allow},
	{Source: ambiguityRS + "exact_wildcard_tls_conflict_is_rejected", Policy: leftRight(
		`{ host: "*.example.com", port: 443, tls: skip }`,
		`{ host: api.example.com, port: 443 }`), OpenShell: deny,
		Divergence: divOverlapMetadata, Ours: allow},
	{Source: ambiguityRS + "allowed_ip_conflict_is_rejected_regardless_of_order", Policy: leftRight(
		`{ host: api.example.com, port: 443, allowed_ips: ["10.0.1.0/24", "10.0.0.0/24"] }`,
		`{ host: api.example.com, port: 443, allowed_ips: ["10.0.0.0/24", "10.0.1.0/24"] }`), OpenShell: allow},
	{Source: ambiguityRS + "allowed_ip_conflict_is_rejected_regardless_of_order", Policy: leftRight(
		`{ host: api.example.com, port: 443, allowed_ips: ["10.0.1.0/24", "10.0.0.0/24"] }`,
		`{ host: api.example.com, port: 443, allowed_ips: ["10.0.2.0/24"] }`), OpenShell: deny,
		Divergence: divOverlapMetadata, Ours: allow},
	{Source: ambiguityRS + "credential_binding_conflicts_are_rejected_on_same_endpoint", Policy: leftRight(
		`{ host: api.example.com, port: 443, credential_binding: { provider: provider-a }, allow_uninspected_credentials: true }`,
		`{ host: api.example.com, port: 443, credential_binding: { provider: provider-b }, allow_uninspected_credentials: true }`), OpenShell: deny},
	{Source: ambiguityRS + "json_rpc_body_limit_is_compared_only_within_the_same_protocol", Policy: leftRight(
		`{ host: api.example.com, port: 443, protocol: json-rpc, rules: [ { allow: { method: "*" } } ] }`,
		`{ host: api.example.com, port: 443, protocol: mcp, mcp: { allow_all_known_mcp_methods: true } }`), OpenShell: deny},
	{Source: ambiguityRS + "different_binary_lists_do_not_hide_endpoint_ambiguity", Policy: leftRight(
		`{ host: api.example.com, port: 443, tls: skip }`,
		`{ host: api.example.com, port: 443 }`), OpenShell: deny,
		Divergence: divOverlapMetadata, Ours: allow},
	{Source: ambiguityRS + "explicit_tcp_and_omitted_protocol_are_ambiguous_for_native_tcp_eligibility", Policy: leftRight(
		`{ host: api.example.com, port: 443, protocol: tcp, tls: skip }`,
		`{ host: api.example.com, port: 443, tls: skip }`), OpenShell: deny,
		Divergence: divTCPAsL4, Ours: allow},
}

func TestAmbiguity(t *testing.T) { runValidate(t, ambiguityCases) }
