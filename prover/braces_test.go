package prover

import (
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// Issue 11 follow-up: a deny path glob's `{a,b}` alternatives are
// expanded, as OpenShell's Rego glob.match reads them; the prover's
// automaton of a deny path agrees with policy.MatchDenyPath on them.
func TestWidePathBraces(t *testing.T) {
	pats := []string{"/{admin,internal}/**", "/v1/{a,b{c,d}}/x", "/{a,b", "/x/{a,**b}"}
	paths := []string{"/admin", "/admin/keys", "/internal/x", "/INTERNAL/x", "/internal./x", "/public/x",
		"/{admin,internal}/x", "/v1/a/x", "/v1/bc/x", "/v1/bd/x", "/v1/b/x", "/v1/x", "/x/a", "/x/b"}
	for _, p := range pats {
		for _, s := range paths {
			if got, want := run(widePath(p, false), s), policy.MatchDenyPath(p, s); got != want {
				t.Errorf("wide path %q on %q: automaton %v, MatchDenyPath %v", p, s, got, want)
			}
		}
	}
	if !run(widePath("/{admin,internal}/**", false), "/internal/keys") {
		t.Error("deny /{admin,internal}/** does not reach /internal/keys")
	}
}
