package strictjson

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzReader compares the reader with encoding/json under each caller's
// rules: it accepts only what encoding/json calls valid UTF-8 JSON, with
// its exact bytes; it refuses valid JSON only for the rules encoding/json
// does not have; folding keys refuses every duplicate exact keys do; and
// Decode reads what encoding/json reads.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		// The Sentry reader's seeds.
		`{"specversion":"1.0","id":"ev-1","data":{"a":[1,2]}}`, `{"a":1,"a":2}`, `"\ud800"`, `"\ud83d\ude00"`, `[1e400]`,
		`-0.5e-3`, `{"a":[true,false,null,{}]}`, "\"\xff\"", `01`, `1.`, `[1,]`, `{"a" 1}`, "\"\t\"", `[] []`, `"\u00e9\/"`,
		// The MCP reader's.
		`{"jsonrpc":"2.0","id":"\ud83d\ude00","method":"tools/call","params":{"name":"a\u0062","arguments":{"k":[1,-0.5e+3,"\n",null,true,{}]}}}`,
		`{"name":"t","name":"u"}`, `{"kind":1,"\u212aind":2}`, `[]`, ``, ` `, `{} x`,
		// The argument decoder's.
		`{"order_id":"A-1042"}`, `{"a":{"b":{"c":"\u00e9"}}}`, `{"a":"é"}`, ` {"n": -0.0E+1 } `, `{"a":"x}`, `{"a":.5}`, `-`,
	} {
		f.Add([]byte(s))
	}
	loose := Limits{MaxDepth: 64}
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := json.Valid(b) && utf8.Valid(b)
		var faults [3]*Error
		for i, lim := range []Limits{sentryLimits, mcpLimits, loose} {
			raw, err := read(b, lim)
			faults[i] = err
			if err == nil {
				if !valid {
					t.Fatalf("accepted %q under %+v; encoding/json refuses it", b, lim)
				}
				if !bytes.Equal(raw, bytes.Trim(b, " \t\r\n")) {
					t.Fatalf("bytes %q of %q", raw, b)
				}
				continue
			}
			if valid {
				switch err.Code {
				case DuplicateKey, LoneSurrogate, NumberRange, TooDeep:
				default:
					t.Fatalf("refused valid JSON %q under %+v: %v", b, lim, err)
				}
			}
		}
		// The loose rules are the Sentry reader's and the MCP reader's but
		// for depth, numbers and folding.
		if faults[2] != nil && faults[2].Code != TooDeep && (faults[0] == nil || faults[1] == nil) {
			t.Fatalf("%q: refused with %v alone under the loose rules", b, faults[2])
		}
		if faults[0] != nil && faults[0].Code == DuplicateKey && faults[1] == nil {
			t.Fatalf("%q: a duplicate without folding (%v) is none with it", b, faults[0])
		}
		got, err := Decode(b, loose)
		if (err == nil) != (faults[2] == nil) {
			t.Fatalf("%q: Decode %v, Skip %v", b, err, faults[2])
		}
		if err == nil {
			if want := useNumber(t, b); !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: Decode %#v, encoding/json %#v", b, got, want)
			}
		}
	})
}
