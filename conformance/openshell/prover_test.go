package openshell

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

// Cases from crates/openshell-prover/src/lib.rs and queries.rs. OpenShell's
// prover reports what a policy grants (its categories are a delta against
// an empty baseline); ours proves what a proposed policy adds to the
// current one, so each case proves the OpenShell policy against an empty
// current policy. testdata/prover holds OpenShell's fixtures verbatim; the
// credentials file becomes Options.Credentialed (its target_hosts on 443).
//
// Category names: OpenShell's credential_reach_expansion is our
// new_credentialed_reach; link_local_reach on a metadata name is our
// cloud_metadata (a Parse problem with that code: such a policy never
// loads); l7_bypass_credentialed has the same name.

type proverCase struct {
	Source       string
	Proposed     string // YAML, or "@file" under testdata/prover
	Credentialed []prover.HostPort

	// OpenShell's outcome: the category it reports, or none at all.
	Category string // OpenShell's category name
	Kind     string // our finding kind for it; "" with NoFindings
	// NoFindings: OpenShell reports nothing.
	NoFindings bool
	Endpoint   string // with Kind: the finding's endpoint label must contain this
}

var githubCredentials = []prover.HostPort{{Host: "api.github.com", Port: 443}, {Host: "github.com", Port: 443}}

var proverCases = []proverCase{
	{Source: proverLib + "test_findings_for_github_policy", Proposed: "@policy.yaml", Credentialed: githubCredentials,
		Category: "l7_bypass_credentialed", Kind: "l7_bypass_credentialed"},
	{Source: proverLib + "test_wildcard_endpoint_covering_credential_host_emits_credential_reach", Proposed: `
version: 1
network_policies:
  github_wildcard:
    name: github-wildcard
    endpoints:
      - host: "*.github.com"
        port: 443
        protocol: rest
        enforcement: enforce
        access: read-write
    binaries:
      - path: /usr/bin/curl
`, Credentialed: githubCredentials, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Endpoint: "*.github.com"},
	{Source: proverLib + "test_empty_policy_no_findings", Proposed: "@empty-policy.yaml", Credentialed: githubCredentials, NoFindings: true},
}

// prove calls prover.Prove, with a context where it takes one (the
// budgeted prover of issue 11 does); once that is merged this is one call.
func prove(current, proposed *policy.Policy, opts prover.Options) (*prover.Report, error) {
	switch f := any(prover.Prove).(type) {
	case func(*policy.Policy, *policy.Policy, prover.Options) (*prover.Report, error):
		return f(current, proposed, opts)
	case func(context.Context, *policy.Policy, *policy.Policy, prover.Options) (*prover.Report, error):
		return f(context.Background(), current, proposed, opts)
	}
	return nil, fmt.Errorf("prover.Prove has an unexpected signature %T", prover.Prove)
}

func TestProver(t *testing.T) {
	empty, _, err := policy.Parse([]byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range proverCases {
		t.Run(c.Source, func(t *testing.T) {
			doc := []byte(c.Proposed)
			if c.Proposed[0] == '@' {
				if doc, err = os.ReadFile("testdata/prover/" + c.Proposed[1:]); err != nil {
					t.Fatal(err)
				}
			}
			proposed, _, err := policy.Parse(doc)
			if err != nil {
				t.Fatalf("%s\nwe refuse the policy OpenShell's prover loads: %v", c.Source, err)
			}
			rep, err := prove(empty, proposed, prover.Options{Credentialed: c.Credentialed})
			if err != nil {
				t.Fatalf("%s\nProve: %v", c.Source, err)
			}
			if c.NoFindings {
				if len(rep.Findings) > 0 {
					t.Errorf("%s\nOpenShell reports no finding; we report %+v", c.Source, rep.Findings)
				}
				return
			}
			var kinds []string
			for _, f := range rep.Findings {
				kinds = append(kinds, f.Kind)
				if f.Kind == c.Kind && (c.Endpoint == "" || strings.Contains(f.Endpoint, c.Endpoint)) {
					return
				}
			}
			t.Errorf("%s\nOpenShell reports %s; we report no %s finding (endpoint %q); we report %q", c.Source, c.Category, c.Kind, c.Endpoint, kinds)
		})
	}
}

// metadataCase: OpenShell's prover reports link_local_reach for a policy
// naming a cloud-metadata host; here such a policy never loads, and the
// refusal carries the cloud_metadata code `portcullis prove` reports.
type metadataCase struct {
	Source string
	Policy string
	// Metadata: OpenShell classes the destination as link-local/metadata.
	Metadata bool
}

func endpointDoc(endpoint string) string {
	return "version: 1\nnetwork_policies:\n  metadata:\n    name: metadata\n    endpoints:\n      - " + endpoint + "\n    binaries:\n      - path: /usr/bin/curl\n"
}

const queriesRS = "crates/openshell-prover/src/queries.rs: "

var metadataCases = []metadataCase{
	{Source: proverLib + "test_known_metadata_hostname_emits_link_local_finding", Policy: endpointDoc("{ host: metadata.google.internal, port: 80 }"), Metadata: true},
	{Source: queriesRS + "is_known_metadata_hostname_recognises_gcp_variants", Policy: endpointDoc("{ host: METADATA.GOOGLE.INTERNAL, port: 80 }"), Metadata: true},
	{Source: queriesRS + "is_known_metadata_hostname_recognises_gcp_variants", Policy: endpointDoc(`{ host: "metadata.google.internal.", port: 80 }`), Metadata: true},
	{Source: queriesRS + "is_link_local_recognises_ipv4_169_254", Policy: endpointDoc(`{ host: "169.254.169.254", port: 80 }`), Metadata: true},
	{Source: queriesRS + "is_known_metadata_hostname_rejects_other_hostnames", Policy: endpointDoc("{ host: api.github.com, port: 443 }"), Metadata: false},
	{Source: queriesRS + "is_link_local_rejects_hostnames", Policy: endpointDoc("{ host: api.github.com, port: 443 }"), Metadata: false},
}

func TestProverMetadata(t *testing.T) {
	seen := map[string]int{}
	for _, c := range metadataCases {
		seen[c.Source]++
		t.Run(fmt.Sprintf("%s#%d", c.Source, seen[c.Source]), func(t *testing.T) {
			_, _, err := policy.Parse([]byte(c.Policy))
			var ve *policy.ValidationError
			flagged := false
			if errors.As(err, &ve) {
				for _, p := range ve.Problems {
					if p.Code == policy.CodeCloudMetadata {
						flagged = true
					}
				}
			}
			if flagged != c.Metadata {
				t.Errorf("%s\nOpenShell metadata/link-local: %v; our cloud_metadata refusal: %v (err %v)", c.Source, c.Metadata, flagged, err)
			}
		})
	}
}

// Link-local classification (queries.rs is_link_local): allowed_ips
// overlapping link-local is refused, other ranges load.
var linkLocalCases = []validateCase{
	{Source: queriesRS + "is_link_local_recognises_ipv4_169_254", Policy: endpointDoc(`{ host: svc.example.com, port: 443, allowed_ips: ["169.254.0.1"] }`), OpenShell: deny},
	{Source: queriesRS + "is_link_local_recognises_ipv4_169_254", Policy: endpointDoc(`{ host: svc.example.com, port: 443, allowed_ips: ["169.254.255.255"] }`), OpenShell: deny},
	{Source: queriesRS + "is_link_local_recognises_ipv6_fe80", Policy: endpointDoc(`{ host: svc.example.com, port: 443, allowed_ips: ["fe80::1"] }`), OpenShell: deny},
	{Source: queriesRS + "is_link_local_recognises_ipv6_fe80", Policy: endpointDoc(`{ host: svc.example.com, port: 443, allowed_ips: ["fe80::abcd:ef01"] }`), OpenShell: deny},
	{Source: queriesRS + "is_link_local_rejects_non_link_local_ips", Policy: endpointDoc(`{ host: svc.example.com, port: 443, allowed_ips: ["10.0.0.1", "192.168.1.1", "8.8.8.8"] }`), OpenShell: allow},
	{Source: proverLib + "test_parse_policy", Policy: "@", OpenShell: allow},
}

func TestProverLinkLocal(t *testing.T) {
	b, err := os.ReadFile("testdata/prover/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cases := append([]validateCase(nil), linkLocalCases...)
	for i := range cases {
		if cases[i].Policy == "@" {
			cases[i].Policy = string(b)
		}
	}
	runValidate(t, cases)
}
