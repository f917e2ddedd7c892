package prover

import (
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// l7_bypass_credentialed, ported from OpenShell's prover
// (crates/openshell-prover at 2f7fb655).

var githubCreds = Options{Credentialed: []HostPort{{"api.github.com", 443}, {"github.com", 443}}}

// Ported from crates/openshell-prover/src/lib.rs:
// test_findings_for_github_policy — its testdata/policy.yaml (kept verbatim
// under conformance/openshell) with the github-pat of credentials.yaml in
// scope: git, a bypass-L7 binary, reaches both credentialed hosts.
func TestL7BypassGithubPolicy(t *testing.T) {
	empty := parse(t, "version: 1\n")
	prop := load(t, "../conformance/openshell/testdata/prover/policy.yaml")
	rep := prove(t, empty, prop, githubCreds)
	k := kinds(rep)
	hosts := map[string]bool{}
	for _, f := range k[L7BypassCredentialed] {
		r := f.Counterexample
		if r == nil || r.Binary != "/usr/bin/git" || r.Port != 443 || !f.Credentialed || f.Entry != "github_api" {
			t.Fatalf("l7_bypass_credentialed finding %+v (counterexample %+v)", f, r)
		}
		if !contains(f.Detail, "bypasses L7 inspection") {
			t.Fatalf("detail %q", f.Detail)
		}
		if !policy.Decide(prop, *r).Allow || policy.Decide(empty, *r).Allow {
			t.Fatalf("counterexample %+v is not added by the proposal", r)
		}
		hosts[r.Host] = true
	}
	if !hosts["api.github.com"] || !hosts["github.com"] {
		t.Fatalf("want l7_bypass_credentialed on api.github.com and github.com:%s", show(rep.Findings))
	}
	// Reported beside new_credentialed_reach, not instead of it.
	if len(k[NewCredentialedReach]) == 0 {
		t.Fatalf("no new_credentialed_reach:%s", show(rep.Findings))
	}
}

// The nine entries of OpenShell's binary registry
// (crates/openshell-prover/registry/binaries/*.yaml): only git, nc and ssh
// have a protocol with bypasses_l7: true, so only they give
// l7_bypass_credentialed (queries.rs check_credential_safety, tier 2).
func TestL7BypassRegistry(t *testing.T) {
	for bin, want := range map[string]bool{
		"/usr/local/bin/claude":     false,
		"/usr/bin/curl":             false,
		"/usr/bin/gh":               false,
		"/usr/bin/git":              true,
		"/usr/bin/nc":               true,
		"/usr/local/bin/node":       false,
		"/usr/local/bin/python3.13": false,
		"/usr/bin/ssh":              true,
		"/usr/bin/wget":             false,
	} {
		t.Run(bin, func(t *testing.T) {
			prop := parse(t, `
version: 1
network_policies:
  gh:
    name: gh
    endpoints: [ { host: github.com, port: 443 } ]
    binaries: [ { path: `+bin+` } ]
`)
			rep := prove(t, parse(t, "version: 1\n"), prop, githubCreds)
			k := kinds(rep)
			if got := len(k[L7BypassCredentialed]) > 0; got != want {
				t.Fatalf("l7_bypass_credentialed %v, want %v:%s", got, want, show(rep.Findings))
			}
			if len(k[NewCredentialedReach]) != 1 {
				t.Fatalf("want one new_credentialed_reach:%s", show(rep.Findings))
			}
		})
	}
}

// queries.rs check_credential_safety: "Un-credentialed reach is not a
// tracked risk" — git reaching a host with no credential in scope is
// new_reach only.
func TestL7BypassNeedsCredential(t *testing.T) {
	prop := load(t, "../conformance/openshell/testdata/prover/policy.yaml")
	rep := prove(t, parse(t, "version: 1\n"), prop, Options{Credentialed: []HostPort{{"api.github.com", 8443}}})
	if k := kinds(rep); len(k[L7BypassCredentialed]) != 0 || len(k[NewCredentialedReach]) != 0 {
		t.Fatalf("want no credentialed finding:%s", show(rep.Findings))
	}
}

// The gateway's finding_delta (crates/openshell-server/src/grpc/policy.rs)
// reports only (binary, host, port) paths the baseline lacks: git that
// already reached github.com gains nothing the category tracks when the
// change only adds a path there.
func TestL7BypassOnlyNewReach(t *testing.T) {
	cur := parse(t, `
version: 1
network_policies:
  gh:
    name: gh
    endpoints:
      - host: github.com
        port: 443
        protocol: rest
        rules:
          - allow: { method: GET, path: "/acme/app.git/**" }
    binaries: [ { path: /usr/bin/git } ]
`)
	prop := cur.Clone()
	ep := prop.NetworkPolicies["gh"].Endpoints[0]
	ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "POST", Path: "/acme/app.git/git-receive-pack"}})
	rep := prove(t, cur, prop, githubCreds)
	k := kinds(rep)
	if len(k[L7BypassCredentialed]) != 0 || len(k[NewHTTPMethod]) != 1 {
		t.Fatalf("want new_http_method only:%s", show(rep.Findings))
	}
}

// A binary glob that admits a bypass-L7 binary gives it as the
// counterexample, as a wildcard host does a credentialed host
// (lib.rs: test_wildcard_endpoint_covering_credential_host_emits_credential_reach,
// for binaries).
func TestL7BypassThroughBinaryGlob(t *testing.T) {
	prop := parse(t, `
version: 1
network_policies:
  tools:
    name: tools
    endpoints: [ { host: github.com, port: 443 } ]
    binaries: [ { path: "/usr/bin/*" } ]
`)
	rep := prove(t, parse(t, "version: 1\n"), prop, githubCreds)
	k := kinds(rep)
	if len(k[L7BypassCredentialed]) != 1 {
		t.Fatalf("want one l7_bypass_credentialed:%s", show(rep.Findings))
	}
	f := k[L7BypassCredentialed][0]
	if _, ok := L7Bypass[f.Counterexample.Binary]; !ok || f.Counterexample.Host != "github.com" {
		t.Fatalf("counterexample %+v", f.Counterexample)
	}
	// Without credentials the glob is not split by the bypass binaries.
	rep = prove(t, parse(t, "version: 1\n"), prop, Options{})
	if k := kinds(rep); len(k[L7BypassCredentialed]) != 0 {
		t.Fatalf("l7_bypass_credentialed without credentials:%s", show(rep.Findings))
	}
}

// An entry that names no binaries admits every binary, the bypass-L7 ones
// among them.
func TestL7BypassEntryWithoutBinaries(t *testing.T) {
	prop := parse(t, `
version: 1
network_policies:
  any:
    name: any
    endpoints: [ { host: github.com, port: 443 } ]
`)
	rep := prove(t, parse(t, "version: 1\n"), prop, githubCreds)
	k := kinds(rep)
	if len(k[L7BypassCredentialed]) != 1 {
		t.Fatalf("want one l7_bypass_credentialed:%s", show(rep.Findings))
	}
	if b := k[L7BypassCredentialed][0].Counterexample.Binary; L7Bypass[b] == "" {
		t.Fatalf("counterexample binary %q", b)
	}
}
