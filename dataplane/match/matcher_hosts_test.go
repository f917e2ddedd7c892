package match

import (
	"net/netip"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// Host patterns and always-denied address forms, through the matcher and
// policy.Decide together (agree fails on any difference).
func TestMatcherHostsTable(t *testing.T) {
	m := mustCompile(t, parse(t, `
version: 1
network_policies:
  s3:
    binaries: [{path: /usr/bin/curl}]
    endpoints:
      - {host: "*.s3.*.amazonaws.com", port: 443}
      - {host: "**.blob.*.example.com", port: 443}
      - {host: "*.example.org", port: 443}
  hostless:
    binaries: [{path: /usr/bin/curl}]
    endpoints:
      - {port: 8443, allowed_ips: ["2002:808:800::/40", "2600::/16"]}
`))
	l4 := func(host string, port int, addr string) policy.Request {
		r := policy.Request{Binary: curl, Host: host, Addr: pubIP, Port: port, Time: when}
		if addr != "" {
			r.Addr = netip.MustParseAddr(addr)
		}
		return r
	}
	cases := []struct {
		name  string
		r     policy.Request
		allow bool
	}{
		{"middle label wildcard", l4("bucket.s3.us-east-1.amazonaws.com", 443, ""), true},
		{"middle label is one label", l4("bucket.s3.a.b.amazonaws.com", 443, ""), false},
		{"middle label is never empty", l4("bucket.s3..amazonaws.com", 443, ""), false},
		{"middle label missing", l4("bucket.s3.amazonaws.com", 443, ""), false},
		{"** then a middle label", l4("a.b.blob.eu.example.com", 443, ""), true},
		{"** needs a label", l4("blob.eu.example.com", 443, ""), false},
		{"NUL in a wildcard label", l4("a\x00b.example.org", 443, ""), false},
		{"NUL in a middle wildcard label", l4("bucket.s3.us\x00x.amazonaws.com", 443, ""), false},
		{"star in the host", l4("*.example.org", 443, ""), false},
		{"slash in the host", l4("a/b.example.org", 443, ""), false},
		{"space in the host", l4("a b.example.org", 443, ""), false},
		{"percent in the host", l4("a%00.example.org", 443, ""), false},
		{"plain wildcard host", l4("a.example.org", 443, ""), true},
		{"SIIT metadata resolved", l4("a.example.org", 443, "::ffff:0:a9fe:a9fe"), false},
		{"6to4 metadata resolved", l4("a.example.org", 443, "2002:a9fe:a9fe::1"), false},
		{"Teredo client metadata resolved", l4("a.example.org", 443, "2001:0:4136:e378:8000:63bf:5601:5601"), false},
		{"local-use NAT64 /48 metadata resolved", l4("a.example.org", 443, "64:ff9b:1:a9fe:a9:fe00::"), false},
		{"6to4 loopback literal", l4("[2002:7f00:1::]", 8443, "2002:7f00:1::"), false},
		{"hostless 6to4 of a public address", l4("x.test", 8443, "2002:808:808::"), true},
		{"hostless 6to4 metadata", l4("x.test", 8443, "2002:a9fe:a9fe::"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if d := agree(t, m, c.r); d.Allow != c.allow {
				t.Errorf("got %+v, want allow=%v", d, c.allow)
			}
		})
	}
}

// Query matchers in every OpenShell shape, and malformed globs failing
// closed (no value on allow, every value on deny), through both
// evaluators.
func TestMatcherQueryForms(t *testing.T) {
	m := mustCompile(t, parse(t, `
version: 1
network_policies:
  q:
    binaries: []
    endpoints:
      - host: a.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        rules:
          - allow: {method: GET, path: /glob, query: {tag: {glob: "v1.*"}}}
          - allow: {method: GET, path: /any, query: {tag: {any: ["v1.*", "v2.*"]}}}
          - allow: {method: GET, path: /bad, query: {tag: "[bad"}}
          - allow: {method: GET, path: /open, query: {tag: "*"}}
          - allow: {method: GET, path: /brace, query: {f: "{json,x{ml,sd}}"}}
        deny_rules:
          - {method: GET, path: /open, query: {admin: {glob: "tru\\"}}}
          - {method: GET, path: /open, query: {role: "{admin,ro*t}"}}
`))
	get := func(path, q string) policy.Request {
		return policy.Request{Binary: curl, Host: "a.example.com", Addr: pubIP, Port: 443, HTTPMethod: "GET", Path: path, Query: q, Time: when}
	}
	cases := []struct {
		name  string
		r     policy.Request
		allow bool
	}{
		{"glob object", get("/glob", "tag=v1.0"), true},
		{"glob object refuses", get("/glob", "tag=v2.0"), false},
		{"any", get("/any", "tag=v2.0&tag=v1.1"), true},
		{"any refuses one value", get("/any", "tag=v2.0&tag=v3"), false},
		{"malformed allow glob matches nothing", get("/bad", "tag=[bad"), false},
		{"malformed allow glob, plain value", get("/bad", "tag=b"), false},
		{"malformed deny glob denies every value", get("/open", "tag=x&admin=no"), false},
		{"malformed deny glob needs the parameter", get("/open", "tag=x"), true},
		{"deny brace alternative", get("/open", "tag=x&role=root"), false},
		{"deny brace, other value", get("/open", "tag=x&role=user"), true},
		{"allow nested brace", get("/brace", "f=xsd"), true},
		{"allow brace, other value", get("/brace", "f=yaml"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if d := agree(t, m, c.r); d.Allow != c.allow {
				t.Errorf("got %+v, want allow=%v", d, c.allow)
			}
		})
	}
}
