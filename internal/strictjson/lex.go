package strictjson

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// plain marks the bytes a string holds as they are: not a quote, a
// backslash, a control character or part of a multi-byte sequence.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads the string at r.i (its opening quote). With decode it returns
// its value: a slice of the input when it has no escape, else a new array.
func (r *Reader) str(decode bool) []byte {
	r.i++ // "
	start := r.i
	r.i = plainRun(r.b, r.i)
	for r.i < len(r.b) && plain[r.b[r.i]] {
		r.i++
	}
	if r.i < len(r.b) && r.b[r.i] == '"' {
		r.i++
		return r.b[start : r.i-1 : r.i-1]
	}
	return r.strRest(start, decode)
}

// plainRun skips plain bytes at b[i:] eight at a time, and returns where
// the first word holding another byte starts: str reads on from there a
// byte at a time.
func plainRun(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	// below reports whether a byte of x is below n (n <= 0x80; exact when
	// no byte of x is from 0x80 on, which high catches anyway).
	below := func(x, n uint64) uint64 { return (x - ones*n) &^ x & highs }
	for ; i+8 <= len(b); i += 8 {
		v := binary.LittleEndian.Uint64(b[i:])
		high := v & highs
		control := below(v, 0x20)
		quote := below(v^(ones*'"'), 1)
		backslash := below(v^(ones*'\\'), 1)
		if high|control|quote|backslash != 0 {
			return i
		}
	}
	return i
}

// strRest reads on where str's plain run stopped.
func (r *Reader) strRest(start int, decode bool) []byte {
	var buf []byte // the value decoded so far, once an escape is met
	escaped := false
	run := start // the bytes from run on are to be copied into buf as they are
	for r.i < len(r.b) {
		c := r.b[r.i]
		switch {
		case plain[c]:
			r.i++
		case c == '"':
			r.i++
			switch {
			case !escaped:
				return r.b[start : r.i-1 : r.i-1]
			case !decode:
				return nil
			}
			return append(buf, r.b[run:r.i-1]...)
		case c == '\\':
			if decode && !escaped {
				buf = make([]byte, 0, r.i-start+16)
			}
			escaped = true
			if decode {
				buf = append(buf, r.b[run:r.i]...)
			}
			buf = r.escape(buf, decode)
			if r.err != nil {
				return nil
			}
			run = r.i
		case c < 0x20:
			r.fail(ControlCharacter)
			return nil
		default:
			// A run of bytes from 0x80 on: UTF-8 splits only between them
			// and ASCII, so the run must be whole sequences.
			j := r.i + 1
			for j < len(r.b) && r.b[j] >= utf8.RuneSelf {
				j++
			}
			if !utf8.Valid(r.b[r.i:j]) {
				for k := r.i; ; { // name the first bad sequence
					rn, size := utf8.DecodeRune(r.b[k:j])
					if rn == utf8.RuneError && size == 1 {
						r.i = k
						break
					}
					k += size
				}
				r.fail(InvalidUTF8)
				return nil
			}
			r.i = j
		}
	}
	r.fail(UnterminatedString)
	return nil
}

// escape reads the escape at r.i (its backslash), appending its value to
// buf when decode is set. A \u escape of a high surrogate must be followed
// by one of a low surrogate; the pair is one character.
func (r *Reader) escape(buf []byte, decode bool) []byte {
	at := r.i
	if r.i+1 >= len(r.b) {
		r.i = len(r.b)
		r.fail(UnterminatedString)
		return nil
	}
	e := r.b[r.i+1]
	r.i += 2
	var c rune
	switch e {
	case '"', '\\', '/':
		c = rune(e)
	case 'b':
		c = '\b'
	case 'f':
		c = '\f'
	case 'n':
		c = '\n'
	case 'r':
		c = '\r'
	case 't':
		c = '\t'
	case 'u':
		c = r.unicode(at)
		if r.err != nil {
			return nil
		}
	default:
		r.failAt(InvalidEscape, at+1, at)
		return nil
	}
	if decode {
		buf = utf8.AppendRune(buf, c)
	}
	return buf
}

// unicode reads the four hex digits of the \u escape at at, and the low
// half's escape after a high surrogate.
func (r *Reader) unicode(at int) rune {
	c, ok := hex4(r.b, r.i)
	if !ok {
		r.failAt(InvalidUnicodeEscape, r.i, at)
		return 0
	}
	r.i += 4
	if !utf16.IsSurrogate(c) {
		return c
	}
	if c >= 0xdc00 || r.i+1 >= len(r.b) || r.b[r.i] != '\\' || r.b[r.i+1] != 'u' {
		r.failAt(LoneSurrogate, r.i, at)
		return 0
	}
	second := r.i
	r.i += 2
	lo, ok := hex4(r.b, r.i)
	if !ok {
		r.failAt(InvalidUnicodeEscape, r.i, second)
		return 0
	}
	r.i += 4
	if c = utf16.DecodeRune(c, lo); c == utf8.RuneError {
		r.failAt(LoneSurrogate, r.i, at)
		return 0
	}
	return c
}

// hex4 reads the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var c rune
	for _, h := range b[i : i+4] {
		c <<= 4
		switch {
		case h >= '0' && h <= '9':
			c |= rune(h - '0')
		case h >= 'a' && h <= 'f':
			c |= rune(h - 'a' + 10)
		case h >= 'A' && h <= 'F':
			c |= rune(h - 'A' + 10)
		default:
			return 0, false
		}
	}
	return c, true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at r.i. A
// number runs into the next token only through a delimiter: "01" and
// "1x" leave a digit or letter, which the next read refuses.
func (r *Reader) number() {
	start := r.i
	if r.b[r.i] == '-' {
		r.i++
	}
	first := r.i
	switch {
	case r.i < len(r.b) && r.b[r.i] == '0':
		r.i++
	case r.digits() == 0:
		r.failAt(InvalidNumber, r.i, start)
		return
	}
	// An integer this short is always a double.
	short := r.i-first <= 15
	if r.i < len(r.b) && r.b[r.i] == '.' {
		r.i++
		short = false
		if r.digits() == 0 {
			r.failAt(InvalidNumber, r.i, start)
			return
		}
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.i++
		short = false
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		if r.digits() == 0 {
			r.failAt(InvalidNumber, r.i, start)
			return
		}
	}
	if r.lim.FiniteNumbers && !short {
		if f, err := strconv.ParseFloat(string(r.b[start:r.i]), 64); err != nil || math.IsInf(f, 0) {
			r.failAt(NumberRange, r.i, start)
		}
	}
}

func (r *Reader) digits() int {
	start := r.i
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		r.i++
	}
	return r.i - start
}
