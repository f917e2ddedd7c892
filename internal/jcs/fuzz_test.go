package jcs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// FuzzTransform compares Transform with the encoding/json-based
// canonicaliser it replaced (referenceTransform, kept here as it was):
// the same verdict and, when both accept, the same bytes.
func FuzzTransform(f *testing.F) {
	for _, s := range []string{
		`{"b": 1, "a": [true, null, "x"]}`, `[1E21, 1e-7, 0.000001, -0, 333333333.33333329]`, `[4.50, 2e-3, 0.000001000, 1e+30, 100]`,
		`"\u20ac\u000f\/\"\\\n"`, `{"\ufb33": 1, "\ud83d\ude00": 2, "\u0080": 3, "\ue000": 4}`, `{"peach": 1, "péché": 2, "pêche": 3, "sin": 4}`,
		`{"a":1,"a":2}`, `[[[1]]]`, `1e999`, `{} {}`, "\"\xff\"", `{"a":`, `"\ud800"`, `"\ud800\uZZZZ"`, `["\\ud800", "\uD800"]`, ` `,
		`{"\u0000\u001f":"\b\f\t\r"}`, `[1.7976931348623157e308, 5e-324, 123456789012345678901234567890]`,
	} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, raw []byte, maxDepth int) {
		maxDepth = maxDepth%40 + 1
		got, err := Transform(raw, maxDepth)
		want, wantErr := referenceTransform(raw, maxDepth)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q (depth %d): %v; reference %v", raw, maxDepth, err, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q: %s; reference %s", raw, got, want)
		}
	})
}

// Transform returns the canonical form of raw, one JSON value nested at
// most maxDepth levels.
func referenceTransform(raw []byte, maxDepth int) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, errors.New("not valid UTF-8")
	}
	if err := refLoneSurrogate(raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	var buf bytes.Buffer
	c := refCanonicalizer{dec: dec, maxDepth: maxDepth}
	if err := c.value(&buf, tok, 1); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more data follows the JSON value")
	}
	return buf.Bytes(), nil
}

// refLoneSurrogate refuses a \uD800-\uDFFF escape in a string (or key)
// that is not a high surrogate followed by a low one: encoding/json would
// read it as U+FFFD, so "\ud800" would pass and have the digest of
// "\ufffd", where RFC 8785 requires refusing it. Malformed JSON is left
// to the decoder.
func refLoneSurrogate(raw []byte) error {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\':
			if i+1 < len(raw) && raw[i+1] == 'u' {
				r, ok := refHex4(raw[i+2:])
				switch {
				case ok && utf16.IsSurrogate(r) && r < 0xdc00:
					if len(raw) >= i+12 && raw[i+6] == '\\' && raw[i+7] == 'u' {
						if lo, ok := refHex4(raw[i+8:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
							i += 11
							continue
						}
					}
					return fmt.Errorf("a string holds %.6s, a high surrogate not followed by a low one", raw[i:])
				case ok && utf16.IsSurrogate(r):
					return fmt.Errorf("a string holds %.6s, a low surrogate not after a high one", raw[i:])
				}
			}
			i++ // the escaped character (the hex digits are plain)
		}
	}
	return nil
}

// hex4 reads the four hex digits that start b.
func refHex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n), err == nil
}

type refCanonicalizer struct {
	dec      *json.Decoder
	maxDepth int
}

// value writes the value that starts with tok.
func (c *refCanonicalizer) value(buf *bytes.Buffer, tok json.Token, depth int) error {
	if depth > c.maxDepth {
		return fmt.Errorf("nested more than %d levels deep", c.maxDepth)
	}
	switch t := tok.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case string:
		refWriteString(buf, t)
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("number %.40s is not a finite double", t)
		}
		if f == 0 {
			buf.WriteString("0") // ECMAScript writes -0 as 0
			return nil
		}
		// encoding/json writes a float64 as ECMAScript does (shortest
		// round trip; exponent form below 1e-6 and from 1e21).
		b, _ := json.Marshal(f)
		buf.Write(b)
	case json.Delim:
		if t == '[' {
			return c.array(buf, depth)
		}
		return c.object(buf, depth)
	}
	return nil
}

// array writes an array whose '[' was read.
func (c *refCanonicalizer) array(buf *bytes.Buffer, depth int) error {
	buf.WriteByte('[')
	for i := 0; c.dec.More(); i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		next, err := c.dec.Token()
		if err != nil {
			return fmt.Errorf("not JSON: %w", err)
		}
		if err := c.value(buf, next, depth+1); err != nil {
			return err
		}
	}
	if _, err := c.dec.Token(); err != nil { // ']'
		return fmt.Errorf("not JSON: %w", err)
	}
	buf.WriteByte(']')
	return nil
}

// object writes an object whose '{' was read: its members are written
// apart, then in key order.
func (c *refCanonicalizer) object(buf *bytes.Buffer, depth int) error {
	type member struct {
		key  string
		json []byte
	}
	var members []member
	seen := map[string]bool{}
	for c.dec.More() {
		k, err := c.dec.Token()
		if err != nil {
			return fmt.Errorf("not JSON: %w", err)
		}
		key := k.(string) // the decoder reads only strings as keys
		if seen[key] {
			return fmt.Errorf("the key %.60q appears twice in an object", key)
		}
		seen[key] = true
		v, err := c.dec.Token()
		if err != nil {
			return fmt.Errorf("not JSON: %w", err)
		}
		var b bytes.Buffer
		if err := c.value(&b, v, depth+1); err != nil {
			return err
		}
		members = append(members, member{key, b.Bytes()})
	}
	if _, err := c.dec.Token(); err != nil { // '}'
		return fmt.Errorf("not JSON: %w", err)
	}
	slices.SortFunc(members, func(a, b member) int {
		return slices.Compare(utf16.Encode([]rune(a.key)), utf16.Encode([]rune(b.key)))
	})
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		refWriteString(buf, m.key)
		buf.WriteByte(':')
		buf.Write(m.json)
	}
	buf.WriteByte('}')
	return nil
}

// writeString escapes as RFC 8785 says: '"', '\\' and the C0 controls,
// with the short forms where JSON has them; nothing else.
func refWriteString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			buf.WriteString(`\"`)
		case '\\':
			buf.WriteString(`\\`)
		case '\b':
			buf.WriteString(`\b`)
		case '\f':
			buf.WriteString(`\f`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		case '\t':
			buf.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(buf, `\u%04x`, r)
			} else {
				buf.WriteRune(r)
			}
		}
	}
	buf.WriteByte('"')
}
