package policy

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

// Denied tool arguments never leave the sandbox in a decision record: a
// record of a denied tools/call carries only ArgumentsDigest of them, so
// that arguments given later for that denial (to build a proposal that
// admits exactly them) can be checked against what was denied.

// ArgumentsDigest returns "sha256:" and the 64 lower-case hex digits of
// the SHA-256 of CanonicalArguments(raw).
func ArgumentsDigest(raw []byte) (string, error) {
	c, err := CanonicalArguments(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// CanonicalArguments reads tools/call arguments strictly — one JSON
// object, valid UTF-8, no duplicate keys, nested at most 64 levels, finite
// numbers, nothing after it — and writes them in the RFC 8785 (JSON
// Canonicalization Scheme) form: no whitespace, keys sorted by UTF-16 code
// units, only the string escapes JSON requires, numbers as ECMAScript
// writes a double. Two spellings of the same arguments (spacing, key
// order, escapes) have the same canonical form.
func CanonicalArguments(raw []byte) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, errors.New("arguments are not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var buf bytes.Buffer
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("arguments are not JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("arguments must be a JSON object")
	}
	if err := canonicalValue(dec, &buf, tok, 1); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("arguments are followed by more data")
	}
	return buf.Bytes(), nil
}

// canonicalValue writes the value that starts with tok.
func canonicalValue(dec *json.Decoder, buf *bytes.Buffer, tok json.Token, depth int) error {
	if depth > maxNesting {
		return fmt.Errorf("arguments are nested more than %d levels deep", maxNesting)
	}
	switch t := tok.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case string:
		jcsString(buf, t)
	case json.Number:
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("number %.40s is not a finite double", t)
		}
		if f == 0 {
			buf.WriteString("0") // ECMAScript writes -0 as 0
			return nil
		}
		b, _ := json.Marshal(f) // encoding/json writes a float64 as ECMAScript does
		buf.Write(b)
	case json.Delim:
		if t == '[' {
			buf.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				next, err := dec.Token()
				if err != nil {
					return fmt.Errorf("arguments are not JSON: %w", err)
				}
				if err := canonicalValue(dec, buf, next, depth+1); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil { // ']'
				return fmt.Errorf("arguments are not JSON: %w", err)
			}
			buf.WriteByte(']')
			return nil
		}
		return canonicalObjectTokens(dec, buf, depth)
	}
	return nil
}

// canonicalObjectTokens writes an object whose '{' was read: its members
// are written separately, then in key order.
func canonicalObjectTokens(dec *json.Decoder, buf *bytes.Buffer, depth int) error {
	type member struct {
		key  string
		json []byte
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return fmt.Errorf("arguments are not JSON: %w", err)
		}
		key := k.(string) // the decoder reads only strings as keys
		if seen[key] {
			return fmt.Errorf("arguments repeat the key %.60q", key)
		}
		seen[key] = true
		v, err := dec.Token()
		if err != nil {
			return fmt.Errorf("arguments are not JSON: %w", err)
		}
		var b bytes.Buffer
		if err := canonicalValue(dec, &b, v, depth+1); err != nil {
			return err
		}
		members = append(members, member{key, b.Bytes()})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return fmt.Errorf("arguments are not JSON: %w", err)
	}
	slices.SortFunc(members, func(a, b member) int {
		return slices.Compare(utf16.Encode([]rune(a.key)), utf16.Encode([]rune(b.key)))
	})
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		jcsString(buf, m.key)
		buf.WriteByte(':')
		buf.Write(m.json)
	}
	buf.WriteByte('}')
	return nil
}

// jcsString escapes as RFC 8785 says: '"', '\\' and the C0 controls, with
// the short forms where JSON has them; nothing else.
func jcsString(buf *bytes.Buffer, s string) {
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
