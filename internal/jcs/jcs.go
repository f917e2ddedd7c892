// Package jcs writes JSON in its RFC 8785 (JSON Canonicalization Scheme)
// form — no whitespace, object keys sorted by their UTF-16 code units,
// only the string escapes JSON requires, numbers as ECMAScript writes a
// double — so that two spellings of one document (spacing, key order,
// escapes, 1e2 for 100) have the same bytes, and a signer or hasher in any
// language with a JCS library gets them too. It reads strictly: one JSON
// value, valid UTF-8, no lone surrogate escape, no key twice in an
// object, finite numbers, nesting bounded. The proxy pins MCP tool
// definitions by the digest of this form, decision records carry the
// digest of denied tool arguments, and Sentry events are signed over it.
package jcs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Transform returns the canonical form of raw, one JSON value nested at
// most maxDepth levels.
func Transform(raw []byte, maxDepth int) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, errors.New("not valid UTF-8")
	}
	if err := loneSurrogate(raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	var buf bytes.Buffer
	c := canonicalizer{dec: dec, maxDepth: maxDepth}
	if err := c.value(&buf, tok, 1); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more data follows the JSON value")
	}
	return buf.Bytes(), nil
}

// loneSurrogate refuses a \uD800-\uDFFF escape in a string (or key)
// that is not a high surrogate followed by a low one: encoding/json would
// read it as U+FFFD, so "\ud800" would pass and have the digest of
// "\ufffd", where RFC 8785 requires refusing it. Malformed JSON is left
// to the decoder.
func loneSurrogate(raw []byte) error {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\':
			if i+1 < len(raw) && raw[i+1] == 'u' {
				r, ok := hex4(raw[i+2:])
				switch {
				case ok && utf16.IsSurrogate(r) && r < 0xdc00:
					if len(raw) >= i+12 && raw[i+6] == '\\' && raw[i+7] == 'u' {
						if lo, ok := hex4(raw[i+8:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
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
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n), err == nil
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

type canonicalizer struct {
	dec      *json.Decoder
	maxDepth int
}

// value writes the value that starts with tok.
func (c *canonicalizer) value(buf *bytes.Buffer, tok json.Token, depth int) error {
	if depth > c.maxDepth {
		return fmt.Errorf("nested more than %d levels deep", c.maxDepth)
	}
	switch t := tok.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case string:
		writeString(buf, t)
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
func (c *canonicalizer) array(buf *bytes.Buffer, depth int) error {
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
func (c *canonicalizer) object(buf *bytes.Buffer, depth int) error {
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
		writeString(buf, m.key)
		buf.WriteByte(':')
		buf.Write(m.json)
	}
	buf.WriteByte('}')
	return nil
}

// writeString escapes as RFC 8785 says: '"', '\\' and the C0 controls,
// with the short forms where JSON has them; nothing else.
func writeString(buf *bytes.Buffer, s string) {
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
