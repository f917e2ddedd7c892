package strictjson

import "hash/maphash"

// Kind is the kind of a JSON value.
type Kind uint8

const (
	Invalid Kind = iota // no value: the reader has failed
	Null
	Bool
	Number
	String
	Array
	Object
)

// Limits are the rules a caller sets; the rest are always on.
type Limits struct {
	// MaxDepth is how deep a value may be nested: the top-level value is
	// at depth 0, a member or element one deeper than its object or array.
	// An array or object at MaxDepth may only be empty.
	MaxDepth int
	// MaxOpen, when not 0, bounds how many arrays and objects may be open
	// at once (an empty one included): at most MaxOpen-1 deep, where
	// MaxDepth alone lets an empty one be at MaxDepth.
	MaxOpen int
	// FoldKeys refuses two keys of one object that are equal ignoring
	// case (Unicode simple folding, as strings.EqualFold and encoding/json's
	// field matching), not only equal ones.
	FoldKeys bool
	// FiniteNumbers refuses a number a float64 cannot hold (it would be
	// ±Inf): it has no canonical form to sign or hash.
	FiniteNumbers bool
}

// Reader reads one JSON text strictly (see the package comment). Its
// zero value is ready for Reset. A Reader keeps scratch space across
// Resets, so a pool of them allocates nothing per read for inputs like
// the last.
type Reader struct {
	all  []byte // the input
	b    []byte // what may be read: all, or a prefix of it (Window)
	i    int
	lim  Limits
	err  *Error
	open []frame // the arrays and objects open, innermost last
	// usedOpen and usedKeys are how much of open's and keys' arrays this
	// read has used: what Reset clears, so that no reference into one
	// input outlives its read (a pooled Reader would keep it alive).
	usedOpen, usedKeys int
	// keys holds the keys of the open objects, each object's from its
	// frame's keys on, to refuse a duplicate. An object with many keys
	// (a hostile one may hold thousands) also has a hash set (sets), so
	// that the check stays linear.
	keys    [][]byte
	sets    []keySet
	nsets   int
	fold    []byte // scratch for a folded key
	seed    maphash.Seed
	hasSeed bool
}

// frame is an open array or object, and where the reader is in it: the
// open frames are the path an error names.
type frame struct {
	object bool
	first  bool   // nothing read in it yet
	in     bool   // in a member (from its key on) or an element
	keys   int32  // its keys are keys[keys:]
	set    int32  // its hash set in sets, -1 until it has many keys
	key    []byte // the member's key (objects)
	index  int    // the element's index (arrays)
}

// Reset makes r read b under lim, forgetting what it read before (and
// every reference into it).
func (r *Reader) Reset(b []byte, lim Limits) {
	clear(r.keys[:max(r.usedKeys, len(r.keys))])
	clear(r.open[:max(r.usedOpen, len(r.open))])
	r.all, r.b, r.i, r.lim, r.err = b, b, 0, lim, nil
	r.open, r.keys, r.nsets, r.usedOpen, r.usedKeys = r.open[:0], r.keys[:0], 0, 0, 0
}

// Err returns the first fault met, an *Error, or nil.
func (r *Reader) Err() error {
	if r.err == nil {
		return nil
	}
	return r.err
}

// Pos is the offset of the next byte to read. After Kind, Member or
// Element it is where the next value starts, so that b[start:r.Pos()]
// after reading it is its exact bytes.
func (r *Reader) Pos() int { return r.i }

// Window lets r read only b[:end] until the next Window, as if the input
// ended there: a reader of a batch bounds each element so.
func (r *Reader) Window(end int) { r.b = r.all[:end] }

// End reports the first fault, or, if there is none, anything but
// whitespace after the value read (TrailingData).
func (r *Reader) End() error {
	if r.err == nil {
		r.space()
		if r.i != len(r.b) {
			r.fail(TrailingData)
		}
	}
	return r.Err()
}

// kinds maps the first byte of a value to its kind (literals are
// checked apart).
var kinds = func() (t [256]Kind) {
	t['{'], t['['], t['"'], t['-'] = Object, Array, String, Number
	for c := '0'; c <= '9'; c++ {
		t[c] = Number
	}
	t['t'], t['f'], t['n'] = Bool, Bool, Null
	return t
}()

// Kind skips whitespace and returns the kind of the value that starts
// there, without reading it; Invalid (and the fault ExpectedValue) when
// none does.
func (r *Reader) Kind() Kind {
	if r.err != nil {
		return Invalid
	}
	r.space()
	if r.i < len(r.b) {
		switch k := kinds[r.b[r.i]]; k {
		case Bool, Null:
			if r.literal() > 0 {
				return k
			}
		case Invalid:
		default:
			return k
		}
	}
	r.fail(ExpectedValue)
	return Invalid
}

// literal returns the length of the true, false or null at r.i, or 0.
func (r *Reader) literal() int {
	rest := r.b[r.i:]
	switch {
	case len(rest) >= 4 && string(rest[:4]) == "true", len(rest) >= 4 && string(rest[:4]) == "null":
		return 4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		return 5
	}
	return 0
}

// Skip reads the next value whole, checking it, and returns its bytes
// (nil after a fault).
func (r *Reader) Skip() []byte {
	k := r.Kind()
	start := r.i
	switch k {
	case Invalid:
		return nil
	case Object:
		if r.open1(k) {
			for _, ok := r.Member(); ok; _, ok = r.Member() {
				r.Skip()
			}
		}
	case Array:
		if r.open1(k) {
			for r.Element() {
				r.Skip()
			}
		}
	case String:
		r.str(false)
	case Number:
		r.number()
	default:
		r.i += r.literal()
	}
	if r.err != nil {
		return nil
	}
	return r.b[start:r.i:r.i]
}

// ReadString reads the string Kind announced and returns its value: a
// slice of the input when it has no escape, else a new array.
func (r *Reader) ReadString() []byte {
	if r.Kind() != String {
		return nil
	}
	return r.str(true)
}

// Open enters the array or object Kind announced; Member or Element then
// read what it holds.
func (r *Reader) Open() bool {
	k := r.Kind()
	if k != Array && k != Object {
		if k != Invalid {
			r.fail(ExpectedValue)
		}
		return false
	}
	return r.open1(k)
}

// open1 opens the array or object (k) at r.i.
func (r *Reader) open1(k Kind) bool {
	if r.lim.MaxOpen > 0 && len(r.open) >= r.lim.MaxOpen {
		r.fail(TooDeep)
		return false
	}
	r.i++
	r.open = append(r.open, frame{object: k == Object, first: true, keys: int32(len(r.keys)), set: -1})
	r.usedOpen = max(r.usedOpen, len(r.open))
	return true
}

// Member reads to the next member of the object just opened: it returns
// its key (decoded) and leaves r at its value, which the caller must
// read before calling Member again. It returns false at the end of the
// object, which it closes, and after a fault.
func (r *Reader) Member() (key []byte, ok bool) {
	if r.err != nil {
		return nil, false
	}
	f := &r.open[len(r.open)-1]
	if f.first {
		f.first = false
		if r.closes('}') {
			return nil, false
		}
	} else {
		f.in = false
		if !r.next('}') {
			return nil, false
		}
		r.space()
	}
	if r.i >= len(r.b) || r.b[r.i] != '"' {
		r.fail(ExpectedKey)
		return nil, false
	}
	key = r.str(true)
	if r.err != nil {
		return nil, false
	}
	f.key, f.in = key, true
	if prev, dup := r.repeated(f, key); dup {
		r.fail(DuplicateKey)
		r.err.Key, r.err.Prev = key, prev
		return nil, false
	}
	r.space()
	if r.i >= len(r.b) || r.b[r.i] != ':' {
		r.fail(ExpectedColon)
		return nil, false
	}
	r.i++
	return key, r.enter()
}

// Element reads to the next element of the array just opened, leaving r
// at it; the caller must read it before calling Element again. It
// returns false at the end of the array, which it closes, and after a
// fault.
func (r *Reader) Element() bool {
	if r.err != nil {
		return false
	}
	f := &r.open[len(r.open)-1]
	if f.first {
		f.first = false
		if r.closes(']') {
			return false
		}
	} else {
		f.in = false
		if !r.next(']') {
			return false
		}
		f.index++
	}
	f.in = true
	return r.enter()
}

// enter checks the depth of the member or element r is at and moves to
// its first byte.
func (r *Reader) enter() bool {
	if len(r.open) > r.lim.MaxDepth {
		r.fail(TooDeep)
		return false
	}
	r.space()
	return true
}

// closes reads the space after an opening bracket and reports whether
// close, the end of an empty array or object, follows; it then closes it.
func (r *Reader) closes(close byte) bool {
	r.space()
	if r.i < len(r.b) && r.b[r.i] == close {
		r.i++
		r.pop()
		return true
	}
	return false
}

// next reads what follows a member or element: ',' (more follow, true)
// or close, which ends the array or object (false). Anything else is a
// fault.
func (r *Reader) next(close byte) bool {
	r.space()
	if r.i < len(r.b) {
		switch r.b[r.i] {
		case ',':
			r.i++
			return true
		case close:
			r.i++
			r.pop()
			return false
		}
	}
	r.fail(ExpectedCommaOrClose)
	r.err.Close = close
	return false
}

// pop closes the innermost array or object.
func (r *Reader) pop() {
	n := len(r.open) - 1
	if f := &r.open[n]; f.object {
		r.usedKeys = max(r.usedKeys, len(r.keys))
		r.keys = r.keys[:f.keys]
		if f.set >= 0 {
			r.dropSet()
		}
	}
	r.open = r.open[:n]
}

func (r *Reader) space() { r.i = SkipSpace(r.b, r.i) }

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

// fail records the first fault, at r.i.
func (r *Reader) fail(c Code) { r.failAt(c, r.i, r.i) }

// failAt is kept out of line: faults are rare, and the readers that call
// it stay small enough to inline.
//
//go:noinline
func (r *Reader) failAt(c Code, offset, start int) {
	if r.err == nil {
		r.err = &Error{Code: c, Offset: offset, Start: start, Path: r.path()}
	}
}

// path names where the reader is: the member or element it is in, in
// each open array and object.
func (r *Reader) path() []Segment {
	var path []Segment
	for _, f := range r.open {
		switch {
		case !f.in:
			return path
		case f.object:
			path = append(path, Segment{Key: f.key, Index: -1})
		default:
			path = append(path, Segment{Index: f.index})
		}
	}
	return path
}
