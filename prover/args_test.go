package prover

import (
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// The argument gate asserts formats: schemaInstance gives, for every
// format a schema may name, a string of that format.
func TestSchemaInstanceFormats(t *testing.T) {
	for _, f := range policy.KnownFormats() {
		schema := map[string]any{"type": "object", "required": []any{"x"},
			"properties": map[string]any{"x": map[string]any{"type": "string", "format": f}}}
		compiled, err := policy.CompileArgumentsSchema(schema)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := formatInstances[f]; !ok {
			t.Errorf("format %q has no instance", f)
		}
		args := schemaInstance(schema, 0)
		if err := compiled.Validate(args); err != nil {
			t.Errorf("format %q: instance %v refused: %v", f, args, err)
		}
	}
}
