package sentry

import (
	"bytes"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(SchemaJSON()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, body []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate(inst)
}

// TestSchemaAgreesWithReader: every sample the reader takes, the schema
// takes; every refusal of the table that JSON Schema can state, the
// schema refuses too.
func TestSchemaAgreesWithReader(t *testing.T) {
	s := compileSchema(t)
	valid := map[string][]byte{}
	for _, c := range Classes() {
		valid[string(c)] = mustJSON(t, sample(c))
	}
	unknown := sample(ClassToolAccess)
	unknown["type"] = "com.example.gpu_fault"
	unknown["data"] = map[string]any{"severity": 99, "tool_call": map[string]any{"arguments": "kept: not ours to read"}}
	unknown["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	unknown["sequence"] = 12
	valid["unknown type and extension"] = mustJSON(t, unknown)
	signed := sample(ClassQuarantine)
	signed["signature"] = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="
	valid["signed"] = mustJSON(t, signed)
	for name, body := range valid {
		if _, err := ParseCloudEvent(body); err != nil {
			t.Errorf("%s: reader refused: %v", name, err)
		}
		if err := validate(t, s, body); err != nil {
			t.Errorf("%s: schema refused: %v", name, err)
		}
	}
	for _, tc := range refusals() {
		if err := validate(t, s, tc.body(t)); err == nil {
			t.Errorf("%s: the schema accepts what the reader refuses (%s)", tc.name, tc.field)
		}
	}
}
