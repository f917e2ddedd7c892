package policy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// Spellings of the same arguments share a digest; other arguments do not;
// what is not one strict JSON object has none.
func TestArgumentsDigest(t *testing.T) {
	want, err := ArgumentsDigest([]byte(`{"order_id":"x","n":1,"l":[true,null]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(want, "sha256:") || len(want) != len("sha256:")+64 {
		t.Fatalf("digest %q is not sha256:<64 hex>", want)
	}
	for _, same := range []string{
		` { "n" : 1.0, "l" : [ true , null ], "order_id" : "x" } `,
		`{"order_\u0069d":"\u0078","n":1e0,"l":[true,null]}`,
		"{\"l\":[true,null],\n\t\"n\":10E-1,\"order_id\":\"x\"}",
	} {
		if got, err := ArgumentsDigest([]byte(same)); err != nil || got != want {
			t.Errorf("ArgumentsDigest(%s) = %q, %v; want %q", same, got, err, want)
		}
	}
	for _, other := range []string{`{"order_id":"y","n":1,"l":[true,null]}`, `{"order_id":"x","n":2,"l":[true,null]}`, `{"order_id":"x","n":1,"l":[null,true]}`} {
		if got, _ := ArgumentsDigest([]byte(other)); got == want {
			t.Errorf("ArgumentsDigest(%s) equals the digest of other arguments", other)
		}
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{"a":1,"a":1}`, `{"a":{"b":1,"b":2}}`, `{} {}`, `{"a":1e999}`, "{\"a\":\"\xff\"}", `{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, `{"a"}`} {
		if got, err := ArgumentsDigest([]byte(bad)); err == nil {
			t.Errorf("ArgumentsDigest(%.40s) = %q, want an error", bad, got)
		}
	}
}

// The canonical form is RFC 8785's: sorted keys, minimal escapes,
// ECMAScript numbers.
func TestCanonicalArguments(t *testing.T) {
	got, err := CanonicalArguments([]byte(`{"b":[1.50,-0,1e21,0.000001],"a":"\u00e9\n\u001f<>","é":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"a":"é\n\u001f<>","b":[1.5,0,1e+21,0.000001],"é":{}}`
	if string(got) != want {
		t.Errorf("CanonicalArguments = %s, want %s", got, want)
	}
}

// FuzzCanonicalArguments: what is accepted has a canonical form that is
// valid JSON, its own canonical form, and has the input's digest.
func FuzzCanonicalArguments(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,2.5e3,"\u00e9"],"b":{"c":null}}`, `{"a":1,"a":2}`, `{"x":-0.0}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := CanonicalArguments(raw)
		if err != nil {
			return
		}
		if !json.Valid(c) {
			t.Fatalf("canonical form %q is not JSON", c)
		}
		again, err := CanonicalArguments(c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("canonical form %q is not its own canonical form: %q, %v", c, again, err)
		}
		d1, _ := ArgumentsDigest(raw)
		d2, _ := ArgumentsDigest(c)
		if d1 != d2 {
			t.Fatalf("digest of %q differs from its canonical form's", raw)
		}
	})
}
