package advisor

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

// credBaseDoc binds the gh provider on api.github.com:443 (and on an
// uploads.github.com endpoint under a path scope) for /usr/bin/gh.
const credBaseDoc = `
version: 1
network_policies:
  github:
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        credential_binding: { provider: gh }
        rules:
          - allow: { method: GET, path: "/repos/**" }
    binaries: [ { path: /usr/bin/gh } ]
  plain:
    endpoints:
      - { host: ship.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /v1/x } } ] }
    binaries: [ { path: /usr/bin/python3 } ]
`

// credFieldValues sets each credential field of an endpoint (YAML).
var credFieldValues = map[string]string{
	"websocket_credential_rewrite":    "websocket_credential_rewrite: true",
	"request_body_credential_rewrite": "request_body_credential_rewrite: true",
	"allow_uninspected_credentials":   "allow_uninspected_credentials: true",
	"credential_signing":              "credential_signing: sigv4",
	"signing_service":                 "signing_service: s3",
	"signing_region":                  "signing_region: us-east-1",
	"credential_binding":              "credential_binding: { provider: gh }",
}

// Every credential field in an add_rule endpoint is refused, alone, at its
// field path, on a new host and on a credential-bound one alike (even
// naming the provider already bound there), in the first or a later
// endpoint; nothing is returned and the base is untouched.
func TestCredentialFieldsRefused(t *testing.T) {
	if len(credFieldValues) != len(credentialFields) {
		t.Fatalf("%d fields tested, %d credential fields", len(credFieldValues), len(credentialFields))
	}
	base := mustParsePolicy(t, credBaseDoc)
	hash := base.Hash()
	for _, field := range credentialFields {
		set := credFieldValues[field]
		if set == "" {
			t.Fatalf("no value for %s", field)
		}
		for _, c := range []struct{ name, endpoints, path string }{
			{"new host", `{ host: other.example.com, port: 443, protocol: rest, ` + set + `, rules: [ { allow: { method: GET, path: /v1/x } } ] }`, "endpoints[0]"},
			{"bound host", `{ host: api.github.com, port: 443, path: /graphql, protocol: rest, ` + set + `, rules: [ { allow: { method: POST, path: /graphql } } ] }`, "endpoints[0]"},
			{"later endpoint", `{ host: other.example.com, port: 443 }, { host: "*.github.com", port: 443, protocol: rest, ` + set + `, rules: [ { allow: { method: GET, path: /v1/x } } ] }`, "endpoints[1]"},
		} {
			t.Run(field+"/"+c.name, func(t *testing.T) {
				p := mustParse(t, newRule(c.endpoints, py))
				want := "operations[0].add_rule.rule." + c.path + "." + field
				for name, run := range map[string]func() (*policy.Policy, error){
					"Apply": func() (*policy.Policy, error) { return Apply(base, p) },
					"Evaluate": func() (*policy.Policy, error) {
						res, rep, err := Evaluate(context.Background(), base, p, prover.Options{Now: now, Credentialed: []prover.HostPort{{Host: "*.github.com", Port: 443}}})
						if rep != nil {
							t.Fatalf("Evaluate: a refused proposal was proved: %+v", rep)
						}
						return res, err
					},
				} {
					res, err := run()
					r, ok := AsRefusal(err)
					if !ok || res != nil {
						t.Fatalf("%s: want a refusal and no policy, got %v, %v", name, res != nil, err)
					}
					if all := r.All(); len(all) != 1 {
						t.Fatalf("%s: want exactly one refusal, got %v", name, err)
					}
					if r.Field != want || r.Rule != RuleForbiddenField || r.Op != 0 {
						t.Fatalf("%s: refusal %s (%s) op %d, want %s (%s)", name, r.Field, r.Rule, r.Op, want, RuleForbiddenField)
					}
					if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(r.Reason, field) || !strings.Contains(r.Reason, "credential binding") {
						t.Fatalf("%s: the refusal does not name the field and why: %v", name, err)
					}
				}
				if base.Hash() != hash {
					t.Fatal("the base policy changed")
				}
			})
		}
	}
}

// credentialedFindings maps kind → the findings of that kind marked
// credentialed.
func credentialedFindings(rep *prover.Report) map[string][]prover.Finding {
	out := map[string][]prover.Finding{}
	for _, f := range rep.Findings {
		if f.Credentialed {
			out[f.Kind] = append(out[f.Kind], f)
		}
	}
	return out
}

// An add_rule endpoint at, or overlapping, a credential-bound host is
// judged by the narrowness rules as any other; what it adds there is
// marked credentialed, whether the caller lists the destination (an
// attached provider's host pattern) or only the base binds it.
func TestCredentialBoundDestinationMarked(t *testing.T) {
	base := mustParsePolicy(t, credBaseDoc)
	withProvider := prover.Options{Now: now, Credentialed: []prover.HostPort{{Host: "*.github.com", Port: 443}}}
	unlisted := prover.Options{Now: now}
	cases := []struct {
		name, doc string
		kind      string // the credentialed finding expected
		host      string // its counterexample's host
	}{
		{"L4 endpoint at the bound host", newRule(`{ host: api.github.com, port: 443 }`, py), prover.NewCredentialedReach, "api.github.com"},
		{"host pattern over the bound host", newRule(`{ host: "*.github.com", port: 443 }`, py), prover.NewCredentialedReach, "api.github.com"},
		{"rest endpoint under a path scope at the bound host", newRule(`{ host: api.github.com, port: 443, path: /graphql, protocol: rest, rules: [ { allow: { method: POST, path: /graphql } } ] }`, py), prover.NewCredentialedReach, "api.github.com"},
		{"binary on the bound endpoint", `
rationale: x
operations:
  - add_binary: { policy: github, path: /usr/bin/python3, endpoints: [ "api.github.com:443" ] }
`, prover.NewCredentialedReach, "api.github.com"},
		{"method on the bound endpoint", `
rationale: x
operations:
  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: PUT, path: /repos/acme/app/contents/README.md } } ] }
`, prover.NewHTTPMethod, "api.github.com"},
	}
	for _, c := range cases {
		for optName, o := range map[string]prover.Options{"provider pattern": withProvider, "binding only": unlisted} {
			t.Run(c.name+"/"+optName, func(t *testing.T) {
				res, rep, err := Evaluate(context.Background(), base, mustParse(t, c.doc), o)
				if err != nil {
					t.Fatal(err)
				}
				fs := credentialedFindings(rep)[c.kind]
				if len(fs) == 0 {
					t.Fatalf("no credentialed %s: %+v", c.kind, rep.Findings)
				}
				// The counterexample is added, and goes to the bound host or
				// (with the provider's pattern) one the pattern covers.
				creds := boundDestinations(o.Credentialed, base)
				covered := func(r *prover.Finding) bool {
					return slices.ContainsFunc(creds, func(hp prover.HostPort) bool { return hp.Covers(r.Counterexample.Host, r.Counterexample.Port) })
				}
				r := fs[0].Counterexample
				if r == nil || !covered(&fs[0]) || len(o.Credentialed) == 0 && r.Host != c.host || !policy.Decide(res, *r).Allow || policy.Decide(base, *r).Allow {
					t.Fatalf("counterexample %+v", r)
				}
				for _, f := range rep.Findings {
					if f.Kind == prover.NewReach && covered(&f) {
						t.Fatalf("an unmarked new_reach to a credentialed host: %+v", f)
					}
				}
			})
		}
	}
	// Nowhere near a credential: nothing is marked.
	_, rep, err := Evaluate(context.Background(), base, mustParse(t, newRule(`{ host: other.example.com, port: 443 }`, py)), withProvider)
	if err != nil {
		t.Fatal(err)
	}
	if fs := credentialedFindings(rep); len(fs) != 0 || len(rep.Findings) == 0 {
		t.Fatalf("want unmarked findings, got %+v", rep.Findings)
	}
	// The endpoint the narrowness rules refuse stays refused beside a
	// binding: a rest endpoint at the bound host:port with the same path
	// scope is ambiguous with it (which credential would a request carry?).
	_, _, err = Evaluate(context.Background(), base, mustParse(t, newRule(`{ host: api.github.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: /v1/x } } ] }`, py)), withProvider)
	if r, ok := AsRefusal(err); !ok || r.Rule != RuleInvalidPolicy || !strings.Contains(r.Reason, "credential_binding") {
		t.Fatalf("want the resulting policy refused as ambiguous, got %v", err)
	}
}

func TestBoundDestinations(t *testing.T) {
	p := mustParsePolicy(t, `
version: 1
network_policies:
  a:
    endpoints:
      - { host: API.GitHub.com, ports: [ 443, 8443 ], protocol: rest, credential_binding: { provider: gh }, rules: [ { allow: { method: GET, path: /x } } ] }
      - { host: "*.s3.amazonaws.com", port: 443, protocol: rest, credential_binding: { provider: s3 }, rules: [ { allow: { method: GET, path: /x } } ] }
      - { host: plain.example.com, port: 443 }
    binaries: [ { path: /usr/bin/gh } ]
`)
	got := boundDestinations([]prover.HostPort{{Host: "api.github.com", Port: 443}}, p)
	want := []prover.HostPort{{Host: "api.github.com", Port: 443}, {Host: "api.github.com", Port: 8443}, {Host: "*.s3.amazonaws.com", Port: 443}}
	if len(got) != len(want) || got[0] != want[0] {
		t.Fatalf("got %v, want %v (the caller's first)", got, want)
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if got := boundDestinations(nil, nil); got != nil {
		t.Fatalf("no policy: %v", got)
	}
}
