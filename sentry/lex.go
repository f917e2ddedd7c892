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
	// tree, when set, receives the members of the objects read down to
	// recordDepth, so that the reader finds fields without a second pass.
	tree *tree
	// keys holds the keys of the objects still open, to refuse a
	// duplicate: a linear scan allocates nothing, and an object with many
	// keys (a hostile event can hold thousands) moves to a map so the
	// check stays linear.
	keys [][]byte
}

// recordDepth is the deepest object the lexer records: an event (0), its
// data (1) and data's objects (2). Deeper values are only checked.
const recordDepth = 2

// field is one member of a recorded object: its key (decoded), its value's
// bytes, and, when the value is itself a recorded object, its index in
// tree.objects (else -1).
type field struct {
	key []byte
	val []byte
	obj int
}

// tree is what one pass of the lexer recorded of a value: the members of
// each object down to recordDepth, an object's members contiguous in
// fields, the objects in the order they closed (so the outermost is last).
type tree struct {
	fields  []field
	objects [][2]int // fields[lo:hi]
	stack   []field  // members of the objects still open
}

func (t *tree) reset() {
	t.fields, t.objects, t.stack = t.fields[:0], t.objects[:0], t.stack[:0]
}

// members returns the members of recorded object i.
func (t *tree) members(i int) []field {
	o := t.objects[i]
	return t.fields[o[0]:o[1]:o[1]]
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
	t := l.tree
	if depth > recordDepth {
		t = nil
	}
	base := 0
	if t != nil {
		base = len(t.stack)
	}
	if l.expect('}') {
		t.closeObject(base)
		return nil
	}
	kbase := len(l.keys)
	defer func() { l.keys = l.keys[:kbase] }()
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
		if l.seenKey(kbase, &many, key) {
			return l.fail("duplicate key")
		}
		if !l.expect(':') {
			return l.fail(fmt.Sprintf("invalid JSON: expected ':' at byte %d", l.i))
		}
		l.ws()
		start, objects := l.i, 0
		if t != nil {
			objects = len(t.objects)
		}
		if err := l.value(depth + 1); err != nil {
			return err
		}
		if t != nil {
			// A member that is an object closed last of what it recorded.
			f := field{key: key, val: l.b[start:l.i:l.i], obj: -1}
			if l.b[start] == '{' && len(t.objects) > objects {
				f.obj = len(t.objects) - 1
			}
			t.stack = append(t.stack, f)
		}
		done, err := l.next('}')
		if done {
			t.closeObject(base)
		}
		if done || err != nil {
			return err
		}
	}
}

// closeObject moves the members of the object just closed, those on the
// stack from base, to fields. A nil tree records nothing.
func (t *tree) closeObject(base int) {
	if t == nil {
		return
	}
	lo := len(t.fields)
	t.fields = append(t.fields, t.stack[base:]...)
	t.stack = t.stack[:base]
	t.objects = append(t.objects, [2]int{lo, len(t.fields)})
}

// seenKey reports whether key is already a key of the object whose keys
// start at l.keys[base] (or are in many), and adds it.
func (l *lexer) seenKey(base int, many *map[string]bool, key []byte) bool {
	if *many != nil {
		if (*many)[string(key)] {
			return true
		}
		(*many)[string(key)] = true
		return false
	}
	for _, k := range l.keys[base:] {
		if bytes.Equal(k, key) {
			return true
		}
	}
	l.keys = append(l.keys, key)
	if len(l.keys)-base > 32 {
		*many = make(map[string]bool, 2*(len(l.keys)-base))
		for _, k := range l.keys[base:] {
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
		if err := l.value(depth + 1); err != nil {
			return err
		}
		if done, err := l.next(']'); done || err != nil {
			return err
		}
	}
}

// next pops the path segment of the member or element just read and reads
// what follows it: a comma, or close, which ends the container (done).
func (l *lexer) next(close byte) (done bool, err *FieldError) {
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

// plain marks the bytes a string holds as they are: not a quote, a
// backslash, a control character or the start of a multi-byte sequence.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// strBytes reads a string at l.i (its opening quote) and returns its
// value's bytes: a slice of l.b when the string has no escape.
func (l *lexer) strBytes() ([]byte, *FieldError) {
	start := l.i
	l.i++
	escaped := false
	for l.i < len(l.b) {
		if !plain[l.b[l.i]] {
			break
		}
		l.i++
	}
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
	integer := l.i-first <= 15 // an integer this short is always a double
	if l.i < len(l.b) && l.b[l.i] == '.' {
		l.i++
		integer = false
		if digits() == 0 {
			return l.fail(fmt.Sprintf("invalid JSON: invalid number at byte %d", start))
		}
	}
	if l.i < len(l.b) && (l.b[l.i] == 'e' || l.b[l.i] == 'E') {
		l.i++
		integer = false
		if l.i < len(l.b) && (l.b[l.i] == '+' || l.b[l.i] == '-') {
			l.i++
		}
		if digits() == 0 {
			return l.fail(fmt.Sprintf("invalid JSON: invalid number at byte %d", start))
		}
	}
	if integer {
		return nil
	}
	if f, err := strconv.ParseFloat(string(l.b[start:l.i]), 64); err != nil || math.IsInf(f, 0) {
		return l.fail("number out of the range of a double")
	}
	return nil
}
