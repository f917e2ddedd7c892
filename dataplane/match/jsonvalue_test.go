package match

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// FuzzDecodeArguments: the fast reader gives exactly what
// jsonschema.UnmarshalJSON gives, values and errors alike.
func FuzzDecodeArguments(f *testing.F) {
	for _, s := range []string{
		`{"order_id":"A-1042"}`, `{}`, `[]`, `{"a":[1,2.5,-3e10,true,false,null,"x"]}`,
		`{"a":{"b":{"c":"\u00e9"}}}`, `{"a":"é"}`, `{"a":1,"a":2}`, ` {"n": -0.0E+1 } `,
		`{"a":01}`, `{"a":"x}`, `{"a":"\n"}`, "{\"a\":\"\xff\"}", `{"a":1}x`, `{"a":.5}`, `-`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gotErr := decodeArguments(b)
		want, wantErr := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%q: fast error %v, reference error %v", b, gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: fast %#v, reference %#v", b, got, want)
		}
	})
}
