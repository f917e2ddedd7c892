package policy

import (
	"errors"
	"fmt"
	"strings"
)

// This file holds the glob for paths, binaries and method/tool names: its
// syntax, brace and query forms, and MatchGlob. The other pattern languages
// of a policy sit beside it: host patterns (glob_host.go), deny path
// matching (glob_deny.go), the token engine (glob_match.go) and the
// canonical HTTP path the globs are matched against (canonical_path.go).

// ValidGlob reports whether pattern is a valid Portcullis glob (see
// MatchGlob).
func ValidGlob(pattern string) error {
	if pattern == "" {
		return errors.New("glob is empty")
	}
	for _, seg := range strings.Split(pattern, "/") {
		if seg == "**" {
			continue
		}
		if strings.Contains(seg, "**") {
			return fmt.Errorf("glob %q: ** must be a whole path segment", pattern)
		}
		if err := validSegment(seg); err != nil {
			return fmt.Errorf("glob %q: %w", pattern, err)
		}
	}
	return nil
}

// ValidQueryGlob reports whether a query-value glob parses: `*` (any run
// of bytes, `/` included), `?`, bracket classes, `\` escapes and, as in
// OpenShell (whose Rego glob.match reads them), `{a,b}` alternatives,
// read as one string (query values are not paths, so `**` is `*`). An
// unclosed class or brace, a stray `}`, a trailing backslash or more than
// 256 alternatives is an error; the validator only warns about it, as
// OpenShell does, and such a glob fails closed.
func ValidQueryGlob(pattern string) error {
	return eachAlternative(pattern, func(a string) error {
		for i := 0; i < len(a); i++ {
			switch a[i] {
			case '\\':
				if i+1 >= len(a) {
					return fmt.Errorf("glob %q: trailing backslash", pattern)
				}
				i++
			case '[':
				_, n, err := parseClass(a[i:])
				if err != nil {
					return fmt.Errorf("glob %q: %w", pattern, err)
				}
				i += n - 1
			}
		}
		return nil
	})
}

// eachAlternative checks each of the `{a,b}` alternatives a glob stands
// for with check, after the braces themselves: the first error.
func eachAlternative(pattern string, check func(alt string) error) error {
	alts, err := expandBraces(pattern)
	if err != nil {
		return fmt.Errorf("glob %q: %w", pattern, err)
	}
	for _, a := range alts {
		if err := check(a); err != nil {
			return err
		}
	}
	return nil
}

// ExpandQueryGlob returns the plain character globs a query-value glob's
// `{a,b}` alternatives stand for (see ValidQueryGlob); ok is false when
// its braces do not parse. The data plane's matcher compiles query
// matchers from it, so both evaluators read a query glob alike.
func ExpandQueryGlob(pattern string) ([]string, bool) {
	alts, err := expandBraces(pattern)
	return alts, err == nil
}

// matchQueryGlob reports whether a query value matches the glob; ok is
// false when the glob does not parse.
func matchQueryGlob(pattern, v string) (match, ok bool) {
	alts, err := expandBraces(pattern)
	if err != nil {
		return false, false
	}
	for _, a := range alts {
		toks, ok := compileChars(a)
		if !ok {
			return false, false
		}
		if matchTokens(toks, v) {
			match = true
		}
	}
	return match, true
}

const maxBraceAlternatives = 256

// expandBraces expands `{a,b}` groups (nested, escaped with `\`, literal
// inside a bracket class) into the plain globs they stand for, at most
// maxBraceAlternatives of them and 32 groups deep.
func expandBraces(p string) ([]string, error) { return expandBracesAt(p, 0) }

func expandBracesAt(p string, depth int) ([]string, error) {
	if depth > 32 {
		return nil, errors.New("braces nested too deep")
	}
	open := -1
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '[':
			i += classLen(p[i:]) - 1
		case '}':
			return nil, errors.New("unmatched }")
		case '{':
			open = i
		}
		if open >= 0 {
			break
		}
	}
	if open < 0 {
		return []string{p}, nil
	}
	// Find the matching brace and the top-level commas.
	level, cuts, end := 0, []int{open}, -1
	for i := open; i < len(p) && end < 0; i++ {
		switch p[i] {
		case '\\':
			i++
		case '[':
			i += classLen(p[i:]) - 1
		case '{':
			level++
		case '}':
			level--
			if level == 0 {
				end = i
			}
		case ',':
			if level == 1 {
				cuts = append(cuts, i)
			}
		}
	}
	if end < 0 {
		return nil, errors.New("unclosed {")
	}
	cuts = append(cuts, end)
	var out []string
	for k := 0; k+1 < len(cuts); k++ {
		alt := p[:open] + p[cuts[k]+1:cuts[k+1]] + p[end+1:]
		exp, err := expandBracesAt(alt, depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, exp...)
		if len(out) > maxBraceAlternatives {
			return nil, fmt.Errorf("more than %d brace alternatives", maxBraceAlternatives)
		}
	}
	return out, nil
}

// classLen is the length of the bracket class at the start of s, or 1
// when it does not close (the '[' is then left to compileChars to refuse).
func classLen(s string) int {
	if _, n, err := parseClass(s); err == nil {
		return n
	}
	return 1
}

// validSegment checks escapes and bracket classes of one segment.
func validSegment(seg string) error {
	for i := 0; i < len(seg); i++ {
		switch seg[i] {
		case '\\':
			if i+1 >= len(seg) {
				return errors.New("trailing backslash")
			}
			i++
		case '[':
			_, n, err := parseClass(seg[i:])
			if err != nil {
				return err
			}
			i += n - 1
		}
	}
	return nil
}

// MatchGlob reports whether s matches the glob pattern; an invalid pattern
// matches nothing. Patterns and strings are split into `/`-separated
// segments:
//
//   - `**` as a whole segment matches zero or more segments, so `/a/**`
//     matches `/a`, `/a/` and `/a/b/c`, and `**/python3` matches any path
//     ending in python3;
//   - `*` matches any run of characters within one segment, never `/`;
//   - `?` matches one character other than `/`;
//   - `[a-z]`, `[abc]`, `[!0-9]` (or `[^0-9]`) match one character of (or
//     not of) the class, never `/`;
//   - `\x` matches x literally.
//
// Divergence from OpenShell, whose REST path globs let `*` cross `/`: here
// only `**` crosses segments, so `/v1/*` does not reach `/v1/a/b`.
// Matching is on bytes and case-sensitive.
func MatchGlob(pattern, s string) bool {
	if ValidGlob(pattern) != nil {
		return false
	}
	return matchSegments(strings.Split(pattern, "/"), strings.Split(s, "/"))
}

// HasWildcard reports whether a glob holds an unescaped `*`, `?` or `[`.
// A glob without one matches exactly one string (UnescapeGlob): a name
// with its metacharacters escaped (EscapeGlob), as the advisor writes a
// denied one, is no wildcard.
func HasWildcard(glob string) bool {
	for i := 0; i < len(glob); i++ {
		switch glob[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return true
		}
	}
	return false
}

// EscapeGlob writes s as a glob that matches exactly s: `*`, `?`, `[` and
// `\` escaped with `\`.
func EscapeGlob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte("*?[\\", s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// UnescapeGlob is the string a glob without wildcards (HasWildcard)
// matches: its `\` escapes dropped.
func UnescapeGlob(glob string) string {
	var b strings.Builder
	for i := 0; i < len(glob); i++ {
		if glob[i] == '\\' && i+1 < len(glob) {
			i++
		}
		b.WriteByte(glob[i])
	}
	return b.String()
}
