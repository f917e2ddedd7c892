package openshell

import "testing"

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
