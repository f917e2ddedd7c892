package mcp

import (
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/portcullis-dev/portcullis/internal/strictjson"
)

// ---- the tree of an MCP message ----
//
// encoding/json keeps the last of duplicate keys and matches struct fields
// ignoring case, and other decoders differ again; so the body is read
// once, by the strict reader (internal/strictjson, keys compared ignoring
// case), into a small tree that keeps each value's exact bytes.

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

// limits are the strict reader's rules for MCP: keys compared ignoring
// case, as encoding/json matches struct fields (an upstream in Go would
// read "Name" as "name"), and at most mcpMaxDepth arrays and objects open.
var limits = strictjson.Limits{MaxDepth: mcpMaxDepth, MaxOpen: mcpMaxDepth, FoldKeys: true}

// jparser builds the tree of a message from what the strict reader reads,
// keeping what the levels say.
type jparser struct {
	r strictjson.Reader
	b []byte
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

// parsers lends parsers and their scratch space (the reader's key lists
// and paths) across requests; the tree a parse returns never points into
// them.
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
	if strictjson.SkipSpace(b, 0) == len(b) {
		return jvalue{}, mcpErrorf("body holds no JSON value")
	}
	p.r.Reset(b, limits)
	v := p.value(lvRoot)
	if err := p.r.End(); err != nil {
		return jvalue{}, p.refusal(err)
	}
	return v, nil
}

// release forgets a parse and returns p to parsers. keepArena lends the
// arena to the next parse too: only for a tree nothing uses any more
// (Parse copies out what it returns).
func (p *jparser) release(keepArena bool) {
	p.b, p.response = nil, false
	p.r.Reset(nil, strictjson.Limits{}) // drop references into the body
	clear(p.kept[:cap(p.kept)])
	p.kept = p.kept[:0]
	if keepArena && cap(p.arena) <= maxPooledArena {
		clear(p.arena[:cap(p.arena)])
		p.arena = p.arena[:0]
	} else {
		p.arena = nil
	}
	parsers.Put(p)
}

// maxPooledArena bounds the arena a pooled parser keeps.
const maxPooledArena = 4 * arenaMembers

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

// kinds are the tree's kinds of the reader's.
var kinds = [...]jkind{
	strictjson.Null:   jNull,
	strictjson.Bool:   jBool,
	strictjson.Number: jNumber,
	strictjson.String: jString,
	strictjson.Array:  jArray,
	strictjson.Object: jObject,
}

// value reads the next value at level lv. After a fault of the reader it
// returns whatever it has; parse reports the fault.
func (p *jparser) value(lv level) jvalue {
	r := &p.r
	k := r.Kind()
	start := r.Pos()
	switch k {
	case strictjson.Invalid:
		return jvalue{}
	case strictjson.Object:
		if lv == lvRoot {
			lv = lvMessage
		}
		if lv.keepsMembers() {
			return p.object(lv, start)
		}
	case strictjson.Array:
		if lv.keepsElems() {
			return p.array(lv, start)
		}
	case strictjson.String:
		if lv != lvNone {
			s := r.ReadString()
			return jvalue{kind: jString, raw: p.b[start:r.Pos()], str: intern(s)}
		}
	}
	return jvalue{kind: kinds[k], raw: r.Skip()}
}

func (p *jparser) object(lv level, start int) jvalue {
	r := &p.r
	r.Open()
	base := len(p.kept)
	for key, ok := r.Member(); ok; key, ok = r.Member() {
		val := p.value(lv.child(key, false, p.response))
		p.kept = append(p.kept, jmember{intern(key), val})
	}
	if r.Err() != nil {
		return jvalue{}
	}
	return jvalue{kind: jObject, raw: p.b[start:r.Pos()], members: p.arenaMembers(base)}
}

func (p *jparser) array(lv level, start int) jvalue {
	r := &p.r
	r.Open()
	v := jvalue{kind: jArray}
	for r.Element() {
		el := p.value(lv.child(nil, true, p.response))
		kept := new(jvalue)
		*kept = el
		v.elems = append(v.elems, kept)
	}
	if r.Err() != nil {
		return jvalue{}
	}
	v.raw = p.b[start:r.Pos()]
	return v
}

// refusal words a fault of the strict reader as the proxy's denial
// reason.
func (p *jparser) refusal(err error) *Error {
	var e *strictjson.Error
	if !errors.As(err, &e) {
		return mcpErrorf("invalid JSON: %v", err)
	}
	switch e.Code {
	case strictjson.TooDeep:
		return mcpErrorf("JSON nested deeper than %d", mcpMaxDepth)
	case strictjson.TrailingData:
		return mcpErrorf("trailing data after the JSON value at byte %d", e.Offset)
	case strictjson.DuplicateKey:
		where := where(e.Path[:len(e.Path)-1]) // the object's
		if string(e.Prev) == string(e.Key) {
			return mcpErrorf("duplicate key %q in %s", e.Key, where)
		}
		return mcpErrorf("duplicate key %q in %s (same as %q ignoring case)", e.Key, where, e.Prev)
	}
	if e.Offset >= len(p.b) {
		return mcpErrorf("invalid JSON: unexpected end of body (%s)", e.Reason())
	}
	return mcpErrorf("invalid JSON at byte %d: %s", e.Offset, e.Reason())
}

// where names a place for duplicate-key errors: "message 0" or "message 2
// at params.arguments.a[0]".
func where(path []strictjson.Segment) string {
	msg := "message 0"
	if len(path) > 0 && path[0].Index >= 0 {
		msg = "message " + strconv.Itoa(path[0].Index)
		path = path[1:]
	}
	if len(path) == 0 {
		return msg
	}
	var sb strings.Builder
	for i, e := range path {
		switch {
		case e.Index >= 0:
			sb.WriteString("[" + strconv.Itoa(e.Index) + "]")
		case i > 0:
			sb.WriteByte('.')
			fallthrough
		default:
			sb.Write(e.Key)
		}
	}
	return msg + " at " + sb.String()
}
