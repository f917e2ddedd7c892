package sentry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of an event's JSON, so that a hostile event
// cannot make a reader recurse without end.
const maxDepth = 32

// checkSyntax refuses what encoding/json would accept silently: duplicate
// object keys (which the last one wins, hiding the first from a reader of
// the raw bytes), invalid UTF-8 and lone UTF-16 surrogates (both replaced
// by U+FFFD), numbers beyond a double, nesting deeper than maxDepth and
// trailing data. The error
// names the path of the offending value.
func checkSyntax(b []byte) *FieldError {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	w := walker{dec: dec, b: b}
	if err := w.value("", 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return &FieldError{Reason: "trailing data after the JSON value"}
	}
	return nil
}

type walker struct {
	dec *json.Decoder
	b   []byte
}

// token reads one token and checks the bytes it came from.
func (w walker) token(path string) (json.Token, *FieldError) {
	start := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, &FieldError{Field: path, Reason: "invalid JSON: " + err.Error()}
	}
	span := w.b[start:w.dec.InputOffset()]
	if !utf8.Valid(span) {
		return nil, &FieldError{Field: path, Reason: "invalid UTF-8"}
	}
	if loneSurrogate(span) {
		return nil, &FieldError{Field: path, Reason: "invalid \\u escape: lone UTF-16 surrogate"}
	}
	return tok, nil
}

func (w walker) value(path string, depth int) *FieldError {
	if depth > maxDepth {
		return &FieldError{Field: path, Reason: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	tok, err := w.token(path)
	if err != nil {
		return err
	}
	switch tok := tok.(type) {
	case json.Number:
		// A number a double cannot hold has no canonical form to sign.
		if f, err := tok.Float64(); err != nil || math.IsInf(f, 0) {
			return &FieldError{Field: path, Reason: "number out of the range of a double"}
		}
	case json.Delim:
		return w.container(tok, path, depth)
	}
	return nil
}

// container reads the members of an object or array whose opening
// delimiter has been read.
func (w walker) container(open json.Delim, path string, depth int) *FieldError {
	switch open {
	case json.Delim('{'):
		seen := map[string]bool{}
		for w.dec.More() {
			k, err := w.token(path)
			if err != nil {
				return err
			}
			key := k.(string)
			sub := join(path, key)
			if seen[key] {
				return &FieldError{Field: sub, Reason: "duplicate key"}
			}
			seen[key] = true
			if err := w.value(sub, depth+1); err != nil {
				return err
			}
		}
		_, err := w.token(path)
		return err
	default:
		for i := 0; w.dec.More(); i++ {
			if err := w.value(fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
		_, err := w.token(path)
		return err
	}
}

// join appends key to a dotted path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// loneSurrogate reports whether span holds a \u escape of a UTF-16
// surrogate that is not part of a high-low pair. Outside strings, valid
// JSON has no backslash, so span need not be a whole string.
func loneSurrogate(span []byte) bool {
	for i := 0; i < len(span); i++ {
		if span[i] != '\\' || i+1 >= len(span) {
			continue
		}
		if span[i+1] != 'u' {
			i++ // \" \\ \n …: skip the escaped byte
			continue
		}
		r, ok := hex4(span, i+2)
		if !ok {
			return false // the decoder has already refused it
		}
		i += 5
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00: // high: a low must follow
			if i+2 >= len(span) || span[i+1] != '\\' || span[i+2] != 'u' {
				return true
			}
			lo, ok := hex4(span, i+3)
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i += 6
		case utf16.IsSurrogate(r):
			return true
		}
	}
	return false
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[at:at+4]), 16, 16)
	return rune(v), err == nil
}

// canonicalJSON returns the RFC 8785 (JSON Canonicalization Scheme) form
// of raw: no whitespace, object keys sorted by their UTF-16 code units,
// strings with only the escapes RFC 8785 requires, numbers as ECMAScript
// writes a double. A signer in any language with a JCS library produces
// the same bytes. raw must already have passed checkSyntax.
func canonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(v))
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) {
			return fmt.Errorf("number %s is not a finite double", v)
		}
		if f == 0 {
			buf.WriteString("0") // ECMAScript writes -0 as 0
			return nil
		}
		// encoding/json writes a float64 as ECMAScript does (shortest
		// round trip; exponent form below 1e-6 and from 1e21).
		b, _ := json.Marshal(f)
		buf.Write(b)
	case string:
		writeCanonicalString(buf, v)
	case []any:
		buf.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := slices.SortedFunc(maps.Keys(v), func(a, b string) int {
			return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
		})
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeCanonicalString(buf, k)
			buf.WriteByte(':')
			if err := writeCanonical(buf, v[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	}
	return nil
}

// writeCanonicalString escapes as RFC 8785 says: '"', '\\' and the C0
// controls, with the short forms where JSON has them; nothing else.
func writeCanonicalString(buf *bytes.Buffer, s string) {
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
