package match

import (
	"regexp/syntax"
)

// fixedPattern is a pattern that matches only strings of one length, each
// byte from its own set of ASCII characters: ^, then single characters
// (ASCII literals, ASCII classes such as [A-Z] or \d, each optionally
// repeated an exact number of times, x{4}), then $ — the common shape of
// an identifier's pattern (`^[A-Z]-\d{4}$`). Matching it is a loop over
// the bytes rather than the regexp engine.
//
// It is exact: for a pattern it compiles, match(s) is what
// regexp.MustCompile(pattern).Match(s) says of any s. A character outside
// ASCII is in none of the sets, as it is in none of the pattern's
// classes; ^ and $ are the text's ends, since Go's regexp compiles with
// syntax.Perl (OneLine: no (?m) here, which would be another op and is
// refused). FuzzFixedPattern checks it against package regexp.
type fixedPattern []asciiSet

// asciiSet is a set of ASCII bytes, bit c of word c/64.
type asciiSet [2]uint64

func (s *asciiSet) has(c byte) bool { return c < 0x80 && s[c>>6]&(1<<(c&63)) != 0 }

// maxFixedPattern bounds the length a fixedPattern matches.
const maxFixedPattern = 256

// compileFixedPattern returns the fixedPattern of pattern, or nil when
// pattern is not of that shape (or does not compile).
func compileFixedPattern(pattern string) fixedPattern {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil || re.Op != syntax.OpConcat || len(re.Sub) < 2 {
		return nil
	}
	subs := re.Sub
	if subs[0].Op != syntax.OpBeginText || subs[len(subs)-1].Op != syntax.OpEndText {
		return nil
	}
	var p fixedPattern
	for _, sub := range subs[1 : len(subs)-1] {
		n := 1
		if sub.Op == syntax.OpRepeat {
			if sub.Min != sub.Max || sub.Min < 0 {
				return nil
			}
			n, sub = sub.Min, sub.Sub[0]
		}
		sets, ok := singleChars(sub)
		if !ok || len(p)+n*len(sets) > maxFixedPattern {
			return nil
		}
		if n > 1 && len(sets) != 1 {
			return nil // a repeated literal string: keep it simple
		}
		for range n {
			p = append(p, sets...)
		}
	}
	return p
}

// singleChars reads re as a sequence of single ASCII characters: a
// literal (case-sensitive) or a character class.
func singleChars(re *syntax.Regexp) ([]asciiSet, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		if re.Flags&syntax.FoldCase != 0 {
			return nil, false
		}
		sets := make([]asciiSet, len(re.Rune))
		for i, r := range re.Rune {
			if r < 0 || r >= 0x80 {
				return nil, false
			}
			sets[i][r>>6] |= 1 << (r & 63)
		}
		return sets, true
	case syntax.OpCharClass:
		var s asciiSet
		for i := 0; i+1 < len(re.Rune); i += 2 {
			lo, hi := re.Rune[i], re.Rune[i+1]
			if lo < 0 || hi >= 0x80 || lo > hi {
				return nil, false
			}
			for r := lo; r <= hi; r++ {
				s[r>>6] |= 1 << (r & 63)
			}
		}
		return []asciiSet{s}, true
	}
	return nil, false
}

// match reports whether the pattern matches s.
func (p fixedPattern) match(s []byte) bool {
	if len(s) != len(p) {
		return false
	}
	for i, c := range s {
		if !p[i].has(c) {
			return false
		}
	}
	return true
}
