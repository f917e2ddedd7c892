package openshell

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/policy"
)

// Cases from crates/openshell-supervisor-network/src/policy_local.rs: the
// proposals an agent POSTs to http://policy.local/v1/proposals. OpenShell's
// addRule body is written in our proposal format (DESIGN "Proposal files":
// add_rule with name and rule) and judged by advisor.ParseProposal and
// advisor.Apply on an empty policy: allow = the proposal is accepted.

type advisorCase struct {
	Source   string
	Proposal string // YAML, our format

	OpenShell verdict
	// Secret must not appear in a refusal (OpenShell redacts it).
	Secret string

	Divergence string
	Ours       verdict
}

// divNarrowness: a proposal may only add narrow rules and never sets
// tls, enforcement, access, allowed_ips or credentials (DESIGN, Proposal
// files).
const divNarrowness = "proposals are an allow-list of narrow changes"

var advisorCases = []advisorCase{
	{Source: policyLocal + "proposal_chunks_from_body_accepts_add_rule_operation", Proposal: `
rationale: Allow gh to create one repo.
operations:
  - add_rule:
      name: github_api_repo_create
      rule:
        endpoints:
          - host: api.github.com
            port: 443
            protocol: rest
            tls: terminate
            enforcement: enforce
            rules:
              - allow: { method: POST, path: /user/repos }
        binaries:
          - path: /usr/bin/gh
`, OpenShell: allow, Divergence: divNarrowness, Ours: deny},
	{Source: policyLocal + "proposal_chunks_from_body_rejects_query_in_l7_path", Proposal: `
rationale: bad
operations:
  - add_rule:
      name: bad
      rule:
        endpoints:
          - host: api.github.com
            port: 443
            protocol: rest
            rules:
              - allow: { method: GET, path: "/repos?token=secret" }
        binaries:
          - path: /usr/bin/gh
`, OpenShell: deny, Secret: "secret"},
}

func TestAdvisor(t *testing.T) {
	base, _, err := policy.Parse([]byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range advisorCases {
		t.Run(c.Source, func(t *testing.T) {
			want := c.OpenShell
			if c.Divergence != "" {
				want = c.Ours
			}
			p, err := advisor.ParseProposal([]byte(c.Proposal))
			if err == nil {
				_, err = advisor.Apply(base, p)
			}
			got := allow
			if err != nil {
				got = deny
			}
			if got != want {
				t.Errorf("%s\nOpenShell: %v; we want %v (divergence %q); we answer %v: %v", c.Source, c.OpenShell, want, c.Divergence, got, err)
			}
			if err != nil && c.Secret != "" && strings.Contains(err.Error(), c.Secret) {
				t.Errorf("%s\nthe refusal repeats the secret: %v", c.Source, err)
			}
		})
	}
}
