package policy

import (
	"strings"
	"testing"
)

// Issue 11 follow-ups: OpenShell documents that load there load here.

func compatDoc(fields string) string {
	return "version: 1\nnetwork_policies:\n  test:\n    endpoints:\n      - host: api.example.com\n        port: 443\n        enforcement: enforce\n" +
		fields + "    binaries: [{path: /usr/bin/curl}]\n"
}

// OpenShell parses protocol names case-insensitively; the canonical form
// (and so the hash) spells them in lower case.
func TestProtocolCaseInsensitive(t *testing.T) {
	upper, _, err := Parse([]byte(compatDoc("        protocol: REST\n        access: read-only\n")))
	if err != nil {
		t.Fatalf("protocol: REST refused: %v", err)
	}
	lower, _, err := Parse([]byte(compatDoc("        protocol: rest\n        access: read-only\n")))
	if err != nil {
		t.Fatal(err)
	}
	if upper.Hash() != lower.Hash() {
		t.Errorf("REST and rest hash differently:\n%s\n%s", upper.CanonicalJSON(), lower.CanonicalJSON())
	}
	r := Request{Binary: "/usr/bin/curl", Host: "api.example.com", Port: 443, HTTPMethod: "POST", Path: "/x"}
	if d := Decide(upper, r); d.Allow {
		t.Errorf("POST allowed by read-only REST endpoint: %+v", d)
	}
	if _, _, err := Parse([]byte(compatDoc("        protocol: Bogus\n        access: read-only\n"))); err == nil {
		t.Error("an unknown protocol loads")
	}
}

// An unknown access preset is ignored with a warning, as OpenShell does
// (expand_access_presets), and allows nothing.
func TestUnknownAccessPresetWarns(t *testing.T) {
	p, warns, err := Parse([]byte(compatDoc("        protocol: rest\n        access: allow\n")))
	if err != nil {
		t.Fatalf("access: allow refused: %v", err)
	}
	found := false
	for _, w := range warns {
		found = found || strings.HasSuffix(w.Path, "endpoints[0].access") && strings.Contains(w.Message, "not an access preset")
	}
	if !found {
		t.Errorf("no warning at access: %v", warns)
	}
	for _, m := range []string{"GET", "POST", "DELETE"} {
		if d := Decide(p, Request{Binary: "/usr/bin/curl", Host: "api.example.com", Port: 443, HTTPMethod: m, Path: "/x"}); d.Allow {
			t.Errorf("%s allowed by an ignored access preset: %+v", m, d)
		}
	}
	// It still excludes rules, and needs an L7 protocol.
	if _, _, err := Parse([]byte(compatDoc("        protocol: rest\n        access: allow\n        rules: [{allow: {method: GET, path: /x}}]\n"))); err == nil || !strings.Contains(err.Error(), "mutually exclusive") {
		t.Errorf("access: allow with rules: %v", err)
	}
	if _, _, err := Parse([]byte(compatDoc("        access: allow\n"))); err == nil || !strings.Contains(err.Error(), "needs an L7 protocol") {
		t.Errorf("access: allow on L4: %v", err)
	}
}

// tls: skip with an L7 protocol on 443 warns, as OpenShell does.
func TestTLSSkipL7On443Warns(t *testing.T) {
	warnsAt := func(doc string) bool {
		_, warns, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range warns {
			if strings.HasSuffix(w.Path, "endpoints[0].tls") {
				return true
			}
		}
		return false
	}
	if !warnsAt(compatDoc("        protocol: rest\n        tls: skip\n        access: read-only\n")) {
		t.Error("no warning at tls for tls: skip, rest, 443")
	}
	if warnsAt(compatDoc("        tls: skip\n")) {
		t.Error("a warning at tls for an L4 endpoint")
	}
}

// OpenShell's ambiguity rule (ambiguity.rs), as far as it names a real
// ambiguity here: endpoints that can match one request must agree on
// credential_binding when both carry request metadata and their path
// scopes compete; the conflict is refused at the later endpoint's field.
// tls and allowed_ips may differ (opa.rs l7_overlapping_policies_*).
func TestAmbiguousEndpointMetadata(t *testing.T) {
	doc := func(left, right string) string {
		return "version: 1\nnetwork_policies:\n  left:\n    endpoints:\n      - " + left +
			"\n    binaries: [{path: /usr/bin/curl}]\n  right:\n    endpoints:\n      - " + right +
			"\n    binaries: [{path: /usr/bin/bash}]\n"
	}
	for _, tc := range []struct {
		name, left, right, field string
	}{
		{"credential_binding", `{host: api.example.com, port: 443, credential_binding: {provider: a}, allow_uninspected_credentials: true}`,
			`{host: api.example.com, port: 443, credential_binding: {provider: b}, allow_uninspected_credentials: true}`, "network_policies.right.endpoints[0].credential_binding"},
	} {
		p, _, err := Parse([]byte(doc(tc.left, tc.right)))
		if err == nil || p != nil || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: got policy %v, error %v; want a refusal at %s", tc.name, p != nil, err, tc.field)
		}
	}
	for _, tc := range []struct{ name, left, right string }{
		// tls and allowed_ips may differ: each endpoint is judged with
		// its own allowed_ips, and tls: skip turns no inspection off
		// (OpenShell's file loader accepts these; its gateway refuses).
		{"tls wildcard", `{host: "*.example.com", port: 443, tls: skip}`, `{host: api.example.com, port: 443}`},
		{"tls same host", `{host: api.example.com, port: 443}`, `{host: api.example.com, ports: [80, 443], tls: skip}`},
		{"allowed_ips", `{host: api.example.com, port: 443, allowed_ips: ["10.0.1.0/24", "10.0.0.0/24"]}`, `{host: api.example.com, port: 443, allowed_ips: ["10.0.2.0/24"]}`},
		{"allowed_ips one side", `{host: api.example.com, port: 443, allowed_ips: ["10.0.1.0/24"]}`, `{host: api.example.com, port: 443}`},
		{"l7 tls and allowed_ips", `{host: 192.168.1.100, port: 8567, protocol: rest, rules: [{allow: {method: GET, path: "**"}}]}`,
			`{host: 192.168.1.100, port: 8567, protocol: rest, tls: skip, allowed_ips: [192.168.1.100], rules: [{allow: {method: GET, path: "**"}}]}`},
		{"disjoint ports", `{host: api.example.com, port: 443, tls: skip}`, `{host: api.example.com, port: 8443}`},
		{"disjoint hosts", `{host: a.example.com, port: 443, tls: skip}`, `{host: b.example.com, port: 443}`},
		{"same ip set, other order", `{host: api.example.com, port: 443, allowed_ips: ["10.0.1.0/24", "10.0.0.0/24"]}`, `{host: api.example.com, port: 443, allowed_ips: ["10.0.0.0/24", "10.0.1.0/24"]}`},
		{"terminate is automatic", `{host: api.example.com, port: 443, tls: terminate}`, `{host: api.example.com, port: 443}`},
		{"bindings on disjoint paths", `{host: api.example.com, port: 443, path: "/a/**", protocol: rest, access: full, credential_binding: {provider: a}}`,
			`{host: api.example.com, port: 443, path: "/b/**", protocol: rest, access: full, credential_binding: {provider: b}}`},
		{"more specific path wins", `{host: api.example.com, port: 443, protocol: rest, access: full, credential_binding: {provider: a}}`,
			`{host: api.example.com, port: 443, path: "/b/**", protocol: rest, access: full, credential_binding: {provider: b}}`},
	} {
		if _, _, err := Parse([]byte(doc(tc.left, tc.right))); err != nil {
			t.Errorf("%s: refused: %v", tc.name, err)
		}
	}
}
