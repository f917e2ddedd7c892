package match

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"pgregory.net/rapid"

	"github.com/portcullis-dev/portcullis/policy"
)

// TestFastSchemaNeverAdmitsWhatTheLibraryRefuses compares the fast path
// with the reference validator on generated simple schemas and arguments
// (plain and not): whatever the fast path accepts, the library accepts.
func TestFastSchemaNeverAdmitsWhatTheLibraryRefuses(t *testing.T) {
	names := []string{"order_id", "a", "A", "é", "b c"}
	strs := []string{"", "A-1042", "Z-0000", "aa", "X", "A-10421", "a", "ab", "abc", "é", "éé", "x", `\n`, `\u0041`, "\xff", "\t", "A-1042\n", "ß"}
	var compiled, accepted, rejected int
	// More cases than rapid's default 100: few of them are accepted.
	prop := func(t *rapid.T) {
		schema := map[string]any{"type": "object"}
		props := map[string]any{}
		for _, name := range rapid.SliceOfNDistinct(rapid.SampledFrom(names), 0, 4, rapid.ID).Draw(t, "props") {
			p := map[string]any{"type": rapid.SampledFrom([]string{"string", "string", "boolean", "number"}).Draw(t, "type")}
			if rapid.Bool().Draw(t, "hasPattern") {
				p["pattern"] = rapid.SampledFrom([]string{`^[A-Z]-\d{4}$`, "a", "^$", "^.{2}$", "é", "(?i)X", "^[^\n]*$"}).Draw(t, "pattern")
			}
			if rapid.Bool().Draw(t, "hasMin") {
				p["minLength"] = rapid.IntRange(0, 3).Draw(t, "min")
			}
			if rapid.Bool().Draw(t, "hasMax") {
				p["maxLength"] = rapid.IntRange(0, 6).Draw(t, "max")
			}
			switch rapid.IntRange(0, 3).Draw(t, "enum") {
			case 1:
				var enum []any
				for _, s := range rapid.SliceOfN(rapid.SampledFrom(strs), 1, 3).Draw(t, "values") {
					enum = append(enum, s)
				}
				p["enum"] = enum
			case 2:
				p["const"] = rapid.SampledFrom(strs).Draw(t, "const")
			}
			props[name] = p
		}
		if len(props) > 0 || rapid.Bool().Draw(t, "emptyProps") {
			schema["properties"] = props
		}
		if req := rapid.SliceOfNDistinct(rapid.SampledFrom(append(names, "z")), 0, 3, rapid.ID).Draw(t, "required"); len(req) > 0 {
			var list []any
			for _, r := range req {
				list = append(list, r)
			}
			schema["required"] = list
		}
		if rapid.Bool().Draw(t, "closed") {
			schema["additionalProperties"] = false
		}

		var args []byte
		if rapid.Bool().Draw(t, "guided") {
			args = drawFitting(t, props, strs)
		} else {
			args = drawArguments(t, append(names, "z", "order_ID"), strs)
		}
		fast := compileFastSchema(schema)
		if fast == nil {
			return
		}
		compiled++
		ref, err := policy.CompileArgumentsSchema(schema)
		if err != nil {
			t.Fatalf("schema %v does not compile: %v", schema, err)
		}
		refValid := false
		if inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args)); err == nil {
			refValid = policy.ValidateArguments(ref, inst) == nil
		}
		if fast.valid(args) {
			accepted++
			if !refValid {
				t.Fatalf("fast path admits %s under %v; the library refuses it", args, schema)
			}
		} else if !refValid {
			rejected++
		}
	}
	for range 8 {
		rapid.Check(t, prop)
	}
	t.Logf("%d schemas took the fast path; it accepted %d arguments; the library refused %d of the others", compiled, accepted, rejected)
	if compiled == 0 || accepted == 0 || rejected == 0 {
		t.Fatalf("the generators miss a case: %d schemas compiled, %d arguments accepted, %d refused", compiled, accepted, rejected)
	}
}

// drawArguments draws tools/call arguments: mostly a JSON object of
// string and boolean values (with odd spacing, duplicate keys, escapes,
// numbers, nulls and nesting now and then), sometimes any bytes.
func drawArguments(t *rapid.T, keys, strs []string) []byte {
	if rapid.IntRange(0, 9).Draw(t, "garbage") == 0 {
		return []byte(rapid.StringOfN(rapid.SampledFrom([]rune(`{}[]":, tfnrue0123-"aé\`)), 0, 30, -1).Draw(t, "bytes"))
	}
	space := func() string { return rapid.SampledFrom([]string{"", "", " ", "\n\t "}).Draw(t, "space") }
	var sb strings.Builder
	sb.WriteString(space() + "{")
	n := rapid.IntRange(0, 5).Draw(t, "members")
	for i := range n {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(space() + `"` + rapid.SampledFrom(keys).Draw(t, "key") + `"` + space() + ":" + space())
		switch rapid.IntRange(0, 6).Draw(t, "value") {
		case 0:
			sb.WriteString(rapid.SampledFrom([]string{"true", "false"}).Draw(t, "bool"))
		case 1:
			sb.WriteString(rapid.SampledFrom([]string{"null", "1", "-0.5", "{}", `["a"]`, `{"a":"b"}`}).Draw(t, "other"))
		default:
			sb.WriteString(`"` + rapid.SampledFrom(strs).Draw(t, "str") + `"`)
		}
		sb.WriteString(space())
	}
	sb.WriteString("}" + space())
	return []byte(sb.String())
}

// drawFitting draws arguments that mostly fit props: each property is
// given, mostly, a value of its type, often one its enum or const names.
func drawFitting(t *rapid.T, props map[string]any, strs []string) []byte {
	var sb strings.Builder
	sb.WriteString("{")
	first := true
	for _, name := range slices.Sorted(maps.Keys(props)) {
		if rapid.IntRange(0, 4).Draw(t, "omit") == 0 {
			continue
		}
		if !first {
			sb.WriteString(",")
		}
		first = false
		p := props[name].(map[string]any)
		sb.WriteString(`"` + name + `":`)
		var choices []string
		switch {
		case p["type"] == "boolean":
			choices = []string{"true", "false", `"true"`}
		case p["const"] != nil:
			choices = []string{`"` + p["const"].(string) + `"`}
		case p["enum"] != nil:
			for _, e := range p["enum"].([]any) {
				choices = append(choices, `"`+e.(string)+`"`)
			}
		}
		for _, s := range strs {
			if len(choices) == 0 || rapid.IntRange(0, 5).Draw(t, "any") == 0 {
				choices = append(choices, `"`+s+`"`)
			}
		}
		sb.WriteString(rapid.SampledFrom(choices).Draw(t, "value"))
	}
	if rapid.IntRange(0, 5).Draw(t, "extra") == 0 {
		if !first {
			sb.WriteString(",")
		}
		sb.WriteString(`"z":"a"`)
	}
	sb.WriteString("}")
	return []byte(sb.String())
}

// TestFastSchemaShapes pins which schemas take the fast path and what it
// accepts on the bench policy's lookup_order schema.
func TestFastSchemaShapes(t *testing.T) {
	lookup := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"order_id": map[string]any{"type": "string", "pattern": `^[A-Z]-\d{4}$`}},
		"required":             []any{"order_id"},
		"additionalProperties": false,
	}
	f := compileFastSchema(lookup)
	if f == nil {
		t.Fatal("lookup_order's schema takes no fast path")
	}
	for args, want := range map[string]bool{
		`{"order_id":"A-1042"}`:                     true,
		` { "order_id" : "B-0000" } `:               true,
		`{"order_id":"x"}`:                          false,
		`{}`:                                        false,
		`{"order_id":"A-1042","extra":""}`:          false,
		`{"order_id":"A-1042","order_id":"A-1042"}`: false,
		`{"order_id":"A-\u0031042"}`:                false, // an escape: the library decides
		`{"order_id":"A-1042"} x`:                   false,
		`{"order_id":"A-1042"`:                      false,
		`["A-1042"]`:                                false,
	} {
		if got := f.valid([]byte(args)); got != want {
			t.Errorf("valid(%s) = %v, want %v", args, got, want)
		}
	}
	for _, s := range []map[string]any{
		{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}},
		{"type": "object", "properties": map[string]any{"s": map[string]any{"type": "string", "format": "email"}}},
		{"type": "object", "additionalProperties": true},
		{"type": "object", "$defs": map[string]any{}},
		{"properties": map[string]any{}},
	} {
		if compileFastSchema(s) != nil {
			t.Errorf("schema %v takes the fast path", s)
		}
	}
}

// FuzzFastSchema checks the fast path against the library on any bytes,
// under schemas of each shape it takes.
func FuzzFastSchema(f *testing.F) {
	schemas := []map[string]any{
		{
			"type":                 "object",
			"properties":           map[string]any{"order_id": map[string]any{"type": "string", "pattern": `^[A-Z]-\d{4}$`}},
			"required":             []any{"order_id"},
			"additionalProperties": false,
		},
		{
			"type": "object",
			"properties": map[string]any{
				"mode":  map[string]any{"type": "string", "enum": []any{"fast", "slow", "é"}},
				"note":  map[string]any{"type": "string", "minLength": 1, "maxLength": 3},
				"force": map[string]any{"type": "boolean"},
				"k":     map[string]any{"type": "string", "const": "v"},
			},
			"required": []any{"mode"},
		},
	}
	type pair struct {
		fast *fastSchema
		ref  *jsonschema.Schema
	}
	var pairs []pair
	for _, s := range schemas {
		fast := compileFastSchema(s)
		ref, err := policy.CompileArgumentsSchema(s)
		if fast == nil || err != nil {
			f.Fatalf("schema %v: fast %v, %v", s, fast != nil, err)
		}
		pairs = append(pairs, pair{fast, ref})
	}
	for _, s := range []string{
		`{"order_id":"A-1042"}`, `{"order_id":"A-1042","x":1}`, `{"mode":"fast","note":"éé","force":true}`,
		`{"mode":"é","k":"v"}`, `{"mode":"fast","mode":"slow"}`, ` {"mode" : "slow"} `, `{"mode":"sl\u006fw"}`, `{}`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		for i, p := range pairs {
			if !p.fast.valid(args) {
				continue
			}
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
			if err != nil {
				t.Fatalf("schema %d: fast path admits %q, which is not JSON: %v", i, args, err)
			}
			if err := policy.ValidateArguments(p.ref, inst); err != nil {
				t.Fatalf("schema %d: fast path admits %q; the library refuses it: %v", i, args, err)
			}
		}
	})
}
