package prover

import (
	"net/netip"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// Two entries naming one host:port, one with tls: skip and allowed_ips
// and one without (OpenShell's opa.rs OVERLAPPING_L7_TEST_DATA), load now.
// Adding the allowed_ips entry to the plain one opens the private address
// for GET; the proof reports exactly what Decide adds: GET is covered, and
// DELETE, which neither entry allows, is not.
func TestProveOverlappingMetadata(t *testing.T) {
	const plain = `
  test_server:
    endpoints:
      - host: 192.168.1.100
        port: 8567
        protocol: rest
        enforcement: enforce
        rules: [{allow: {method: GET, path: "**"}}]
    binaries: [{path: /usr/bin/curl}]
`
	const skip = `
  allow_192_168_1_100_8567:
    endpoints:
      - host: 192.168.1.100
        port: 8567
        protocol: rest
        enforcement: enforce
        tls: skip
        allowed_ips: [192.168.1.100]
        rules: [{allow: {method: GET, path: "**"}}]
    binaries: [{path: /usr/bin/curl}]
`
	cur := parse(t, "version: 1\nnetwork_policies:"+plain)
	prop := parse(t, "version: 1\nnetwork_policies:"+plain+skip)
	rep := prove(t, cur, prop, Options{})
	req := func(method string) policy.Request {
		return policy.Request{Binary: "/usr/bin/curl", Host: "192.168.1.100", Addr: netip.MustParseAddr("192.168.1.100"),
			Port: 8567, HTTPMethod: method, Path: "/test", Time: now}
	}
	for _, tc := range []struct {
		method string
		added  bool
	}{{"GET", true}, {"DELETE", false}} {
		r := req(tc.method)
		c, p := policy.Decide(cur, r), policy.Decide(prop, r)
		if added := p.Allow && !c.Allow; added != tc.added {
			t.Fatalf("%s: Decide adds %v (current %+v, proposed %+v), want %v", tc.method, added, c, p, tc.added)
		}
		covered := false
		for _, f := range rep.Findings {
			if f.Counterexample != nil && f.Covers(r) {
				covered = true
			}
		}
		if covered != tc.added {
			t.Errorf("%s: covered by a finding %v, want %v; findings: %s", tc.method, covered, tc.added, show(rep.Findings))
		}
	}
}
