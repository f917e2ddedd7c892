// Package jsonlex owns the byte-level JSON lexing that the data plane's
// two hand-written JSON readers share — match's reader of tools/call
// arguments and mcp's strict reader of MCP bodies — so the two cannot
// disagree on what is whitespace or how an object or array goes on: the
// space between tokens, an empty container, and the ',' or closing byte
// after a member or element. Each function takes the body and an offset
// and returns the offset after what it read; the readers keep their own
// values and error reporting.
package jsonlex

// SkipSpace returns the offset of the first byte at or after i that is
// not JSON whitespace (space, tab, newline, carriage return), or len(b).
func SkipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// Empty reads the space after an opening '{' or '[' and reports whether
// closing, the end of that object or array, follows at once (the container
// is empty); j is past closing when empty, at the next token otherwise.
func Empty(b []byte, i int, closing byte) (j int, empty bool) {
	i = SkipSpace(b, i)
	if i < len(b) && b[i] == closing {
		return i + 1, true
	}
	return i, false
}

// Next reads what follows a member or an element: ',' (more follow) or
// closing, the end of the object or array (done). ok is false for anything
// else, the end of b included; j is then the offset of the offending byte,
// for an error to name.
func Next(b []byte, i int, closing byte) (j int, done, ok bool) {
	i = SkipSpace(b, i)
	if i < len(b) {
		switch b[i] {
		case ',':
			return i + 1, false, true
		case closing:
			return i + 1, true, true
		}
	}
	return i, false, false
}
