package match

import (
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// ---------------------------------------------------------------------------
// Paths.

// canonicalPaths holds a request's canonical path under each
// allow_encoded_slash setting, computed at most once each.
type canonicalPaths struct {
	done [2]bool
	path [2]string
	err  [2]error
}

func (c *canonicalPaths) get(raw string, allowEncodedSlash bool) (string, error) {
	i := 0
	if allowEncodedSlash {
		i = 1
	}
	if !c.done[i] {
		c.path[i], c.err[i] = canonicalPath(raw, allowEncodedSlash)
		c.done[i] = true
	}
	return c.path[i], c.err[i]
}

// canonicalPath is policy.CanonicalPath without allocating when raw is
// already canonical — the usual case: it starts with `/` and holds only
// bytes the canonical form writes literally, no empty segment but a
// trailing one, and no dot segment.
func canonicalPath(raw string, allowEncodedSlash bool) (string, error) {
	if isCanonicalPath(raw) {
		return raw, nil
	}
	return policy.CanonicalPath(raw, allowEncodedSlash)
}

func isCanonicalPath(raw string) bool {
	if raw == "" || raw[0] != '/' {
		return false
	}
	start := 1
	for i := 1; i <= len(raw); i++ {
		if i < len(raw) && raw[i] != '/' {
			if !pathLiteral[raw[i]] {
				return false
			}
			continue
		}
		seg := raw[start:i]
		switch {
		case seg == "" && i < len(raw), seg == ".", seg == "..":
			return false
		}
		start = i + 1
	}
	return true
}

// pathLiteral marks the bytes a canonical path segment writes literally
// (policy's isPathLiteral): RFC 3986 unreserved, sub-delims but ';', ':'
// and '@'. A raw ';' starts parameters, which CanonicalPath strips.
var pathLiteral = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range []byte("-._~!$&'()*+,=:@") {
		t[c] = true
	}
	return t
}()

// ---------------------------------------------------------------------------
// Globs.

// glob is a compiled policy glob. match is policy.MatchGlob (segments;
// `**` alone crosses `/`), matchDeny is policy.MatchDenyGlob (also
// OpenShell's character reading, and an optional trailing slash),
// matchChars is the character reading alone (query values). An invalid
// glob matches nothing.
type glob struct {
	fold    []glob // path globs: each `{a,b}` alternative (policy.ExpandDenyPathGlob) ignoring ASCII case, for deny matching
	folded  bool   // literals compare ignoring ASCII case
	valid   bool
	literal bool // every segment literal: matches lit alone
	lit     string
	segs    []globSeg
	chars   []token // the whole pattern as characters; nil when it does not compile so
	charsOK bool
}

type globSeg struct {
	folded  bool // lit compares ignoring ASCII case
	any     bool // `**`
	literal bool // no metacharacters: matches lit exactly
	lit     string
	toks    []token
}

func compileGlob(pattern string) glob {
	g := glob{valid: policy.ValidGlob(pattern) == nil}
	if !g.valid {
		return g
	}
	for _, s := range strings.Split(pattern, "/") {
		if s == "**" {
			g.segs = append(g.segs, globSeg{any: true})
			continue
		}
		toks, ok := compileChars(s)
		if !ok {
			return glob{} // ValidGlob accepted what compileChars refuses: match nothing
		}
		g.segs = append(g.segs, globSeg{literal: !strings.ContainsAny(s, `*?[\`), lit: s, toks: toks})
	}
	g.chars, g.charsOK = compileChars(pattern)
	g.lit, g.literal = pattern, g.isLiteral()
	return g
}

// isLiteral reports whether the glob matches exactly one string, itself.
func (g *glob) isLiteral() bool {
	if !g.valid {
		return false
	}
	for _, s := range g.segs {
		if !s.literal {
			return false
		}
	}
	return true
}

// match is policy.MatchGlob: the greedy wildcard algorithm over segments,
// `**` standing for any run of whole segments. Segments of s are walked by
// byte offset; len(s)+1 marks "no segment left".
func (g *glob) match(s string) bool {
	switch {
	case !g.valid:
		return false
	case g.literal:
		return s == g.lit || g.folded && asciiEqualFold(s, g.lit)
	}
	n := len(g.segs)
	p, i := 0, 0
	star, mark := -1, 0
	for i <= len(s) {
		if p < n && g.segs[p].any {
			star, mark = p, i
			p++
			continue
		}
		end := segmentEnd(s, i)
		switch {
		case p < n && g.segs[p].matchSeg(s[i:end]):
			p++
			i = end + 1
		case star >= 0:
			mark = segmentEnd(s, mark) + 1
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < n && g.segs[p].any {
		p++
	}
	return p == n
}

func (s *globSeg) matchSeg(seg string) bool {
	if s.literal {
		return seg == s.lit || s.folded && asciiEqualFold(seg, s.lit)
	}
	return matchTokens(s.toks, seg)
}

// segmentEnd returns the end of the segment of s starting at i: the next
// `/`, or len(s).
func segmentEnd(s string, i int) int {
	if j := strings.IndexByte(s[i:], '/'); j >= 0 {
		return i + j
	}
	return len(s)
}

// matchDeny is policy.MatchDenyGlob.
func (g *glob) matchDeny(s string) bool {
	if !g.valid {
		return false
	}
	if g.match(s) || g.matchChars(s) {
		return true
	}
	if trimmed := strings.TrimSuffix(s, "/"); trimmed != s && trimmed != "" {
		return g.match(trimmed) || g.matchChars(trimmed)
	}
	return false
}

// compilePathGlob compiles a path glob (a rule's path or an endpoint's
// path scope) with the case-folded copies of its brace alternatives for
// matchDenyPath.
func compilePathGlob(pattern string) glob {
	g := compileGlob(pattern)
	alts, ok := policy.ExpandDenyPathGlob(pattern)
	if !ok {
		return g // matchDenyPath matches nothing, as policy.MatchDenyPath
	}
	for _, a := range alts {
		f := compileGlob(a)
		f.folded = true
		for i := range f.segs {
			f.segs[i].folded = true
			f.segs[i].toks = foldTokens(f.segs[i].toks)
		}
		f.chars = foldTokens(f.chars)
		g.fold = append(g.fold, f)
	}
	return g
}

// matchDenyPath is policy.MatchDenyPath: matchDeny ignoring ASCII case,
// with any brace alternative, on every reading of p
// (policy.DenyReadings). The readings other than p itself are computed
// only when p has what they change: a `%` or a segment ending in a dot.
func (g *glob) matchDenyPath(p string) bool {
	if len(g.fold) == 0 {
		return false
	}
	if g.matchDenyAlts(p) {
		return true
	}
	if !policy.HasOtherDenyReadings(p) {
		return false
	}
	for _, r := range policy.DenyReadings(p)[1:] {
		if g.matchDenyAlts(r) {
			return true
		}
	}
	return false
}

func (g *glob) matchDenyAlts(p string) bool {
	for i := range g.fold {
		if g.fold[i].matchDeny(p) {
			return true
		}
	}
	return false
}

// asciiEqualFold is strings.EqualFold for ASCII letters only (policy's
// folded tokens know no Unicode folding).
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if a[i] != b[i] && a[i] != policy.SwapCase(b[i]) {
			return false
		}
	}
	return true
}

// foldTokens makes every one-byte token accept both cases of an ASCII
// letter (policy's foldTokens).
func foldTokens(toks []token) []token {
	out := make([]token, len(toks))
	for i, t := range toks {
		switch {
		case t.star:
			out[i] = t
		case t.set == nil && policy.SwapCase(t.lit) == t.lit:
			out[i] = t
		default:
			var set [256]bool
			for c := range set {
				set[c] = t.matches(byte(c)) || t.matches(policy.SwapCase(byte(c)))
			}
			out[i] = token{set: &set}
		}
	}
	return out
}

// matchChars is policy's matchChars on the whole pattern: `*` crosses `/`.
func (g *glob) matchChars(s string) bool {
	return g.valid && g.charsOK && matchTokens(g.chars, s)
}

// token is one element of a character pattern (policy's globToken): a star,
// or a set of bytes matching exactly one byte.
type token struct {
	star bool
	set  *[256]bool
	lit  byte
	one  bool // set == nil and !star: matches lit only
}

func (t *token) matches(c byte) bool {
	if t.set != nil {
		return t.set[c]
	}
	return c == t.lit
}

// compileChars is policy.CompileGlobChars (so the two cannot read a
// pattern differently) with each one-byte token's class turned into a
// byte table, or a literal when it accepts one byte only: the fast path
// never calls a closure per byte. ok is false for an unclosed class or a
// trailing backslash.
func compileChars(pat string) (toks []token, ok bool) {
	ptoks, ok := policy.CompileGlobChars(pat)
	if !ok {
		return nil, false
	}
	toks = make([]token, len(ptoks))
	for i, pt := range ptoks {
		if pt.Star {
			toks[i] = token{star: true}
			continue
		}
		var set [256]bool
		n, last := 0, byte(0)
		for c := range set {
			if pt.Class(byte(c)) {
				set[c] = true
				n, last = n+1, byte(c)
			}
		}
		if n == 1 {
			toks[i] = token{lit: last, one: true}
		} else {
			toks[i] = token{set: &set}
		}
	}
	return toks, true
}

// matchTokens mirrors policy's matchTokens (the greedy star algorithm).
func matchTokens(toks []token, s string) bool {
	n := len(toks)
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < n && toks[p].star:
			star, mark = p, i
			p++
		case p < n && toks[p].matches(s[i]):
			p++
			i++
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < n && toks[p].star {
		p++
	}
	return p == n
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
