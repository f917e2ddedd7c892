package match

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/portcullis-dev/portcullis/dataplane/jsonlex"
)

// decodeArguments turns tools/call arguments into the value a JSON Schema
// validates: what jsonschema.UnmarshalJSON gives (maps, slices, strings,
// json.Number, bool, nil), without encoding/json's decoder for the common
// case. Anything the fast reader does not handle plainly — escapes,
// control bytes, invalid UTF-8, a syntax error — goes to
// jsonschema.UnmarshalJSON, so results and errors are exactly its own.
func decodeArguments(b []byte) (any, error) {
	r := fastJSON{b: b}
	r.space()
	if v, ok := r.value(0); ok {
		r.space()
		if r.i == len(r.b) {
			return v, nil
		}
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

// fastJSON reads the plain subset of JSON; ok=false means "not plain".
type fastJSON struct {
	b []byte
	i int
}

// maxFastDepth bounds recursion; deeper documents take the slow path.
const maxFastDepth = 64

func (r *fastJSON) space() { r.i = jsonlex.SkipSpace(r.b, r.i) }

func (r *fastJSON) value(depth int) (any, bool) {
	if r.i >= len(r.b) || depth > maxFastDepth {
		return nil, false
	}
	switch c := r.b[r.i]; {
	case c == '{':
		return r.object(depth)
	case c == '[':
		return r.array(depth)
	case c == '"':
		s, ok := r.str()
		return s, ok
	case c == '-' || c >= '0' && c <= '9':
		return r.number()
	case bytes.HasPrefix(r.b[r.i:], []byte("true")):
		r.i += 4
		return true, true
	case bytes.HasPrefix(r.b[r.i:], []byte("false")):
		r.i += 5
		return false, true
	case bytes.HasPrefix(r.b[r.i:], []byte("null")):
		r.i += 4
		return nil, true
	}
	return nil, false
}

func (r *fastJSON) object(depth int) (any, bool) {
	r.i++ // {
	m := map[string]any{}
	if r.closesAt('}') {
		return m, true
	}
	for {
		r.space()
		if r.i >= len(r.b) || r.b[r.i] != '"' {
			return nil, false
		}
		k, ok := r.str()
		if !ok {
			return nil, false
		}
		r.space()
		if r.i >= len(r.b) || r.b[r.i] != ':' {
			return nil, false
		}
		r.i++
		r.space()
		v, ok := r.value(depth + 1)
		if !ok {
			return nil, false
		}
		m[k] = v // a repeated key: the last wins, as in encoding/json
		switch done, ok := r.next('}'); {
		case !ok:
			return nil, false
		case done:
			return m, true
		}
	}
}

func (r *fastJSON) array(depth int) (any, bool) {
	r.i++ // [
	a := []any{}
	if r.closesAt(']') {
		return a, true
	}
	for {
		r.space()
		v, ok := r.value(depth + 1)
		if !ok {
			return nil, false
		}
		a = append(a, v)
		switch done, ok := r.next(']'); {
		case !ok:
			return nil, false
		case done:
			return a, true
		}
	}
}

// closesAt reports whether the object or array just opened is empty
// (jsonlex.Empty).
func (r *fastJSON) closesAt(closing byte) bool {
	var empty bool
	r.i, empty = jsonlex.Empty(r.b, r.i, closing)
	return empty
}

// next reads the ',' or closing byte after a member or element
// (jsonlex.Next).
func (r *fastJSON) next(closing byte) (done, ok bool) {
	r.i, done, ok = jsonlex.Next(r.b, r.i, closing)
	return done, ok
}

// str reads a string with no escapes, no control bytes and valid UTF-8.
func (r *fastJSON) str() (string, bool) {
	start := r.i + 1
	end := bytes.IndexByte(r.b[start:], '"')
	if end < 0 {
		return "", false
	}
	s := r.b[start : start+end]
	for _, c := range s {
		if c == '\\' || c < 0x20 {
			return "", false
		}
	}
	if !utf8.Valid(s) {
		return "", false
	}
	r.i = start + end + 1
	return string(s), true
}

// number reads a JSON number (RFC 8259 grammar) as a json.Number.
func (r *fastJSON) number() (any, bool) {
	start := r.i
	if r.b[r.i] == '-' {
		r.i++
	}
	switch {
	case r.i < len(r.b) && r.b[r.i] == '0':
		r.i++
	case r.i < len(r.b) && r.b[r.i] >= '1' && r.b[r.i] <= '9':
		r.digits()
	default:
		return nil, false
	}
	if r.i < len(r.b) && r.b[r.i] == '.' {
		r.i++
		if !r.digits() {
			return nil, false
		}
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.i++
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		if !r.digits() {
			return nil, false
		}
	}
	return json.Number(r.b[start:r.i]), true
}

func (r *fastJSON) digits() bool {
	start := r.i
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		r.i++
	}
	return r.i > start
}
