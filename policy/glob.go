package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// This file holds the pattern languages of a policy: host patterns, the
// glob for paths, binaries and method/tool names, and the canonical HTTP
// path the globs are matched against.

// NormalizeHost lowercases a host and drops one trailing dot.
func NormalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}

// ValidHostPattern reports whether pattern is a valid endpoint host: an IP
// address in its standard spelling, an exact DNS name, or a DNS name with
// wildcards. Following OpenShell, `*` may appear inside the first label
// (`*.example.com`, `*-aiplatform.googleapis.com`) and matches within that
// label; `**` must be the entire first label and matches one or more
// labels; a later label may be a whole `*` (`*.s3.*.amazonaws.com`),
// matching exactly one label. Wildcards never cross a dot, and a label a
// wildcard matches is never empty.
//
// Stricter than OpenShell: at least two literal labels must follow the
// last wildcard label, so `*`, `**`, TLD wildcards (`*.com`), `*.*.com`
// and a wildcard last label (`api.example.*`) are refused, as are partial
// wildcards in later labels (`foo.us-*.x`, refused by OpenShell too) and
// `**` anywhere but the whole first label.
func ValidHostPattern(pattern string) error {
	h := NormalizeHost(pattern)
	if h == "" {
		return errors.New("host is empty")
	}
	if strings.HasPrefix(h, "[") || strings.Contains(h, ":") {
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
		if err != nil || !a.Is6() || a.Zone() != "" {
			return fmt.Errorf("host %q is not a valid IPv6 address", pattern)
		}
		return nil
	}
	if a, ok := ParseHostIP(h); ok {
		if a.String() != h {
			return fmt.Errorf("host %q is an IP address in a non-standard spelling; write %s", pattern, a)
		}
		return nil
	}
	if len(h) > 253 {
		return fmt.Errorf("host %q is longer than 253 characters", pattern)
	}
	labels := strings.Split(h, ".")
	lastWild := -1
	for i, l := range labels {
		if err := validHostLabel(l, i == 0); err != nil {
			return fmt.Errorf("host %q: %w", pattern, err)
		}
		if strings.Contains(l, "*") {
			lastWild = i
		}
	}
	if lastWild >= 0 && len(labels)-1-lastWild < 2 {
		return fmt.Errorf("host %q: a wildcard label needs at least two literal labels after it (no bare, TLD or last-label wildcards)", pattern)
	}
	return nil
}

func validHostLabel(l string, first bool) error {
	switch {
	case l == "":
		return errors.New("empty label")
	case len(l) > 63:
		return fmt.Errorf("label %q is longer than 63 characters", l)
	case strings.Contains(l, "**") && (l != "**" || !first):
		return fmt.Errorf("label %q: ** must be the entire first label", l)
	case strings.Contains(l, "*") && !first && l != "*":
		return fmt.Errorf("wildcard in label %q: after the first label, a wildcard must be the entire label", l)
	}
	for i := 0; i < len(l); i++ {
		if c := l[i]; !hostChar(c) && c != '*' {
			return fmt.Errorf("label %q: character %q is not allowed in a host name", l, c)
		}
	}
	return nil
}

// hostChar reports whether c belongs to the host-name alphabet, after
// lower-casing: letters, digits, '-' and '_' (which real DNS names use,
// although RFC 952 does not).
func hostChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// ValidHostName reports whether host, lower-cased and without one trailing
// dot (NormalizeHost), is a DNS name a wildcard may match: dot-separated
// non-empty labels of letters, digits, '-' and '_', at most 253
// characters. A host with any other byte (NUL, '*', '/', '%', space,
// non-ASCII) matches no wildcard, and the proxy refuses it before policy.
func ValidHostName(host string) bool {
	h := NormalizeHost(host)
	if h == "" || len(h) > 253 {
		return false
	}
	n := 0
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c == '.':
			if n == 0 {
				return false
			}
			n = 0
		case hostChar(c):
			n++
			if n > 63 {
				return false
			}
		default:
			return false
		}
	}
	return n > 0
}

// MatchHost reports whether host matches the host pattern (see
// ValidHostPattern; an invalid pattern matches nothing). Names compare
// case-insensitively with a trailing dot ignored. A pattern that is an IP
// address matches that address in any spelling ParseHostIP accepts. A
// name pattern matches only a host that is a valid host name
// (ValidHostName): a label holding NUL or another byte outside the
// host-name alphabet matches no `*`.
func MatchHost(pattern, host string) bool {
	if ValidHostPattern(pattern) != nil {
		return false
	}
	p, h := NormalizeHost(pattern), NormalizeHost(host)
	if pa, ok := ParseHostIP(p); ok {
		ha, ok := ParseHostIP(h)
		return ok && ha == pa
	}
	if _, ok := ParseHostIP(h); ok {
		return false
	}
	if !ValidHostName(h) {
		return false
	}
	pl, hl := strings.Split(p, "."), strings.Split(h, ".")
	if pl[0] == "**" {
		// One or more labels, then the rest label by label.
		n := len(pl) - 1
		return len(hl) > n && matchLabels(pl[1:], hl[len(hl)-n:])
	}
	return len(pl) == len(hl) && matchLabels(pl, hl)
}

// matchLabels matches host labels against pattern labels one by one: a
// literal label compares equal, a `*` label matches any label, and a first
// label holding `*` matches as a character pattern within the label.
func matchLabels(pl, hl []string) bool {
	if len(pl) != len(hl) {
		return false
	}
	for i := range pl {
		switch {
		case pl[i] == "*":
		case strings.Contains(pl[i], "*"):
			if !matchChars(pl[i], hl[i]) {
				return false
			}
		case pl[i] != hl[i]:
			return false
		}
	}
	return true
}

// HostPatternsOverlap reports whether some host name matches both host
// patterns (MatchHost), exactly: IP patterns overlap when they are one
// address; name patterns are compared label by label from the right, a
// `**` first label standing for one or more labels and a `*` label for
// any one label. An invalid pattern overlaps nothing.
func HostPatternsOverlap(a, b string) bool {
	if ValidHostPattern(a) != nil || ValidHostPattern(b) != nil {
		return false
	}
	a, b = NormalizeHost(a), NormalizeHost(b)
	ia, aIP := hostPatternIP(a)
	ib, bIP := hostPatternIP(b)
	if aIP || bIP {
		return aIP && bIP && ia == ib
	}
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	i, j := len(pa)-1, len(pb)-1
	for i >= 0 && j >= 0 {
		if pa[i] == "**" {
			return true // one or more labels: b has j+1 ≥ 1 left
		}
		if pb[j] == "**" {
			return true
		}
		if !labelsOverlap(pa[i], pb[j]) {
			return false
		}
		i--
		j--
	}
	return i < 0 && j < 0
}

func hostPatternIP(p string) (netip.Addr, bool) {
	if strings.HasPrefix(p, "[") || strings.Contains(p, ":") {
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(p, "["), "]"))
		return a.Unmap(), err == nil
	}
	return ParseHostIP(p)
}

// labelsOverlap reports whether one host label matches both label
// patterns (literals, `*`, or first-label patterns of literals and `*`).
// Two star patterns share a label exactly when their literal heads (before
// the first star) and tails (after the last) are compatible: one a prefix
// (suffix) of the other; the stars absorb the rest.
func labelsOverlap(x, y string) bool {
	xs, ys := strings.Contains(x, "*"), strings.Contains(y, "*")
	switch {
	case !xs && !ys:
		return x == y
	case xs && !ys:
		return matchChars(x, y)
	case !xs && ys:
		return matchChars(y, x)
	}
	xh, xt := x[:strings.IndexByte(x, '*')], x[strings.LastIndexByte(x, '*')+1:]
	yh, yt := y[:strings.IndexByte(y, '*')], y[strings.LastIndexByte(y, '*')+1:]
	return (strings.HasPrefix(xh, yh) || strings.HasPrefix(yh, xh)) &&
		(strings.HasSuffix(xt, yt) || strings.HasSuffix(yt, xt))
}

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
	alts, err := expandBraces(pattern)
	if err != nil {
		return fmt.Errorf("glob %q: %w", pattern, err)
	}
	for _, a := range alts {
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
	if !strings.Contains(s, "%") && !segmentEndsInDot(s) {
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
	alts, err := expandBraces(pattern)
	if err != nil {
		return fmt.Errorf("glob %q: %w", pattern, err)
	}
	for _, a := range alts {
		if err := ValidGlob(a); err != nil {
			if a == pattern {
				return err
			}
			return fmt.Errorf("glob %q: alternative %q: %w", pattern, a, err)
		}
	}
	return nil
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

// segmentEndsInDot reports whether a segment of s ends in '.'.
func segmentEndsInDot(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' && (i+1 == len(s) || s[i+1] == '/') {
			return true
		}
	}
	return false
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
func matchSegmentsFold(pat, segs []string) bool {
	compiled := make([][]globToken, len(pat))
	for i, seg := range pat {
		if seg == "**" {
			continue
		}
		toks, ok := compileChars(seg)
		if !ok {
			return false
		}
		compiled[i] = foldTokens(toks)
	}
	return greedyMatch(len(pat), len(segs),
		func(p int) bool { return pat[p] == "**" },
		func(p, i int) bool { return matchTokens(compiled[p], segs[i]) })
}

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

// matchSegments matches `/`-separated segments, `**` standing for zero or
// more whole segments. Every other pattern segment matches exactly one
// segment, so the greedy star algorithm (remember the last `**`, retry one
// segment further on a mismatch) is exact and takes O(len(pat)·len(segs))
// segment matches instead of backtracking exponentially.
func matchSegments(pat, segs []string) bool {
	compiled := make([][]globToken, len(pat))
	for i, seg := range pat {
		if seg == "**" {
			continue
		}
		toks, ok := compileChars(seg)
		if !ok {
			return false
		}
		compiled[i] = toks
	}
	return greedyMatch(len(pat), len(segs),
		func(p int) bool { return pat[p] == "**" },
		func(p, i int) bool { return matchTokens(compiled[p], segs[i]) })
}

// matchChars matches characters with no notion of segments: runs of `*`
// match any characters, `/` included (OpenShell's reading). Applied to one
// segment, where no `/` appears, it is segment matching. An invalid
// pattern matches nothing.
func matchChars(pat, s string) bool {
	toks, ok := compileChars(pat)
	return ok && matchTokens(toks, s)
}

// GlobToken is one element of a compiled character pattern: Star (any
// run of bytes), or one byte that Class accepts.
type GlobToken struct {
	Star  bool
	Class func(byte) bool
}

// CompileGlobChars compiles a character pattern (one segment of an allow
// glob, or a whole deny glob) into the tokens MatchGlob and MatchDenyGlob
// match with: `*` a run, `?` any one byte, `[..]` a class (never `/`),
// `\x` and other bytes literals. ok is false for an unclosed class or a
// trailing backslash. The prover builds its automata from these, so they
// cannot read a pattern differently from the evaluator.
func CompileGlobChars(pat string) ([]GlobToken, bool) {
	toks, ok := compileChars(pat)
	if !ok {
		return nil, false
	}
	out := make([]GlobToken, len(toks))
	for i, t := range toks {
		out[i] = GlobToken{Star: t.star, Class: t.class}
	}
	return out, true
}

// globToken is one element of a character pattern: a star, or something
// that matches exactly one byte.
type globToken struct {
	star  bool
	class func(byte) bool // `?`, a bracket class or a literal
}

// compileChars splits a character pattern into tokens; ok is false for an
// unclosed class or a trailing backslash.
func compileChars(pat string) (toks []globToken, ok bool) {
	for i := 0; i < len(pat); {
		switch c := pat[i]; c {
		case '*':
			if len(toks) == 0 || !toks[len(toks)-1].star {
				toks = append(toks, globToken{star: true})
			}
			i++
		case '?':
			toks = append(toks, globToken{class: func(byte) bool { return true }})
			i++
		case '[':
			class, n, err := parseClass(pat[i:])
			if err != nil {
				return nil, false
			}
			toks = append(toks, globToken{class: class})
			i += n
		case '\\':
			if i+1 >= len(pat) {
				return nil, false
			}
			toks = append(toks, literal(pat[i+1]))
			i += 2
		default:
			toks = append(toks, literal(c))
			i++
		}
	}
	return toks, true
}

func literal(c byte) globToken {
	return globToken{class: func(b byte) bool { return b == c }}
}

// matchTokens matches s against compiled tokens with the greedy star
// algorithm, exact here because every non-star token matches one byte.
func matchTokens(toks []globToken, s string) bool {
	return greedyMatch(len(toks), len(s),
		func(p int) bool { return toks[p].star },
		func(p, i int) bool { return toks[p].class(s[i]) })
}

// greedyMatch is the classic wildcard matcher over n pattern units and m
// subject units: isStar(p) says unit p matches any run of subject units,
// one(p, i) whether non-star unit p matches subject unit i. On a mismatch
// it returns to the last star and lets it absorb one more unit; earlier
// stars never need revisiting, so the work is O(n·m).
func greedyMatch(n, m int, isStar func(p int) bool, one func(p, i int) bool) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < m {
		switch {
		case p < n && isStar(p):
			star, mark = p, i
			p++
		case p < n && one(p, i):
			p++
			i++
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < n && isStar(p) {
		p++
	}
	return p == n
}

// parseClass parses the bracket class at the start of pat and returns its
// predicate and length. `]` first in the class is literal; `\` escapes.
func parseClass(pat string) (func(byte) bool, int, error) {
	i := 1
	negate := false
	if i < len(pat) && (pat[i] == '!' || pat[i] == '^') {
		negate = true
		i++
	}
	type span struct{ lo, hi byte }
	var spans []span
	first := true
	for {
		if i >= len(pat) {
			return nil, 0, fmt.Errorf("unclosed bracket class in %q", pat)
		}
		if pat[i] == ']' && !first {
			i++
			break
		}
		first = false
		lo, n, err := classChar(pat[i:])
		if err != nil {
			return nil, 0, err
		}
		i += n
		hi := lo
		if i+1 < len(pat) && pat[i] == '-' && pat[i+1] != ']' {
			hi, n, err = classChar(pat[i+1:])
			if err != nil {
				return nil, 0, err
			}
			i += 1 + n
			if hi < lo {
				return nil, 0, fmt.Errorf("bad range %c-%c in bracket class", lo, hi)
			}
		}
		spans = append(spans, span{lo, hi})
	}
	match := func(c byte) bool {
		if c == '/' {
			return false
		}
		in := false
		for _, sp := range spans {
			if c >= sp.lo && c <= sp.hi {
				in = true
			}
		}
		return in != negate
	}
	return match, i, nil
}

func classChar(s string) (byte, int, error) {
	if s[0] == '\\' {
		if len(s) < 2 {
			return 0, 0, errors.New("trailing backslash in bracket class")
		}
		return s[1], 2, nil
	}
	if s[0] == '/' {
		return 0, 0, errors.New("/ in bracket class")
	}
	return s[0], 1, nil
}

// CanonicalPath returns the canonical form of an HTTP request path, the form
// rules are matched against and the proxy forwards:
//
//   - a query (`?…`) is dropped; a fragment (`#`) is refused;
//   - `;` path parameters are stripped from every segment, as OpenShell,
//     Tomcat, Jetty and Spring do (`/admin;jsessionid=x/keys` is
//     `/admin/keys`, `/a/;/b` is `/a/b`), before dot segments are resolved,
//     so `..;x` is `..` and `.;x` is `.`;
//   - every percent-encoding is decoded and each byte re-encoded one way:
//     unreserved characters, sub-delims but `;`, `:` and `@` literal,
//     everything else as %XX with upper-case hex — so `%61dmin` and
//     `admin` are one path, and `%3A` and `:` are one. An encoded `;`
//     (`%3B`) is data, not a parameter, and stays `%3B`: decoded, the
//     upstream would strip what follows it;
//   - `.` and `..` segments (also spelled `%2e`) are resolved as RFC 3986
//     §5.2.4 does, never above `/`;
//   - a dot segment that survives decoding is refused: `.` or `..` next to
//     an encoded `/`, `\` or `;` inside a segment (`..%2F`, `.%5Cx`,
//     `..%3B`), which a server that decodes before routing reads as a dot
//     segment;
//   - empty segments (`//`) are collapsed;
//   - `%2F` and `%5C` (an encoded `/` or `\`) are refused unless
//     allowEncodedSlash, and then kept encoded inside their segment;
//   - NUL and other control bytes, raw or encoded, raw backslashes and
//     invalid percent-encodings are refused.
//
// The result starts with `/` and holds no raw `;`; an empty path is `/`.
func CanonicalPath(raw string, allowEncodedSlash bool) (string, error) {
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	if strings.ContainsRune(raw, '#') {
		return "", fmt.Errorf("path %q contains a fragment", raw)
	}
	if raw == "" {
		return "/", nil
	}
	if raw[0] != '/' {
		return "", fmt.Errorf("path %q does not start with /", raw)
	}
	var out []string
	segs := strings.Split(raw[1:], "/")
	for i, seg := range segs {
		if j := strings.IndexByte(seg, ';'); j >= 0 {
			seg = seg[:j]
		}
		dec, err := decodeSegment(seg, allowEncodedSlash)
		if err != nil {
			return "", fmt.Errorf("path %q: %w", raw, err)
		}
		last := i == len(segs)-1
		switch {
		case dec == ".":
		case dec == "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case hidesDotSegment(dec):
			return "", fmt.Errorf("path %q: segment %q holds a dot segment behind an encoded separator", raw, seg)
		case dec == "":
			// An empty segment is a doubled or trailing slash; only the
			// trailing one survives.
			if !last {
				continue
			}
		default:
			out = append(out, encodeSegment(dec))
			continue
		}
		if last {
			// A trailing dot segment or slash leaves a trailing slash.
			out = append(out, "")
		}
	}
	p := "/" + strings.Join(out, "/")
	return strings.ReplaceAll(p, "//", "/"), nil
}

// hidesDotSegment reports whether a decoded segment holding an encoded
// `/`, `\` or `;` has a `.` or `..` part: a server that decodes before it
// splits the path on `/` (or `\`) and strips `;` parameters reads that
// part as a dot segment (`..%2F`, `.%5Cx`, `..%3Bx`).
func hidesDotSegment(dec string) bool {
	if !strings.ContainsAny(dec, `/\;`) {
		return false
	}
	for _, part := range strings.FieldsFunc(dec, func(r rune) bool { return r == '/' || r == '\\' }) {
		if j := strings.IndexByte(part, ';'); j >= 0 {
			part = part[:j]
		}
		if part == "." || part == ".." {
			return true
		}
	}
	return false
}

// decodeSegment percent-decodes one path segment, refusing control bytes,
// backslashes, invalid escapes and (unless allowed) encoded slashes.
func decodeSegment(seg string, allowEncodedSlash bool) (string, error) {
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '\\' {
			return "", errors.New("backslash in path")
		}
		if c >= 0x80 {
			// As OpenShell: a request target is ASCII; a client that
			// means a non-ASCII byte percent-encodes it. Servers differ in
			// how they read a raw one.
			return "", fmt.Errorf("raw non-ASCII byte %#02x in path (percent-encode it)", c)
		}
		if c == '%' {
			if i+2 >= len(seg) || !isHex(seg[i+1]) || !isHex(seg[i+2]) {
				return "", fmt.Errorf("invalid percent-encoding in %q", seg)
			}
			c = unhex(seg[i+1])<<4 | unhex(seg[i+2])
			i += 2
			if (c == '/' || c == '\\') && !allowEncodedSlash {
				return "", fmt.Errorf("encoded %q in path (allow_encoded_slash is off)", c)
			}
		}
		if c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("control byte %#02x in path", c)
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// encodeSegment writes a decoded segment in the one canonical spelling.
func encodeSegment(seg string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if isPathLiteral(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
	return b.String()
}

// isPathLiteral reports whether c stays literal in a canonical segment:
// RFC 3986 unreserved, sub-delims but ';', ':' and '@'.
func isPathLiteral(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,=:@", c) >= 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
