package match

import (
	"net/netip"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// Two entries naming one host:port, one with tls: skip and allowed_ips
// and one without (OpenShell's opa.rs OVERLAPPING_L7_TEST_DATA): the
// proxy still inspects the destination (tls: skip turns no inspection
// off), and judges each request by both entries' rules, as Decide does.
func TestOverlappingMetadataInspected(t *testing.T) {
	p := parse(t, `version: 1
network_policies:
  test_server:
    endpoints:
      - {host: 192.168.1.100, port: 8567, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, path: "**"}}]}
    binaries: [{path: /usr/bin/curl}]
  allow_192_168_1_100_8567:
    endpoints:
      - {host: 192.168.1.100, port: 8567, protocol: rest, enforcement: enforce, tls: skip, allowed_ips: [192.168.1.100], rules: [{allow: {method: GET, path: "**"}}]}
    binaries: [{path: /usr/bin/curl}]
`)
	m := mustCompile(t, p)
	if !m.Inspect("192.168.1.100", 8567) {
		t.Fatal("the destination of a tls: skip REST endpoint is not inspected")
	}
	for _, tc := range []struct {
		method string
		allow  bool
	}{{"GET", true}, {"DELETE", false}, {"", false}} {
		r := policy.Request{Binary: "/usr/bin/curl", Host: "192.168.1.100", Addr: netip.MustParseAddr("192.168.1.100"), Port: 8567, HTTPMethod: tc.method, Path: "/test"}
		d, want := m.Decide(&r), policy.Decide(p, r)
		if d != want || d.Allow != tc.allow {
			t.Errorf("%q: matcher %+v, Decide %+v, want allow %v", tc.method, d, want, tc.allow)
		}
	}
}
