package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The callers' rules: the Sentry intake's and the MCP proxy's.
var (
	sentryLimits = Limits{MaxDepth: 32, FiniteNumbers: true}
	mcpLimits    = Limits{MaxDepth: 1000, MaxOpen: 1000, FoldKeys: true}
)

// read reads b as one value under lim: its bytes (Skip's) and the fault.
func read(b []byte, lim Limits) ([]byte, *Error) {
	var r Reader
	r.Reset(b, lim)
	raw := r.Skip()
	err := r.End()
	if err == nil {
		return raw, nil
	}
	var e *Error
	if !errors.As(err, &e) {
		panic(fmt.Sprintf("error %v is not an *Error", err))
	}
	return raw, e
}

// pathString joins a path for the tests: "a.b[0]".
func pathString(path []Segment) string {
	var sb strings.Builder
	for _, s := range path {
		if s.Index >= 0 {
			sb.WriteString("[" + strconv.Itoa(s.Index) + "]")
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.Write(s.Key)
	}
	return sb.String()
}

func TestSkipSpace(t *testing.T) {
	for _, c := range []struct {
		in   string
		i, j int
	}{
		{"", 0, 0},
		{" \t\r\n x", 0, 5},
		{"x ", 0, 0},
		{"x  ", 1, 3},
		{"\v", 0, 0}, // not JSON whitespace
	} {
		if j := SkipSpace([]byte(c.in), c.i); j != c.j {
			t.Errorf("SkipSpace(%q, %d) = %d, want %d", c.in, c.i, j, c.j)
		}
	}
}

// TestAccepted: what every caller's rules read, with its exact bytes.
func TestAccepted(t *testing.T) {
	for _, in := range []string{
		`{}`, "{ \n}", `[ ]`, `[1, 2]`, `[1 ]`, `{"a":1 }`, ` {"a" : [ 1 , 2.5e-3 , true , false, null ] } `,
		`0`, `-0`, `-0.5e-3`, `1E+2`, `123456789012345`, `1234567890123456789012345678901234567890`,
		`"\u00e9\/\"\\\b\f\n\r\t"`, `"\ud83d\ude00"`, `"\uD83D\uDE00 \\ud800"`, `"é😀"`, `""`,
		`{"a":{"a":{"a":1}},"b":["A","a"],"c":{"x":1},"d":{"x":1}}`, `{"":{"":1}}`,
		`{"k0":1,"k1":1,"k2":1,"k3":1,"k4":1,"k5":1,"k6":1,"k7":1,"k8":1,"k9":1,"K10":1,"ſ":1}`,
		`{"a":[true,false,null,{}]}`,
	} {
		for _, lim := range []Limits{sentryLimits, mcpLimits} {
			raw, err := read([]byte(in), lim)
			if err != nil {
				t.Errorf("%s under %+v: %v", in, lim, err)
				continue
			}
			if want := strings.TrimSpace(in); string(raw) != want {
				t.Errorf("%s: bytes %s, want %s", in, raw, want)
			}
		}
	}
}

// TestRefused: every fault, where it is named (Offset, Start, Path), for
// each caller's rules.
func TestRefused(t *testing.T) {
	many := func(extra string) string {
		var keys []string
		for i := range 40 {
			keys = append(keys, `"k`+strconv.Itoa(i)+`":`+strconv.Itoa(i))
		}
		return `{"x":{` + strings.Join(keys, ",") + extra + `}}`
	}
	for _, tc := range []struct {
		name          string
		in            string
		lim           Limits
		code          Code
		offset, start int
		path          string
	}{
		{"empty", ``, sentryLimits, ExpectedValue, 0, 0, ""},
		{"only space", " \n", sentryLimits, ExpectedValue, 2, 2, ""},
		{"BOM", "\xef\xbb\xbf{}", mcpLimits, ExpectedValue, 0, 0, ""},
		{"bare word", `{"a":ping}`, sentryLimits, ExpectedValue, 5, 5, "a"},
		{"truncated literal", `[tru]`, sentryLimits, ExpectedValue, 1, 1, "[0]"},
		{"plus sign", `{"a":+1}`, mcpLimits, ExpectedValue, 5, 5, "a"},
		{"no integer part", `{"a":.5}`, mcpLimits, ExpectedValue, 5, 5, "a"},
		{"NaN", `[NaN]`, mcpLimits, ExpectedValue, 1, 1, "[0]"},
		{"trailing comma in array", `[1,]`, sentryLimits, ExpectedValue, 3, 3, "[1]"},
		{"truncated array", `[1,`, sentryLimits, ExpectedValue, 3, 3, "[1]"},
		{"single quotes", `{'a':1}`, mcpLimits, ExpectedKey, 1, 1, ""},
		{"trailing comma", `{"a":1,}`, mcpLimits, ExpectedKey, 7, 7, ""},
		{"truncated object", `{"a":1,`, mcpLimits, ExpectedKey, 7, 7, ""},
		{"missing colon", `{"a" 1}`, sentryLimits, ExpectedColon, 5, 5, "a"},
		{"comment", `{"a":1/*x*/}`, mcpLimits, ExpectedCommaOrClose, 6, 6, ""},
		{"leading zero", `{"a":01}`, sentryLimits, ExpectedCommaOrClose, 6, 6, ""},
		{"leading zero at the top", `01`, sentryLimits, TrailingData, 1, 1, ""},
		{"hex number", `[0x10]`, mcpLimits, ExpectedCommaOrClose, 2, 2, ""},
		{"truncated after a value", `{"a":1`, mcpLimits, ExpectedCommaOrClose, 6, 6, ""},
		{"bracket mismatch", `[1}`, sentryLimits, ExpectedCommaOrClose, 2, 2, ""},
		{"colon after a value", `{"a":1 :}`, sentryLimits, ExpectedCommaOrClose, 7, 7, ""},
		{"empty array closed as an object", `[ }`, sentryLimits, ExpectedValue, 2, 2, "[0]"},
		{"bare minus", `[-]`, mcpLimits, InvalidNumber, 2, 1, "[0]"},
		{"minus Infinity", `[-Infinity]`, mcpLimits, InvalidNumber, 2, 1, "[0]"},
		{"no fraction digits", `[1.]`, sentryLimits, InvalidNumber, 3, 1, "[0]"},
		{"no exponent digits", `[1e+]`, sentryLimits, InvalidNumber, 4, 1, "[0]"},
		{"raw newline", "[\"a\nb\"]", sentryLimits, ControlCharacter, 3, 3, "[0]"},
		{"raw tab after an escape", "[\"\\na\tb\"]", mcpLimits, ControlCharacter, 5, 5, "[0]"},
		{"unterminated", `["abc`, sentryLimits, UnterminatedString, 5, 5, "[0]"},
		{"unterminated after an escape", `["a\n`, sentryLimits, UnterminatedString, 5, 5, "[0]"},
		{"backslash at the end", `["a\`, mcpLimits, UnterminatedString, 4, 4, "[0]"},
		{"invalid escape", `["a\x41"]`, sentryLimits, InvalidEscape, 4, 3, "[0]"},
		{"short \\u escape", `["\u41"]`, mcpLimits, InvalidUnicodeEscape, 4, 2, "[0]"},
		{"\\u escape at the end", `["\u00`, mcpLimits, InvalidUnicodeEscape, 4, 2, "[0]"},
		{"invalid low half", `["\ud800\uZZZZ"]`, mcpLimits, InvalidUnicodeEscape, 10, 8, "[0]"},
		{"invalid escape in a key", `{"a":{"\q":1}}`, sentryLimits, InvalidEscape, 8, 7, "a"},
		{"trailing data", `{} {}`, sentryLimits, TrailingData, 3, 3, ""},
		{"trailing NUL", "{}\x00", mcpLimits, TrailingData, 2, 2, ""},

		{"invalid UTF-8", "[\"a\xffb\"]", sentryLimits, InvalidUTF8, 3, 3, "[0]"},
		{"invalid UTF-8 after valid", "{\"k\":\"é\xc3\"}", sentryLimits, InvalidUTF8, 8, 8, "k"},
		{"overlong UTF-8", "[\"\xc0\xaf\"]", sentryLimits, InvalidUTF8, 2, 2, "[0]"},
		{"UTF-8-encoded surrogate", "[\"\xed\xa0\x80\"]", sentryLimits, InvalidUTF8, 2, 2, "[0]"},
		{"invalid UTF-8 in a key", "{\"i\xc3\":1}", sentryLimits, InvalidUTF8, 3, 3, ""},
		{"lone high surrogate", `["\ud800"]`, sentryLimits, LoneSurrogate, 8, 2, "[0]"},
		{"lone low surrogate", `["\udc00\ud800"]`, mcpLimits, LoneSurrogate, 8, 2, "[0]"},
		{"high surrogate then a letter", `["\ud800x"]`, sentryLimits, LoneSurrogate, 8, 2, "[0]"},
		{"high surrogate then a letter escape", `["\ud800\u0041"]`, mcpLimits, LoneSurrogate, 14, 2, "[0]"},
		{"two high surrogates", `["\ud800\ud800"]`, sentryLimits, LoneSurrogate, 14, 2, "[0]"},
		{"lone surrogate in a key", `{"a\udbff": 1}`, sentryLimits, LoneSurrogate, 9, 3, ""},
		{"escaped backslash, then a surrogate", `["\\ud800", "\uD800"]`, sentryLimits, LoneSurrogate, 19, 13, "[1]"},
		{"number beyond a double", `{"big":1e400}`, sentryLimits, NumberRange, 12, 7, "big"},
		{"negative number beyond a double", `[-1e309]`, sentryLimits, NumberRange, 7, 1, "[0]"},
		{"duplicate key", `{"a":1,"a":2}`, sentryLimits, DuplicateKey, 10, 10, "a"},
		{"duplicate spelled with an escape", `{"a":1,"\u0061":2}`, sentryLimits, DuplicateKey, 15, 15, "a"},
		{"duplicate deep", `{"a":[{"b":{"c":1,"c":2}}]}`, sentryLimits, DuplicateKey, 21, 21, "a[0].b.c"},
		{"duplicate in a large object", many(`,"k7":0,"k3":0`), sentryLimits, DuplicateKey, 350, 350, "x.k7"},
		{"duplicate differing in case", `{"name":1,"Name":2}`, mcpLimits, DuplicateKey, 16, 16, "Name"},
		{"duplicate through the Kelvin sign", `{"kind":1,"\u212aind":2}`, mcpLimits, DuplicateKey, 21, 21, "\u212aind"},
		{"duplicate through the long s", `{"ſ":1,"s":2}`, mcpLimits, DuplicateKey, 11, 11, "s"},
		{"duplicate empty key", `{"":1,"":2}`, mcpLimits, DuplicateKey, 8, 8, ""},
		{"duplicate in a large object differing in case", many(`,"K15":0`), mcpLimits, DuplicateKey, 351, 351, "x.K15"},
		{"duplicate in a large object through the Kelvin sign", many(`,"\u212a1":0`), mcpLimits, DuplicateKey, 355, 355, "x.\u212a1"},
		{"too deep", strings.Repeat(`{"a":`, 34) + "1" + strings.Repeat("}", 34), sentryLimits, TooDeep, 165, 165, strings.Repeat(".a", 33)[1:]},
		{"too deep, a scalar", strings.Repeat("[", 33) + "1" + strings.Repeat("]", 33), sentryLimits, TooDeep, 33, 33, strings.Repeat("[0]", 33)},
		{"too many open", strings.Repeat("[", 1001) + strings.Repeat("]", 1001), mcpLimits, TooDeep, 1000, 1000, strings.Repeat("[0]", 1000)},
		{"too many open, an empty one", strings.Repeat("[", 1001) + strings.Repeat("]", 1001), Limits{MaxDepth: 2000, MaxOpen: 1000}, TooDeep, 1000, 1000, strings.Repeat("[0]", 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, e := read([]byte(tc.in), tc.lim)
			if e == nil {
				t.Fatalf("read %q", raw)
			}
			if e.Code != tc.code || e.Offset != tc.offset || e.Start != tc.start || pathString(e.Path) != tc.path {
				t.Errorf("fault %d (%s) at %d from %d, path %q; want %d at %d from %d, path %q",
					e.Code, e.Reason(), e.Offset, e.Start, pathString(e.Path), tc.code, tc.offset, tc.start, tc.path)
			}
			if raw != nil && e.Code != TrailingData {
				t.Errorf("Skip returned %q with a fault", raw)
			}
		})
	}
}

// TestLimits: the bounds at their edge, and the rules callers choose.
func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		in  string
		lim Limits
		ok  bool
	}{
		// MaxDepth bounds values; an array or object at the bound may only
		// be empty.
		{`[[1]]`, Limits{MaxDepth: 2}, true},
		{`[[[]]]`, Limits{MaxDepth: 2}, true},
		{`[[{}]]`, Limits{MaxDepth: 2}, true},
		{`[[[1]]]`, Limits{MaxDepth: 2}, false},
		{`1`, Limits{}, true},
		{`[]`, Limits{}, true},
		{`[1]`, Limits{}, false},
		// MaxOpen bounds open arrays and objects, empty ones too.
		{`[[1]]`, Limits{MaxDepth: 10, MaxOpen: 2}, true},
		{`[[[]]]`, Limits{MaxDepth: 10, MaxOpen: 2}, false},
		{strings.Repeat("[", 1000) + strings.Repeat("]", 1000), mcpLimits, true},
		// The choices.
		{`{"a":1,"A":2}`, sentryLimits, true},
		{`{"a":1,"A":2}`, mcpLimits, false},
		{`[1e400]`, mcpLimits, true},
		{`[1e400]`, sentryLimits, false},
		{`[1e-400]`, sentryLimits, true}, // underflows to 0: a double
		{`[1.7976931348623157e308]`, sentryLimits, true},
	} {
		if _, err := read([]byte(tc.in), tc.lim); (err == nil) != tc.ok {
			t.Errorf("%.40s under %+v: %v, want ok %v", tc.in, tc.lim, err, tc.ok)
		}
	}
}

// TestManyKeys: objects past smallObject keep finding duplicates, and
// only them, as their hash set grows.
func TestManyKeys(t *testing.T) {
	for _, lim := range []Limits{sentryLimits, mcpLimits} {
		var sb strings.Builder
		sb.WriteString("{")
		for i := range 5000 {
			if i > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `"ſκ%d":{"a":1,"b":2}`, i)
		}
		doc := sb.String()
		if _, err := read([]byte(doc+"}"), lim); err != nil {
			t.Fatalf("5000 keys: %v", err)
		}
		_, err := read([]byte(doc+`,"ſκ4321":1}`), lim)
		if err == nil || err.Code != DuplicateKey || string(err.Prev) != "ſκ4321" {
			t.Fatalf("a duplicate among 5000 keys: %v", err)
		}
	}
	// A set's collisions (two keys hashed alike) send the reader to
	// compare keys.
	var s keySet
	s.reset()
	if _, seen := s.add(7, 0); seen {
		t.Fatal("first add seen")
	}
	if first, seen := s.add(7, 1); !seen || first != 0 {
		t.Fatalf("second add: %d, %v", first, seen)
	}
	for i := range int32(1000) {
		s.add(uint64(i)*64+1, i+2) // all in one probe chain's way
	}
	if first, seen := s.add(7, 3000); !seen || first != 0 {
		t.Fatalf("after growing: %d, %v", first, seen)
	}
}

// TestWalk: a caller walking a value sees its members and elements, their
// exact bytes and their decoded strings.
func TestWalk(t *testing.T) {
	in := []byte(` { "s" : "a\u0062" , "n" : -1.5e3 , "l" : [ true , { } , "x" ] , "k\u00e9y" : null } `)
	var r Reader
	r.Reset(in, sentryLimits)
	var got []string
	if r.Kind() != Object || !r.Open() {
		t.Fatal(r.Err())
	}
	for key, ok := r.Member(); ok; key, ok = r.Member() {
		start := r.Pos()
		switch r.Kind() {
		case String:
			got = append(got, fmt.Sprintf("%s=%s", key, r.ReadString()))
		case Array:
			r.Open()
			for r.Element() {
				got = append(got, fmt.Sprintf("%s[]=%s", key, r.Skip()))
			}
		default:
			r.Skip()
		}
		got = append(got, fmt.Sprintf("%s:%s", key, in[start:r.Pos()]))
	}
	if err := r.End(); err != nil {
		t.Fatal(err)
	}
	want := []string{`s=ab`, `s:"a\u0062"`, `n:-1.5e3`, `l[]=true`, `l[]={ }`, `l[]="x"`, `l:[ true , { } , "x" ]`, `kéy:null`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("walk\n got %q\nwant %q", got, want)
	}
	// After a fault every read is a no-op.
	r.Reset([]byte(`[1,]`), sentryLimits)
	r.Skip()
	if r.Kind() != Invalid || r.Open() || r.Skip() != nil || r.ReadString() != nil {
		t.Error("reads after a fault did something")
	}
	if err := r.End(); err == nil || err.(*Error).Code != ExpectedValue {
		t.Errorf("End after a fault: %v", err)
	}
}

// TestWindow: a window makes the input end early, and can be lifted.
func TestWindow(t *testing.T) {
	in := []byte(`[{"a":1},{"b":"` + strings.Repeat("x", 100) + `"}]`)
	var r Reader
	r.Reset(in, sentryLimits)
	r.Open()
	var n int
	for r.Element() {
		r.Window(min(len(in), r.Pos()+20))
		r.Skip()
		r.Window(len(in))
		n++
	}
	if err := r.Err(); err == nil || err.(*Error).Code != UnterminatedString || n != 2 {
		t.Fatalf("%d elements, %v; want the second cut short", n, err)
	}
}

func TestDecode(t *testing.T) {
	for _, in := range []string{
		`{"order_id":"A-1042"}`, `{}`, `[]`, `{"a":[1,2.5,-3e10,true,false,null,"x"]}`,
		`{"a":{"b":{"c":"\u00e9\n\ud83d\ude00"}}}`, ` {"n": -0.0E+1 } `, `"s"`, `null`, `[1e400]`,
	} {
		got, err := Decode([]byte(in), Limits{MaxDepth: 64})
		if err != nil {
			t.Errorf("Decode(%s): %v", in, err)
			continue
		}
		if want := useNumber(t, []byte(in)); !reflect.DeepEqual(got, want) {
			t.Errorf("Decode(%s) = %#v, encoding/json %#v", in, got, want)
		}
	}
	for _, in := range []string{`{"a":1,"a":2}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}", `{"a":01}`, `{"a":1}x`, `-`} {
		if v, err := Decode([]byte(in), Limits{MaxDepth: 64}); err == nil {
			t.Errorf("Decode(%s) = %#v", in, v)
		}
	}
}

// useNumber is what encoding/json reads of b with UseNumber.
func useNumber(t testing.TB, b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("encoding/json refuses %q: %v", b, err)
	}
	return v
}

// TestPlainRun: the word-at-a-time scan stops at the word of the first
// byte that is not plain, whatever the byte and wherever in the word.
func TestPlainRun(t *testing.T) {
	for c := range 256 {
		for at := range 8 {
			b := []byte(strings.Repeat("a", 24))
			b[8+at] = byte(c)
			want := 24
			if !plain[c] {
				want = 8
			}
			if got := plainRun(b, 0); got != want {
				t.Errorf("byte %#x at %d: plainRun = %d, want %d", c, 8+at, got, want)
			}
		}
	}
}
