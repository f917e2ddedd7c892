package sentry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// lexer reads JSON bytes once, refusing what encoding/json would accept
// silently: duplicate object keys (the last would win, hiding the first
// from whoever reads the raw bytes), invalid UTF-8 and lone UTF-16
// surrogates (both would become U+FFFD), numbers beyond a double (no
// canonical form to sign), nesting deeper than maxDepth and trailing data.
// It is hand-written because encoding/json's Token API, which can say the
// same, made reading a batch about five times slower than a plain
// json.Unmarshal; this lexer brings it to about twice (BenchmarkParseBatch).
type lexer struct {
	b []byte
	i int
	// path holds the keys and indexes down to the current value; it is
	// joined only to name the field of an error.
	path []segment
}

// segment is a key (its decoded bytes) or, when index >= 0, an index.
type segment struct {
	key   []byte
	index int
}

// checkSyntax reads b as one JSON value and nothing else.
func checkSyntax(b []byte) *FieldError {
	l := lexer{b: b}
	if err := l.value(0); err != nil {
		return err
	}
	l.ws()
	if l.i != len(l.b) {
		return &FieldError{Reason: "trailing data after the JSON value"}
	}
	return nil
}

// fail names the current path.
func (l *lexer) fail(reason string) *FieldError {
	var sb strings.Builder
	for _, s := range l.path {
		if s.index >= 0 {
			fmt.Fprintf(&sb, "[%d]", s.index)
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.Write(s.key)
	}
	return &FieldError{Field: sb.String(), Reason: reason}
}

func (l *lexer) ws() {
	for l.i < len(l.b) {
		switch l.b[l.i] {
		case ' ', '\t', '\n', '\r':
			l.i++
		default:
			return
		}
	}
}

// expect skips whitespace and reports whether the next byte is c,
// consuming it if so.
func (l *lexer) expect(c byte) bool {
	l.ws()
	if l.i < len(l.b) && l.b[l.i] == c {
		l.i++
		return true
	}
	return false
}

func (l *lexer) value(depth int) *FieldError {
	if depth > maxDepth {
		return l.fail(fmt.Sprintf("nested deeper than %d levels", maxDepth))
	}
	l.ws()
	if l.i >= len(l.b) {
		return l.fail("invalid JSON: unexpected end of input")
	}
	switch c := l.b[l.i]; {
	case c == '{':
		return l.object(depth)
	case c == '[':
		return l.array(depth)
	case c == '"':
		_, err := l.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return l.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(l.b[l.i:], []byte(lit)) {
				l.i += len(lit)
				return nil
			}
		}
		return l.fail(fmt.Sprintf("invalid JSON: unexpected %q at byte %d", c, l.i))
	}
}

func (l *lexer) object(depth int) *FieldError {
	l.i++ // {
	if l.expect('}') {
		return nil
	}
	// The keys seen so far: most objects are small, and a linear scan over
	// their bytes allocates nothing; a large object (a hostile event can
	// hold thousands of keys) moves to a map so the check stays linear.
	var seen [][]byte
	var many map[string]bool
	for {
		l.ws()
		if l.i >= len(l.b) || l.b[l.i] != '"' {
			return l.fail(fmt.Sprintf("invalid JSON: expected a key at byte %d", l.i))
		}
		key, err := l.strBytes()
		if err != nil {
			return err
		}
		l.path = append(l.path, segment{key: key, index: -1})
		if seenKey(&seen, &many, key) {
			return l.fail("duplicate key")
		}
		if !l.expect(':') {
			return l.fail(fmt.Sprintf("invalid JSON: expected ':' at byte %d", l.i))
		}
		if done, err := l.member(depth, '}'); done || err != nil {
			return err
		}
	}
}

// seenKey reports whether key is already in the set (seen, then many), and
// adds it.
func seenKey(seen *[][]byte, many *map[string]bool, key []byte) bool {
	if *many != nil {
		if (*many)[string(key)] {
			return true
		}
		(*many)[string(key)] = true
		return false
	}
	for _, k := range *seen {
		if bytes.Equal(k, key) {
			return true
		}
	}
	*seen = append(*seen, key)
	if len(*seen) > 32 {
		*many = make(map[string]bool, 2*len(*seen))
		for _, k := range *seen {
			(*many)[string(k)] = true
		}
	}
	return false
}

func (l *lexer) array(depth int) *FieldError {
	l.i++ // [
	if l.expect(']') {
		return nil
	}
	for n := 0; ; n++ {
		l.path = append(l.path, segment{index: n})
		if done, err := l.member(depth, ']'); done || err != nil {
			return err
		}
	}
}

// member reads the value of an object member or array element, whose path
// segment the caller has pushed, pops the segment, and reads what follows:
// a comma, or close, which ends the container (done).
func (l *lexer) member(depth int, close byte) (done bool, err *FieldError) {
	if err := l.value(depth + 1); err != nil {
		return false, err
	}
	l.path = l.path[:len(l.path)-1]
	if l.expect(',') {
		return false, nil
	}
	if l.expect(close) {
		return true, nil
	}
	return false, l.fail(fmt.Sprintf("invalid JSON: expected ',' or '%c' at byte %d", close, l.i))
}

// str reads a string at l.i (its opening quote) and returns its value.
func (l *lexer) str() (string, *FieldError) {
	b, err := l.strBytes()
	return string(b), err
}

// strBytes reads a string at l.i (its opening quote) and returns its
// value's bytes: a slice of l.b when the string has no escape.
func (l *lexer) strBytes() ([]byte, *FieldError) {
	start := l.i
	l.i++
	escaped := false
	for l.i < len(l.b) {
		c := l.b[l.i]
		switch {
		case c == '"':
			l.i++
			if !escaped {
				return l.b[start+1 : l.i-1], nil
			}
			var s string
			if err := json.Unmarshal(l.b[start:l.i], &s); err != nil {
				return nil, l.fail("invalid JSON: " + err.Error())
			}
			return []byte(s), nil
		case c == '\\':
			escaped = true
			if err := l.escape(); err != nil {
				return nil, err
			}
		case c < 0x20:
			return nil, l.fail("invalid JSON: control character in a string")
		case c < utf8.RuneSelf:
			l.i++
		default:
			r, size := utf8.DecodeRune(l.b[l.i:])
			if r == utf8.RuneError && size == 1 {
				return nil, l.fail("invalid UTF-8")
			}
			l.i += size
		}
	}
	return nil, l.fail("invalid JSON: unterminated string")
}

// escape reads one escape at l.i (its backslash); a \u escape of a high
// surrogate must be followed by one of a low surrogate.
func (l *lexer) escape() *FieldError {
	if l.i+1 >= len(l.b) {
		return l.fail("invalid JSON: unterminated string")
	}
	switch l.b[l.i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		l.i += 2
		return nil
	case 'u':
	default:
		return l.fail(fmt.Sprintf("invalid JSON: invalid escape at byte %d", l.i))
	}
	r, ok := l.hex4(l.i + 2)
	if !ok {
		return l.fail(fmt.Sprintf("invalid JSON: invalid \\u escape at byte %d", l.i))
	}
	l.i += 6
	if !utf16.IsSurrogate(r) {
		return nil
	}
	if r < 0xdc00 && l.i+1 < len(l.b) && l.b[l.i] == '\\' && l.b[l.i+1] == 'u' {
		if lo, ok := l.hex4(l.i + 2); ok && lo >= 0xdc00 && lo <= 0xdfff {
			l.i += 6
			return nil
		}
	}
	return l.fail("invalid \\u escape: lone UTF-16 surrogate")
}

func (l *lexer) hex4(at int) (rune, bool) {
	if at+4 > len(l.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(l.b[at:at+4]), 16, 16)
	return rune(v), err == nil
}

// number reads a number as RFC 8259 spells it and refuses one a double
// cannot hold.
func (l *lexer) number() *FieldError {
	start := l.i
	digits := func() int {
		n := 0
		for l.i < len(l.b) && l.b[l.i] >= '0' && l.b[l.i] <= '9' {
			l.i++
			n++
		}
		return n
	}
	if l.b[l.i] == '-' {
		l.i++
	}
	first := l.i
	if digits() == 0 || (l.b[first] == '0' && l.i-first > 1) {
		return l.fail(fmt.Sprintf("invalid JSON: invalid number at byte %d", start))
	}
	if l.i < len(l.b) && l.b[l.i] == '.' {
		l.i++
		if digits() == 0 {
			return l.fail(fmt.Sprintf("invalid JSON: invalid number at byte %d", start))
		}
	}
	if l.i < len(l.b) && (l.b[l.i] == 'e' || l.b[l.i] == 'E') {
		l.i++
		if l.i < len(l.b) && (l.b[l.i] == '+' || l.b[l.i] == '-') {
			l.i++
		}
		if digits() == 0 {
			return l.fail(fmt.Sprintf("invalid JSON: invalid number at byte %d", start))
		}
	}
	if f, err := strconv.ParseFloat(string(l.b[start:l.i]), 64); err != nil || math.IsInf(f, 0) {
		return l.fail("number out of the range of a double")
	}
	return nil
}

// members splits a JSON object that checkSyntax has accepted into its
// members' raw values, by key. It returns false when raw is not an object.
func members(raw []byte) (map[string]json.RawMessage, bool) {
	l := lexer{b: raw}
	if !l.expect('{') {
		return nil, false
	}
	m := map[string]json.RawMessage{}
	if l.expect('}') {
		return m, true
	}
	for {
		l.ws()
		key, err := l.str()
		if err != nil || !l.expect(':') {
			return nil, false
		}
		l.ws()
		start := l.i
		if l.value(0) != nil {
			return nil, false
		}
		m[key] = raw[start:l.i:l.i]
		if l.expect(',') {
			continue
		}
		return m, l.expect('}')
	}
}
