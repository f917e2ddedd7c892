package apiclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// MarshalJSON is m as JSON, compact: protojson with opts, and every 64-bit
// integer a JSON number, as the CLI's contract promises (protojson writes
// them as strings).
func MarshalJSON(opts protojson.MarshalOptions, m proto.Message) ([]byte, error) {
	b, err := opts.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s as JSON: %w", m.ProtoReflect().Descriptor().Name(), err)
	}
	return intsAsNumbers(m.ProtoReflect().Descriptor(), b)
}

// MarshalJSONWith is m as MarshalJSON writes it with the key (a field
// name of the JSON) set to v, written with every field present even when
// zero: "enforcement" added to a committed answer. A field of m under that
// key is left out for v; m itself is not changed. A nil v adds nothing:
// m as MarshalJSON writes it.
func MarshalJSONWith(opts protojson.MarshalOptions, m proto.Message, key string, v proto.Message) ([]byte, error) {
	if v == nil || !v.ProtoReflect().IsValid() {
		return MarshalJSON(opts, m)
	}
	fields := m.ProtoReflect().Descriptor().Fields()
	fd := fields.ByName(protoreflect.Name(key))
	if fd == nil {
		fd = fields.ByJSONName(key)
	}
	if fd != nil && m.ProtoReflect().Has(fd) {
		m = proto.Clone(m)
		m.ProtoReflect().Clear(fd)
	}
	full := opts
	full.EmitUnpopulated = true
	value, err := MarshalJSON(full, v)
	if err != nil {
		return nil, err
	}
	body, err := MarshalJSON(opts, m)
	if err != nil {
		return nil, err
	}
	name, _ := json.Marshal(key)
	// body is a JSON object, "{…}": add the key before its closing brace.
	body = bytes.TrimSpace(body)
	var b bytes.Buffer
	b.WriteByte('{')
	if inner := bytes.TrimSpace(body[1 : len(body)-1]); len(inner) > 0 {
		b.Write(inner)
		b.WriteByte(',')
	}
	b.Write(name)
	b.WriteByte(':')
	b.Write(value)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// intsAsNumbers rewrites data, protojson's encoding of a message of type
// md, so that every 64-bit integer field is a JSON number: protojson
// writes them as strings ("id": "3"), the contract promises numbers. The
// order of the keys and every other value are kept; the result is compact.
//
// It reads the JSON alongside the message's descriptor, so a string field
// that happens to hold digits (a map<string, string> value) stays a string.
func intsAsNumbers(md protoreflect.MessageDescriptor, data []byte) ([]byte, error) {
	r := &numberRewriter{dec: json.NewDecoder(bytes.NewReader(data))}
	r.dec.UseNumber()
	if err := r.message(md); err != nil {
		return nil, fmt.Errorf("rewrite %s JSON: %w", md.Name(), err)
	}
	return r.out.Bytes(), nil
}

type numberRewriter struct {
	dec *json.Decoder
	out bytes.Buffer
}

// message copies one JSON object of message type md.
func (r *numberRewriter) message(md protoreflect.MessageDescriptor) error {
	return r.container('{', '}', true, func(key string) error {
		fd := md.Fields().ByName(protoreflect.Name(key))
		if fd == nil {
			fd = md.Fields().ByJSONName(key)
		}
		if fd == nil {
			return r.copy() // an extension or a key this build does not know
		}
		return r.field(fd)
	})
}

// field copies the value of fd: a list, a map or a single value.
func (r *numberRewriter) field(fd protoreflect.FieldDescriptor) error {
	switch {
	case fd.IsList():
		return r.container('[', ']', false, func(string) error { return r.single(fd) })
	case fd.IsMap():
		return r.container('{', '}', true, func(string) error { return r.single(fd.MapValue()) })
	default:
		return r.single(fd)
	}
}

// container copies null, an array, or an object whose keys are copied as
// they are (keyed), with each element copied by elem (given its key).
func (r *numberRewriter) container(open, close json.Delim, keyed bool, elem func(key string) error) error {
	tok, err := r.dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		r.out.WriteString("null")
		return nil
	}
	if tok != open {
		return fmt.Errorf("want %v, got %v", open, tok)
	}
	r.out.WriteString(open.String())
	for first := true; r.dec.More(); first = false {
		if !first {
			r.out.WriteByte(',')
		}
		var key string
		if keyed {
			tok, err := r.dec.Token()
			if err != nil {
				return err
			}
			key, _ = tok.(string)
			r.str(key)
			r.out.WriteByte(':')
		}
		if err := elem(key); err != nil {
			return err
		}
	}
	if _, err := r.dec.Token(); err != nil {
		return err
	}
	r.out.WriteString(close.String())
	return nil
}

// single copies one value of fd's type.
func (r *numberRewriter) single(fd protoreflect.FieldDescriptor) error {
	switch fd.Kind() {
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return r.integer()
	case protoreflect.MessageKind, protoreflect.GroupKind:
		md := fd.Message()
		switch md.FullName() {
		case "google.protobuf.Int64Value", "google.protobuf.UInt64Value":
			return r.integer()
		}
		if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
			// The other well-known types have JSON forms of their own
			// (a timestamp is a string, a Struct any JSON).
			return r.copy()
		}
		return r.message(md)
	default:
		return r.copy()
	}
}

// integer copies a 64-bit integer, written as a number.
func (r *numberRewriter) integer() error {
	tok, err := r.dec.Token()
	if err != nil {
		return err
	}
	if s, ok := tok.(string); ok && isInteger(s) {
		r.out.WriteString(s)
		return nil
	}
	return r.token(tok)
}

// isInteger reports whether s is a JSON integer: an optional minus and
// digits without a leading zero.
func isInteger(s string) bool {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// copy copies one value of any shape as it is.
func (r *numberRewriter) copy() error {
	var raw json.RawMessage
	if err := r.dec.Decode(&raw); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return err
	}
	r.out.Write(buf.Bytes())
	return nil
}

// token writes one scalar token.
func (r *numberRewriter) token(tok json.Token) error {
	switch v := tok.(type) {
	case nil:
		r.out.WriteString("null")
	case bool:
		fmt.Fprint(&r.out, v)
	case json.Number:
		r.out.WriteString(v.String())
	case string:
		r.str(v)
	default:
		return fmt.Errorf("unexpected %v", tok)
	}
	return nil
}

// str writes s as a JSON string, without escaping HTML characters (as
// protojson writes them).
func (r *numberRewriter) str(s string) {
	enc := json.NewEncoder(&r.out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	r.out.Truncate(r.out.Len() - 1) // Encode's newline
}
