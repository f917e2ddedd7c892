package prover

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/portcullis-dev/portcullis/policy"
)

// The host automaton agrees with policy.MatchHost on whole middle-label
// wildcards, `**` and hosts holding bytes outside the host-name alphabet.
func TestHostNFAMiddleLabelsAgreeWithPolicy(t *testing.T) {
	pats := []string{"*.s3.*.amazonaws.com", "**.s3.*.amazonaws.com", "foo.*.example.com", "*.*.example.com", "a*.x.*.example.com", "*.example.com"}
	labels := []string{"a", "ab", "foo", "s3", "x", "us-east-1", "amazonaws", "example", "com", "a\x00b", "*", "é", ""}
	rapid.Check(t, func(t *rapid.T) {
		pat := rapid.SampledFrom(pats).Draw(t, "pattern")
		ls := rapid.SliceOfN(rapid.SampledFrom(labels), 1, 6).Draw(t, "labels")
		h := ""
		for i, l := range ls {
			if i > 0 {
				h += "."
			}
			h += l
		}
		if !policy.ValidHostName(h) {
			// Witnesses are drawn from dnsNames; outside it the
			// automaton still must not accept what MatchHost refuses.
			if policy.MatchHost(pat, h) {
				t.Fatalf("MatchHost(%q, %q) accepts a host outside the alphabet", pat, h)
			}
			return
		}
		if got, want := run(hostNFA(pat), h), policy.MatchHost(pat, h); got != want {
			t.Fatalf("host %q on %q: automaton %v, MatchHost %v", pat, h, got, want)
		}
	})
	for _, h := range []string{"bucket.s3.us-east-1.amazonaws.com", "a.b.s3.x.amazonaws.com"} {
		if !run(hostNFA("**.s3.*.amazonaws.com"), h) {
			t.Errorf("automaton refuses %q", h)
		}
	}
	if run(hostNFA("*.example.com"), "a\x00b.example.com") {
		t.Error("automaton accepts a NUL label")
	}
}

// The prover sees what a middle-label wildcard grants: a new entry with
// `*.s3.*.amazonaws.com` reaches hosts the current policy does not.
func TestProveMiddleLabelWildcard(t *testing.T) {
	cur := parse(t, "version: 1\nnetwork_policies:\n  s3:\n    endpoints: [{host: 'bucket.s3.us-east-1.amazonaws.com', port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n")
	prop := parse(t, "version: 1\nnetwork_policies:\n  s3:\n    endpoints: [{host: '*.s3.*.amazonaws.com', port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n")
	rep := prove(t, cur, prop, Options{})
	found := false
	for _, f := range rep.Findings {
		if f.Counterexample != nil && f.Counterexample.Host != "bucket.s3.us-east-1.amazonaws.com" && policy.MatchHost("*.s3.*.amazonaws.com", f.Counterexample.Host) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no finding with a host under *.s3.*.amazonaws.com: %+v", rep.Findings)
	}
}

// OpenShell's hostless endpoints (allowed_ips only) now validate; the
// prover reports the reach they add, with a counterexample inside
// allowed_ips that Decide allows (prove checks it).
func TestProveHostlessEndpoint(t *testing.T) {
	cur := parse(t, "version: 1\nnetwork_policies: {}\n")
	prop := parse(t, "version: 1\nnetwork_policies:\n  lan:\n    endpoints: [{port: 9443, allowed_ips: ['172.16.0.0/12']}]\n    binaries: [{path: /usr/bin/curl}]\n")
	rep := prove(t, cur, prop, Options{})
	found := false
	for _, f := range rep.Findings {
		if ce := f.Counterexample; ce != nil && ce.Port == 9443 && ce.Addr.IsValid() {
			found = true
		}
	}
	if !found {
		t.Fatalf("no finding for the hostless endpoint: %+v", rep.Findings)
	}
}

// A query matcher with `{a,b}` alternatives is read as Decide reads it:
// the new rule's reach is found.
func TestProveQueryBraces(t *testing.T) {
	cur := parse(t, "version: 1\nnetwork_policies:\n  a:\n    endpoints: [{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, path: /x}}]}]\n    binaries: [{path: /usr/bin/curl}]\n")
	prop := parse(t, "version: 1\nnetwork_policies:\n  a:\n    endpoints: [{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, path: /x}}, {allow: {method: GET, path: /dl, query: {f: '{json,xml}'}}}]}]\n    binaries: [{path: /usr/bin/curl}]\n")
	rep := prove(t, cur, prop, Options{})
	if len(rep.Findings) == 0 {
		t.Fatal("no finding for the new /dl rule")
	}
}
