package policylocal

import (
	"bytes"
	"encoding/json"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// numbers rewrites protojson output b of a message of descriptor md so
// that its 64-bit integer fields are JSON numbers: protojson writes them
// as strings ("id": "12"), and policy.local promises numbers. Values
// beyond 2^53 lose nothing: ids and versions stay far below. On any
// surprise it returns b unchanged.
func numbers(b []byte, md protoreflect.MessageDescriptor) []byte {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return b
	}
	v = numbersIn(v, md, 0)
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return b
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}

// maxNumbersDepth bounds the walk (messages nest only a few levels).
const maxNumbersDepth = 32

func numbersIn(v any, md protoreflect.MessageDescriptor, depth int) any {
	obj, ok := v.(map[string]any)
	if !ok || depth > maxNumbersDepth || strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		// Well-known types (Struct, Timestamp, …) have JSON forms of
		// their own.
		return v
	}
	for k, x := range obj {
		fd := md.Fields().ByName(protoreflect.Name(k))
		if fd == nil {
			fd = md.Fields().ByJSONName(k)
		}
		if fd == nil {
			continue
		}
		value := func(x any, fd protoreflect.FieldDescriptor) any {
			if fd.Kind() == protoreflect.MessageKind {
				return numbersIn(x, fd.Message(), depth+1)
			}
			return number(x, fd.Kind())
		}
		switch {
		case fd.IsMap():
			if m, ok := x.(map[string]any); ok {
				for mk, mv := range m {
					m[mk] = value(mv, fd.MapValue())
				}
			}
		case fd.IsList():
			if l, ok := x.([]any); ok {
				for i := range l {
					l[i] = value(l[i], fd)
				}
			}
		default:
			obj[k] = value(x, fd)
		}
	}
	return obj
}

// number turns a 64-bit integer field's string into a JSON number.
func number(x any, kind protoreflect.Kind) any {
	s, ok := x.(string)
	if !ok {
		return x
	}
	switch kind {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if json.Valid([]byte(s)) && strings.Trim(s, "-0123456789") == "" && s != "" {
			return json.Number(s)
		}
	}
	return x
}
