package openshell

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

// Cases from crates/openshell-prover/src/lib.rs, queries.rs,
// credentials.rs and report.rs, and from the prover's use in
// crates/openshell-server/src/grpc/policy.rs. OpenShell's prover reports
// what a policy grants (its categories are a delta against an empty
// baseline, or, at the gateway, finding_delta against the current policy);
// ours proves what a proposed policy adds to the current one, so each case
// proves the OpenShell policy against Current (empty unless given).
// testdata/prover holds OpenShell's fixtures verbatim; the credentials file
// becomes Options.Credentialed (its target_hosts on 443), and so do the
// hosts of the provider profiles a test attaches (providers/*.yaml: github's
// api.github.com and github.com; aws-s3's and google-vertex-ai's include
// host patterns), as lifecycle makes attached providers' hosts credentialed.
//
// Category names: OpenShell's credential_reach_expansion is our
// new_credentialed_reach; capability_expansion (a new HTTP method on a
// (binary, host, port) the binary already reached with a credential in
// scope) is our new_http_method marked credentialed; link_local_reach on a
// metadata name is our cloud_metadata (a Parse problem with that code: such
// a policy never loads); l7_bypass_credentialed has the same name. Where
// OpenShell reports no credential category (un-credentialed reach is not
// its tracked risk) we may report new_reach, never a credentialed finding
// (Uncredentialed).

type proverCase struct {
	Source       string
	Current      string // YAML; "" is the empty policy
	Proposed     string // YAML, or "@file" under testdata/prover
	Credentialed []prover.HostPort

	// OpenShell's outcome: the category it reports, or none at all.
	Category string // OpenShell's category name
	Kind     string // our finding kind for it; "" with NoFindings or Uncredentialed
	// NoFindings: OpenShell reports nothing.
	NoFindings bool
	// Uncredentialed: OpenShell reports no credential category (it does
	// not track un-credentialed reach); no finding of ours is marked
	// credentialed and none is new_credentialed_reach or
	// l7_bypass_credentialed.
	Uncredentialed bool
	Endpoint       string // with Kind: the finding's endpoint label must contain this
	// Host, Method: with Kind, the counterexample's host (exactly) and HTTP
	// method.
	Host, Method string
	// Absent: OpenShell reports none of these categories here (finding_delta
	// keeps capability_expansion off a reach that is itself new): none of
	// our kinds for them either.
	Absent []string
}

const (
	credentialsRS = "crates/openshell-prover/src/credentials.rs: "
	reportRS      = "crates/openshell-prover/src/report.rs: "
	serverPolicy  = "crates/openshell-server/src/grpc/policy.rs: "
)

var (
	githubCredentials = []prover.HostPort{{Host: "api.github.com", Port: 443}, {Host: "github.com", Port: 443}}
	// providers/aws-s3.yaml and providers/google-vertex-ai.yaml at 2f7fb655.
	awsS3Credentials = []prover.HostPort{{Host: "*.s3.amazonaws.com", Port: 443}, {Host: "s3.amazonaws.com", Port: 443},
		{Host: "*.s3.*.amazonaws.com", Port: 443}, {Host: "s3.*.amazonaws.com", Port: 443},
		{Host: "*.s3.dualstack.*.amazonaws.com", Port: 443}, {Host: "s3.dualstack.*.amazonaws.com", Port: 443}}
	vertexCredentials = []prover.HostPort{{Host: "*-aiplatform.googleapis.com", Port: 443}, {Host: "aiplatform.googleapis.com", Port: 443},
		{Host: "aiplatform.us.rep.googleapis.com", Port: 443}, {Host: "aiplatform.eu.rep.googleapis.com", Port: 443}}
)

// entryDoc is a policy of one entry granting bin the endpoint (a flow
// mapping).
func entryDoc(bin, endpoint string) string {
	return "version: 1\nnetwork_policies:\n  proposed:\n    name: proposed\n    endpoints:\n      - " + endpoint + "\n    binaries:\n      - path: " + bin + "\n"
}

// githubGet is curl with GET on api.github.com (a credential in scope).
const githubGet = "{ host: api.github.com, port: 443, protocol: rest, enforcement: enforce, rules: [ { allow: { method: GET, path: \"/repos/**\" } } ] }"

var proverCases = append([]proverCase{
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
`, Credentialed: githubCredentials, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Endpoint: "*.github.com", Host: "api.github.com"},
	{Source: proverLib + "test_empty_policy_no_findings", Proposed: "@empty-policy.yaml", Credentialed: githubCredentials, NoFindings: true},

	// credentials.rs: a credential whose target is api.github.com is in
	// scope for a *.github.com endpoint.
	{Source: credentialsRS + "wildcard_policy_host_finds_credentialed_concrete_target", Proposed: entryDoc("/usr/bin/curl", `{ host: "*.github.com", port: 443 }`),
		Credentialed: []prover.HostPort{{Host: "api.github.com", Port: 443}}, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Host: "api.github.com"},

	// report.rs: the shapes its shorthand renders. capability_expansion:
	// PUT on api.github.com:443 via /usr/bin/curl, which already reached it
	// with GET.
	{Source: reportRS + "shorthand_renders_capability_expansion_with_method", Current: entryDoc("/usr/bin/curl", githubGet),
		Proposed:     entryDoc("/usr/bin/curl", "{ host: api.github.com, port: 443, protocol: rest, enforcement: enforce, rules: [ { allow: { method: GET, path: \"/repos/**\" } }, { allow: { method: PUT, path: /repos/owner/name/contents/path/file.md } } ] }"),
		Credentialed: githubCredentials, Category: "capability_expansion", Kind: prover.NewHTTPMethod, Host: "api.github.com", Method: "PUT",
		Absent: []string{prover.NewCredentialedReach}},
	// credential_reach_expansion: uploads.github.com:443 via /usr/bin/curl,
	// the credential's target a pattern covering it.
	{Source: reportRS + "shorthand_renders_credential_reach_expansion", Proposed: entryDoc("/usr/bin/curl", "{ host: uploads.github.com, port: 443 }"),
		Credentialed: []prover.HostPort{{Host: "*.github.com", Port: 443}}, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Host: "uploads.github.com"},

	// The gateway with the github provider attached (test_provider
	// "github": api.github.com and github.com).
	{Source: serverPolicy + "agent_authored_l4_proposal_with_credential_records_high_finding", Proposed: entryDoc("/usr/bin/curl", "{ host: api.github.com, port: 443 }"),
		Credentialed: githubCredentials, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Endpoint: "api.github.com:443", Host: "api.github.com"},
	{Source: serverPolicy + "agent_authored_l4_proposal_without_credential_emits_no_finding", Proposed: entryDoc("/usr/bin/curl", "{ host: example.com, port: 443 }"),
		Uncredentialed: true},
	{Source: serverPolicy + "agent_authored_l7_full_with_credential_emits_reach_expansion", Proposed: entryDoc("/usr/bin/curl", "{ host: api.github.com, port: 443, protocol: rest, enforcement: enforce, access: full }"),
		Credentialed: githubCredentials, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Host: "api.github.com",
		Absent: []string{prover.NewHTTPMethod}},
	{Source: serverPolicy + "full_loop_under_v2_auto_mode_splits_credentialed_and_uncredentialed",
		Proposed:     entryDoc("/usr/bin/curl", "{ host: raw.githubusercontent.com, port: 443, protocol: rest, enforcement: enforce, rules: [ { allow: { method: GET, path: /github/rest-api-description/main/descriptions/api.github.com/api.github.com.json } } ] }"),
		Credentialed: githubCredentials, Uncredentialed: true},
	{Source: serverPolicy + "full_loop_under_v2_auto_mode_splits_credentialed_and_uncredentialed",
		Proposed:     entryDoc("/usr/bin/curl", "{ host: api.github.com, port: 443, protocol: rest, enforcement: enforce, rules: [ { allow: { method: PUT, path: /repos/owner/name/contents/path/file.md } } ] }"),
		Credentialed: githubCredentials, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Host: "api.github.com", Method: "PUT",
		Absent: []string{prover.NewHTTPMethod}},
	{Source: serverPolicy + "agent_authored_submission_supersedes_pending_mechanistic_for_same_endpoint", Proposed: entryDoc("/usr/bin/curl", "{ host: api.github.com, port: 443 }"),
		Credentialed: githubCredentials, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Host: "api.github.com"},

	// The same with providers whose hosts are patterns: aws-s3 and
	// google-vertex-ai attached (their profiles' endpoint hosts).
	{Source: serverPolicy + "agent_authored_l4_proposal_with_credential_records_high_finding", Proposed: entryDoc("/usr/bin/curl", "{ host: my-bucket.s3.us-east-1.amazonaws.com, port: 443 }"),
		Credentialed: awsS3Credentials, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Host: "my-bucket.s3.us-east-1.amazonaws.com"},
	{Source: serverPolicy + "agent_authored_l4_proposal_with_credential_records_high_finding", Proposed: entryDoc("/usr/bin/curl", "{ host: us-central1-aiplatform.googleapis.com, port: 443 }"),
		Credentialed: vertexCredentials, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Host: "us-central1-aiplatform.googleapis.com"},
	{Source: serverPolicy + "agent_authored_l4_proposal_without_credential_emits_no_finding", Proposed: entryDoc("/usr/bin/curl", "{ host: generativelanguage.googleapis.com, port: 443 }"),
		Credentialed: vertexCredentials, Uncredentialed: true},
	{Source: serverPolicy + "agent_authored_l7_full_with_credential_emits_reach_expansion", Proposed: entryDoc("/usr/bin/python3", `{ host: "*.s3.amazonaws.com", port: 443, protocol: rest, enforcement: enforce, access: full }`),
		Credentialed: awsS3Credentials, Category: "credential_reach_expansion", Kind: prover.NewCredentialedReach, Endpoint: "*.s3.amazonaws.com",
		Absent: []string{prover.NewHTTPMethod}},
	{Source: proverLib + "test_findings_for_github_policy", Proposed: entryDoc("/usr/bin/git", `{ host: "*.s3.us-west-2.amazonaws.com", port: 443 }`),
		Credentialed: awsS3Credentials, Category: "l7_bypass_credentialed", Kind: prover.L7BypassCredentialed},
	{Source: reportRS + "shorthand_renders_capability_expansion_with_method",
		Current:      entryDoc("/usr/bin/python3", "{ host: my-bucket.s3.eu-west-1.amazonaws.com, port: 443, protocol: rest, enforcement: enforce, rules: [ { allow: { method: GET, path: \"/**\" } } ] }"),
		Proposed:     entryDoc("/usr/bin/python3", "{ host: my-bucket.s3.eu-west-1.amazonaws.com, port: 443, protocol: rest, enforcement: enforce, rules: [ { allow: { method: GET, path: \"/**\" } }, { allow: { method: PUT, path: /reports/today.csv } } ] }"),
		Credentialed: awsS3Credentials, Category: "capability_expansion", Kind: prover.NewHTTPMethod, Host: "my-bucket.s3.eu-west-1.amazonaws.com", Method: "PUT",
		Absent: []string{prover.NewCredentialedReach}},
}, overlapCases()...)

// overlapCases port credentials.rs's host_patterns_overlap tests: the
// credential's target host and the endpoint's host overlap (in either
// role) exactly when OpenShell says so; a credential in scope is then
// credential_reach_expansion, and none is no credential category.
func overlapCases() []proverCase {
	var out []proverCase
	for _, c := range []struct {
		test, a, b string
		overlap    bool
	}{
		{"host_patterns_overlap_matches_exact_case_and_trailing_dot", "API.GITHUB.COM.", "api.github.com", true},
		{"host_patterns_overlap_matches_exact_case_and_trailing_dot", "api.github.com", "uploads.github.com", false},
		{"host_patterns_overlap_matches_first_label_wildcard_only", "*.github.com", "api.github.com", true},
		{"host_patterns_overlap_matches_first_label_wildcard_only", "*.github.com", "github.com", false},
		{"host_patterns_overlap_matches_first_label_wildcard_only", "*.github.com", "deep.api.github.com", false},
		{"host_patterns_overlap_matches_intra_label_first_label_wildcard", "api-*.github.com", "api-v3.github.com", true},
		{"host_patterns_overlap_matches_intra_label_first_label_wildcard", "api-*.github.com", "uploads.github.com", false},
		{"host_patterns_overlap_matches_whole_middle_label_wildcard", "api.*.github.com", "api.v3.github.com", true},
		{"host_patterns_overlap_matches_whole_middle_label_wildcard", "*.s3.*.amazonaws.com", "bucket.s3.us-east-1.amazonaws.com", true},
		{"host_patterns_overlap_matches_whole_middle_label_wildcard", "s3.*.amazonaws.com", "s3.eu-west-1.amazonaws.com", true},
		{"host_patterns_overlap_matches_whole_middle_label_wildcard", "s3.*.amazonaws.com", "s3.amazonaws.com", false},
		{"host_patterns_overlap_matches_whole_middle_label_wildcard", "*.s3.*.amazonaws.com", "bucket.s3.dualstack.us-east-1.amazonaws.com", false},
		{"host_patterns_overlap_matches_whole_middle_label_wildcard", "api.*.github.com", "api.v3.gitlab.com", false},
		{"host_patterns_overlap_matches_recursive_first_label_wildcard", "**.github.com", "api.github.com", true},
		{"host_patterns_overlap_matches_recursive_first_label_wildcard", "**.github.com", "deep.api.github.com", true},
		{"host_patterns_overlap_matches_recursive_first_label_wildcard", "**.github.com", "github.com", false},
	} {
		for _, roles := range [][2]string{{c.a, c.b}, {c.b, c.a}} {
			target, endpoint := roles[0], roles[1]
			pc := proverCase{Source: credentialsRS + c.test, Proposed: entryDoc("/usr/bin/curl", fmt.Sprintf("{ host: %q, port: 443 }", endpoint)),
				Credentialed: []prover.HostPort{{Host: target, Port: 443}}}
			if c.overlap {
				pc.Category, pc.Kind = "credential_reach_expansion", prover.NewCredentialedReach
			} else {
				pc.Uncredentialed = true
			}
			out = append(out, pc)
		}
	}
	return out
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

func loadProverDoc(t *testing.T, doc string) *policy.Policy {
	t.Helper()
	if doc == "" {
		doc = "version: 1\n"
	}
	b := []byte(doc)
	if doc[0] == '@' {
		var err error
		if b, err = os.ReadFile("testdata/prover/" + doc[1:]); err != nil {
			t.Fatal(err)
		}
	}
	p, _, err := policy.Parse(b)
	if err != nil {
		t.Fatalf("we refuse the policy OpenShell's prover loads: %v", err)
	}
	return p
}

// credentialedFinding: the kinds that say a credential is in scope.
func credentialedFinding(f prover.Finding) bool {
	return f.Credentialed || f.Kind == prover.NewCredentialedReach || f.Kind == prover.L7BypassCredentialed
}

func TestProver(t *testing.T) {
	seen := map[string]int{}
	for _, c := range proverCases {
		seen[c.Source]++
		t.Run(fmt.Sprintf("%s#%d", c.Source, seen[c.Source]), func(t *testing.T) {
			current, proposed := loadProverDoc(t, c.Current), loadProverDoc(t, c.Proposed)
			rep, err := prove(current, proposed, prover.Options{Credentialed: c.Credentialed})
			if err != nil {
				t.Fatalf("%s\nProve: %v", c.Source, err)
			}
			var kinds []string
			for _, f := range rep.Findings {
				kinds = append(kinds, f.Kind)
				if slices.Contains(c.Absent, f.Kind) {
					t.Errorf("%s\nOpenShell reports no category that is our %s here; we report %+v", c.Source, f.Kind, f)
				}
				if c.Uncredentialed && credentialedFinding(f) {
					t.Errorf("%s\nOpenShell reports no credential category; we report %s credentialed (%+v)", c.Source, f.Kind, f.Counterexample)
				}
			}
			if c.NoFindings {
				if len(rep.Findings) > 0 {
					t.Errorf("%s\nOpenShell reports no finding; we report %+v", c.Source, rep.Findings)
				}
				return
			}
			if c.Kind == "" {
				return
			}
			for _, f := range rep.Findings {
				if f.Kind != c.Kind || c.Endpoint != "" && !strings.Contains(f.Endpoint, c.Endpoint) || !f.Credentialed {
					continue
				}
				r := f.Counterexample
				if r == nil || c.Host != "" && r.Host != c.Host || c.Method != "" && r.HTTPMethod != c.Method {
					continue
				}
				// The counterexample is concrete, added, and credentialed.
				if !policy.Decide(proposed, *r).Allow || policy.Decide(current, *r).Allow || strings.Contains(r.Host, "*") {
					t.Fatalf("%s\ncounterexample %+v is not a request the proposal adds", c.Source, r)
				}
				if !slices.ContainsFunc(c.Credentialed, func(hp prover.HostPort) bool { return hp.Covers(r.Host, r.Port) }) {
					t.Fatalf("%s\ncounterexample %+v goes to no credentialed host of %v", c.Source, r, c.Credentialed)
				}
				return
			}
			t.Errorf("%s\nOpenShell reports %s; we report no credentialed %s finding (endpoint %q, host %q, method %q); we report %q", c.Source, c.Category, c.Kind, c.Endpoint, c.Host, c.Method, kinds)
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
