package policy

import (
	"testing"

	"pgregory.net/rapid"
)

// TestPlainPathIsCanonical checks the fast path of CanonicalPath against
// its steps: a path plainPath passes is its own canonical form, under
// either allowEncodedSlash.
func TestPlainPathIsCanonical(t *testing.T) {
	plain := 0
	rapid.Check(t, func(t *rapid.T) {
		raw := rapid.StringOfN(rapid.SampledFrom([]rune("/./a.Z9~-_%2F;\\:@+ \x00é")), 0, 16, -1).Draw(t, "raw")
		if rapid.Bool().Draw(t, "slash") {
			raw = "/" + raw
		}
		if !plainPath(raw) {
			return
		}
		plain++
		for _, allow := range []bool{false, true} {
			if got, err := canonicalPath(raw, allow); err != nil || got != raw {
				t.Fatalf("canonicalPath(%q, %v) = %q, %v; plainPath passes it as canonical", raw, allow, got, err)
			}
		}
	})
	if plain == 0 {
		t.Fatal("no plain path was drawn")
	}
	for raw, want := range map[string]bool{
		"/": true, "/mcp": true, "/a/b/": true, "/a.b/..c": true,
		"": false, "mcp": false, "//": false, "/a//b": false, "/./a": false, "/a/..": false,
		"/a/%2F": false, "/a;b": false, "/a\\b": false, "/é": false, "/a b": false,
	} {
		if got := plainPath(raw); got != want {
			t.Errorf("plainPath(%q) = %v, want %v", raw, got, want)
		}
	}
}
