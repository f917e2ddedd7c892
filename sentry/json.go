package sentry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
)

// maxDepth bounds the nesting of an event's JSON, so that a hostile event
// cannot make a reader recurse without end.
const maxDepth = 32

// join appends key to a dotted path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
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
