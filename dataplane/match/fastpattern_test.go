package match

import (
	"regexp"
	"testing"
)

// fixedPatternSeeds are patterns of the shape and near misses.
var fixedPatternSeeds = []string{
	`^[A-Z]-\d{4}$`, `^[a-z0-9_]{3}$`, `^abc$`, `^ab{2}c$`, `^[^a]$`, `^.$`, `^(?i)a$`, `(?i)^a$`, `^[a-z]{2,3}$`,
	`^\w\s$`, `^[A-Z]-\d{4}`, `[A-Z]-\d{4}$`, `^$`, `^x{0}$`, `(?m)^a$`, `^\x{e9}$`, `^[k]$`, `(?i)^[k]$`, `^a|b$`,
	`^(ab)$`, `^\d{300}$`, `\A\d\z`, `^[[:alpha:]]$`, `^\pL$`, `^[\x00-\x7f]$`,
}

// The shapes compileFixedPattern takes and those it leaves to regexp.
func TestFixedPatternShapes(t *testing.T) {
	for _, c := range []struct {
		pattern string
		fixed   bool
	}{
		{`^[A-Z]-\d{4}$`, true}, {`^abc$`, true}, {`^[a-z0-9_]{3}$`, true}, {`^[[:alpha:]]$`, true}, {`\A\d\z`, true},
		{`^[^a]$`, false}, {`^.$`, false}, {`^(?i)a$`, false}, {`^[a-z]{2,3}$`, false}, {`^[A-Z]-\d{4}`, false},
		{`(?m)^a$`, false}, {`^\x{e9}$`, false}, {`(?i)^[k]$`, false}, {`^a|b$`, false}, {`^(ab)$`, false},
		{`^\d{300}$`, false}, {`^\pL$`, false},
	} {
		if got := compileFixedPattern(c.pattern) != nil; got != c.fixed {
			t.Errorf("%s: fixed %v, want %v", c.pattern, got, c.fixed)
		}
	}
}

// A fixedPattern matches exactly what package regexp matches.
func FuzzFixedPattern(f *testing.F) {
	for _, p := range fixedPatternSeeds {
		for _, s := range []string{"A-1042", "a-1042", "A-10420", "abc", "abbc", "b", "é", "K", "\u212a", "", "a_9", "A\n", "a "} {
			f.Add(p, s)
		}
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		fixed := compileFixedPattern(pattern)
		if fixed == nil {
			return
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			t.Fatalf("%q: compiled as fixed, but regexp refuses it: %v", pattern, err)
		}
		if got, want := fixed.match([]byte(s)), re.MatchString(s); got != want {
			t.Fatalf("%q on %q: fixed %v, regexp %v", pattern, s, got, want)
		}
	})
}
