package openshell

import (
	"fmt"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// Cases from crates/openshell-supervisor-network/src/l7/path.rs: request
// path canonicalisation, through policy.CanonicalPath (the form rules are
// matched against and the proxy forwards). OpenShell's canonicaliser also
// returns the query separately and strips an absolute-form authority; here
// net/http does the latter before the path reaches CanonicalPath, so those
// cases run against the proxy (proxy_test.go).

type canonCase struct {
	Source            string
	Input             string
	AllowEncodedSlash bool
	Want              string // the canonical path OpenShell returns; "" when it refuses the target
	// NoDots: OpenShell asserts only that an accepted result has no dot segment.
	NoDots bool
	// Divergence names the deliberate difference; Ours is then our result
	// ("" for a refusal).
	Divergence string
	Ours       string
}

var pathCases = []canonCase{
	{Source: pathRS + "literal_dot_segments_resolve", Input: "/a/./b", Want: "/a/b"},
	{Source: pathRS + "literal_dot_segments_resolve", Input: "/a/b/.", Want: "/a/b/"},
	{Source: pathRS + "literal_dot_segments_resolve", Input: "/a/../b", Want: "/b"},
	{Source: pathRS + "literal_dot_segments_resolve", Input: "/a/b/..", Want: "/a/"},
	{Source: pathRS + "percent_encoded_dot_segments_resolve_the_same_way", Input: "/public/%2e%2e/secret", Want: "/secret"},
	{Source: pathRS + "percent_encoded_dot_segments_resolve_the_same_way", Input: "/public/%2E%2E/secret", Want: "/secret"},
	{Source: pathRS + "percent_encoded_dot_segments_resolve_the_same_way", Input: "/public/%2e/secret", Want: "/public/secret"},
	{Source: pathRS + "traversal_above_root_is_rejected", Input: "/..", Want: "",
		Divergence: divAboveRoot, Ours: "/"},
	{Source: pathRS + "traversal_above_root_is_rejected", Input: "/a/../..", Want: "",
		Divergence: divAboveRoot, Ours: "/"},
	{Source: pathRS + "traversal_above_root_is_rejected", Input: "/a/%2e%2e/%2e%2e", Want: "",
		Divergence: divAboveRoot, Ours: "/"},
	{Source: pathRS + "doubled_slashes_collapse", Input: "//", Want: "/"},
	{Source: pathRS + "doubled_slashes_collapse", Input: "//public//../secret", Want: "/secret"},
	{Source: pathRS + "doubled_slashes_collapse", Input: "/public//secret", Want: "/public/secret"},
	{Source: pathRS + "encoded_slash_rejected_by_default", Input: "/a/%2f/b", Want: ""},
	{Source: pathRS + "encoded_slash_rejected_by_default", Input: "/public/..%2fsecret", Want: ""},
	{Source: pathRS + "encoded_slash_preserved_when_opted_in", Input: "/a/%2f/b", AllowEncodedSlash: true, Want: "/a/%2F/b"},
	{Source: pathRS + "encoded_slash_preserved_when_opted_in", Input: "/a/%2F/b", AllowEncodedSlash: true, Want: "/a/%2F/b"},
	{Source: pathRS + "null_and_control_bytes_rejected", Input: "/a%00b", Want: ""},
	{Source: pathRS + "null_and_control_bytes_rejected", Input: "/a%0Ab", Want: ""},
	{Source: pathRS + "null_and_control_bytes_rejected", Input: "/a%0Db", Want: ""},
	{Source: pathRS + "null_and_control_bytes_rejected", Input: "/a%7Fb", Want: ""},
	{Source: pathRS + "null_and_control_bytes_rejected", Input: "/a\nb", Want: ""},
	{Source: pathRS + "fragment_rejected", Input: "/a#b", Want: ""},
	{Source: pathRS + "origin_form_with_embedded_url_is_not_stripped_as_absolute_form", Input: "/fetch/http://example.test?next=http://other.test", Want: "/fetch/http:/example.test"},
	{Source: pathRS + "legitimate_percent_encoded_bytes_round_trip", Input: "/files/hello%20world.txt", Want: "/files/hello%20world.txt"},
	{Source: pathRS + "legitimate_percent_encoded_bytes_round_trip", Input: "/search/a%3Fb", Want: "/search/a%3Fb"},
	{Source: pathRS + "legitimate_percent_encoded_bytes_round_trip", Input: "/users/%40alice", Want: "/users/@alice"},
	{Source: pathRS + "path_parameters_stripped_by_default", Input: "/a;jsessionid=xyz/b", Want: "/a/b"},
	{Source: pathRS + "path_parameters_stripped_by_default", Input: "/public;x=1/../secret", Want: "/secret"},
	{Source: pathRS + "non_ascii_raw_byte_rejected", Input: "/aé", Want: ""},
	{Source: pathRS + "percent_encoded_non_ascii_bytes_round_trip", Input: "/users/caf%C3%A9", Want: "/users/caf%C3%A9"},
	{Source: pathRS + "empty_and_root_equivalent", Input: "", Want: "/"},
	{Source: pathRS + "empty_and_root_equivalent", Input: "/", Want: "/"},
	{Source: pathRS + "mixed_case_percent_normalizes_to_uppercase", Input: "/a/caf%c3%a9", Want: "/a/caf%C3%A9"},
	{Source: pathRS + "query_suffix_is_returned_separately", Input: "/a?q=1&r=2", Want: "/a"},
	{Source: pathRS + "regression_public_slash_dotdot_secret", Input: "/public/../secret", Want: "/secret"},
	{Source: pathRS + "regression_public_slash_percent_dotdot_secret", Input: "/public/%2E%2E/secret", Want: "/secret"},
	{Source: pathRS + "regression_percent_encoded_slash_in_dotdot_rejected", Input: "/public/%2E%2E%2Fsecret", Want: ""},
	{Source: pathRS + "regression_double_slash_prefix", Input: "//public/../secret", Want: "/secret"},
	{Source: pathRS + "regression_dot_slash_dotdot", Input: "/public/./../secret", Want: "/secret"},
	{Source: pathRS + "regression_dotdot_with_path_parameter_is_resolved_not_smuggled", Input: "/public/..;/secret", Want: "/secret"},
	{Source: pathRS + "regression_dotdot_with_path_parameter_is_resolved_not_smuggled", Input: "/public/..;jsessionid=xyz/secret", Want: "/secret"},
	{Source: pathRS + "regression_dotdot_with_path_parameter_is_resolved_not_smuggled", Input: "/public/.;x/secret", Want: "/public/secret"},
	{Source: pathRS + "regression_percent_encoded_dotdot_with_path_parameter", Input: "/public/%2e%2e;/secret", Want: "/secret"},
	{Source: pathRS + "regression_percent_encoded_dotdot_with_path_parameter", Input: "/public/..%3B/secret", Want: "/secret",
		Divergence: divEncodedSemicolon, Ours: ""},
	{Source: pathRS + "regression_chained_dotdot_with_path_parameters_hits_root_guard", Input: "/api/v1/..;/..;/..;/admin/keys", Want: "",
		Divergence: divAboveRoot, Ours: "/admin/keys"},
	{Source: pathRS + "regression_chained_dotdot_with_path_parameters_hits_root_guard", Input: "/..;", Want: "",
		Divergence: divAboveRoot, Ours: "/"},
	{Source: pathRS + "regression_dotdot_behind_encoded_slash_is_rejected_when_opted_in", Input: "/public/..%2fsecret", AllowEncodedSlash: true, Want: ""},
	{Source: pathRS + "regression_dotdot_behind_encoded_slash_is_rejected_when_opted_in", Input: "/public/.%2fsecret", AllowEncodedSlash: true, Want: ""},
	{Source: pathRS + "regression_dotdot_behind_encoded_slash_is_rejected_when_opted_in", Input: "/repos/group%2fproject/issues", AllowEncodedSlash: true, Want: "/repos/group%2Fproject/issues"},
	{Source: pathRS + "encoded_slash_detection_on_canonical_paths_is_exact", Input: "/a/%252F/b", Want: "/a/%252F/b"},
	{Source: pathRS + "encoded_slash_detection_on_canonical_paths_is_exact", Input: "/a/100%25/b", Want: "/a/100%25/b"},
	{Source: pathRS + "canonical_output_never_contains_dot_segments", Input: "/public/..;/secret", NoDots: true},
	{Source: pathRS + "canonical_output_never_contains_dot_segments", Input: "/public/.;/secret", NoDots: true},
	{Source: pathRS + "canonical_output_never_contains_dot_segments", Input: "/public/%2e%2e;/secret", NoDots: true},
	{Source: pathRS + "canonical_output_never_contains_dot_segments", Input: "/a;jsessionid=xyz/b", NoDots: true},
	{Source: pathRS + "canonical_output_never_contains_dot_segments", Input: "/public//../secret", NoDots: true},
}

func TestPath(t *testing.T) {
	seen := map[string]int{}
	for _, c := range pathCases {
		seen[c.Source]++
		t.Run(fmt.Sprintf("%s#%d", c.Source, seen[c.Source]), func(t *testing.T) {
			got, err := policy.CanonicalPath(c.Input, c.AllowEncodedSlash)
			if c.Divergence != "" {
				// Ours "" is a refusal.
				if c.Ours == "" && err == nil || c.Ours != "" && (err != nil || got != c.Ours) {
					openshell := "refuses it"
					if c.Want != "" {
						openshell = fmt.Sprintf("canonicalises it to %q", c.Want)
					}
					t.Errorf("%s\n%q: OpenShell %s; we want %q (divergence %q); we answer %q, %v", c.Source, c.Input, openshell, c.Ours, c.Divergence, got, err)
				}
				return
			}
			switch {
			case c.NoDots:
				if err == nil {
					for _, seg := range strings.Split(got, "/") {
						if seg == "." || seg == ".." {
							t.Errorf("%s\n%q canonicalises to %q, which has a dot segment", c.Source, c.Input, got)
						}
					}
				}
			case c.Want == "" && err == nil:
				t.Errorf("%s\n%q: OpenShell refuses it; we canonicalise it to %q", c.Source, c.Input, got)
			case c.Want != "" && err != nil:
				t.Errorf("%s\n%q: OpenShell canonicalises it to %q; we refuse it: %v", c.Source, c.Input, c.Want, err)
			case c.Want != "" && got != c.Want:
				t.Errorf("%s\n%q: OpenShell canonicalises it to %q; we to %q", c.Source, c.Input, c.Want, got)
			}
		})
	}
}
