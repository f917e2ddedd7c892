package strictjson

import (
	"encoding/json"
	"sync"
)

// Decode reads b, one JSON value, into what encoding/json's Decoder with
// UseNumber gives (jsonschema.UnmarshalJSON too): map[string]any, []any,
// string, json.Number, bool and nil. Where encoding/json would read a
// value, Decode reads the same one or refuses it under its stricter
// rules (a duplicate key, a lone surrogate, ...); its error is an *Error.
func Decode(b []byte, lim Limits) (any, error) {
	r := decoders.Get().(*Reader)
	r.Reset(b, lim)
	v := r.decode()
	err := r.End()
	r.Reset(nil, Limits{})
	decoders.Put(r)
	if err != nil {
		return nil, err
	}
	return v, nil
}

var decoders = sync.Pool{New: func() any { return new(Reader) }}

func (r *Reader) decode() any {
	switch r.Kind() {
	case Object:
		m := map[string]any{}
		if r.Open() {
			for k, ok := r.Member(); ok; k, ok = r.Member() {
				m[string(k)] = r.decode()
			}
		}
		return m
	case Array:
		a := []any{}
		if r.Open() {
			for r.Element() {
				a = append(a, r.decode())
			}
		}
		return a
	case String:
		return string(r.ReadString())
	case Number:
		return json.Number(r.Skip())
	case Bool:
		t := r.b[r.i] == 't'
		r.Skip()
		return t
	case Null:
		r.Skip()
	}
	return nil
}
