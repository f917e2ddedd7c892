package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The argument gate: params.arguments of a tools/call checked against an
// allow rule's arguments_schema. Decide and the proxy's matcher both call
// ValidateArguments, so they judge alike. Beyond JSON Schema it promises
// two things.
//
// Bounded cost. The schema library compares numbers as exact rationals
// (math/big): a number such as 1e999999 costs it about 0.1 s each time a
// schema looks at it (type: integer, minimum/maximum, multipleOf, enum,
// const, uniqueItems). So before the library sees the arguments, every
// number in them must keep to these limits, or the call is refused at the
// first one that does not, without consulting the schema:
//   - at most MaxArgumentNumberBytes characters as written, with an
//     exponent part (if any) within ±1000;
//   - finite as a float64: a number whose nearest float64 is ±Inf
//     (|x| ≥ about 1.797693134862315709e308) is refused;
//   - a number that is not zero must not read as zero: one whose nearest
//     float64 is 0 (|x| ≤ about 2.47e-324) is refused.
//
// Within them a number has at most 100 digits and a decimal exponent
// within ±430, and each comparison costs microseconds. The schema's own
// numbers keep to the same limits (CompileArgumentsSchema).
//
// What the upstream reads. Most MCP servers read JSON numbers as float64
// (JavaScript, Python's float, Go's float64). The arguments pass only if the
// schema accepts them as written and also as a float64 reader reads them —
// every number replaced by its nearest float64 (written in shortest form).
// So with exclusiveMaximum: 100, 99.99999999999999999 is refused: a float64
// reader sees 100. This covers every keyword (bounds, multipleOf, enum,
// const, type: integer). Integer checks need nothing more for int64 readers:
// an int64 reader either reads the exact value or refuses the number, and a
// float64 rounding of an integer is an integer.
//
// Formats. format (email, uri, ipv4, …) is asserted, in every draft: a
// string that is not of its format is refused. A schema naming a format
// the library cannot check is refused (UnknownFormatError), since it would
// silently allow anything.

// maxArgumentExponent bounds the exponent as written. Only a zero could
// pass the float64 limits with a larger one, and the schema library fails
// (nil big.Rat) on an exponent beyond int64.
const maxArgumentExponent = 1000

// MaxArgumentNumberBytes is the longest number, as written, that the
// argument gate hands to the schema library. float64 needs 17 significant
// digits and int64 19; the shortest spelling of any float64 is at most 24
// characters.
const MaxArgumentNumberBytes = 100

// ArgumentNumberError refuses arguments holding a number beyond the
// limits above. Its message is safe to show to the caller.
type ArgumentNumberError struct {
	Pointer string // JSON pointer to the number, "" for the whole value
	Number  string // the number as written, cut to 40 characters
	Reason  string
}

func (e *ArgumentNumberError) Error() string {
	if e.Pointer == "" {
		return fmt.Sprintf("number %s %s", e.Number, e.Reason)
	}
	return fmt.Sprintf("number %s at %s %s", e.Number, e.Pointer, e.Reason)
}

// UnknownFormatError refuses a schema naming a format that cannot be
// asserted. Path is the field path of the format keyword inside the schema.
type UnknownFormatError struct {
	Path   string
	Format string
}

func (e *UnknownFormatError) Error() string {
	return fmt.Sprintf("%s: format %q cannot be checked (known: %s); Portcullis asserts formats, so it refuses a schema that names one it cannot check", e.Path, e.Format, strings.Join(KnownFormats(), ", "))
}

// assertedFormats are the formats the schema library (santhosh-tekuri/
// jsonschema v6.0.3) asserts; TestKnownFormatsAreAsserted checks each.
var assertedFormats = map[string]bool{
	"date": true, "date-time": true, "duration": true, "email": true, "hostname": true,
	"ipv4": true, "ipv6": true, "iri": true, "iri-reference": true, "json-pointer": true,
	"period": true, "regex": true, "relative-json-pointer": true, "semver": true, "time": true,
	"uri": true, "uri-reference": true, "uri-template": true, "uuid": true,
}

// KnownFormats lists, sorted, the format names an arguments_schema may use.
func KnownFormats() []string { return sortedKeys(assertedFormats) }

// ValidateArguments checks decoded arguments (the value
// jsonschema.UnmarshalJSON gives: maps, slices, strings, json.Number, bool,
// nil) against a schema from CompileArgumentsSchema. It returns an
// *ArgumentNumberError for a number beyond the limits — the schema library
// is then never called — or the schema's refusal, of the arguments as
// written first, then of their float64 reading. It stops at the first
// refusal.
func ValidateArguments(schema *jsonschema.Schema, args any) error {
	return validateArguments(schema.Validate, args)
}

// validateArguments is ValidateArguments with the library's Validate
// passed in, so tests can see what reaches it.
func validateArguments(validate func(any) error, args any) error {
	differs, err := checkNumbers(args, "")
	if err != nil {
		return err
	}
	if err := validate(args); err != nil {
		return brief(err)
	}
	if !differs {
		return nil
	}
	if err := validate(floatReading(args)); err != nil {
		return fmt.Errorf("as a float64 reader reads the numbers: %w", brief(err))
	}
	return nil
}

// maxRefusalsShown bounds the schema failures a refusal names, and
// maxRefusalBytes each one's length: a 64 KB call can fail thousands of
// times, and the reason goes into every decision record.
const (
	maxRefusalsShown = 3
	maxRefusalBytes  = 200
)

// SchemaRefusal is the schema library's refusal told briefly: the first
// few failures (a JSON pointer into the arguments and what failed there),
// each cut short, and how many more there were. It unwraps to the
// library's *jsonschema.ValidationError.
type SchemaRefusal struct {
	err *jsonschema.ValidationError
}

func brief(err error) error {
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return &SchemaRefusal{err: ve}
	}
	return err
}

func (r *SchemaRefusal) Unwrap() error { return r.err }

func (r *SchemaRefusal) Error() string {
	var shown []string
	total := 0
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			total++
			if len(shown) < maxRefusalsShown {
				msg := e.Error() // a leaf: "at '/ptr': what failed"
				if len(msg) > maxRefusalBytes {
					cut := maxRefusalBytes
					for cut > 0 && !utf8.RuneStart(msg[cut]) {
						cut--
					}
					msg = msg[:cut] + "…"
				}
				shown = append(shown, msg)
			}
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(r.err)
	msg := strings.Join(shown, "; ")
	if more := total - len(shown); more > 0 {
		msg += fmt.Sprintf(" (and %d more)", more)
	}
	return msg
}

// checkNumbers walks a decoded JSON value and returns the first number
// beyond the limits (keys in sorted order, so the same one every time), and
// whether any number's float64 reading differs from its exact value. ptr is
// the JSON pointer of v.
func checkNumbers(v any, ptr string) (differs bool, err error) {
	w := numberWalk{}
	if err := w.walk(v); err != nil {
		err.Pointer = ptr + err.Pointer
		return false, err
	}
	return w.differs, nil
}

// InexactArgumentNumber finds the first number (keys in sorted order) of
// the JSON arguments raw whose float64 reading differs from the number as
// written — 12345678901234567890, 1000.00000000000000001 — and returns its
// JSON pointer and its text (cut to 40 characters); found is false when
// every number reads exactly. RFC 8785 writes numbers as float64s, so such
// arguments have no canonical form that is the call as made. The error is
// an *ArgumentNumberError for a number beyond the limits, or the
// arguments not being JSON.
func InexactArgumentNumber(raw []byte) (pointer, number string, found bool, err error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return "", "", false, fmt.Errorf("arguments are not JSON: %w", err)
	}
	w := numberWalk{}
	if err := w.walk(v); err != nil {
		return "", "", false, err
	}
	return w.firstPointer, w.firstNumber, w.differs, nil
}

// numberWalk keeps the path to the value being walked, turned into a JSON
// pointer only for a number it refuses, or the first whose float64
// reading differs.
type numberWalk struct {
	path    []pathStep
	differs bool
	// firstPointer and firstNumber are the first number that differs.
	firstPointer, firstNumber string
}

type pathStep struct {
	key   string // a key of an object when isKey
	index int    // else an index into an array
	isKey bool
}

func (w *numberWalk) walk(v any) *ArgumentNumberError {
	switch t := v.(type) {
	case json.Number:
		d, reason := checkNumber(string(t))
		if reason != "" {
			return &ArgumentNumberError{Pointer: w.pointer(), Number: shownNumber(string(t)), Reason: reason}
		}
		if d && !w.differs {
			w.firstPointer, w.firstNumber = w.pointer(), shownNumber(string(t))
		}
		w.differs = w.differs || d
	case map[string]any:
		for _, k := range sortedKeys(t) {
			w.path = append(w.path, pathStep{key: k, isKey: true})
			if err := w.walk(t[k]); err != nil {
				return err
			}
			w.path = w.path[:len(w.path)-1]
		}
	case []any:
		for i, e := range t {
			w.path = append(w.path, pathStep{index: i})
			if err := w.walk(e); err != nil {
				return err
			}
			w.path = w.path[:len(w.path)-1]
		}
	}
	return nil
}

// shownNumber is a number as a message quotes it: cut to 40 characters.
func shownNumber(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func (w *numberWalk) pointer() string {
	var sb strings.Builder
	for _, s := range w.path {
		sb.WriteByte('/')
		if s.isKey {
			sb.WriteString(escapePointer(s.key))
		} else {
			sb.WriteString(strconv.Itoa(s.index))
		}
	}
	return sb.String()
}

// checkNumber applies the limits to one JSON number: it returns why the
// number is refused ("" when it is not) and whether its float64 reading
// differs from it. strconv.ParseFloat costs O(length) whatever the
// exponent; nothing here allocates.
func checkNumber(s string) (differs bool, refused string) {
	if len(s) <= 15 && plainInteger(s) {
		return false, "" // below 2^53: exact as a float64
	}
	if len(s) > MaxArgumentNumberBytes {
		return false, fmt.Sprintf("is %d characters long (at most %d)", len(s), MaxArgumentNumberBytes)
	}
	f, err := strconv.ParseFloat(s, 64)
	switch e := decimalOf(s).exp; {
	case math.IsInf(f, 0):
		return false, "is too large for a float64"
	case err != nil:
		return false, "is not a number"
	case f == 0 && !isZero(s):
		return false, "is too small for a float64 (it reads as 0)"
	case e > maxArgumentExponent || e < -maxArgumentExponent: // a zero
		return false, fmt.Sprintf("has an exponent beyond ±%d", maxArgumentExponent)
	}
	var buf [32]byte
	return !sameDecimal(s, strconv.AppendFloat(buf[:0], f, 'g', -1, 64)), ""
}

// plainInteger reports whether s is an optional minus and digits.
func plainInteger(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isZero reports whether a JSON number's digits are all zero.
func isZero(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 'e' || c == 'E':
			return true
		case c >= '1' && c <= '9':
			return false
		}
	}
	return true
}

// sameDecimal reports whether a number in JSON syntax and one in strconv
// 'g' syntax have the same value.
func sameDecimal(a string, b []byte) bool {
	x, y := decimalOf(a), decimalOf(b)
	if x.first < 0 || y.first < 0 {
		return x.first < 0 && y.first < 0
	}
	if x.neg != y.neg || x.lead != y.lead {
		return false
	}
	i, j := x.first, y.first
	for {
		for i <= x.last && a[i] == '.' {
			i++
		}
		for j <= y.last && b[j] == '.' {
			j++
		}
		if i > x.last || j > y.last {
			return i > x.last && j > y.last
		}
		if a[i] != b[j] {
			return false
		}
		i, j = i+1, j+1
	}
}

// decimal is a number's significant digits, read in place: n[first] and
// n[last] are its first and last nonzero digits (first < 0 for zero; a
// '.' may lie between them), and lead is the power of ten of the first.
type decimal struct {
	neg         bool
	first, last int
	lead        int
	exp         int // the exponent as written, saturated at ±math.MaxInt32
}

// decimalOf reads a number in JSON or strconv 'g' syntax. It is short
// (at most MaxArgumentNumberBytes), so its exponent is small or saturates.
func decimalOf[B string | []byte](n B) decimal {
	d := decimal{first: -1, last: -1}
	end := len(n) // end of the mantissa
	exp, expNeg := 0, false
	for i := 0; i < len(n); i++ {
		if n[i] == 'e' || n[i] == 'E' {
			end = i
			for j := i + 1; j < len(n); j++ {
				switch c := n[j]; {
				case c == '-':
					expNeg = true
				case c >= '0' && c <= '9':
					exp = min(exp*10+int(c-'0'), math.MaxInt32)
				}
			}
			break
		}
	}
	if expNeg {
		exp = -exp
	}
	d.exp = exp
	dot := end
	for i := 0; i < end; i++ {
		switch c := n[i]; {
		case c == '-':
			d.neg = true
		case c == '.':
			dot = i
		case c >= '1' && c <= '9':
			if d.first < 0 {
				d.first = i
			}
			d.last = i
		}
	}
	if d.first >= 0 {
		pos := dot - d.first - 1 // the power of ten of the digit at first
		if d.first > dot {
			pos = dot - d.first
		}
		d.lead = pos + exp
	}
	return d
}

// floatReading copies a decoded JSON value with every number replaced by
// its nearest float64 in shortest form (checkNumbers has accepted them).
func floatReading(v any) any {
	switch t := v.(type) {
	case json.Number:
		f, _ := strconv.ParseFloat(string(t), 64)
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = floatReading(e)
		}
		return m
	case []any:
		a := make([]any, len(t))
		for i, e := range t {
			a[i] = floatReading(e)
		}
		return a
	}
	return v
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(k string) string {
	if !strings.ContainsAny(k, "~/") {
		return k
	}
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// schemaFormats calls fn with the field path and name of every format
// keyword in a schema: every "format" whose value is a string, except
// inside enum, const, default and examples (values, not schemas). A
// property named "format" has a schema (a mapping) as its value, so it is
// not taken for the keyword.
func schemaFormats(v any, path string, fn func(path, name string)) {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(t) {
			switch k {
			case "enum", "const", "default", "examples":
				continue
			case "format":
				if name, ok := t[k].(string); ok {
					fn(keyPath(path, k), name)
					continue
				}
			}
			schemaFormats(t[k], keyPath(path, k), fn)
		}
	case []any:
		for i, e := range t {
			schemaFormats(e, indexPath(path, i), fn)
		}
	}
}

// compileArgumentsDoc checks a decoded schema document before the library
// compiles it: its numbers keep to the argument limits (the library turns
// each into a big.Rat) and its formats are ones that can be asserted.
func compileArgumentsDoc(doc any) error {
	if _, err := checkNumbers(doc, ""); err != nil {
		return fmt.Errorf("schema %w", err)
	}
	var unknown *UnknownFormatError
	schemaFormats(doc, "", func(path, name string) {
		if unknown == nil && !assertedFormats[name] {
			unknown = &UnknownFormatError{Path: path, Format: name}
		}
	})
	if unknown != nil {
		return unknown
	}
	return nil
}
