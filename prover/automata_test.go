package prover

import (
	"context"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
	"pgregory.net/rapid"
)

var (
	globVocab = []string{"/v1/items", "/v1/*", "/v1/**", "/v1/items/*/x", "/admin/", "/a/[bc]d", "/**/x", "/v1/it?ms", "/v1/\\*", "/**", "/", "**", "**/python3", "/usr/bin/*", "/opt/**/python3", "lookup_*", "tools/*", "/a/**/b/**", "/a/**/**", "**/**/x", "*", "/x*y/z", "/[!a]b"}
	strPieces = []string{"/", "v1", "items", "x", "a", "bd", "cd", "admin", "*", "python3", "usr", "bin", "opt", "itxms", "b", "y", "z", ".", "lookup_", "tools", "call", "ADMIN", "V1", "Items", "X", "..", "B", "admin.", "/x.", "items."}
)

func genString(t *rapid.T, label string) string {
	parts := rapid.SliceOfN(rapid.SampledFrom(strPieces), 0, 8).Draw(t, label)
	s := ""
	for _, p := range parts {
		s += p
	}
	return s
}

// The automata are the policy matchers, string for string.
func TestGlobAutomataAgreeWithPolicy(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pat := rapid.SampledFrom(globVocab).Draw(t, "pattern")
		s := genString(t, "s")
		if got, want := run(narrowGlob(pat), s), policy.MatchGlob(pat, s); got != want {
			t.Fatalf("narrow %q on %q: automaton %v, MatchGlob %v", pat, s, got, want)
		}
		if got, want := run(wideGlob(pat), s), policy.MatchDenyGlob(pat, s); got != want {
			t.Fatalf("wide %q on %q: automaton %v, MatchDenyGlob %v", pat, s, got, want)
		}
		if got, want := run(widePath(pat, false), s), policy.MatchDenyPath(pat, s); got != want {
			t.Fatalf("wide path %q on %q: automaton %v, MatchDenyPath %v", pat, s, got, want)
		}
	})
}

func TestHostAutomataAgreeWithPolicy(t *testing.T) {
	pats := []string{"api.example.com", "*.example.com", "**.example.com", "a*.example.com", "*-ai.x.example.com", "other.test"}
	labels := []string{"api", "example", "com", "a", "b-ai", "x", "other", "test", "ab"}
	rapid.Check(t, func(t *rapid.T) {
		pat := rapid.SampledFrom(pats).Draw(t, "pattern")
		ls := rapid.SliceOfN(rapid.SampledFrom(labels), 1, 5).Draw(t, "labels")
		h := ""
		for i, l := range ls {
			if i > 0 {
				h += "."
			}
			h += l
		}
		if got, want := run(hostNFA(pat), h), policy.MatchHost(pat, h); got != want {
			t.Fatalf("host %q on %q: automaton %v, MatchHost %v", pat, h, got, want)
		}
	})
}

// Every combination of matches is found: brute force over short strings.
func TestWitnessesRealiseEveryCombination(t *testing.T) {
	pats := []string{"/v1/*", "/v1/**", "/v1/items", "/**/x", "/a*"}
	var ms []*nfa
	for _, p := range pats {
		ms = append(ms, narrowGlob(p), wideGlob(p))
	}
	vec := func(s string) string {
		v := ""
		for _, p := range pats {
			v += map[bool]string{true: "1", false: "0"}[policy.MatchGlob(p, s)]
			v += map[bool]string{true: "1", false: "0"}[policy.MatchDenyGlob(p, s)]
		}
		return v
	}
	got := map[string]bool{}
	for _, w := range witnesses(newMeter(context.Background(), 0), canonicalPaths, ms) {
		if c, err := policy.CanonicalPath(w, false); err != nil || c != w {
			t.Fatalf("witness %q is not canonical (%q, %v)", w, c, err)
		}
		got[vec(w)] = true
	}
	rapid.Check(t, func(t *rapid.T) {
		s := genString(t, "s")
		c, err := policy.CanonicalPath(s, false)
		if err != nil {
			return
		}
		if !got[vec(c)] {
			t.Fatalf("combination of %q (%s) has no witness", c, vec(c))
		}
	})
}

// The same for the deny reading of paths (policy.MatchDenyPath: case,
// trailing dots), on canonical paths with and without encoded slashes.
func TestPathWitnessesRealiseEveryCombination(t *testing.T) {
	pats := []string{"/admin", "/admin/**", "/v1/*", "/A*", "/v1/items.", "/x"}
	vec := func(s string) string {
		v := ""
		for _, p := range pats {
			v += map[bool]string{true: "1", false: "0"}[policy.MatchGlob(p, s)]
			v += map[bool]string{true: "1", false: "0"}[policy.MatchDenyPath(p, s)]
		}
		return v
	}
	for _, aes := range []bool{false, true} {
		dom := canonicalPaths
		if aes {
			dom = encodedSlashPaths
		}
		var ms []*nfa
		for _, p := range pats {
			ms = append(ms, narrowGlob(p), widePath(p, aes))
		}
		got := map[string]bool{}
		for _, w := range witnesses(newMeter(context.Background(), 0), dom, ms) {
			if c, err := policy.CanonicalPath(w, aes); err != nil || c != w {
				t.Fatalf("witness %q is not canonical (%q, %v)", w, c, err)
			}
			got[vec(w)] = true
		}
		rapid.Check(t, func(t *rapid.T) {
			s := genString(t, "s")
			if aes {
				s += rapid.SampledFrom([]string{"%2F", "%2F.", "a%2Fb", "%2F..", "%2Fx.", "/%2F", "%2F/admin", "x.%2F", "%2F%2Fadmin%2F"}).Draw(t, "encoded") + genString(t, "tail")
			}
			c, err := policy.CanonicalPath(s, aes)
			if err != nil || aes && !strings.Contains(c, "%2F") {
				return
			}
			if !got[vec(c)] {
				t.Fatalf("combination of %q (%s) has no witness", c, vec(c))
			}
		})
	}
}
