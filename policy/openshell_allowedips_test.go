package policy

import (
	"testing"
)

// openshellAllowedIPs is ALLOWED_IPS_TEST_DATA from NVIDIA/OpenShell
// crates/openshell-supervisor-network/src/opa.rs (commit 2f7fb65, Apache
// License 2.0, copyright NVIDIA Corporation & affiliates), with the
// `version: 1` line our documents require (the Rego engine there is fed
// the network data alone). Its "Mode 3" endpoint has no host, only
// allowed_ips.
const openshellAllowedIPs = `version: 1
network_policies:
  # Mode 2: host + allowed_ips
  internal_api:
    name: internal_api
    endpoints:
      - host: my-service.corp.net
        port: 8080
        allowed_ips: ["10.0.5.0/24"]
    binaries:
      - { path: /usr/bin/curl }
  # Mode 3: allowed_ips only (no host) — uses port 9443 to avoid overlap
  private_network:
    name: private_network
    endpoints:
      - port: 9443
        allowed_ips: ["172.16.0.0/12", "192.168.1.1"]
    binaries:
      - { path: /usr/bin/curl }
  # Mode 1: host only (no allowed_ips) — standard behavior
  public_api:
    name: public_api
    endpoints:
      - { host: api.github.com, port: 443 }
    binaries:
      - { path: /usr/bin/curl }
  # Wildcard host endpoint should not count as an exact declared hostname.
  wildcard_api:
    name: wildcard_api
    endpoints:
      - { host: "*.corp.net", port: 443 }
    binaries:
      - { path: /usr/bin/curl }
filesystem_policy:
  include_workdir: true
  read_only: []
  read_write: []
landlock:
  compatibility: best_effort
process:
  run_as_user: sandbox
  run_as_group: sandbox
`

// The fixture loads (OpenShell: allowed_ips_engine), and the decisions of
// its tests hold here, each named after its OpenShell test.
func TestOpenShellAllowedIPsFixture(t *testing.T) {
	p, _, err := Parse([]byte(openshellAllowedIPs))
	if err != nil {
		t.Fatalf("OpenShell's allowed_ips fixture does not load: %v", err)
	}
	runDecide(t, []decideCase{
		// opa.rs allowed_ips_mode2_host_plus_ips_allows.
		{"allowed_ips_mode2_host_plus_ips_allows", p, req("my-service.corp.net", 8080).at("10.0.5.7"), want{allow: true, entry: "internal_api"}},
		{"mode 2 outside allowed_ips", p, req("my-service.corp.net", 8080).at("10.0.6.7"), want{reason: "outside the allowed_ips"}},
		// opa.rs allowed_ips_mode3_hostless_allows_any_domain: OpenShell
		// allows at the name and checks the address when it dials; Decide
		// sees the resolved address.
		{"allowed_ips_mode3_hostless_allows_any_domain", p, req("anything.example.com", 9443).at("172.16.3.4"), want{allow: true, entry: "private_network"}},
		{"mode 3 single address", p, req("anything.example.com", 9443).at("192.168.1.1"), want{allow: true, entry: "private_network"}},
		{"mode 3 outside allowed_ips", p, req("anything.example.com", 9443).at("8.8.8.8"), want{reason: "default deny"}},
		{"mode 3 other port", p, req("anything.example.com", 8443).at("172.16.3.4"), want{reason: "default deny"}},
		// opa.rs allowed_ips_mode1_no_ips_returns_empty.
		{"allowed_ips_mode1_no_ips_returns_empty", p, req("api.github.com", 443), want{allow: true, entry: "public_api"}},
		// The wildcard endpoint needs allowed_ips for a private address
		// (OpenShell too: wildcard hosts are not exact declared hosts).
		{"wildcard private resolution", p, req("x.corp.net", 443).at("10.0.5.7"), want{reason: "private address"}},
	})
}

// A hostless endpoint needs allowed_ips, and an mcp or tcp endpoint a host
// (OpenShell's validate_rejects_hostless_allowed_ips_for_explicit_tcp).
func TestValidateHostless(t *testing.T) {
	parseProblem(t, withEndpoint("{port: 443}"), ep0+".host", "unless allowed_ips is set")
	parseProblem(t, withEndpoint("{port: 6379, protocol: tcp, allowed_ips: [10.0.5.0/24]}"), ep0+".host", "protocol tcp")
	parseProblem(t, withEndpoint("{port: 6379, protocol: TCP, allowed_ips: [10.0.5.0/24]}"), ep0+".host", "protocol tcp")
	parseProblem(t, withEndpoint("{port: 443, protocol: mcp, allowed_ips: [10.0.0.0/8], rules: [{allow: {method: initialize}}]}"), ep0+".host", "concrete host")
	// It shares its ports with every named endpoint: an mcp endpoint there
	// would be reachable through it uninspected.
	doc := "version: 1\nnetwork_policies:\n  p:\n    binaries: [{path: /usr/bin/curl}]\n    endpoints:\n" +
		"      - {port: 443, allowed_ips: [10.0.0.0/8]}\n" +
		"      - {host: m.example.com, port: 443, protocol: mcp, enforcement: enforce, rules: [{allow: {method: initialize}}]}\n"
	parseProblem(t, doc, "network_policies.p.endpoints[1]", "cannot share its host:port")
	if _, _, err := Parse([]byte(withEndpoint("{port: 443, protocol: rest, enforcement: enforce, access: read-only, allowed_ips: [10.0.0.0/8]}"))); err != nil {
		t.Errorf("hostless rest endpoint refused: %v", err)
	}
}
