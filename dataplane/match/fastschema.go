package match

import (
	"bytes"
	"encoding/json"
	"regexp"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/portcullis-dev/portcullis/internal/strictjson"
)

// fastSchema accepts, without the schema library, the arguments that a
// simple arguments_schema plainly admits: the common shape of a tool's
// schema, an object of named string or boolean properties
//
//	type: object, properties: {NAME: {type, pattern, minLength,
//	maxLength, enum, const}}, required: [...], additionalProperties: false
//
// and arguments that are one flat JSON object of such values, written
// without escapes. It only ever says "valid": anything else — another
// keyword, a number, an escape, a duplicate key, a value the schema
// refuses — is left to the reference validator (policy.ValidateArguments),
// so every refusal, and its reason, is the library's own. valid must
// never accept what the library refuses (fastschema_test.go checks it
// against the library).
type fastSchema struct {
	props      map[string]*fastString
	required   []string
	additional bool // additionalProperties is absent (anything goes)
}

// fastString is a property's schema.
type fastString struct {
	boolean   bool // type: boolean (else type: string)
	pattern   *regexp.Regexp
	fixed     fixedPattern // pattern, when of that shape (fastpattern.go)
	minLength int
	maxLength int // -1: none
	enum      []string
	hasEnum   bool
}

// compileFastSchema returns the fast path of schema, or nil when schema
// is not of the simple shape. It reads schema as the library does: the
// JSON form of the policy's value (numbers as json.Number).
func compileFastSchema(schema map[string]any) *fastSchema {
	data, err := json.Marshal(schema)
	if err != nil {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil
	}
	root, ok := doc.(map[string]any)
	if !ok || root["type"] != "object" {
		return nil
	}
	f := &fastSchema{props: map[string]*fastString{}, additional: true}
	for k, v := range root {
		switch k {
		case "type":
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			for name, s := range props {
				p := compileFastString(s)
				if p == nil {
					return nil
				}
				f.props[name] = p
			}
		case "required":
			list, ok := v.([]any)
			if !ok {
				return nil
			}
			for _, r := range list {
				name, ok := r.(string)
				if !ok {
					return nil
				}
				f.required = append(f.required, name)
			}
		case "additionalProperties":
			if v != false {
				return nil
			}
			f.additional = false
		default:
			return nil
		}
	}
	return f
}

func compileFastString(s any) *fastString {
	m, ok := s.(map[string]any)
	if !ok {
		return nil
	}
	p := &fastString{maxLength: -1}
	switch m["type"] {
	case "string":
	case "boolean":
		p.boolean = true
	default:
		return nil
	}
	for k, v := range m {
		switch k {
		case "type":
		case "pattern":
			src, ok := v.(string)
			if !ok || p.boolean {
				return nil
			}
			re, err := regexp.Compile(src) // as the library compiles patterns
			if err != nil {
				return nil
			}
			p.pattern, p.fixed = re, compileFixedPattern(src)
		case "minLength", "maxLength":
			n, ok := v.(json.Number)
			if !ok || p.boolean {
				return nil
			}
			i, err := n.Int64()
			if err != nil || i < 0 || i > 1<<30 {
				return nil
			}
			if k == "minLength" {
				p.minLength = int(i)
			} else {
				p.maxLength = int(i)
			}
		case "enum", "const":
			if p.boolean {
				return nil
			}
			list := []any{v}
			if k == "enum" {
				if list, ok = v.([]any); !ok {
					return nil
				}
			}
			var values []string
			for _, e := range list {
				str, ok := e.(string)
				if !ok {
					return nil
				}
				values = append(values, str)
			}
			if p.hasEnum { // enum and const both: keep it simple
				return nil
			}
			p.enum, p.hasEnum = values, true
		default:
			return nil
		}
	}
	return p
}

// maxFastMembers bounds the arguments the fast path reads; more go to the
// library.
const maxFastMembers = 16

// valid reports whether args (JSON) plainly satisfy the schema; false
// means "ask the library", not "invalid".
func (f *fastSchema) valid(args []byte) bool {
	var keys [maxFastMembers][]byte
	n := 0
	i := strictjson.SkipSpace(args, 0)
	if i >= len(args) || args[i] != '{' {
		return false
	}
	i = strictjson.SkipSpace(args, i+1)
	if i < len(args) && args[i] == '}' {
		i++
	} else {
		for {
			if n == maxFastMembers {
				return false
			}
			key, next, ok := plainString(args, i)
			if !ok {
				return false
			}
			for _, k := range keys[:n] {
				if bytes.Equal(k, key) {
					return false
				}
			}
			keys[n] = key
			n++
			i = strictjson.SkipSpace(args, next)
			if i >= len(args) || args[i] != ':' {
				return false
			}
			i = strictjson.SkipSpace(args, i+1)
			p := f.props[string(key)]
			if p == nil && !f.additional {
				return false
			}
			var str []byte
			isBool := false
			switch {
			case i < len(args) && args[i] == '"':
				if str, i, ok = plainString(args, i); !ok {
					return false
				}
			case bytes.HasPrefix(args[i:], []byte("true")):
				i, isBool = i+4, true
			case bytes.HasPrefix(args[i:], []byte("false")):
				i, isBool = i+5, true
			default:
				return false
			}
			if p != nil && !p.admits(str, isBool) {
				return false
			}
			i = strictjson.SkipSpace(args, i)
			if i >= len(args) {
				return false
			}
			if args[i] == '}' {
				i++
				break
			}
			if args[i] != ',' {
				return false
			}
			i = strictjson.SkipSpace(args, i+1)
		}
	}
	if strictjson.SkipSpace(args, i) != len(args) {
		return false
	}
	for _, r := range f.required {
		found := false
		for _, k := range keys[:n] {
			if string(k) == r {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// admits reports whether the value (a string's bytes, or a boolean) is
// plainly valid.
func (p *fastString) admits(str []byte, isBool bool) bool {
	if p.boolean || isBool {
		return p.boolean && isBool
	}
	if p.minLength > 0 || p.maxLength >= 0 {
		n := utf8.RuneCount(str)
		if n < p.minLength || p.maxLength >= 0 && n > p.maxLength {
			return false
		}
	}
	if p.hasEnum {
		found := false
		for _, e := range p.enum {
			if string(str) == e {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	switch {
	case p.fixed != nil:
		return p.fixed.match(str)
	case p.pattern != nil:
		return p.pattern.Match(str)
	}
	return true
}

// plainString reads the JSON string at b[i]: its bytes and the index past
// it; ok is false unless it is a string of valid UTF-8 without escapes or
// control bytes (whose bytes are then its value).
func plainString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	start := i + 1
	for j := start; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s = b[start:j]
			return s, j + 1, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}
