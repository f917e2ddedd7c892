package openshell

import (
	"fmt"
	"strings"
	"testing"
)

// Cases from crates/openshell-policy/src/lib.rs: parsing and
// validate_sandbox_policy, on restrictive_default_policy() with one field
// changed.

// restrictive builds restrictive_default_policy() in YAML with the given
// process (user, group; "" leaves process out), read_only and read_write
// lists, and network_policies entries (YAML, indented by 2).
func restrictive(user, group string, readOnly, readWrite []string, entries string) string {
	ro := `["/usr", "/lib", "/proc", "/dev/urandom", "/app", "/etc", "/var/log"]`
	rw := `["/tmp", "/dev/null"]`
	if readOnly != nil {
		ro = yamlList(readOnly)
	}
	if readWrite != nil {
		rw = yamlList(readWrite)
	}
	doc := "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: " + ro + "\n  read_write: " + rw +
		"\nlandlock:\n  compatibility: best_effort\n"
	if user != "" {
		doc += fmt.Sprintf("process:\n  run_as_user: %q\n  run_as_group: %q\n", user, group)
	}
	if entries != "" {
		doc += "network_policies:\n" + entries
	}
	return doc
}

func yamlList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// entry is one network_policies entry with one endpoint.
func entry(name, endpoint string) string {
	return "  " + name + ":\n    name: " + name + "\n    endpoints:\n      - " + endpoint + "\n    binaries:\n      - { path: /usr/bin/curl }\n"
}

func manyPaths(n int) []string {
	p := make([]string, n)
	for i := range p {
		p[i] = fmt.Sprintf("/path/%d", i)
	}
	return p
}

var policyLibCases = []validateCase{
	{Source: policyLib + "parse_minimal_policy_yaml", Policy: "version: 1\n", OpenShell: allow},
	{Source: policyLib + "parse_rejects_unknown_fields", Policy: "version: 1\nbogus_field: true\n", OpenShell: deny, Contains: "bogus_field"},
	{Source: policyLib + "parse_rejects_middleware_attachments_on_network_policies_and_endpoints", Policy: `
version: 1
network_policies:
  api:
    middleware: [redact]
    endpoints:
      - host: api.example.com
        port: 443
`, OpenShell: deny, Contains: "middleware"},
	{Source: policyLib + "parse_rejects_middleware_attachments_on_network_policies_and_endpoints", Policy: `
version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: 443
        middleware: [redact]
`, OpenShell: deny, Contains: "middleware"},
	{Source: policyLib + "validate_rejects_root_run_as_user", Policy: restrictive("root", "sandbox", nil, nil, ""), OpenShell: deny, Contains: "run_as_user"},
	{Source: policyLib + "validate_rejects_uid_zero", Policy: restrictive("0", "0", nil, nil, ""), OpenShell: deny, Contains: "run_as_user"},
	{Source: policyLib + "validate_rejects_non_sandbox_user", Policy: restrictive("nobody", "nogroup", nil, nil, ""), OpenShell: deny, Contains: "run_as_user"},
	{Source: policyLib + "validate_accepts_sandbox_identity", Policy: restrictive("", "", nil, nil, ""), OpenShell: allow},
	{Source: policyLib + "validate_rejects_path_traversal", Policy: restrictive("", "", []string{"/usr/../etc/shadow"}, []string{"/tmp"}, ""), OpenShell: deny, Contains: "read_only"},
	{Source: policyLib + "validate_rejects_relative_paths", Policy: restrictive("", "", []string{"usr/lib"}, []string{"/tmp"}, ""), OpenShell: deny, Contains: "read_only"},
	{Source: policyLib + "validate_rejects_overly_broad_read_write_path", Policy: restrictive("", "", []string{"/usr"}, []string{"/"}, ""), OpenShell: deny, Contains: "read_write"},
	{Source: policyLib + "validate_accepts_valid_policy", Policy: restrictive("sandbox", "sandbox", nil, nil, ""), OpenShell: allow},
	{Source: policyLib + "validate_rejects_yaml_tcp_endpoint_without_host_or_port", Policy: `
version: 1
network_policies:
  invalid:
    endpoints:
      - host: ""
        protocol: tcp
`, OpenShell: deny},
	{Source: policyLib + "validate_accepts_hostless_allowed_ips_for_non_tcp_proxy_endpoint", Policy: `
version: 1
network_policies:
  legacy-proxy:
    endpoints:
      - port: 9443
        allowed_ips:
          - 10.0.5.0/24
`, OpenShell: allow},
	{Source: policyLib + "validate_rejects_hostless_allowed_ips_for_explicit_tcp", Policy: `
version: 1
network_policies:
  native-tcp:
    endpoints:
      - port: 6379
        protocol: tcp
        allowed_ips:
          - 10.0.5.0/24
`, OpenShell: deny, Contains: "network_policies.native-tcp.endpoints[0].host"},
	{Source: policyLib + "validate_rejects_ip_literal_hosts_for_explicit_tcp", Policy: restrictive("", "", nil, nil, entry("native-tcp", `{ host: "192.0.2.10", port: 6379, protocol: tcp }`)), OpenShell: deny,
		Divergence: divTCPAsL4, Ours: allow},
	{Source: policyLib + "validate_rejects_ip_literal_hosts_for_explicit_tcp", Policy: restrictive("", "", nil, nil, entry("native-tcp", `{ host: "2001:db8::10", port: 6379, protocol: tcp }`)), OpenShell: deny,
		Divergence: divTCPAsL4, Ours: allow},
	{Source: policyLib + "validate_rejects_malformed_dns_selectors_for_explicit_tcp", Policy: restrictive("", "", nil, nil, entry("native-tcp", `{ host: "db..example.com", port: 6379, protocol: tcp }`)), OpenShell: deny},
	{Source: policyLib + "validate_rejects_malformed_dns_selectors_for_explicit_tcp", Policy: restrictive("", "", nil, nil, entry("native-tcp", `{ host: "bad name.example.com", port: 6379, protocol: tcp }`)), OpenShell: deny},
	{Source: policyLib + "validate_rejects_malformed_dns_selectors_for_explicit_tcp", Policy: restrictive("", "", nil, nil, entry("native-tcp", `{ host: " db.example.com", port: 6379, protocol: tcp }`)), OpenShell: deny,
		Divergence: divTCPAsL4, Ours: allow},
	{Source: policyLib + "validate_rejects_malformed_dns_selectors_for_explicit_tcp", Policy: restrictive("", "", nil, nil, entry("native-tcp", `{ host: "`+strings.Repeat("a", 64)+`.example.com", port: 6379, protocol: tcp }`)), OpenShell: deny},
	{Source: policyLib + "validate_rejects_raw_endpoint_zero_and_out_of_range_ports", Policy: restrictive("", "", nil, nil, entry("invalid", `{ host: database.example.com, ports: [0, 65536], protocol: tcp }`)), OpenShell: deny, Contains: "port"},
	{Source: policyLib + "validate_rejects_raw_endpoint_without_effective_port", Policy: restrictive("", "", nil, nil, entry("invalid", `{ host: database.example.com }`)), OpenShell: deny, Contains: "port"},
	{Source: policyLib + "validate_accepts_empty_process", Policy: "version: 1\n", OpenShell: allow},
	{Source: policyLib + "validate_accepts_omitted_process_fields", Policy: restrictive("", "", nil, nil, ""), OpenShell: allow},
	{Source: policyLib + "validate_rejects_too_many_paths", Policy: restrictive("", "", manyPaths(300), []string{"/tmp"}, ""), OpenShell: deny, Contains: "filesystem_policy"},
	{Source: policyLib + "validate_rejects_path_too_long", Policy: restrictive("", "", []string{"/" + strings.Repeat("a", 5000)}, []string{"/tmp"}, ""), OpenShell: deny, Contains: "read_only"},
	{Source: policyLib + "validate_rejects_tld_wildcard", Policy: restrictive("", "", nil, nil, entry("bad-rule", `{ host: "*.com", port: 443 }`)), OpenShell: deny, Contains: "host"},
	{Source: policyLib + "validate_rejects_double_star_tld_wildcard", Policy: restrictive("", "", nil, nil, entry("bad-rule", `{ host: "**.org", port: 443 }`)), OpenShell: deny, Contains: "host"},
	{Source: policyLib + "validate_rejects_all_host_star_wildcards", Policy: restrictive("", "", nil, nil, entry("bad-rule", `{ host: "*", port: 443 }`)), OpenShell: deny, Contains: "host"},
	{Source: policyLib + "validate_rejects_all_host_star_wildcards", Policy: restrictive("", "", nil, nil, entry("bad-rule", `{ host: "**", port: 443 }`)), OpenShell: deny, Contains: "host"},
	{Source: policyLib + "validate_accepts_subdomain_wildcard", Policy: restrictive("", "", nil, nil, entry("ok-rule", `{ host: "*.example.com", port: 443 }`)), OpenShell: allow},
	{Source: policyLib + "validate_accepts_middle_label_star_wildcard", Policy: restrictive("", "", nil, nil, entry("ok-rule", `{ host: "*.s3.*.amazonaws.com", port: 443 }`)), OpenShell: allow},
	{Source: policyLib + "validate_rejects_partial_middle_label_wildcard", Policy: restrictive("", "", nil, nil, entry("bad-rule", `{ host: "*.s3.us-*.amazonaws.com", port: 443 }`)), OpenShell: deny, Contains: "host"},
	{Source: policyLib + "validate_accepts_explicit_domain", Policy: restrictive("", "", nil, nil, entry("ok-rule", `{ host: api.example.com, port: 443 }`)), OpenShell: allow},
	{Source: policyLib + "validate_rejects_credential_signing_without_signing_service", Policy: restrictive("", "", nil, nil, entry("bedrock", `{ host: bedrock-runtime.us-east-1.amazonaws.com, port: 443, credential_signing: sigv4 }`)), OpenShell: deny, Contains: "signing_service"},
	{Source: policyLib + "validate_accepts_credential_signing_with_signing_service", Policy: restrictive("", "", nil, nil, entry("bedrock", `{ host: bedrock-runtime.us-east-1.amazonaws.com, port: 443, credential_signing: sigv4, signing_service: bedrock }`)), OpenShell: allow},
	{Source: policyLib + "validate_accepts_sigv4_body_with_signing_service", Policy: restrictive("", "", nil, nil, entry("bedrock", `{ host: bedrock-runtime.us-east-1.amazonaws.com, port: 443, credential_signing: "sigv4:body", signing_service: bedrock }`)), OpenShell: allow},
	{Source: policyLib + "validate_accepts_sigv4_no_body_with_signing_service", Policy: restrictive("", "", nil, nil, entry("s3", `{ host: s3.us-east-1.amazonaws.com, port: 443, credential_signing: "sigv4:no_body", signing_service: s3 }`)), OpenShell: allow},
	{Source: policyLib + "validate_rejects_sigv4_no_body_without_signing_service", Policy: restrictive("", "", nil, nil, entry("s3", `{ host: s3.us-east-1.amazonaws.com, port: 443, credential_signing: "sigv4:no_body" }`)), OpenShell: deny, Contains: "signing_service"},
	{Source: policyLib + "validate_rejects_unknown_credential_signing", Policy: restrictive("", "", nil, nil, entry("test", `{ host: example.amazonaws.com, port: 443, credential_signing: sigv4_typo, signing_service: bedrock }`)), OpenShell: deny, Contains: "credential_signing"},
	{Source: policyLib + "validate_rejects_credential_signing_with_body_rewrite", Policy: restrictive("", "", nil, nil, entry("bedrock", `{ host: bedrock-runtime.us-east-1.amazonaws.com, port: 443, credential_signing: sigv4, signing_service: bedrock, request_body_credential_rewrite: true }`)), OpenShell: deny},
	{Source: policyLib + "valid_identity_accepts_non_root_numeric_uid", Policy: restrictive("1000", "1000", nil, nil, ""), OpenShell: allow},
	{Source: policyLib + "validate_accepts_numeric_uid_in_range", Policy: "version: 1\nprocess:\n  run_as_user: \"1000\"\n  run_as_group: \"5000\"\n", OpenShell: allow},
	{Source: policyLib + "validate_rejects_root_string", Policy: restrictive("root", "root", nil, nil, ""), OpenShell: deny, Contains: "run_as_user"},
	{Source: policyLib + "validate_rejects_nobody_string", Policy: restrictive("nobody", "nogroup", nil, nil, ""), OpenShell: deny, Contains: "run_as_user"},
	{Source: policyLib + "validate_accepts_mixed_sandbox_name_and_uid", Policy: restrictive("sandbox", "1000", nil, nil, ""), OpenShell: allow},
	{Source: policyLib + "parse_ports_array", Policy: restrictive("", "", nil, nil, entry("multi", `{ host: api.example.com, ports: [443, 8443] }`)), OpenShell: allow},
	{Source: policyLib + "parse_wildcard_host", Policy: restrictive("", "", nil, nil, entry("wild", `{ host: "*.example.com", port: 443 }`)), OpenShell: allow},
	{Source: policyLib + "parse_deny_rules_from_yaml", Policy: ep("        protocol: rest\n        access: read-write\n        deny_rules:\n          - method: POST\n            path: \"/repos/*/pulls/*/reviews\"\n"), OpenShell: allow},
	{Source: policyLib + "parse_deny_rules_with_query_any", Policy: ep("        protocol: rest\n        access: full\n        deny_rules:\n          - method: POST\n            path: \"/admin/**\"\n            query:\n              force:\n                any: [\"true\", \"yes\"]\n"), OpenShell: allow},
	{Source: policyLib + "parse_rejects_unsupported_json_rpc_config_fields", Policy: `
version: 1
network_policies:
  jsonrpc_api:
    endpoints:
      - host: jsonrpc.example.com
        port: 443
        protocol: json-rpc
        json_rpc:
          max_body_bytes: 131072
          on_parse_error: deny
          batch_policy: all
        access: full
    binaries:
      - path: /usr/bin/curl
`, OpenShell: deny},
	{Source: policyLib + "parse_rejects_unknown_fields_in_deny_rule", Policy: `
version: 1
network_policies:
  test:
    endpoints:
      - host: example.com
        port: 443
        deny_rules:
          - method: POST
            path: /foo
            bogus: true
`, OpenShell: deny, Contains: "bogus"},
	{Source: policyLib + "rejects_port_above_65535", Policy: `
version: 1
network_policies:
  test:
    endpoints:
      - host: example.com
        port: 70000
`, OpenShell: deny, Contains: "port"},
}

func TestPolicyLib(t *testing.T) { runValidate(t, policyLibCases) }

// safeE2E is the Python e2e suite's _safe_policy() with one change.
func safeE2E(user string, readOnly, readWrite []string) string {
	return "version: 1\nfilesystem_policy:\n  include_workdir: true\n  read_only: " + yamlList(readOnly) +
		"\n  read_write: " + yamlList(readWrite) + "\nlandlock:\n  compatibility: best_effort\nprocess:\n  run_as_user: " + user + "\n  run_as_group: sandbox\n"
}

// Cases from e2e/python/test_policy_validation.py: the gateway refuses
// unsafe documents with INVALID_ARGUMENT; here, policy.Parse refuses them
// (the gateway's create and update paths call it).
var e2eCases = []validateCase{
	{Source: e2ePy + "test_create_sandbox_rejects_root_user", Policy: safeE2E("root", []string{"/usr", "/lib", "/etc", "/app", "/var/log"}, []string{"/sandbox", "/tmp"}), OpenShell: deny, Contains: "root"},
	{Source: e2ePy + "test_create_sandbox_rejects_path_traversal", Policy: safeE2E("sandbox", []string{"/usr/../etc/shadow"}, []string{"/tmp"}), OpenShell: deny, Contains: "read_only"},
	{Source: e2ePy + "test_create_sandbox_rejects_overly_broad_paths", Policy: safeE2E("sandbox", []string{"/usr"}, []string{"/"}), OpenShell: deny, Contains: "read_write"},
	{Source: e2ePy + "test_update_policy_rejects_immutable_fields", Policy: safeE2E("sandbox", []string{"/usr/../etc/shadow"}, []string{"/tmp"}), OpenShell: deny},
}

func TestE2EValidation(t *testing.T) { runValidate(t, e2eCases) }
