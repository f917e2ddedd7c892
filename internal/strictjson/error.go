package strictjson

import (
	"fmt"
	"strconv"
)

// Code says what a Reader refused.
type Code uint8

// The faults a Reader refuses. The first group is JSON's grammar (what
// encoding/json refuses too); the second its own rules.
const (
	ExpectedValue        Code = iota + 1 // no value starts here, or the input ended
	ExpectedKey                          // an object member does not start with a string
	ExpectedColon                        // no ':' after a key
	ExpectedCommaOrClose                 // neither ',' nor the closing bracket after a member or element
	InvalidNumber                        // a number off the grammar ("-", "1.", "1e")
	ControlCharacter                     // a raw byte below 0x20 in a string
	UnterminatedString                   // the input ends inside a string
	InvalidEscape                        // a backslash before anything but "\/bfnrtu
	InvalidUnicodeEscape                 // \u not followed by four hex digits
	TrailingData                         // something other than whitespace after the value

	InvalidUTF8   // a string holds bytes that are not UTF-8
	LoneSurrogate // a \u escape names a UTF-16 surrogate that is not half of a pair
	DuplicateKey  // an object holds a key twice (ignoring case, with FoldKeys)
	NumberRange   // with FiniteNumbers, a number beyond a float64 (it overflows to ±Inf)
	TooDeep       // nesting past Limits.MaxDepth or Limits.MaxOpen
)

// Error is what a Reader refused, and where. Callers word it for their
// own readers (the MCP proxy's denial reasons, the Sentry intake's field
// errors); Error() is a plain default.
type Error struct {
	Code Code
	// Offset is where the reader stood when it met the fault: the
	// offending byte, or the end of the input.
	Offset int
	// Start is where the token at fault starts — a number's first byte,
	// the backslash of an escape — and Offset otherwise.
	Start int
	// Path names the value at fault, outermost first: for a fault in a
	// member's value (or a duplicate key), its key is the last segment.
	Path []Segment
	// Key and Prev are, for DuplicateKey, the key read twice and its first
	// spelling (which differs only with FoldKeys).
	Key, Prev []byte
	// Close is, for ExpectedCommaOrClose, the bracket that would close the
	// object or array: '}' or ']'.
	Close byte
}

// Segment is one step of a path: a member's key, or an element's Index
// (then Key is nil and Index >= 0; Index is -1 for a key).
type Segment struct {
	Key   []byte
	Index int
}

// Reason says what is wrong, without where: "expected ':'", "invalid
// number", "duplicate key \"a\"".
func (e *Error) Reason() string {
	switch e.Code {
	case ExpectedValue:
		return "expected a value"
	case ExpectedKey:
		return "expected a string key"
	case ExpectedColon:
		return "expected ':'"
	case ExpectedCommaOrClose:
		return "expected ',' or '" + string(rune(e.Close)) + "'"
	case InvalidNumber:
		return "invalid number"
	case ControlCharacter:
		return "control character in string"
	case UnterminatedString:
		return "unterminated string"
	case InvalidEscape:
		return "invalid escape"
	case InvalidUnicodeEscape:
		return "invalid \\u escape"
	case TrailingData:
		return "trailing data after the JSON value"
	case InvalidUTF8:
		return "invalid UTF-8"
	case LoneSurrogate:
		return "\\u escape names a lone surrogate"
	case DuplicateKey:
		return "duplicate key " + strconv.Quote(string(e.Key))
	case NumberRange:
		return "number out of the range of a double"
	case TooDeep:
		return "nested too deep"
	}
	return "invalid JSON"
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Reason())
}
