package mcp

import (
	"bytes"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/portcullis-dev/portcullis/dataplane/jsonlex"
)

// ---- a strict JSON reader ----
//
// encoding/json keeps the last of duplicate keys and matches struct fields
// ignoring case, and other decoders differ again; so the body is read here,
// once, into a small tree that keeps each value's exact bytes, and every
// ambiguity is an error.

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

func (k jkind) String() string {
	switch k {
	case jNull:
		return "null"
	case jBool:
		return "a boolean"
	case jNumber:
		return "a number"
	case jString:
		return "a string"
	case jArray:
		return "an array"
	}
	return "an object"
}

type jvalue struct {
	kind    jkind
	raw     []byte    // the value's bytes as sent
	str     string    // decoded, for strings (see level)
	members []jmember // objects (see level)
	elems   []*jvalue // arrays (see level)
}

type jmember struct {
	key string
	val jvalue
}

// get returns the member with exactly this key.
func (v *jvalue) get(key string) *jvalue {
	for i := range v.members {
		if v.members[i].key == key {
			return &v.members[i].val
		}
	}
	return nil
}

// lookup returns the member with exactly this key, and refuses a member
// whose key equals it only ignoring case (a case-insensitive decoder
// upstream would read that one). where+in names the object in that
// error (two strings, so that no name is built unless it is needed).
func (v *jvalue) lookup(key, where, in string) (*jvalue, error) {
	for _, m := range v.members {
		if m.key != key && strings.EqualFold(m.key, key) {
			return nil, mcpErrorf("key %q in %s differs from %q only in case", m.key, where+in, key)
		}
	}
	return v.get(key), nil
}

// intern returns b as a string, without allocating for the keys and
// values every MCP message carries.
func intern(b []byte) string {
	switch string(b) {
	case "jsonrpc":
		return "jsonrpc"
	case "id":
		return "id"
	case "method":
		return "method"
	case "params":
		return "params"
	case "result":
		return "result"
	case "error":
		return "error"
	case "_meta":
		return "_meta"
	case "progressToken":
		return "progressToken"
	case "name":
		return "name"
	case "arguments":
		return "arguments"
	case "2.0":
		return "2.0"
	case "tools/call":
		return "tools/call"
	case "tools/list":
		return "tools/list"
	case "initialize":
		return "initialize"
	case "notifications/initialized":
		return "notifications/initialized"
	case "tools":
		return "tools"
	case "description":
		return "description"
	case "inputSchema":
		return "inputSchema"
	case "content":
		return "content"
	}
	return string(b)
}

// level says how much of a value the tree keeps: the batch's elements, the
// members of messages, of their params and of params._meta, and the
// decoded text of the strings directly inside those. Everything else is
// checked (syntax, duplicate keys) but only its kind and bytes are kept,
// without allocating.
type level uint8

const (
	lvRoot    level = iota // keeps array elements; an object root is a message
	lvMessage              // keeps members
	lvParams               // keeps members
	lvMeta                 // keeps members
	lvLeaf                 // strings decoded
	lvNone                 // bytes only

	// A server's response (readResponse): its result, a tools/list
	// result's tools and each tool keep what the proxy reads of them.
	lvResult   // keeps members
	lvToolList // keeps array elements
	lvTool     // keeps members
)

// keepsMembers and keepsElems say which levels an object's members or an
// array's elements are kept at.
func (lv level) keepsMembers() bool {
	return lv == lvMessage || lv == lvParams || lv == lvMeta || lv == lvResult || lv == lvTool
}

func (lv level) keepsElems() bool { return lv == lvRoot || lv == lvToolList }

// child is the level of a member (elem false) or element (elem true) of a
// value at lv; response is set when reading a server's response.
func (lv level) child(key []byte, elem, response bool) level {
	switch lv {
	case lvRoot:
		return lvMessage
	case lvMessage:
		if string(key) == "params" {
			return lvParams
		}
		if response && string(key) == "result" && !elem {
			return lvResult
		}
	case lvResult:
		if string(key) == "tools" && !elem {
			return lvToolList
		}
	case lvToolList:
		if elem {
			return lvTool
		}
		return lvNone
	case lvTool:
	case lvParams:
		if string(key) == "_meta" {
			return lvMeta
		}
	case lvMeta:
	default:
		return lvNone
	}
	if elem { // an array where a message, params or _meta should be
		return lvNone
	}
	return lvLeaf
}

// smallObject is the size up to which an object's keys are compared
// pairwise; larger objects sort hashes of their folded keys.
const smallObject = 8

type jparser struct {
	b       []byte
	i       int
	path    []pathElem   // where we are, for error messages
	keys    [][]keyEntry // per depth: the keys of the object being read
	fold    []byte       // scratch for folding a key
	hashes  []uint64     // scratch for a large object's key hashes
	seed    maphash.Seed
	hasSeed bool
	// response reads a server's response, keeping its result (lvResult)
	// rather than a request's params.
	response bool
	// kept holds the kept members of the objects being read, innermost
	// last (scratch); an object's go to arena when it closes.
	kept []jmember
	// arena is where the members of this parse's objects are stored,
	// several objects to one allocation. It belongs to the tree: a new
	// one is made for every parse.
	arena []jmember
}

type pathElem struct {
	key []byte // a member's key, or
	idx int    // an array index (-1 for a member)
}

type keyEntry struct {
	key []byte // decoded
}

// parsers lends parsers and their scratch space (key lists, paths) across
// requests; the tree a parse returns never points into them.
var parsers = sync.Pool{New: func() any { return new(jparser) }}

// parseJSON reads b, a request's body or (response) a server's message,
// into a tree that is the caller's.
func parseJSON(b []byte, response bool) (*jvalue, error) {
	p := parsers.Get().(*jparser)
	defer p.release(false)
	v, err := p.parse(b, response)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// parse reads b with p.
func (p *jparser) parse(b []byte, response bool) (jvalue, error) {
	p.b, p.response = b, response
	p.skipSpace()
	if p.i == len(b) {
		return jvalue{}, mcpErrorf("body holds no JSON value")
	}
	v, err := p.value(0, lvRoot)
	if err != nil {
		return jvalue{}, err
	}
	p.skipSpace()
	if p.i != len(b) {
		return jvalue{}, mcpErrorf("trailing data after the JSON value at byte %d", p.i)
	}
	return v, nil
}

// release forgets a parse and returns p to parsers. keepArena lends the
// arena to the next parse too: only for a tree nothing uses any more
// (Parse copies out what it returns).
func (p *jparser) release(keepArena bool) {
	p.reset()
	if keepArena && cap(p.arena) <= maxPooledArena {
		clear(p.arena[:cap(p.arena)]) // drop references into the body
		p.arena = p.arena[:0]
	} else {
		p.arena = nil
	}
	parsers.Put(p)
}

// maxPooledArena bounds the arena a pooled parser keeps.
const maxPooledArena = 4 * arenaMembers

// reset forgets a parse but keeps the scratch capacity (and the hash seed);
// release decides about the arena.
func (p *jparser) reset() {
	p.b, p.i, p.response = nil, 0, false
	p.path = p.path[:0]
	for i := range p.keys {
		clear(p.keys[i][:cap(p.keys[i])]) // drop references into the body
		p.keys[i] = p.keys[i][:0]
	}
	p.fold = p.fold[:0]
	p.hashes = p.hashes[:0]
	clear(p.kept[:cap(p.kept)]) // drop references into the body
	p.kept = p.kept[:0]
}

// arenaMembers is the members of an object that closes: those kept from
// base on, moved to the arena.
func (p *jparser) arenaMembers(base int) []jmember {
	n := len(p.kept) - base
	if n == 0 {
		return nil
	}
	if cap(p.arena)-len(p.arena) < n {
		p.arena = make([]jmember, 0, max(n, arenaMembers))
	}
	l := len(p.arena)
	p.arena = append(p.arena, p.kept[base:]...)
	clear(p.kept[base:])
	p.kept = p.kept[:base]
	return p.arena[l : l+n : l+n]
}

// arenaMembers is how many members an arena holds: a tools/call with
// its _meta needs about ten.
const arenaMembers = 12

func (p *jparser) skipSpace() { p.i = jsonlex.SkipSpace(p.b, p.i) }

func (p *jparser) syntaxErr(what string) *Error {
	if p.i >= len(p.b) {
		return mcpErrorf("invalid JSON: unexpected end of body (%s)", what)
	}
	return mcpErrorf("invalid JSON at byte %d: %s", p.i, what)
}

// where names the current position for duplicate-key errors: "message 0"
// or "message 2 at params.arguments.a[0]".
func (p *jparser) where() string {
	path := p.path
	msg := "message 0"
	if len(path) > 0 && path[0].idx >= 0 {
		msg = "message " + strconv.Itoa(path[0].idx)
		path = path[1:]
	}
	if len(path) == 0 {
		return msg
	}
	var sb strings.Builder
	for i, e := range path {
		switch {
		case e.idx >= 0:
			sb.WriteString("[" + strconv.Itoa(e.idx) + "]")
		case i > 0:
			sb.WriteByte('.')
			fallthrough
		default:
			sb.Write(e.key)
		}
	}
	return msg + " at " + sb.String()
}

func (p *jparser) value(depth int, lv level) (jvalue, error) {
	if p.i >= len(p.b) {
		return jvalue{}, p.syntaxErr("expected a value")
	}
	start := p.i
	if c := p.b[p.i]; (c == '{' || c == '[') && depth >= mcpMaxDepth {
		return jvalue{}, mcpErrorf("JSON nested deeper than %d", mcpMaxDepth)
	}
	switch c := p.b[p.i]; {
	case c == '{':
		if lv == lvRoot {
			lv = lvMessage
		}
		return p.object(depth, lv)
	case c == '[':
		return p.array(depth, lv)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return jvalue{}, err
		}
		v := jvalue{kind: jString, raw: p.b[start:p.i]}
		if lv != lvNone {
			v.str = intern(s)
		}
		return v, nil
	case c == '-' || (c >= '0' && c <= '9'):
		if err := p.number(); err != nil {
			return jvalue{}, err
		}
		return jvalue{kind: jNumber, raw: p.b[start:p.i]}, nil
	case bytes.HasPrefix(p.b[p.i:], []byte("true")):
		p.i += 4
		return jvalue{kind: jBool, raw: p.b[start:p.i]}, nil
	case bytes.HasPrefix(p.b[p.i:], []byte("false")):
		p.i += 5
		return jvalue{kind: jBool, raw: p.b[start:p.i]}, nil
	case bytes.HasPrefix(p.b[p.i:], []byte("null")):
		p.i += 4
		return jvalue{kind: jNull, raw: p.b[start:p.i]}, nil
	}
	return jvalue{}, p.syntaxErr("expected a value")
}

func (p *jparser) object(depth int, lv level) (jvalue, error) {
	start := p.i
	p.i++ // {
	v := jvalue{kind: jObject}
	if p.closesAt('}') {
		v.raw = p.b[start:p.i]
		return v, nil
	}
	for len(p.keys) <= depth {
		p.keys = append(p.keys, nil)
	}
	keys := p.keys[depth][:0]
	base := len(p.kept)
	for {
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return jvalue{}, p.syntaxErr("expected a string key")
		}
		key, err := p.str()
		if err != nil {
			return jvalue{}, err
		}
		keys = append(keys, keyEntry{key: key})
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return jvalue{}, p.syntaxErr("expected ':'")
		}
		p.i++
		p.skipSpace()
		p.keys[depth] = keys // a nested object at this depth+1 uses its own slot
		p.path = append(p.path, pathElem{key: key, idx: -1})
		val, err := p.value(depth+1, lv.child(key, false, p.response))
		p.path = p.path[:len(p.path)-1]
		if err != nil {
			return jvalue{}, err
		}
		if lv.keepsMembers() {
			p.kept = append(p.kept, jmember{intern(key), val})
		}
		done, err := p.next('}')
		if err != nil {
			return jvalue{}, err
		}
		if done {
			v.raw = p.b[start:p.i]
			v.members = p.arenaMembers(base)
			p.keys[depth] = keys
			return v, p.checkKeys(keys)
		}
	}
}

// checkKeys refuses two keys of one object that are equal, or equal
// ignoring case (Unicode simple folding, as strings.EqualFold and
// encoding/json's field matching).
func (p *jparser) checkKeys(keys []keyEntry) error {
	if len(keys) <= smallObject {
		for j := 1; j < len(keys); j++ {
			for i := 0; i < j; i++ {
				if bytes.EqualFold(keys[i].key, keys[j].key) {
					return p.duplicate(keys[i].key, keys[j].key)
				}
			}
		}
		return nil
	}
	if !p.hasSeed {
		p.seed, p.hasSeed = maphash.MakeSeed(), true
	}
	hashes := p.hashes[:0]
	for _, k := range keys {
		p.fold = appendFolded(p.fold[:0], k.key)
		hashes = append(hashes, maphash.Bytes(p.seed, p.fold))
	}
	p.hashes = hashes
	slices.Sort(hashes)
	collision := false
	for i := 1; i < len(hashes); i++ {
		if hashes[i] == hashes[i-1] {
			collision = true
			break
		}
	}
	if !collision {
		return nil
	}
	// Some keys hash alike (a duplicate, almost surely): find the first
	// one in document order.
	first := make(map[string]int, len(keys))
	for j, k := range keys {
		f := string(appendFolded(nil, k.key))
		if i, dup := first[f]; dup {
			return p.duplicate(keys[i].key, k.key)
		}
		first[f] = j
	}
	return nil
}

func (p *jparser) duplicate(prev, key []byte) error {
	if bytes.Equal(prev, key) {
		return mcpErrorf("duplicate key %q in %s", key, p.where())
	}
	return mcpErrorf("duplicate key %q in %s (same as %q ignoring case)", key, p.where(), prev)
}

func (p *jparser) array(depth int, lv level) (jvalue, error) {
	start := p.i
	p.i++ // [
	v := jvalue{kind: jArray}
	if p.closesAt(']') {
		v.raw = p.b[start:p.i]
		return v, nil
	}
	for n := 0; ; n++ {
		p.skipSpace()
		p.path = append(p.path, pathElem{idx: n})
		el, err := p.value(depth+1, lv.child(nil, true, p.response))
		p.path = p.path[:len(p.path)-1]
		if err != nil {
			return jvalue{}, err
		}
		if lv.keepsElems() {
			kept := new(jvalue)
			*kept = el
			v.elems = append(v.elems, kept)
		}
		done, err := p.next(']')
		if err != nil {
			return jvalue{}, err
		}
		if done {
			v.raw = p.b[start:p.i]
			return v, nil
		}
	}
}

// closesAt reports whether the object or array just opened is empty
// (jsonlex.Empty).
func (p *jparser) closesAt(closing byte) bool {
	var empty bool
	p.i, empty = jsonlex.Empty(p.b, p.i, closing)
	return empty
}

// next reads the ',' or closing byte after a member or element
// (jsonlex.Next); anything else is a syntax error at that byte.
func (p *jparser) next(closing byte) (done bool, err error) {
	var ok bool
	p.i, done, ok = jsonlex.Next(p.b, p.i, closing)
	if !ok {
		return false, p.syntaxErr("expected ',' or '" + string(rune(closing)) + "'")
	}
	return done, nil
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *jparser) number() error {
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case digits() == 0:
		return p.syntaxErr("invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return p.syntaxErr("invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return p.syntaxErr("invalid number")
		}
	}
	// A number runs into the next token only through a delimiter; "01" or
	// "1x" leave a digit or letter here, which the caller reports.
	return nil
}

// str reads the string at p.i (the body is already valid UTF-8) and returns
// it decoded: the body's own bytes when it has no escapes. Control
// characters must be escaped; \u escapes must not name lone surrogates.
func (p *jparser) str() ([]byte, error) {
	p.i++ // "
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], nil
		case c == '\\':
			return p.strEscaped(start)
		case c < 0x20:
			return nil, p.syntaxErr("control character in string")
		}
		p.i++
	}
	return nil, p.syntaxErr("unterminated string")
}

func (p *jparser) strEscaped(start int) ([]byte, error) {
	buf := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return buf, nil
		case c < 0x20:
			return nil, p.syntaxErr("control character in string")
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		p.i++ // backslash
		if p.i >= len(p.b) {
			break
		}
		e := p.b[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return nil, p.syntaxErr("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				if r >= 0xDC00 || !bytes.HasPrefix(p.b[p.i:], []byte(`\u`)) {
					return nil, p.syntaxErr("\\u escape names a lone surrogate")
				}
				p.i += 2
				r2, ok := p.hex4()
				if !ok {
					return nil, p.syntaxErr("invalid \\u escape")
				}
				if r = utf16.DecodeRune(r, r2); r == unicode.ReplacementChar {
					return nil, p.syntaxErr("\\u escape names a lone surrogate")
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			p.i--
			return nil, p.syntaxErr("invalid escape")
		}
	}
	return nil, p.syntaxErr("unterminated string")
}

func (p *jparser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// appendFolded appends to dst a canonical form of s such that two keys
// fold alike exactly when bytes.EqualFold holds: every rune becomes the
// smallest rune of its simple case-folding orbit (so "K", "k" and the
// Kelvin sign agree, as do "S", "s" and "ſ").
func appendFolded(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		i += n
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		dst = utf8.AppendRune(dst, m)
	}
	return dst
}
