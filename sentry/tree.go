package sentry

import (
	"errors"
	"fmt"
	"strings"

	"github.com/portcullis-dev/portcullis/internal/strictjson"
)

// An event is read once, by the strict JSON reader (internal/strictjson),
// which refuses what encoding/json would accept silently: duplicate object
// keys (the last would win, hiding the first from whoever reads the raw
// bytes), invalid UTF-8 and lone UTF-16 surrogates (both would become
// U+FFFD), numbers beyond a double (no canonical form to sign), nesting
// deeper than maxDepth and trailing data. While it reads, tree records the
// members of the event's first levels, so that the fields are found
// without a second pass. (encoding/json's Token API, which can say the
// same, made reading a batch about five times slower than a plain
// json.Unmarshal; BenchmarkParseBatch.)

// limits are the reader's rules for an event; batchLimits for a batch,
// whose events are one level deeper.
var (
	limits      = strictjson.Limits{MaxDepth: maxDepth, FiniteNumbers: true}
	batchLimits = strictjson.Limits{MaxDepth: maxDepth + 1, FiniteNumbers: true}
)

// recordDepth is the deepest object the tree records: an event (0), its
// data (1) and data's objects (2). Deeper values are only checked.
const recordDepth = 2

// field is one member of a recorded object: its key (decoded), its value's
// bytes, and, when the value is itself a recorded object, its index in
// tree.objects (else -1).
type field struct {
	key []byte
	val []byte
	obj int
}

// tree is what one read of an event recorded: the members of each object
// down to recordDepth, an object's members contiguous in fields, the
// objects in the order they closed (so the outermost is last).
type tree struct {
	fields  []field
	objects [][2]int // fields[lo:hi]
	stack   []field  // members of the objects still open
}

func (t *tree) reset() {
	t.fields, t.objects, t.stack = t.fields[:0], t.objects[:0], t.stack[:0]
}

// members returns the members of recorded object i.
func (t *tree) members(i int) []field {
	o := t.objects[i]
	return t.fields[o[0]:o[1]:o[1]]
}

// read reads the value at r, b being r's input, and records it if it is
// an object at most recordDepth deep: it returns the object's index in
// t.objects, else -1. A fault is left in r.
func (t *tree) read(r *strictjson.Reader, b []byte, depth int) int {
	if depth > recordDepth || r.Kind() != strictjson.Object {
		r.Skip()
		return -1
	}
	r.Open()
	base := len(t.stack)
	for key, ok := r.Member(); ok; key, ok = r.Member() {
		start := r.Pos()
		obj := t.read(r, b, depth+1)
		t.stack = append(t.stack, field{key: key, val: b[start:r.Pos():r.Pos()], obj: obj})
	}
	if r.Err() != nil {
		return -1
	}
	lo := len(t.fields)
	t.fields = append(t.fields, t.stack[base:]...)
	t.stack = t.stack[:base]
	t.objects = append(t.objects, [2]int{lo, len(t.fields)})
	return len(t.objects) - 1
}

// fieldError words a fault of the strict reader of b as a refusal, naming
// the field at fault.
func fieldError(err error, b []byte) *FieldError {
	var e *strictjson.Error
	if !errors.As(err, &e) {
		return &FieldError{Reason: "invalid JSON: " + err.Error()}
	}
	var reason string
	switch e.Code {
	case strictjson.ExpectedValue:
		if e.Offset >= len(b) {
			reason = "invalid JSON: unexpected end of input"
		} else {
			reason = fmt.Sprintf("invalid JSON: unexpected %q at byte %d", b[e.Offset], e.Offset)
		}
	case strictjson.ExpectedKey:
		reason = fmt.Sprintf("invalid JSON: expected a key at byte %d", e.Offset)
	case strictjson.ExpectedColon, strictjson.ExpectedCommaOrClose:
		reason = fmt.Sprintf("invalid JSON: %s at byte %d", e.Reason(), e.Offset)
	case strictjson.InvalidNumber, strictjson.InvalidEscape, strictjson.InvalidUnicodeEscape:
		reason = fmt.Sprintf("invalid JSON: %s at byte %d", e.Reason(), e.Start)
	case strictjson.ControlCharacter:
		reason = "invalid JSON: control character in a string"
	case strictjson.UnterminatedString:
		reason = "invalid JSON: unterminated string"
	case strictjson.LoneSurrogate:
		reason = "invalid \\u escape: lone UTF-16 surrogate"
	case strictjson.DuplicateKey:
		reason = "duplicate key"
	case strictjson.TooDeep:
		reason = fmt.Sprintf("nested deeper than %d levels", maxDepth)
	default: // invalid UTF-8, a number beyond a double, trailing data
		reason = e.Reason()
	}
	return &FieldError{Field: fieldPath(e.Path), Reason: reason}
}

// fieldPath joins a path as a field is named: "data.scope[1]".
func fieldPath(path []strictjson.Segment) string {
	var sb strings.Builder
	for _, s := range path {
		if s.Index >= 0 {
			fmt.Fprintf(&sb, "[%d]", s.Index)
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.Write(s.Key)
	}
	return sb.String()
}
