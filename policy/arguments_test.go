package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func TestCheckNumber(t *testing.T) {
	for _, tc := range []struct {
		num     string
		refused string // "" when accepted
		differs bool   // float64 reading differs from the exact value
	}{
		{"0", "", false},
		{"-0", "", false},
		{"0.0", "", false},
		{"0e1000", "", false},
		{"0e999999", "exponent beyond", false},
		{"0E10000000000000000000", "exponent beyond", false}, // big.Rat cannot read it: the library would panic
		{"42", "", false},
		{"1.0", "", false},
		{"1e2", "", false},
		{"100.000", "", false},
		{"0.1", "", false},
		{"-2.5E-3", "", false},
		{"1.7976931348623157e308", "", false},
		{"5e-324", "", false},
		{"4e-324", "", true}, // nearest float64 is 5e-324
		{"99.99999999999999999", "", true},
		{"9007199254740993", "", true},
		{"1.0000000000000000001", "", true},
		{"1" + strings.Repeat("0", 99), "", false},
		{"1e999999", "too large", false},
		{"-1e999999", "too large", false},
		{"1.7976931348623159e308", "too large", false},
		{"1e309", "too large", false},
		{"1e-999999", "too small", false},
		{"-1e-400", "too small", false},
		{"2e-324", "too small", false},
		{"1" + strings.Repeat("0", 100), "characters long", false},
		{"0." + strings.Repeat("0", 99) + "1", "characters long", false},
	} {
		differs, err := checkNumbers(json.Number(tc.num), "/n")
		if tc.refused == "" {
			if err != nil || differs != tc.differs {
				t.Errorf("%.30s: differs=%v, err=%v; want differs=%v, accepted", tc.num, differs, err, tc.differs)
			}
			continue
		}
		var ne *ArgumentNumberError
		if !errors.As(err, &ne) || !strings.Contains(err.Error(), tc.refused) || ne.Pointer != "/n" {
			t.Errorf("%.30s: err=%v; want an ArgumentNumberError saying %q", tc.num, err, tc.refused)
		}
	}
}

// adversarialSchema looks at numbers in every way that makes the schema
// library do big.Rat work: type integer, bounds, multipleOf, enum, const,
// uniqueItems.
var adversarialSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"ids":   map[string]any{"type": "array", "maxItems": 10, "items": map[string]any{"type": "integer", "minimum": 0, "maximum": 1000000}},
		"set":   map[string]any{"type": "array", "uniqueItems": true},
		"mode":  map[string]any{"enum": []any{1, 2, 3}},
		"fixed": map[string]any{"const": 7},
		"step":  map[string]any{"type": "number", "multipleOf": 0.5},
	},
}

// adversarialBodies are the bodies: about 2 KB of numbers that cost
// the schema library ~0.1 s each (the first exceeds maxItems too).
var adversarialBodies = map[string]string{
	"huge integers past maxItems": `{"ids":[` + strings.TrimSuffix(strings.Repeat("1e999999,", 220), ",") + `]}`,
	"tiny numbers":                `{"ids":[` + strings.TrimSuffix(strings.Repeat("-1e-999999,", 180), ",") + `]}`,
	"uniqueItems":                 `{"set":[` + strings.TrimSuffix(strings.Repeat("1e999999,2e999999,", 110), ",") + `]}`,
	"enum":                        `{"mode":1e999999}`,
	"const":                       `{"fixed":7e999999}`,
	"multipleOf":                  `{"step":1e-999999}`,
	"long mantissa":               `{"ids":[1` + strings.Repeat("0", 2000) + `]}`,
	"exponent beyond int64":       `{"ids":[0e10000000000000000000]}`,
}

const normalBody = `{"ids":[1,2,3,4,5,6,7,8,9,10],"set":[1,2,3],"mode":2,"fixed":7,"step":1.5}`

func numbersIn(v any) int {
	switch t := v.(type) {
	case json.Number:
		return 1
	case map[string]any:
		n := 0
		for _, e := range t {
			n += numbersIn(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range t {
			n += numbersIn(e)
		}
		return n
	}
	return 0
}

// The adversarial bodies are refused before the schema library sees a
// single number; a normal call hands it its numbers once.
func TestValidateArgumentsRefusesBeforeTheLibrary(t *testing.T) {
	schema, err := CompileArgumentsSchema(adversarialSchema)
	if err != nil {
		t.Fatal(err)
	}
	handed := 0
	counting := func(v any) error { handed += numbersIn(v); return schema.Validate(v) }
	for name, body := range adversarialBodies {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		handed = 0
		err = validateArguments(counting, inst)
		var ne *ArgumentNumberError
		if !errors.As(err, &ne) || handed != 0 {
			t.Errorf("%s: err=%v, %d numbers handed to the schema library; want an ArgumentNumberError and none", name, err, handed)
		}
	}
	inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(normalBody))
	handed = 0
	if err := validateArguments(counting, inst); err != nil || handed != 16 {
		t.Fatalf("normal call: err=%v, %d numbers handed; want accepted, 16", err, handed)
	}
}

// bytesAllocated is the memory f allocates: a deterministic measure of its
// work (big.Rat arithmetic on a number like 1e999999 allocates ~400 KB).
func bytesAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Finding 4 through Decide: each adversarial call is denied naming the
// rule and the number, and costs no more than a normal call (Decide
// compiles the schema on every call; the bound is twice a normal call).
func TestDecideArgumentsBoundedCost(t *testing.T) {
	ep := mcpEP(nil, []Rule{allow(L7Rule{Method: "tools/call", Tool: anyOf("tally"), ArgumentsSchema: adversarialSchema})})
	p := pol(map[string]*NetworkPolicy{"m": entry([]string{python}, ep)})
	r := req("orders.example.com", 443).from(python)
	normal := r.mcp("tools/call", "tally", normalBody)
	if d := Decide(p, normal); !d.Allow {
		t.Fatalf("normal call denied: %+v", d)
	}
	normalCost := bytesAllocated(func() { Decide(p, normal) })
	for name, body := range adversarialBodies {
		call := r.mcp("tools/call", "tally", body)
		var d Decision
		cost := bytesAllocated(func() { d = Decide(p, call) })
		if d.Allow || d.Rule != "rules[0]" || !strings.Contains(d.Reason, "arguments_schema refuses the arguments: number ") {
			t.Errorf("%s: %+v; want denied by rules[0]'s number limit", name, d)
		}
		if cost > 2*normalCost {
			t.Errorf("%s: Decide allocated %d bytes, a normal call %d; want at most twice", name, cost, normalCost)
		}
	}
}

// Finding 7: a number passes only if the schema accepts both its exact
// value and its float64 reading; formats are asserted.
func TestDecideArgumentsFloatReadingAndFormats(t *testing.T) {
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"pct":   map[string]any{"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 100},
			"n":     map[string]any{"type": "integer", "multipleOf": 3},
			"email": map[string]any{"type": "string", "format": "email"},
			"ip":    map[string]any{"type": "string", "format": "ipv4"},
			"site":  map[string]any{"type": "string", "format": "uri"},
			// A property named format is not the keyword.
			"format": map[string]any{"type": "string"},
		},
	}
	ep := mcpEP(nil, []Rule{allow(L7Rule{Method: "tools/call", Tool: anyOf("t"), ArgumentsSchema: schema})})
	p := pol(map[string]*NetworkPolicy{"m": entry([]string{python}, ep)})
	r := req("orders.example.com", 443).from(python)
	denied := want{rule: "rules[0]", reason: "arguments_schema refuses"}
	allowed := want{allow: true, rule: "rules[0]"}
	runDecide(t, []decideCase{
		{"inside the bounds", p, r.mcp("tools/call", "t", `{"pct":50,"n":9}`), allowed},
		{"just inside, as float64 too", p, r.mcp("tools/call", "t", `{"pct":99.9999999999999}`), allowed},
		{"smallest float64 above 0", p, r.mcp("tools/call", "t", `{"pct":5e-324}`), allowed},
		{"1e-400 reads as 0", p, r.mcp("tools/call", "t", `{"pct":1e-400}`), want{rule: "rules[0]", reason: "too small for a float64"}},
		{"99.99999999999999999 reads as 100", p, r.mcp("tools/call", "t", `{"pct":99.99999999999999999}`), want{rule: "rules[0]", reason: "as a float64 reader reads the numbers"}},
		{"-0.00000000000000000000001 is below 0 exactly", p, r.mcp("tools/call", "t", `{"pct":-0.00000000000000000000001}`), denied},
		{"multiple of 3 exactly but not as float64", p, r.mcp("tools/call", "t", `{"n":9007199254740993}`), want{rule: "rules[0]", reason: "as a float64 reader"}},
		{"not an integer exactly", p, r.mcp("tools/call", "t", `{"n":3.0000000000000000001}`), denied},
		{"integer spelled with a fraction", p, r.mcp("tools/call", "t", `{"n":6.0}`), allowed},
		{"valid formats", p, r.mcp("tools/call", "t", `{"email":"ops@example.com","ip":"192.0.2.1","site":"https://example.com/x","format":"anything"}`), allowed},
		{"bad email", p, r.mcp("tools/call", "t", `{"email":"not an address"}`), denied},
		{"bad ipv4", p, r.mcp("tools/call", "t", `{"ip":"999.0.0.1"}`), denied},
		{"bad uri", p, r.mcp("tools/call", "t", `{"site":"no scheme"}`), denied},
	})
}

// A schema naming a format that cannot be asserted refuses everything in
// Decide (it does not compile), and the validator names where it stands.
func TestUnknownFormatRefused(t *testing.T) {
	schema := map[string]any{"type": "object", "properties": map[string]any{"card": map[string]any{"type": "string", "format": "credit-card"}}}
	var ufe *UnknownFormatError
	if _, err := CompileArgumentsSchema(schema); !errors.As(err, &ufe) || ufe.Path != "properties.card.format" || ufe.Format != "credit-card" {
		t.Fatalf("compile: %v; want an UnknownFormatError at properties.card.format", err)
	}
	ep := mcpEP(nil, []Rule{allow(L7Rule{Method: "tools/call", Tool: anyOf("pay"), ArgumentsSchema: schema})})
	p := pol(map[string]*NetworkPolicy{"m": entry([]string{python}, ep)})
	r := req("orders.example.com", 443).from(python)
	if d := Decide(p, r.mcp("tools/call", "pay", `{"card":"4111"}`)); d.Allow || !strings.Contains(d.Reason, "does not compile") {
		t.Fatalf("Decide = %+v; want denied, the schema does not compile", d)
	}
}

// Every format Portcullis accepts is one the library asserts, and one it
// does not know is not.
func TestKnownFormatsAreAsserted(t *testing.T) {
	for _, f := range append(KnownFormats(), "idn-email", "credit-card") {
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		doc, _ := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(`{"format":"` + f + `"}`)))
		if err := c.AddResource("urn:t", doc); err != nil {
			t.Fatal(err)
		}
		s, err := c.Compile("urn:t")
		if err != nil {
			t.Fatal(err)
		}
		if asserted := s.Format != nil; asserted != assertedFormats[f] {
			t.Errorf("format %q: asserted by the library %v, listed %v", f, asserted, assertedFormats[f])
		}
	}
}

// policy validate reports formats where they stand: a warning that a known
// one is asserted, an error for one that cannot be; and a schema number
// beyond the limits is an error.
func TestValidateArgumentsSchemaFormatsAndNumbers(t *testing.T) {
	doc := mcpEndpoint("", `{allow: {method: tools/call, tool: a, arguments_schema: {type: object, properties: {email: {type: string, format: email}, card: {format: credit-card}, format: {type: string}}}}}`)
	_, warns, err := Parse([]byte(doc))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Parse = %v; want a ValidationError", err)
	}
	base := ep0 + ".rules[0].allow.arguments_schema.properties"
	if len(ve.Problems) != 1 || ve.Problems[0].Path != base+".card.format" || !strings.Contains(ve.Problems[0].Message, `format "credit-card" cannot be checked`) {
		t.Errorf("errors = %v; want one at %s.card.format", ve.Problems, base)
	}
	found := false
	for _, w := range warns {
		if w.Path == base+".email.format" && strings.Contains(w.Message, "is asserted") {
			found = true
		}
		if strings.HasSuffix(w.Path, "format.type") || w.Path == base+".format" {
			t.Errorf("a property named format was taken for the keyword: %v", w)
		}
	}
	if !found {
		t.Errorf("warnings = %v; want one at %s.email.format saying it is asserted", warns, base)
	}

	p := pol(map[string]*NetworkPolicy{"m": entry([]string{python}, mcpEP(nil, []Rule{allow(L7Rule{Method: "tools/call", Tool: anyOf("a"),
		ArgumentsSchema: map[string]any{"type": "number", "maximum": json.Number("1e999999")}})}))})
	_, err = Validate(p)
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || !strings.HasSuffix(ve.Problems[0].Path, "arguments_schema") ||
		!strings.Contains(ve.Problems[0].Message, "schema number 1e999999 at /maximum is too large for a float64") {
		t.Fatalf("Validate = %v; want the schema number refused", err)
	}
}

// A refusal names at most three failures, each cut short, however many
// the call has: the reason goes into every decision record.
func TestSchemaRefusalIsBrief(t *testing.T) {
	ep := mcpEP(nil, []Rule{allow(L7Rule{Method: "tools/call", Tool: anyOf("tally"), ArgumentsSchema: adversarialSchema})})
	p := pol(map[string]*NetworkPolicy{"m": entry([]string{python}, ep)})
	r := req("orders.example.com", 443).from(python)
	body := `{"ids":[` + strings.TrimSuffix(strings.Repeat("1e300,", 2000), ",") + `],"mode":"` + strings.Repeat("x", 5000) + `"}`
	d := Decide(p, r.mcp("tools/call", "tally", body))
	if d.Allow || !strings.Contains(d.Reason, "at '/ids/0': ") || !strings.Contains(d.Reason, "more)") || len(d.Reason) > 1000 {
		t.Fatalf("reason (%d bytes) = %.1500s; want the first failures and a count of the rest", len(d.Reason), d.Reason)
	}
}

var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// FuzzCheckNumber: a JSON number is accepted only within the limits, and
// its float64 reading is said to differ exactly when, as rationals, it
// does.
func FuzzCheckNumber(f *testing.F) {
	for _, s := range []string{"0", "-0.0e5", "1", "1.0", "1e2", "100", "0.1", "99.99999999999999999", "9007199254740993",
		"1e-400", "5e-324", "1.7976931348623157e308", "1e999999", "0.000001", "123456789012345678901234567890", "1.5E+300"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !jsonNumber.MatchString(s) {
			return
		}
		differs, refused := checkNumber(s)
		f64, perr := strconv.ParseFloat(s, 64)
		if refused != "" {
			return
		}
		exact, ok := new(big.Rat).SetString(s)
		if !ok || len(s) > MaxArgumentNumberBytes || perr != nil || (f64 == 0) != (exact.Sign() == 0) {
			t.Fatalf("%q accepted: %d characters, float64 %v (%v)", s, len(s), f64, perr)
		}
		read, _ := new(big.Rat).SetString(strconv.FormatFloat(f64, 'g', -1, 64))
		if differs != (exact.Cmp(read) != 0) {
			t.Fatalf("%q: differs=%v, but exact %v and float64 reading %v", s, differs, exact, read)
		}
	})
}

// InexactArgumentNumber names the first number (keys in sorted order)
// whose float64 reading differs from the number as written.
func TestInexactArgumentNumber(t *testing.T) {
	for _, c := range []struct {
		args, ptr, num string
		found          bool
	}{
		{`{"n":1.0,"m":[1e2,-0.5,123456789012345]}`, "", "", false},
		{`{"n":12345678901234567890}`, "/n", "12345678901234567890", true},
		{`{"z":1000.00000000000000001,"a":[1,{"b/c":0.1000000000000000000001}]}`, "/a/1/b~1c", "0.1000000000000000000001", true},
	} {
		ptr, num, found, err := InexactArgumentNumber([]byte(c.args))
		if err != nil || ptr != c.ptr || num != c.num || found != c.found {
			t.Errorf("%s: (%q, %q, %v, %v), want (%q, %q, %v, nil)", c.args, ptr, num, found, err, c.ptr, c.num, c.found)
		}
	}
	if _, _, _, err := InexactArgumentNumber([]byte(`{"n":1e999}`)); err == nil {
		t.Error("1e999: no error")
	}
}
