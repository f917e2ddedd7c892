package dataplane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/portcullis-dev/portcullis/policy"
)

// The MCP Streamable HTTP request headers, as the official Go SDK
// (github.com/modelcontextprotocol/go-sdk v1.8.0, mcp/streamable_headers.go)
// sends them. Header names are case-insensitive; ParseMCP matches them so.
const (
	HeaderMCPProtocolVersion = "Mcp-Protocol-Version" // the spec spells it MCP-Protocol-Version
	HeaderMCPSessionID       = "Mcp-Session-Id"
	HeaderMCPMethod          = "Mcp-Method" // 2026-07-28: the JSON-RPC method of the (single) message
	HeaderMCPName            = "Mcp-Name"   // 2026-07-28: params.name (tools/call, prompts/get) or params.uri (resources/read)
)

// MetaKeyProtocolVersion is the params._meta key by which MCP 2026-07-28
// carries the protocol version on every request (the Go SDK's
// mcp.MetaKeyProtocolVersion).
const MetaKeyProtocolVersion = "io.modelcontextprotocol/protocolVersion"

// KnownMCPVersions are the MCP protocol revisions, oldest first (the ones
// policy's mcp.versions may list).
var KnownMCPVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// BatchAllowed reports whether MCP protocol version allows JSON-RPC
// batching: only 2025-03-26 does (2025-06-18 removed it). A request naming
// no version is not allowed a batch.
func BatchAllowed(version string) bool { return version == "2025-03-26" }

// MCPRequest is one POST to an MCP endpoint, as the proxy will judge it.
type MCPRequest struct {
	Batch    bool
	Messages []MCPItem
	// Version is the MCP protocol version the request establishes: from the
	// MCP-Protocol-Version header, initialize's params.protocolVersion, and
	// params._meta (2026-07-28 carries it per request) — which must agree.
	// "" when none is given.
	Version string
}

// MCPItem is one JSON-RPC message of an MCPRequest. ID and
// Message.Arguments are copies: they do not alias the body ParseMCP read.
type MCPItem struct {
	ID      json.RawMessage   // the JSON-RPC id as sent (nil for notifications)
	Message policy.MCPMessage // Method, Tool, Arguments, ProtocolVersion (= MCPRequest.Version), Response
}

// MCPError is why ParseMCP refused a request. Any MCPError means: deny
// before policy, even in audit mode, and forward nothing.
type MCPError struct{ Reason string }

func (e *MCPError) Error() string { return e.Reason }

func mcpErrorf(format string, args ...any) *MCPError {
	return &MCPError{Reason: fmt.Sprintf(format, args...)}
}

// mcpMaxDepth bounds the nesting of arrays and objects (the Go SDK refuses
// deeper than 1000 too).
const mcpMaxDepth = 1000

// ParseMCP reads the headers and body of an MCP Streamable HTTP POST
// strictly. Any error is an *MCPError and means: deny before policy, even in
// audit mode, forward nothing.
//
// Refused: a non-identity Content-Encoding; an empty body, invalid UTF-8,
// anything but exactly one JSON value (trailing whitespace aside), invalid
// JSON, nesting deeper than 1000, a \u escape naming a lone surrogate; a
// duplicate object key at any depth, including keys equal ignoring case
// (Unicode simple folding, as encoding/json matches struct fields); a
// top-level value that is neither an object nor a non-empty array of
// objects; members other than jsonrpc, id, method, params, result and error,
// or one differing from those only in case; jsonrpc other than "2.0"; a
// method that is not a non-empty string; method together with result or
// error; an id that is not a string or an integer (int64); duplicate request
// ids in a batch; params or params._meta not an object; a response without
// id, with both or neither of result and error, or an error that is not an
// object; tools/call without params.name as a string or with
// params.arguments not an object; initialize without params.protocolVersion
// as a string, or inside a batch; Mcp-Method or Mcp-Name headers on a batch,
// given more than once, or disagreeing with the message; and any
// disagreement between the MCP-Protocol-Version header, initialize's
// params.protocolVersion and params._meta's protocol version, within one
// message or across a batch.
func ParseMCP(header http.Header, body []byte) (*MCPRequest, error) {
	if err := checkContentEncoding(header); err != nil {
		return nil, err
	}
	if len(body) == 0 {
		return nil, mcpErrorf("empty body")
	}
	if !utf8.Valid(body) {
		return nil, mcpErrorf("invalid UTF-8 at byte %d", invalidUTF8At(body))
	}
	root, err := parseJSONDocument(body)
	if err != nil {
		return nil, err
	}

	req := &MCPRequest{}
	var msgs []*jvalue
	switch root.kind {
	case jObject:
		msgs = []*jvalue{root}
	case jArray:
		if len(root.elems) == 0 {
			return nil, mcpErrorf("empty batch")
		}
		req.Batch = true
		for i, e := range root.elems {
			if e.kind != jObject {
				return nil, mcpErrorf("batch item %d is %s, not an object", i, e.kind)
			}
		}
		msgs = root.elems
	default:
		return nil, mcpErrorf("top-level JSON value is %s, not an object or array", root.kind)
	}

	var versions []versionSource
	if hv, ok, err := singleHeader(header, HeaderMCPProtocolVersion); err != nil {
		return nil, err
	} else if ok {
		if hv == "" {
			return nil, mcpErrorf("empty %s header", HeaderMCPProtocolVersion)
		}
		versions = append(versions, versionSource{hv, HeaderMCPProtocolVersion + " header"})
	}

	req.Messages = make([]MCPItem, len(msgs))
	parsed := make([]*parsedMessage, len(msgs))
	for i, m := range msgs {
		pm, err := parseMessage(m, i, req.Batch)
		if err != nil {
			return nil, err
		}
		parsed[i] = pm
		versions = append(versions, pm.versions...)
		req.Messages[i] = pm.item
	}
	if req.Batch {
		if err := checkBatchIDs(parsed); err != nil {
			return nil, err
		}
	}
	if err := checkRoutingHeaders(header, req.Batch, parsed); err != nil {
		return nil, err
	}
	for _, v := range versions[min(1, len(versions)):] {
		if v.value != versions[0].value {
			return nil, mcpErrorf("protocol version disagreement: %s says %q, %s says %q", versions[0].where, versions[0].value, v.where, v.value)
		}
	}
	if len(versions) > 0 {
		req.Version = versions[0].value
	}
	for i := range req.Messages {
		req.Messages[i].Message.ProtocolVersion = req.Version
	}
	return req, nil
}

// headerValues returns every value of the header name, matched
// case-insensitively (a hand-built http.Header need not be canonical) and
// with '_' standing for '-': WSGI and CGI servers fold Mcp_Method into the
// same variable as Mcp-Method, so an upstream behind one reads either.
func headerValues(h http.Header, name string) []string {
	var out []string
	for k, vs := range h {
		if sameFieldName(k, name) {
			out = append(out, vs...)
		}
	}
	return out
}

func sameFieldName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if x == '_' {
			x = '-'
		}
		if y == '_' {
			y = '-'
		}
		if x != y && !strings.EqualFold(string(x), string(y)) {
			return false
		}
	}
	return true
}

// singleHeader returns the one value of header name; more than one is an
// error (which would the upstream believe?).
func singleHeader(h http.Header, name string) (string, bool, error) {
	vs := headerValues(h, name)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		return vs[0], true, nil
	}
	return "", false, mcpErrorf("%s header given %d times", name, len(vs))
}

func checkContentEncoding(h http.Header) error {
	for _, v := range headerValues(h, "Content-Encoding") {
		for _, tok := range strings.Split(v, ",") {
			if !strings.EqualFold(strings.TrimSpace(tok), "identity") {
				return mcpErrorf("Content-Encoding %q is not identity", v)
			}
		}
	}
	return nil
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

type versionSource struct {
	value string
	where string
}

// parsedMessage is one message and what the header checks need of it.
type parsedMessage struct {
	item     MCPItem
	index    int
	versions []versionSource
	params   *jvalue // nil if absent
	idKey    string  // canonical id, "" for notifications
}

var allMembers = []string{"jsonrpc", "id", "method", "params", "result", "error"}

func parseMessage(m *jvalue, i int, batch bool) (*parsedMessage, error) {
	pm := &parsedMessage{index: i}
	where := fmt.Sprintf("message %d", i)
	for _, mem := range m.members {
		if slices.Contains(allMembers, mem.key) {
			continue
		}
		for _, k := range allMembers {
			if strings.EqualFold(mem.key, k) {
				return nil, mcpErrorf("member %q in %s differs from %q only in case", mem.key, where, k)
			}
		}
		return nil, mcpErrorf("unknown member %q in %s", mem.key, where)
	}
	jv := m.get("jsonrpc")
	switch {
	case jv == nil:
		return nil, mcpErrorf("%s has no \"jsonrpc\"", where)
	case jv.kind != jString || jv.str != "2.0":
		return nil, mcpErrorf("\"jsonrpc\" in %s is not \"2.0\"", where)
	}
	method, id, params := m.get("method"), m.get("id"), m.get("params")
	result, rpcErr := m.get("result"), m.get("error")

	if method == nil {
		// A client→server response (to elicitation, sampling, roots/list).
		switch {
		case result == nil && rpcErr == nil:
			return nil, mcpErrorf("%s has neither \"method\" nor \"result\"/\"error\"", where)
		case result != nil && rpcErr != nil:
			return nil, mcpErrorf("%s has both \"result\" and \"error\"", where)
		case params != nil:
			return nil, mcpErrorf("%s is a response but has \"params\"", where)
		case id == nil:
			return nil, mcpErrorf("response %s has no \"id\"", where)
		case rpcErr != nil && rpcErr.kind != jObject:
			return nil, mcpErrorf("\"error\" in %s is not an object", where)
		}
		key, err := idKey(id, where)
		if err != nil {
			return nil, err
		}
		pm.idKey = "r" + key
		pm.item = MCPItem{ID: bytes.Clone(id.raw), Message: policy.MCPMessage{Response: true}}
		return pm, nil
	}

	switch {
	case method.kind != jString:
		return nil, mcpErrorf("\"method\" in %s is %s, not a string", where, method.kind)
	case method.str == "":
		return nil, mcpErrorf("empty \"method\" in %s", where)
	case result != nil:
		return nil, mcpErrorf("%s has both \"method\" and \"result\"", where)
	case rpcErr != nil:
		return nil, mcpErrorf("%s has both \"method\" and \"error\"", where)
	case params != nil && params.kind != jObject:
		return nil, mcpErrorf("\"params\" in %s is %s, not an object", where, params.kind)
	}
	pm.item.Message.Method = method.str
	pm.params = params
	if id != nil {
		key, err := idKey(id, where)
		if err != nil {
			return nil, err
		}
		pm.idKey = "q" + key
		pm.item.ID = bytes.Clone(id.raw)
	}
	if params == nil {
		switch method.str {
		case "tools/call", "initialize":
			return nil, mcpErrorf("%s %s has no \"params\"", method.str, where)
		}
		return pm, nil
	}

	meta, err := params.lookup("_meta", where+" params")
	if err != nil {
		return nil, err
	}
	if meta != nil {
		if meta.kind != jObject {
			return nil, mcpErrorf("\"params._meta\" in %s is %s, not an object", where, meta.kind)
		}
		pv, err := meta.lookup(MetaKeyProtocolVersion, where+" params._meta")
		if err != nil {
			return nil, err
		}
		if pv != nil {
			if pv.kind != jString || pv.str == "" {
				return nil, mcpErrorf("params._meta[%q] in %s is not a non-empty string", MetaKeyProtocolVersion, where)
			}
			pm.versions = append(pm.versions, versionSource{pv.str, where + " params._meta"})
		}
	}

	switch method.str {
	case "initialize":
		if batch {
			return nil, mcpErrorf("initialize (%s) inside a batch", where)
		}
		pv, err := params.lookup("protocolVersion", where+" params")
		if err != nil {
			return nil, err
		}
		if pv == nil || pv.kind != jString || pv.str == "" {
			return nil, mcpErrorf("initialize %s has no params.protocolVersion string", where)
		}
		pm.versions = append(pm.versions, versionSource{pv.str, where + " params.protocolVersion"})
	case "tools/call":
		name, err := params.lookup("name", where+" params")
		if err != nil {
			return nil, err
		}
		switch {
		case name == nil:
			return nil, mcpErrorf("tools/call %s has no params.name", where)
		case name.kind != jString:
			return nil, mcpErrorf("params.name in tools/call %s is %s, not a string", where, name.kind)
		}
		pm.item.Message.Tool = name.str
		args, err := params.lookup("arguments", where+" params")
		if err != nil {
			return nil, err
		}
		if args != nil {
			if args.kind != jObject {
				return nil, mcpErrorf("params.arguments in tools/call %s is %s, not an object", where, args.kind)
			}
			pm.item.Message.Arguments = bytes.Clone(args.raw)
		}
	}
	return pm, nil
}

// idKey checks a JSON-RPC id (a string or an integer; MCP forbids null) and
// returns a canonical form for duplicate detection.
func idKey(id *jvalue, where string) (string, error) {
	switch id.kind {
	case jString:
		return "s" + id.str, nil
	case jNumber:
		if bytes.ContainsAny(id.raw, ".eE") {
			return "", mcpErrorf("\"id\" in %s is not an integer", where)
		}
		n, err := strconv.ParseInt(string(id.raw), 10, 64)
		if err != nil {
			return "", mcpErrorf("\"id\" in %s is out of range", where)
		}
		return "n" + strconv.FormatInt(n, 10), nil
	}
	return "", mcpErrorf("\"id\" in %s is %s, not a string or integer", where, id.kind)
}

// checkBatchIDs refuses two requests (or two responses) of a batch with the
// same id: their answers could not be told apart.
func checkBatchIDs(msgs []*parsedMessage) error {
	seen := make(map[string]int, len(msgs))
	for _, pm := range msgs {
		if pm.idKey == "" {
			continue
		}
		if j, dup := seen[pm.idKey]; dup {
			return mcpErrorf("messages %d and %d of the batch share the id %s", j, pm.index, pm.item.ID)
		}
		seen[pm.idKey] = pm.index
	}
	return nil
}

// checkRoutingHeaders makes Mcp-Method and Mcp-Name (MCP 2026-07-28) agree
// with the body: an upstream routing on them must see the call the proxy
// judged.
func checkRoutingHeaders(h http.Header, batch bool, msgs []*parsedMessage) error {
	hm, hasMethod, err := singleHeader(h, HeaderMCPMethod)
	if err != nil {
		return err
	}
	hn, hasName, err := singleHeader(h, HeaderMCPName)
	if err != nil {
		return err
	}
	if batch && (hasMethod || hasName) {
		return mcpErrorf("%s/%s headers on a batch", HeaderMCPMethod, HeaderMCPName)
	}
	if !hasMethod && !hasName {
		return nil
	}
	pm := msgs[0]
	method := pm.item.Message.Method
	if hasMethod {
		switch {
		case pm.item.Message.Response:
			return mcpErrorf("%s header %q on a JSON-RPC response", HeaderMCPMethod, hm)
		case hm != method:
			return mcpErrorf("%s header %q does not match method %q", HeaderMCPMethod, hm, method)
		}
	}
	if !hasName {
		return nil
	}
	// The Go SDK sends Mcp-Name for the three methods that name something.
	var field string
	switch method {
	case "tools/call", "prompts/get":
		field = "name"
	case "resources/read":
		field = "uri"
	default:
		if pm.item.Message.Response {
			return mcpErrorf("%s header %q on a JSON-RPC response", HeaderMCPName, hn)
		}
		return mcpErrorf("%s header %q on method %q, which names nothing", HeaderMCPName, hn, method)
	}
	var v *jvalue
	if pm.params != nil {
		if v, err = pm.params.lookup(field, "message 0 params"); err != nil {
			return err
		}
	}
	if v == nil || v.kind != jString {
		return mcpErrorf("%s header %q but %s message 0 has no params.%s string", HeaderMCPName, hn, method, field)
	}
	if v.str != hn {
		return mcpErrorf("%s header %q does not match params.%s %q", HeaderMCPName, hn, field, v.str)
	}
	return nil
}

// DenyBody is the JSON-RPC error response the proxy sends when it denies an
// MCP request: one error object per request id, in order; nil ids (for
// notifications and responses) get none. ids with more than one entry (nil
// ones included) are a batch and are answered with a JSON array; when
// nothing has an id the answer is a single error object with id null. code
// should be in the implementation-defined range -32099..-32000; a code
// outside it is replaced by -32000. data, if not nil, is the error's data
// member (dropped if it does not marshal). MCPRequest.DenyBody also answers
// a batch of one message with an array.
func DenyBody(ids []json.RawMessage, code int, message string, data any) []byte {
	return denyBody(ids, len(ids) > 1, code, message, data)
}

// DenyBody is the denial answer to r: DenyBody of its request ids, and an
// array whenever r is a batch and some message has an id to answer.
func (r *MCPRequest) DenyBody(code int, message string, data any) []byte {
	ids := make([]json.RawMessage, 0, len(r.Messages))
	for _, m := range r.Messages {
		if !m.Message.Response {
			ids = append(ids, m.ID)
		}
	}
	return denyBody(ids, r.Batch, code, message, data)
}

type jsonrpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

type jsonrpcErrorResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   jsonrpcError    `json:"error"`
}

func denyBody(ids []json.RawMessage, batch bool, code int, message string, data any) []byte {
	if code < -32099 || code > -32000 {
		code = -32000
	}
	e := jsonrpcError{Code: code, Message: message}
	if data != nil {
		if d, err := json.Marshal(data); err == nil {
			e.Data = d
		}
	}
	var out []jsonrpcErrorResponse
	for _, id := range ids {
		if id == nil {
			continue
		}
		if !json.Valid(id) {
			id = nil // not from ParseMCP; answer it as unidentifiable
		}
		out = append(out, jsonrpcErrorResponse{JSONRPC: "2.0", ID: id, Error: e})
	}
	var v any
	switch {
	case len(out) == 0:
		v = jsonrpcErrorResponse{JSONRPC: "2.0", Error: e}
	case len(out) == 1 && !batch:
		v = out[0]
	default:
		v = out
	}
	b, err := json.Marshal(v)
	if err != nil { // cannot happen: every field is plain or checked
		return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"denied"}}`)
	}
	return b
}

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
	val *jvalue
}

// get returns the member with exactly this key.
func (v *jvalue) get(key string) *jvalue {
	for _, m := range v.members {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// lookup returns the member with exactly this key, and refuses a member
// whose key equals it only ignoring case (a case-insensitive decoder
// upstream would read that one).
func (v *jvalue) lookup(key, where string) (*jvalue, error) {
	for _, m := range v.members {
		if m.key != key && strings.EqualFold(m.key, key) {
			return nil, mcpErrorf("key %q in %s differs from %q only in case", m.key, where, key)
		}
	}
	return v.get(key), nil
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
)

// child is the level of a member (elem false) or element (elem true) of a
// value at lv.
func (lv level) child(key []byte, elem bool) level {
	switch lv {
	case lvRoot:
		return lvMessage
	case lvMessage:
		if string(key) == "params" {
			return lvParams
		}
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

func parseJSONDocument(b []byte) (*jvalue, error) {
	p := parsers.Get().(*jparser)
	defer func() {
		p.reset()
		parsers.Put(p)
	}()
	p.b = b
	p.skipSpace()
	if p.i == len(b) {
		return nil, mcpErrorf("body holds no JSON value")
	}
	v, err := p.value(0, lvRoot)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i != len(b) {
		return nil, mcpErrorf("trailing data after the JSON value at byte %d", p.i)
	}
	return &v, nil
}

// reset forgets a parse but keeps the scratch capacity (and the hash seed).
func (p *jparser) reset() {
	p.b, p.i = nil, 0
	p.path = p.path[:0]
	for i := range p.keys {
		clear(p.keys[i][:cap(p.keys[i])]) // drop references into the body
		p.keys[i] = p.keys[i][:0]
	}
	p.fold = p.fold[:0]
	p.hashes = p.hashes[:0]
}

func (p *jparser) skipSpace() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jparser) syntaxErr(what string) *MCPError {
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
			v.str = string(s)
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
	if depth >= mcpMaxDepth {
		return jvalue{}, mcpErrorf("JSON nested deeper than %d", mcpMaxDepth)
	}
	start := p.i
	p.i++ // {
	v := jvalue{kind: jObject}
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		v.raw = p.b[start:p.i]
		return v, nil
	}
	for len(p.keys) <= depth {
		p.keys = append(p.keys, nil)
	}
	keys := p.keys[depth][:0]
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
		val, err := p.value(depth+1, lv.child(key, false))
		p.path = p.path[:len(p.path)-1]
		if err != nil {
			return jvalue{}, err
		}
		if lv == lvMessage || lv == lvParams || lv == lvMeta {
			kept := new(jvalue) // not &val: that would move every val to the heap
			*kept = val
			v.members = append(v.members, jmember{string(key), kept})
		}
		p.skipSpace()
		if p.i >= len(p.b) {
			return jvalue{}, p.syntaxErr("expected ',' or '}'")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			continue
		case '}':
			p.i++
			v.raw = p.b[start:p.i]
			p.keys[depth] = keys
			return v, p.checkKeys(keys)
		}
		return jvalue{}, p.syntaxErr("expected ',' or '}'")
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
	if depth >= mcpMaxDepth {
		return jvalue{}, mcpErrorf("JSON nested deeper than %d", mcpMaxDepth)
	}
	start := p.i
	p.i++ // [
	v := jvalue{kind: jArray}
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		v.raw = p.b[start:p.i]
		return v, nil
	}
	for n := 0; ; n++ {
		p.skipSpace()
		p.path = append(p.path, pathElem{idx: n})
		el, err := p.value(depth+1, lv.child(nil, true))
		p.path = p.path[:len(p.path)-1]
		if err != nil {
			return jvalue{}, err
		}
		if lv == lvRoot {
			kept := new(jvalue)
			*kept = el
			v.elems = append(v.elems, kept)
		}
		p.skipSpace()
		if p.i >= len(p.b) {
			return jvalue{}, p.syntaxErr("expected ',' or ']'")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
			continue
		case ']':
			p.i++
			v.raw = p.b[start:p.i]
			return v, nil
		}
		return jvalue{}, p.syntaxErr("expected ',' or ']'")
	}
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
