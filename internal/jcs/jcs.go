// Package jcs writes JSON in its RFC 8785 (JSON Canonicalization Scheme)
// form — no whitespace, object keys sorted by their UTF-16 code units,
// only the string escapes JSON requires, numbers as ECMAScript writes a
// double — so that two spellings of one document (spacing, key order,
// escapes, 1e2 for 100) have the same bytes, and a signer or hasher in any
// language with a JCS library gets them too. It reads with the strict
// reader (internal/strictjson): one JSON value, valid UTF-8, no lone
// surrogate escape, no key twice in an object, finite numbers, nesting
// bounded. The proxy pins MCP tool definitions by the digest of this form,
// decision records carry the digest of denied tool arguments, and Sentry
// events are signed over it.
package jcs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/portcullis-dev/portcullis/internal/strictjson"
)

// Transform returns the canonical form of raw, one JSON value nested at
// most maxDepth levels (the value itself is the first).
func Transform(raw []byte, maxDepth int) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, errors.New("not valid UTF-8")
	}
	if maxDepth < 1 {
		return nil, fmt.Errorf("nested more than %d levels deep", maxDepth)
	}
	var r strictjson.Reader
	r.Reset(raw, strictjson.Limits{MaxDepth: maxDepth - 1, FiniteNumbers: true})
	out := value(&r, nil)
	if err := r.End(); err != nil {
		return nil, refusal(err, raw, maxDepth)
	}
	return out, nil
}

// refusal words a fault of the strict reader.
func refusal(err error, raw []byte, maxDepth int) error {
	var e *strictjson.Error
	if !errors.As(err, &e) {
		return fmt.Errorf("not JSON: %w", err)
	}
	switch e.Code {
	case strictjson.TooDeep:
		return fmt.Errorf("nested more than %d levels deep", maxDepth)
	case strictjson.DuplicateKey:
		return fmt.Errorf("the key %.60q appears twice in an object", e.Key)
	case strictjson.NumberRange:
		return fmt.Errorf("number %.40s is not a finite double", raw[e.Start:e.Offset])
	case strictjson.TrailingData:
		return errors.New("more data follows the JSON value")
	case strictjson.LoneSurrogate:
		// RFC 8785 §3.2.2.2 refuses them, where encoding/json would read
		// U+FFFD.
		if hi, _ := strconv.ParseUint(string(raw[e.Start+2:e.Start+6]), 16, 16); hi < 0xdc00 {
			return fmt.Errorf("a string holds %.6s, a high surrogate not followed by a low one", raw[e.Start:])
		}
		return fmt.Errorf("a string holds %.6s, a low surrogate not after a high one", raw[e.Start:])
	}
	return fmt.Errorf("not JSON: %s at byte %d", e.Reason(), e.Offset)
}

// Digest is "sha256:" and the 64 lower-case hex digits of the SHA-256 of
// Transform(raw, maxDepth).
func Digest(raw []byte, maxDepth int) (string, error) {
	c, err := Transform(raw, maxDepth)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// value appends the canonical form of the value at r to out. After a
// fault of r it appends nonsense, which Transform drops.
func value(r *strictjson.Reader, out []byte) []byte {
	switch r.Kind() {
	case strictjson.Object:
		return object(r, out)
	case strictjson.Array:
		out = append(out, '[')
		r.Open()
		for i := 0; r.Element(); i++ {
			if i > 0 {
				out = append(out, ',')
			}
			out = value(r, out)
		}
		return append(out, ']')
	case strictjson.String:
		return appendString(out, r.ReadString())
	case strictjson.Number:
		return appendNumber(out, r.Skip())
	}
	return append(out, r.Skip()...) // true, false, null
}

// appendNumber appends a number as ECMAScript writes the double it is
// (the reader has checked that it is one).
func appendNumber(out, raw []byte) []byte {
	f, _ := strconv.ParseFloat(string(raw), 64)
	if f == 0 {
		return append(out, '0') // ECMAScript writes -0 as 0
	}
	// encoding/json writes a float64 as ECMAScript does (shortest round
	// trip; exponent form below 1e-6 and from 1e21).
	b, _ := json.Marshal(f)
	return append(out, b...)
}

// object appends an object: its members are written as they come, then
// put in key order.
func object(r *strictjson.Reader, out []byte) []byte {
	type member struct {
		key    []byte
		lo, hi int // its value, in out
	}
	var members []member
	start := len(out)
	r.Open()
	for key, ok := r.Member(); ok; key, ok = r.Member() {
		lo := len(out)
		out = value(r, out)
		members = append(members, member{key, lo, len(out)})
	}
	slices.SortFunc(members, func(a, b member) int { return compareUTF16(a.key, b.key) })
	values := slices.Clone(out[start:])
	out = append(out[:start], '{')
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendString(out, m.key)
		out = append(out, ':')
		out = append(out, values[m.lo-start:m.hi-start]...)
	}
	return append(out, '}')
}

// compareUTF16 orders two UTF-8 strings by their UTF-16 code units, as
// RFC 8785 sorts keys: a character past U+FFFF is a surrogate pair, and
// sorts before U+E000-U+FFFF.
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		a, b = a[na:], b[nb:]
		if ra == rb {
			continue
		}
		ua, la := utf16Units(ra)
		ub, lb := utf16Units(rb)
		if ua != ub {
			return int(ua) - int(ub)
		}
		return int(la) - int(lb)
	}
	return len(a) - len(b)
}

// utf16Units returns the UTF-16 code units of r: r itself and 0, or its
// surrogate pair.
func utf16Units(r rune) (rune, rune) {
	if r < 0x10000 {
		return r, 0
	}
	return utf16.EncodeRune(r)
}

// appendString escapes as RFC 8785 says: '"', '\\' and the C0 controls,
// with the short forms where JSON has them; nothing else.
func appendString(out, s []byte) []byte {
	out = append(out, '"')
	for _, c := range s {
		switch c {
		case '"':
			out = append(out, `\"`...)
		case '\\':
			out = append(out, `\\`...)
		case '\b':
			out = append(out, `\b`...)
		case '\f':
			out = append(out, `\f`...)
		case '\n':
			out = append(out, `\n`...)
		case '\r':
			out = append(out, `\r`...)
		case '\t':
			out = append(out, `\t`...)
		default:
			if c < 0x20 {
				out = fmt.Appendf(out, `\u%04x`, c)
			} else {
				out = append(out, c)
			}
		}
	}
	return append(out, '"')
}
