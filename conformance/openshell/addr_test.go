package openshell

import (
	"strconv"
	"testing"
)

// Address cases from crates/openshell-supervisor-network/src/proxy.rs: the
// SSRF checks on the address a name resolves to (is_internal_ip for a
// destination without allowed_ips, is_always_blocked_ip and
// resolve_and_check_allowed_ips with them). Each is a request to a
// wildcard endpoint (OpenShell applies is_internal_ip to every host that
// is not an exact declared name) resolving to the address under test.

const wildAddrPolicy = `
network_policies:
  wild:
    name: wild
    endpoints:
      - { host: "*.example.com", port: 443 }
    binaries:
      - { path: /usr/bin/curl }
`

func allowedIPsPolicy(cidr string, port int) string {
	return `
network_policies:
  internal:
    name: internal
    endpoints:
      - { host: "*.example.com", port: ` + strconv.Itoa(port) + `, allowed_ips: ["` + cidr + `"] }
    binaries:
      - { path: /usr/bin/curl }
`
}

// resolvesTo: a request to svc.example.com:443 that resolved to addr.
func resolvesTo(test, addr string, v verdict) decideCase {
	return decideCase{Source: proxyRS + test, Policy: wildAddrPolicy, Binary: curl, Host: "svc.example.com", Addr: addr, Port: 443, OpenShell: v}
}

func withAllowedIPs(test, cidr, addr string, port int, v verdict) decideCase {
	return decideCase{Source: proxyRS + test, Policy: allowedIPsPolicy(cidr, port), Binary: curl, Host: "svc.example.com", Addr: addr, Port: port, OpenShell: v}
}

var addrCases = []decideCase{
	resolvesTo("test_rejects_ipv4_loopback", "127.0.0.2", deny),
	resolvesTo("test_rejects_ipv4_private_10", "10.255.255.255", deny),
	resolvesTo("test_rejects_ipv4_private_172_16", "172.31.255.255", deny),
	resolvesTo("test_rejects_ipv4_private_192_168", "192.168.0.1", deny),
	resolvesTo("test_rejects_ipv4_link_local_metadata", "169.254.0.1", deny),
	resolvesTo("test_rejects_ipv4_unspecified", "0.0.0.0", deny),
	resolvesTo("test_rejects_ipv4_cgnat", "100.100.50.3", deny),
	resolvesTo("test_rejects_ipv4_cgnat", "100.128.0.1", allow),
	resolvesTo("test_rejects_ipv4_special_use_ranges", "192.0.0.1", deny),
	resolvesTo("test_rejects_ipv4_special_use_ranges", "198.18.0.1", deny),
	resolvesTo("test_rejects_ipv4_special_use_ranges", "198.51.100.1", deny),
	resolvesTo("test_rejects_ipv4_special_use_ranges", "203.0.113.1", deny),
	resolvesTo("test_rejects_ipv6_mapped_cgnat", "::ffff:100.64.0.1", deny),
	resolvesTo("test_allows_ipv4_public", "93.184.216.34", allow),
	resolvesTo("test_allows_ipv4_non_private_172", "172.32.0.1", allow),
	resolvesTo("test_rejects_ipv6_loopback", "::1", deny),
	resolvesTo("test_rejects_ipv6_unspecified", "::", deny),
	resolvesTo("test_rejects_ipv6_link_local", "fe80::1", deny),
	resolvesTo("test_rejects_ipv6_unique_local_address", "fdc4:f303:9324::254", deny),
	resolvesTo("test_rejects_ipv4_mapped_ipv6_private", "::ffff:10.0.0.1", deny),
	resolvesTo("test_rejects_ipv4_mapped_ipv6_loopback", "::ffff:127.0.0.1", deny),
	resolvesTo("test_rejects_ipv4_mapped_ipv6_link_local", "::ffff:169.254.169.254", deny),
	resolvesTo("test_allows_ipv6_public", "2001:4860:4860::8888", allow),
	resolvesTo("test_allows_ipv4_mapped_ipv6_public", "::ffff:8.8.8.8", allow),
	resolvesTo("test_forward_private_ip_rejected_without_allowed_ips", "10.0.0.1", deny),
	withAllowedIPs("test_always_blocked_allows_rfc1918", "172.16.0.0/12", "172.16.0.1", 443, allow),
	withAllowedIPs("test_forward_private_ip_accepted_with_allowed_ips", "10.0.0.0/8", "10.0.0.1", 80, allow),
	withAllowedIPs("test_forward_private_ip_rejected_with_wrong_allowed_ips", "192.168.0.0/16", "10.0.0.1", 80, deny),
	withAllowedIPs("test_resolve_check_allowed_ips_rejects_outside_allowlist", "10.0.0.0/8", "8.8.8.8", 443, deny),
	withAllowedIPs("test_resolve_check_allowed_ips_blocks_control_plane_ports", "8.8.8.0/24", "8.8.8.8", 6443, deny),
	withAllowedIPs("test_resolve_check_allowed_ips_blocks_control_plane_ports", "8.8.8.0/24", "8.8.8.8", 2379, deny),
	withAllowedIPs("test_resolve_check_allowed_ips_blocks_control_plane_ports", "8.8.8.0/24", "8.8.8.8", 10250, deny),
	withAllowedIPs("test_resolve_check_allowed_ips_allows_non_control_plane_ports", "8.8.8.0/24", "8.8.8.8", 443, allow),
	// Exact IP-literal destinations.
	{Source: proxyRS + "test_rejects_loopback_ip_literal", Policy: wildAddrPolicy, Binary: curl, Host: "127.0.0.1", Addr: "127.0.0.1", Port: 443, OpenShell: deny},
	{Source: proxyRS + "test_rejects_metadata_ip", Policy: wildAddrPolicy, Binary: curl, Host: "169.254.169.254", Addr: "169.254.169.254", Port: 80, OpenShell: deny},
	{Source: proxyRS + "test_rejects_localhost_resolution", Policy: wildAddrPolicy, Binary: curl, Host: "localhost", Addr: "127.0.0.1", Port: 80, OpenShell: deny},
}

func TestAddresses(t *testing.T) { runDecide(t, addrCases) }

// allowed_ips entries the proxy refuses to parse (parse_allowed_ips):
// always-blocked ranges are refused, private ones load.
var allowedIPsValidateCases = []validateCase{
	{Source: proxyRS + "test_parse_allowed_ips_broad_cidr_is_accepted", Policy: allowedIPsPolicy("10.0.0.0/8", 443), OpenShell: allow},
	{Source: proxyRS + "test_parse_allowed_ips_rejects_loopback_cidr", Policy: allowedIPsPolicy("127.0.0.0/8", 443), OpenShell: deny, Contains: "allowed_ips"},
	{Source: proxyRS + "test_parse_allowed_ips_rejects_link_local_cidr", Policy: allowedIPsPolicy("169.254.0.0/16", 443), OpenShell: deny, Contains: "allowed_ips"},
	{Source: proxyRS + "test_parse_allowed_ips_rejects_unspecified", Policy: allowedIPsPolicy("0.0.0.0", 443), OpenShell: deny, Contains: "allowed_ips"},
	{Source: proxyRS + "test_parse_allowed_ips_rejects_single_loopback_ip", Policy: allowedIPsPolicy("127.0.0.1", 443), OpenShell: deny, Contains: "allowed_ips"},
	{Source: proxyRS + "test_parse_allowed_ips_rejects_single_metadata_ip", Policy: allowedIPsPolicy("169.254.169.254", 443), OpenShell: deny, Contains: "allowed_ips"},
	{Source: proxyRS + "test_parse_allowed_ips_rejects_wildcard_cidr", Policy: allowedIPsPolicy("0.0.0.0/0", 443), OpenShell: deny, Contains: "allowed_ips"},
	{Source: proxyRS + "test_parse_allowed_ips_mixed_valid_and_blocked", Policy: `
network_policies:
  internal:
    name: internal
    endpoints:
      - { host: "*.example.com", port: 443, allowed_ips: ["10.0.5.0/24", "127.0.0.1"] }
    binaries:
      - { path: /usr/bin/curl }
`, OpenShell: deny, Contains: "allowed_ips"},
	{Source: proxyRS + "test_parse_allowed_ips_accepts_rfc1918", Policy: allowedIPsPolicy("192.168.0.0/16", 443), OpenShell: allow},
	{Source: proxyRS + "test_parse_invalid_entry_errors", Policy: allowedIPsPolicy("not-an-ip", 443), OpenShell: deny, Contains: "allowed_ips"},
}

func TestAllowedIPsValidate(t *testing.T) { runValidate(t, allowedIPsValidateCases) }

func exactPolicy(host string, port int) string {
	return `
network_policies:
  declared:
    name: declared
    endpoints:
      - { host: "` + host + `", port: ` + strconv.Itoa(port) + ` }
    binaries:
      - { path: /usr/bin/curl }
`
}

func declared(test, host, addr string, port int, v verdict) decideCase {
	return decideCase{Source: proxyRS + test, Policy: exactPolicy(host, port), Binary: curl, Host: host, Addr: addr, Port: port, OpenShell: v}
}

// Exact declared hosts (validate_declared_endpoint_resolved_addrs) and
// IP-literal hosts (implicit_allowed_ips_for_ip_host).
var declaredCases = []decideCase{
	func() decideCase {
		c := declared("test_declared_endpoint_private_hosts_file_resolution_allowed", "searxng.local", "192.168.1.105", 8080, allow)
		c.Divergence, c.Ours = divPrivate, deny
		return c
	}(),
	{Source: proxyRS + "test_resolve_from_hosts_file_contents_private_ip_requires_allowed_ips", Policy: allowedIPsPolicy("192.168.1.105/32", 8080),
		Binary: curl, Host: "searxng.example.com", Addr: "192.168.1.105", Port: 8080, OpenShell: allow},
	declared("test_declared_endpoint_loopback_stays_blocked", "loopback.local", "127.0.0.1", 80, deny),
	declared("test_declared_endpoint_link_local_stays_blocked", "metadata.local", "169.254.169.254", 80, deny),
	declared("test_declared_endpoint_blocks_control_plane_ports", "kube-api.local", "10.0.0.5", 6443, deny),
	func() decideCase {
		c := declared("test_implicit_allowed_ips_allows_rfc1918", "10.0.5.20", "10.0.5.20", 443, allow)
		c.Divergence, c.Ours = divPrivate, deny
		return c
	}(),
	func() decideCase {
		c := declared("test_implicit_allowed_ips_returns_ip_for_ipv4_literal", "192.168.1.100", "192.168.1.100", 443, allow)
		c.Divergence, c.Ours = divPrivate, deny
		return c
	}(),
}

func TestDeclaredHosts(t *testing.T) { runDecide(t, declaredCases) }

// Loopback destinations declared outright (drive_connect_through_handler
// and drive_forward_through_handler with a 127.0.0.1 endpoint).
var loopbackCases = []decideCase{
	{Source: proxyRS + "connect_handler_returns_ssrf_403_for_internal_address_not_503", Policy: exactPolicy("127.0.0.1", 443),
		Binary: curl, Host: "127.0.0.1", Addr: "127.0.0.1", Port: 443, OpenShell: deny},
	{Source: proxyRS + "forward_handler_preserves_ssrf_response_and_denial_stage", Policy: exactPolicy("127.0.0.1", 80),
		Binary: curl, Host: "127.0.0.1", Addr: "127.0.0.1", Port: 80, OpenShell: deny},
}

func TestLoopback(t *testing.T) { runDecide(t, loopbackCases) }
