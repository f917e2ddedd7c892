package match

import (
	"bytes"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/portcullis-dev/portcullis/internal/strictjson"
)

// decodeArguments turns tools/call arguments into the value a JSON Schema
// validates: what jsonschema.UnmarshalJSON gives (maps, slices, strings,
// json.Number, bool, nil), read by the strict reader rather than
// encoding/json's decoder. What the strict reader refuses — a syntax
// error, and also what encoding/json reads its own way (a duplicate key,
// whose last value it keeps; invalid UTF-8 or a lone surrogate, which it
// reads as U+FFFD; nesting past decodeDepth) — goes to
// jsonschema.UnmarshalJSON, so results and errors are exactly its own.
func decodeArguments(b []byte) (any, error) {
	if v, err := strictjson.Decode(b, decodeLimits); err == nil {
		return v, nil
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

// decodeLimits keeps the strict reader within what encoding/json reads
// (it refuses nesting past 10,000): deeper arguments take the library's
// path.
var decodeLimits = strictjson.Limits{MaxDepth: 64}
