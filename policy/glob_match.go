package policy

import (
	"errors"
	"fmt"
)

// This file holds the glob engine: a segment compiled to tokens, character
// classes, and the matching of segments and characters.

// matchSegments matches `/`-separated segments, `**` standing for zero or
// more whole segments. Every other pattern segment matches exactly one
// segment, so the greedy star algorithm (remember the last `**`, retry one
// segment further on a mismatch) is exact and takes O(len(pat)·len(segs))
// segment matches instead of backtracking exponentially.
func matchSegments(pat, segs []string) bool { return matchSegmentsCase(pat, segs, false) }

// matchSegmentsCase is the one engine of matchSegments and, with fold set,
// matchSegmentsFold (ASCII case folded), so the allow and deny readings of
// segments cannot drift apart.
func matchSegmentsCase(pat, segs []string, fold bool) bool {
	compiled := make([][]globToken, len(pat))
	for i, seg := range pat {
		if seg == "**" {
			continue
		}
		toks, ok := compileChars(seg)
		if !ok {
			return false
		}
		if fold {
			toks = foldTokens(toks)
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
