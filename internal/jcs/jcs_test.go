package jcs

import (
	"strings"
	"testing"
)

// The example of RFC 8785 §3.2.3, and what Transform refuses.
func TestTransform(t *testing.T) {
	in := `{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`
	want := `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`
	got, err := Transform([]byte(in), 10)
	if err != nil || string(got) != want {
		t.Fatalf("Transform = %s, %v\nwant        %s", got, err, want)
	}
	for _, tc := range []struct{ in, err string }{
		{`{"a":1,"a":2}`, "appears twice"},
		{`[[[1]]]`, "nested more than 2"},
		{`1e999`, "not a finite double"},
		{`{} {}`, "more data"},
		{"\"\xff\"", "UTF-8"},
		{`{"a":`, "not JSON"},
		// Lone surrogates (RFC 8785 §3.2.2.2), which encoding/json reads
		// as U+FFFD.
		{`"\ud800"`, "surrogate"},
		{`"\udc00"`, "surrogate"},
		{`"\ud800x"`, "surrogate"},
		{`"\ud800\ud800"`, "surrogate"},
		{`"\udc00\ud800"`, "surrogate"},
		{`["\\ud800", "\uD800"]`, "surrogate"},
		{`{"a\udbff": 1}`, "surrogate"},
	} {
		if _, err := Transform([]byte(tc.in), 2); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Transform(%q): %v, want an error with %q", tc.in, err, tc.err)
		}
	}
	// A surrogate pair is one character, written as UTF-8; an escaped
	// backslash before "ud800" is no escape.
	if got, err := Transform([]byte(`{"\ud83d\ude00":"\uD83D\uDE00 \\ud800"}`), 2); err != nil || string(got) != `{"😀":"😀 \\ud800"}` {
		t.Errorf("Transform(surrogate pair) = %s, %v", got, err)
	}
	// The SHA-256 of {"a":2,"b":1}, computed apart.
	if d, err := Digest([]byte(` {"b": 1, "a": 2} `), 2); err != nil || d != "sha256:d3626ac30a87e6f7a6428233b3c68299976865fa5508e4267c5415c76af7a772" {
		t.Errorf("Digest = %q, %v", d, err)
	}
}
