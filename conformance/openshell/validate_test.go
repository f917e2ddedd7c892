package openshell

import "testing"

// ep is a document with one entry whose single endpoint has the given
// extra fields (YAML, one per line, indented by 8).
func ep(fields string) string {
	return "network_policies:\n  test:\n    name: test\n    endpoints:\n      - host: api.example.com\n        port: 443\n" +
		fields + "    binaries:\n      - { path: /usr/bin/curl }\n"
}

// Cases from crates/openshell-policy/src/l7_validate.rs: the endpoint
// semantics checks, written as the documents they describe.
var l7ValidateCases = []validateCase{
	{Source: l7Validate + "valid_endpoint_produces_no_errors", Policy: ep("        protocol: rest\n        access: read-only\n"), OpenShell: allow},
	{Source: l7Validate + "rejects_unknown_protocol", Policy: ep("        protocol: ftp\n"), OpenShell: deny, Contains: "protocol"},
	{Source: l7Validate + "rejects_rules_and_access_together", Policy: ep("        protocol: rest\n        access: full\n        rules:\n          - allow: { method: GET, path: /x }\n"), OpenShell: deny},
	{Source: l7Validate + "rejects_jsonrpc_with_access_presets", Policy: ep("        protocol: json-rpc\n        access: full\n"), OpenShell: deny, Contains: "access"},
	{Source: l7Validate + "rejects_mcp_with_access_presets", Policy: ep("        protocol: mcp\n        access: full\n"), OpenShell: deny, Contains: "access"},
	{Source: l7Validate + "rejects_jsonrpc_without_rules", Policy: ep("        protocol: json-rpc\n"), OpenShell: deny},
	{Source: l7Validate + "rejects_protocol_without_rules_or_access", Policy: ep("        protocol: rest\n"), OpenShell: deny},
	{Source: l7Validate + "rejects_mcp_without_rules_when_allow_all_false", Policy: ep("        protocol: mcp\n"), OpenShell: deny},
	{Source: l7Validate + "accepts_mcp_with_allow_all_true", Policy: ep("        protocol: mcp\n        mcp:\n          allow_all_known_mcp_methods: true\n"), OpenShell: allow},
	{Source: l7Validate + "rejects_rules_that_deny_all", Policy: ep("        protocol: rest\n        rules:\n          - allow: {}\n"), OpenShell: deny},
	{Source: l7Validate + "mcp_allow_all_with_empty_allow_not_rejected", Policy: ep("        protocol: mcp\n        mcp:\n          allow_all_known_mcp_methods: true\n        rules:\n          - allow: {}\n"), OpenShell: allow},
	{Source: l7Validate + "rejects_deny_rules_without_protocol", Policy: ep("        deny_rules:\n          - { method: GET, path: /x }\n"), OpenShell: deny, Contains: "deny_rules"},
	{Source: l7Validate + "rejects_deny_rules_without_allow_base", Policy: ep("        protocol: rest\n        deny_rules:\n          - { method: GET, path: /x }\n"), OpenShell: deny},
	{Source: l7Validate + "no_protocol_no_errors", Policy: ep(""), OpenShell: allow},
	{Source: l7Validate + "explicit_tcp_is_valid_without_l7_fields", Policy: ep("        protocol: tcp\n"), OpenShell: allow},
	{Source: l7Validate + "explicit_tcp_rejects_l7_fields", Policy: ep("        protocol: tcp\n        access: full\n"), OpenShell: deny},
	{Source: l7Validate + "explicit_tcp_rejects_additional_l7_fields", Policy: ep("        protocol: tcp\n        enforcement: enforce\n"), OpenShell: deny,
		Divergence: divTCPAsL4, Ours: allow},
	{Source: l7Validate + "l7_protocol_parse_known_variants", Policy: ep("        protocol: REST\n        access: read-only\n"), OpenShell: allow},
	{Source: l7Validate + "jsonrpc_with_access_emits_single_diagnostic", Policy: ep("        protocol: json-rpc\n        access: full\n"), OpenShell: deny},
	{Source: l7Validate + "jsonrpc_without_rules_or_access_emits_single_diagnostic", Policy: ep("        protocol: json-rpc\n"), OpenShell: deny},
}

func TestL7Validate(t *testing.T) { runValidate(t, l7ValidateCases) }

// Validation cases from opa.rs: documents the engine refuses to load.
var opaValidateCases = []validateCase{
	{Source: opaRS + "l7_jsonrpc_params_matchers_are_rejected", Policy: `
network_policies:
  invalid_jsonrpc_params:
    name: invalid_jsonrpc_params
    endpoints:
      - host: jsonrpc.invalid.test
        port: 8000
        path: /rpc
        protocol: json-rpc
        enforcement: enforce
        rules:
          - allow:
              method: reports.search
              params:
                query: quarterly
    binaries:
      - { path: /usr/bin/curl }
`, OpenShell: deny, Contains: "params"},
	{Source: opaRS + "l7_jsonrpc_config_alias_unknown_fields_are_rejected", Policy: `
network_policies:
  invalid_jsonrpc_config:
    name: invalid_jsonrpc_config
    endpoints:
      - host: jsonrpc.invalid-config.test
        port: 8000
        path: /rpc
        protocol: json-rpc
        enforcement: enforce
        json_rpc:
          on_parse_error: allow
        rules:
          - allow:
              method: initialize
    binaries:
      - { path: /usr/bin/curl }
`, OpenShell: deny, Contains: "json_rpc"},
	{Source: opaRS + "l7_mcp_config_alias_types_are_rejected", Policy: `
network_policies:
  invalid_mcp_config:
    name: invalid_mcp_config
    endpoints:
      - host: mcp.invalid-config.test
        port: 8000
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          max_body_bytes: large
        rules:
          - allow:
              method: initialize
    binaries:
      - { path: /usr/bin/curl }
`, OpenShell: deny, Contains: "max_body_bytes"},
	{Source: opaRS + "policy_generation_does_not_increment_on_failed_reload", Policy: `
network_policies:
  bad_api:
    name: bad_api
    endpoints:
      - host: api.example.com
        port: 8080
        protocol: invalid-protocol
    binaries:
      - { path: /usr/bin/curl }
`, OpenShell: deny, Contains: "protocol"},
	{Source: opaRS + "proto_load_rejects_ambiguous_endpoint_metadata_with_rationale", Policy: `
network_policies:
  wildcard:
    name: wildcard
    endpoints:
      - { host: "*.example.com", port: 443, tls: skip }
    binaries:
      - { path: /usr/bin/curl }
  exact:
    name: exact
    endpoints:
      - { host: api.example.com, port: 443 }
    binaries:
      - { path: /usr/bin/bash }
`, OpenShell: deny,
		Divergence: divOverlapMetadata, Ours: allow},
	{Source: opaRS + "proto_activation_rejects_explicit_tcp_credential_binding", Policy: `
version: 1
network_policies:
  native_tcp:
    name: native_tcp
    endpoints:
      - host: database.example.com
        port: 5432
        protocol: tcp
        credential_binding:
          provider: database
    binaries:
      - path: /usr/bin/client
`, OpenShell: deny, Contains: "credential_binding"},
	{Source: opaRS + "from_strings_and_from_files_produce_same_results", Policy: sandboxPolicyYAML, OpenShell: allow},
	{Source: opaRS + "l7_endpoint_config_preserves_mcp_strict_tool_names_opt_out", Policy: `
network_policies:
  mcp:
    name: mcp
    endpoints:
      - host: mcp.example.com
        port: 443
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          strict_tool_names: false
        rules:
          - allow:
              method: tools/call
    binaries:
      - { path: /usr/bin/curl }
`, OpenShell: allow},
	{Source: opaRS + "l7_endpoint_config_preserves_proto_credential_signing", Policy: `
network_policies:
  bedrock:
    name: bedrock
    endpoints:
      - host: bedrock-runtime.us-east-2.amazonaws.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: read-write
        credential_signing: sigv4
        signing_service: bedrock
    binaries:
      - { path: /usr/local/bin/claude }
`, OpenShell: allow},
	{Source: opaRS + "l7_endpoint_config_preserves_proto_allow_encoded_slash", Policy: `
network_policies:
  npm:
    name: npm
    endpoints:
      - host: registry.npmjs.org
        port: 443
        protocol: rest
        enforcement: enforce
        access: read-only
        allow_encoded_slash: true
    binaries:
      - { path: /usr/bin/node }
`, OpenShell: allow},
	{Source: opaRS + "l7_endpoint_config_preserves_proto_request_body_credential_rewrite", Policy: `
network_policies:
  slack:
    name: slack
    endpoints:
      - host: slack.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: read-write
        request_body_credential_rewrite: true
    binaries:
      - { path: /usr/bin/node }
`, OpenShell: allow},
	{Source: opaRS + "l7_endpoint_config_preserves_proto_signing_region", Policy: `
network_policies:
  custom_vpc:
    name: custom_vpc
    endpoints:
      - host: custom-vpc-endpoint.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: full
        credential_signing: sigv4
        signing_service: s3
        signing_region: us-west-2
    binaries:
      - { path: /usr/local/bin/aws }
`, OpenShell: allow},
	{Source: opaRS + "l7_endpoint_config_preserves_proto_websocket_credential_rewrite", Policy: `
network_policies:
  gateway:
    name: gateway
    endpoints:
      - host: gateway.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: full
        websocket_credential_rewrite: true
    binaries:
      - { path: /usr/bin/node }
`, OpenShell: allow},
}

func TestOPAValidate(t *testing.T) { runValidate(t, opaValidateCases) }
