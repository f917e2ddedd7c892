package policy

import (
	"fmt"
	"strings"
)

// This file holds how deny path globs match: ignoring case, over every
// reading of a path a server might take (DenyReadings), with brace
// alternatives expanded.

// MatchDenyGlob is how deny rules (and an endpoint's path scope, when its
// deny rules are checked) match: s matches if MatchGlob says so or if it
// matches OpenShell's wider reading, where `*`, `**` and `?` may cross `/`.
// Portcullis reads allow globs narrowly and deny globs widely, so an
// OpenShell document never allows more, nor denies less, here than there:
// `deny /repos/*/rulesets` still closes `/repos/a/b/rulesets`. A trailing
// slash is also optional (`/admin/` matches `/admin`): most servers route
// both to one handler, so a deny must not be dodged by appending one.
func MatchDenyGlob(pattern, s string) bool {
	if ValidGlob(pattern) != nil {
		return false
	}
	if MatchGlob(pattern, s) || matchChars(pattern, s) {
		return true
	}
	if trimmed := strings.TrimSuffix(s, "/"); trimmed != s && trimmed != "" {
		return MatchGlob(pattern, trimmed) || matchChars(pattern, trimmed)
	}
	return false
}

// MatchDenyPath is how a deny rule's path glob (and an endpoint's path
// scope, when its deny rules are checked) matches a canonical path: a deny
// must hold for every spelling a common server routes to the denied
// resource, so s matches if MatchDenyGlob matches, ignoring ASCII case, any
// of its readings (DenyReadings): s itself, s with each segment's trailing
// dots dropped, s with `%3B` parameters stripped, s with encoded slashes
// decoded, and s with the non-ASCII letters a case-insensitive router
// folds to ASCII folded. ASP.NET and Express route case-insensitively; IIS
// drops trailing dots and spaces, and Spring's suffix matching routes `/admin.` to
// `/admin`; a server that decodes before stripping parameters reads
// `/admin%3Bx/keys` as `/admin/keys`, and one that decodes before routing
// (Go's ServeMux before 1.22, Apache with AllowEncodedSlashes On) reads
// `/admin%2Fkeys` as `/admin/keys`.
// Allow globs keep the exact reading (MatchGlob).
//
// As in OpenShell, whose Rego glob.match reads them, a deny path glob's
// `{a,b}` alternatives are expanded (ExpandDenyPathGlob): s matches if it
// matches any alternative, so `deny /{admin,internal}/**` closes both
// trees. A glob whose braces do not parse matches nothing (the validator
// refuses it).
func MatchDenyPath(pattern, s string) bool {
	alts, ok := ExpandDenyPathGlob(pattern)
	if !ok {
		return false
	}
	for _, a := range alts {
		if matchDenyFold(a, s) {
			return true
		}
	}
	if !HasOtherDenyReadings(s) {
		return false // every other reading is s itself
	}
	for _, r := range DenyReadings(s)[1:] {
		for _, a := range alts {
			if matchDenyFold(a, r) {
				return true
			}
		}
	}
	return false
}

// ValidDenyPathGlob reports whether a deny rule's path glob (or an
// endpoint's path scope, which deny rules are checked within) is valid:
// its `{a,b}` alternatives parse, at most 256 of them and 32 groups deep,
// and each alternative is a valid glob (ValidGlob).
func ValidDenyPathGlob(pattern string) error {
	return eachAlternative(pattern, func(a string) error {
		err := ValidGlob(a)
		if err != nil && a != pattern {
			err = fmt.Errorf("glob %q: alternative %q: %w", pattern, a, err)
		}
		return err
	})
}

// ExpandDenyPathGlob returns the plain globs a deny path glob's `{a,b}`
// alternatives stand for (a glob without braces stands for itself); ok is
// false when ValidDenyPathGlob refuses it. MatchDenyPath, the data plane's
// matcher and the prover all read deny path globs through it.
func ExpandDenyPathGlob(pattern string) ([]string, bool) {
	if ValidDenyPathGlob(pattern) != nil {
		return nil, false
	}
	alts, _ := expandBraces(pattern)
	return alts, true
}

// HasBraceAlternatives reports whether a glob holds an unescaped `{a,b}`
// group (or an unparsable brace) that OpenShell would read as
// alternatives. Allow globs read braces literally.
func HasBraceAlternatives(pattern string) bool {
	alts, err := expandBraces(pattern)
	return err != nil || len(alts) != 1 || alts[0] != pattern
}

// matchDenyFold is MatchDenyGlob with ASCII letters matching either case.
func matchDenyFold(pattern, s string) bool {
	match := func(s string) bool {
		return matchSegmentsFold(strings.Split(pattern, "/"), strings.Split(s, "/")) || matchCharsFold(pattern, s)
	}
	if match(s) {
		return true
	}
	if trimmed := strings.TrimSuffix(s, "/"); trimmed != s && trimmed != "" {
		return match(trimmed)
	}
	return false
}

// DenyReadings returns the readings of canonical path s that deny rules
// are matched against (see MatchDenyPath), s first, without duplicates:
// s; s with `%3B` parameters stripped from its segments; each of those
// with encoded slashes (`%2F`, `%5C`) decoded, and that with `%3B`
// parameters stripped again; each of all these with the trailing dots of
// its segments dropped (and trailing spaces); each with non-ASCII letters folded
// (FoldNonASCII). Case is left to the matcher.
func DenyReadings(s string) []string {
	out := []string{s}
	add := func(r string) {
		for _, x := range out {
			if x == r {
				return
			}
		}
		out = append(out, r)
	}
	add(stripEncodedParams(s))
	for _, f := range []func(string) string{decodeSlashes, stripEncodedParams, trimSegmentDots, FoldNonASCII} {
		for _, r := range out {
			add(f(r))
		}
	}
	return out
}

// decodeSlashes turns the encoded slashes of a canonical path (`%2F`,
// `%5C`, kept under allow_encoded_slash) into `/`, collapsing the empty
// segments that leaves, as a server that decodes before routing reads it.
func decodeSlashes(s string) string {
	if !strings.Contains(s, "%2F") && !strings.Contains(s, "%5C") {
		return s
	}
	s = strings.NewReplacer("%2F", "/", "%5C", "/").Replace(s)
	for strings.Contains(s, "//") {
		s = strings.ReplaceAll(s, "//", "/")
	}
	return s
}

// stripEncodedParams drops from every segment of a canonical path what
// follows an encoded `;` (`%3B`), as a server that decodes before it
// strips parameters does; segments left empty collapse.
func stripEncodedParams(s string) string {
	if !strings.Contains(s, "%3B") {
		return s
	}
	segs := strings.Split(s, "/")
	out := segs[:1]
	for i, seg := range segs[1:] {
		if j := strings.Index(seg, "%3B"); j >= 0 {
			seg = seg[:j]
		}
		if seg == "" && i+1 < len(segs)-1 {
			continue
		}
		out = append(out, seg)
	}
	return strings.Join(out, "/")
}

// trimSegmentDots drops the trailing dots and spaces (`%20`) of every
// segment of a canonical path that has something besides them (Windows
// file names, so IIS, ignore both).
func trimSegmentDots(s string) string {
	if !strings.Contains(s, ".") && !strings.Contains(s, "%20") {
		return s
	}
	segs := strings.Split(s, "/")
	for i, seg := range segs {
		t := seg
		for {
			if u := strings.TrimRight(t, "."); u != t {
				t = u
			} else if u := strings.TrimSuffix(t, "%20"); u != t {
				t = u
			} else {
				break
			}
		}
		if t != "" {
			segs[i] = t
		}
	}
	return strings.Join(segs, "/")
}

// nonASCIIFolds are the non-ASCII letters whose simple case mapping is an
// ASCII letter, in canonical (percent-encoded UTF-8) spelling: a
// case-insensitive router (.NET's OrdinalIgnoreCase) may read `ſ` as `s`
// and `K` (Kelvin) as `k`.
var nonASCIIFolds = strings.NewReplacer(
	"%C4%B0", "i", // İ
	"%C4%B1", "i", // ı
	"%C5%BF", "s", // ſ
	"%E2%84%AA", "k", // K (Kelvin sign)
)

// FoldNonASCII replaces, in a canonical path, the non-ASCII letters whose
// simple case mapping is ASCII by that ASCII letter.
func FoldNonASCII(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return nonASCIIFolds.Replace(s)
}

// matchSegmentsFold is matchSegments with ASCII case folded.
func matchSegmentsFold(pat, segs []string) bool { return matchSegmentsCase(pat, segs, true) }

// matchCharsFold is matchChars with ASCII case folded.
func matchCharsFold(pat, s string) bool {
	toks, ok := compileChars(pat)
	return ok && matchTokens(foldTokens(toks), s)
}

// foldTokens makes every one-byte token accept both cases of an ASCII
// letter.
func foldTokens(toks []globToken) []globToken {
	out := make([]globToken, len(toks))
	for i, t := range toks {
		if t.star {
			out[i] = t
			continue
		}
		class := t.class
		out[i] = globToken{class: func(b byte) bool { return class(b) || class(SwapCase(b)) }}
	}
	return out
}

// SwapCase returns the other case of an ASCII letter, and any other byte
// unchanged.
func SwapCase(b byte) byte {
	switch {
	case b >= 'a' && b <= 'z':
		return b - 'a' + 'A'
	case b >= 'A' && b <= 'Z':
		return b - 'A' + 'a'
	}
	return b
}
