package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/portcullis-dev/portcullis/policy"
)

// The MCP Streamable HTTP request headers, as the official Go SDK
// (github.com/modelcontextprotocol/go-sdk v1.8.0, mcp/streamable_headers.go)
// sends them. Header names are case-insensitive; Parse matches them so.
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

// KnownVersions are the MCP protocol revisions, oldest first (the ones
// policy's mcp.versions may list).
var KnownVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// BatchAllowed reports whether MCP protocol version allows JSON-RPC
// batching: only 2025-03-26 does (2025-06-18 removed it). A request naming
// no version is not allowed a batch.
func BatchAllowed(version string) bool { return version == "2025-03-26" }

// Request is one POST to an MCP endpoint, as the proxy will judge it.
type Request struct {
	Batch    bool
	Messages []Item
	// Version is the MCP protocol version the request establishes: from the
	// MCP-Protocol-Version header, initialize's params.protocolVersion, and
	// params._meta (2026-07-28 carries it per request) — which must agree.
	// "" when none is given.
	Version string
}

// Item is one JSON-RPC message of an Request. ID and
// Message.Arguments are copies: they do not alias the body Parse read.
type Item struct {
	ID      json.RawMessage   // the JSON-RPC id as sent (nil for notifications)
	Message policy.MCPMessage // Method, Tool, Prompt, Resource, Arguments, ProtocolVersion (= Request.Version), Response
}

// Error is why Parse refused a request. Any Error means: deny
// before policy, even in audit mode, and forward nothing.
type Error struct{ Reason string }

func (e *Error) Error() string { return e.Reason }

func mcpErrorf(format string, args ...any) *Error {
	return &Error{Reason: fmt.Sprintf(format, args...)}
}

// mcpMaxDepth bounds the nesting of arrays and objects (the Go SDK refuses
// deeper than 1000 too).
const mcpMaxDepth = 1000

// Parse reads the headers and body of an MCP Streamable HTTP POST
// strictly. Any error is an *Error and means: deny before policy, even in
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
// params.arguments not an object; prompts/get without params.name as a
// string; resources/read, resources/subscribe or resources/unsubscribe
// without params.uri as a string; initialize without params.protocolVersion
// as a string, or inside a batch; Mcp-Method or Mcp-Name headers on a batch,
// given more than once, or disagreeing with the message; and any
// disagreement between the MCP-Protocol-Version header, initialize's
// params.protocolVersion and params._meta's protocol version, within one
// message or across a batch.
func Parse(header http.Header, body []byte) (*Request, error) {
	fields := readHeaderFields(header)
	if err := checkContentEncoding(fields.encoding); err != nil {
		return nil, err
	}
	if len(body) == 0 {
		return nil, mcpErrorf("empty body")
	}
	if !utf8.Valid(body) {
		return nil, mcpErrorf("invalid UTF-8 at byte %d", invalidUTF8At(body))
	}
	p := parsers.Get().(*jparser)
	// The tree is read only here: what Parse returns is copied out of it
	// (strings, and the cloned ID and Arguments), so its arena is lent to
	// the next parse.
	defer p.release(true)
	root, err := p.parse(body, false)
	if err != nil {
		return nil, err
	}

	var req *Request
	var msgs []*jvalue
	switch root.kind {
	case jObject:
		msgs = []*jvalue{&root}
		// One allocation for the request and its one message.
		one := &struct {
			req  Request
			item [1]Item
		}{}
		req = &one.req
		req.Messages = one.item[:]
	case jArray:
		if len(root.elems) == 0 {
			return nil, mcpErrorf("empty batch")
		}
		req = &Request{Batch: true, Messages: make([]Item, len(root.elems))}
		for i, e := range root.elems {
			if e.kind != jObject {
				return nil, mcpErrorf("batch item %d is %s, not an object", i, e.kind)
			}
		}
		msgs = root.elems
	default:
		return nil, mcpErrorf("top-level JSON value is %s, not an object or array", root.kind)
	}

	var scratch [4]versionSource
	versions := scratch[:0]
	if hv, ok, err := singleHeader(fields.version, HeaderMCPProtocolVersion); err != nil {
		return nil, err
	} else if ok {
		if hv == "" {
			return nil, mcpErrorf("empty %s header", HeaderMCPProtocolVersion)
		}
		versions = append(versions, versionSource{hv, HeaderMCPProtocolVersion + " header", ""})
	}

	var one [1]parsedMessage
	parsed := one[:]
	if len(msgs) > 1 {
		parsed = make([]parsedMessage, len(msgs))
	}
	for i, m := range msgs {
		pm := &parsed[i]
		if err := pm.parse(m, i, req.Batch); err != nil {
			return nil, err
		}
		pm.item.detach()
		versions = append(versions, pm.versions[:pm.nVersions]...)
		req.Messages[i] = pm.item
	}
	if req.Batch {
		if err := checkBatchIDs(parsed); err != nil {
			return nil, err
		}
	}
	if err := checkRoutingHeaders(&fields, req.Batch, parsed); err != nil {
		return nil, err
	}
	for _, v := range versions[min(1, len(versions)):] {
		if v.value != versions[0].value {
			return nil, mcpErrorf("protocol version disagreement: %s says %q, %s says %q", versions[0].where+versions[0].in, versions[0].value, v.where+v.in, v.value)
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

// headerFields are the values of the header fields Parse reads, each
// field matched case-insensitively (a hand-built http.Header need not be
// canonical) and with '_' standing for '-': WSGI and CGI servers fold
// Mcp_Method into the same variable as Mcp-Method, so an upstream behind
// one reads either. They are gathered in one pass over the header.
//
// A field's values may be the header's own slice: Parse only reads them.
type headerFields struct {
	encoding, version, method, name []string
}

func readHeaderFields(h http.Header) headerFields {
	var f headerFields
	for k, vs := range h {
		var dst *[]string
		switch {
		case sameFieldName(k, "Content-Encoding"):
			dst = &f.encoding
		case sameFieldName(k, HeaderMCPProtocolVersion):
			dst = &f.version
		case sameFieldName(k, HeaderMCPMethod):
			dst = &f.method
		case sameFieldName(k, HeaderMCPName):
			dst = &f.name
		default:
			continue
		}
		if len(*dst) == 0 {
			*dst = vs
		} else {
			*dst = append(slices.Clip(*dst), vs...) // never into h's array
		}
	}
	return f
}

// sameFieldName reports whether header field names a and b are equal in
// ASCII case, '_' standing for '-'. Field names are ASCII tokens, and no
// byte above 0x7F folds to an ASCII letter, so ASCII folding is all the
// folding there is.
func sameFieldName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		if fieldNameByte(a[i]) != fieldNameByte(b[i]) {
			return false
		}
	}
	return true
}

func fieldNameByte(c byte) byte {
	switch {
	case c == '_':
		return '-'
	case 'A' <= c && c <= 'Z':
		return c + ('a' - 'A')
	}
	return c
}

// singleHeader returns the one value vs of header name holds; more than
// one is an error (which would the upstream believe?).
func singleHeader(vs []string, name string) (string, bool, error) {
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
		return vs[0], true, nil
	}
	return "", false, mcpErrorf("%s header given %d times", name, len(vs))
}

func checkContentEncoding(values []string) error {
	for _, v := range values {
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

// versionSource is a protocol version and where it was given: where+in
// (two strings, so that no name is built unless an error needs it).
type versionSource struct {
	value     string
	where, in string
}

// parsedMessage is one message and what the header checks need of it.
type parsedMessage struct {
	item   Item
	index  int
	params *jvalue // nil if absent
	// The protocol versions the message gives: params._meta's and
	// initialize's params.protocolVersion.
	versions  [2]versionSource
	nVersions int
	idKey     string // canonical id, "" for notifications
}

func (pm *parsedMessage) addVersion(v versionSource) {
	pm.versions[pm.nVersions] = v
	pm.nVersions++
}

// messageNames are the names of a batch's first messages in errors.
var messageNames = [...]string{"message 0", "message 1", "message 2", "message 3", "message 4", "message 5", "message 6", "message 7"}

// messageName names message i in errors.
func messageName(i int) string {
	if i < len(messageNames) {
		return messageNames[i]
	}
	return fmt.Sprintf("message %d", i)
}

var allMembers = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// parse reads message i of a request into pm.
func (pm *parsedMessage) parse(m *jvalue, i int, batch bool) error {
	pm.index = i
	where := messageName(i)
	if err := checkMembers(m, where); err != nil {
		return err
	}
	method := m.get("method")
	if method == nil {
		return pm.parseResponse(m, where, batch)
	}
	id, params := m.get("id"), m.get("params")
	switch {
	case method.kind != jString:
		return mcpErrorf("\"method\" in %s is %s, not a string", where, method.kind)
	case method.str == "":
		return mcpErrorf("empty \"method\" in %s", where)
	case m.get("result") != nil:
		return mcpErrorf("%s has both \"method\" and \"result\"", where)
	case m.get("error") != nil:
		return mcpErrorf("%s has both \"method\" and \"error\"", where)
	case params != nil && params.kind != jObject:
		return mcpErrorf("\"params\" in %s is %s, not an object", where, params.kind)
	}
	pm.item.Message.Method = method.str
	pm.params = params
	if id != nil {
		key, err := idKey(id, where, batch)
		if err != nil {
			return err
		}
		if batch {
			pm.idKey = "q" + key
		}
		pm.item.ID = id.raw
	}
	if params == nil {
		switch method.str {
		case "tools/call", "initialize", "prompts/get", "resources/read", "resources/subscribe", "resources/unsubscribe":
			return mcpErrorf("%s %s has no \"params\"", method.str, where)
		}
		return nil
	}
	if err := pm.readMeta(params, where); err != nil {
		return err
	}
	return pm.readParams(method.str, params, where, batch)
}

// checkMembers refuses a member of message m other than JSON-RPC's (or
// one differing from them only in case), and a jsonrpc other than "2.0".
func checkMembers(m *jvalue, where string) error {
	for _, mem := range m.members {
		if slices.Contains(allMembers, mem.key) {
			continue
		}
		for _, k := range allMembers {
			if strings.EqualFold(mem.key, k) {
				return mcpErrorf("member %q in %s differs from %q only in case", mem.key, where, k)
			}
		}
		return mcpErrorf("unknown member %q in %s", mem.key, where)
	}
	switch jv := m.get("jsonrpc"); {
	case jv == nil:
		return mcpErrorf("%s has no \"jsonrpc\"", where)
	case jv.kind != jString || jv.str != "2.0":
		return mcpErrorf("\"jsonrpc\" in %s is not \"2.0\"", where)
	}
	return nil
}

// parseResponse reads message m, which has no method: a client→server
// response (to elicitation, sampling, roots/list).
func (pm *parsedMessage) parseResponse(m *jvalue, where string, batch bool) error {
	id, result, rpcErr := m.get("id"), m.get("result"), m.get("error")
	switch {
	case result == nil && rpcErr == nil:
		return mcpErrorf("%s has neither \"method\" nor \"result\"/\"error\"", where)
	case result != nil && rpcErr != nil:
		return mcpErrorf("%s has both \"result\" and \"error\"", where)
	case m.get("params") != nil:
		return mcpErrorf("%s is a response but has \"params\"", where)
	case id == nil:
		return mcpErrorf("response %s has no \"id\"", where)
	case rpcErr != nil && rpcErr.kind != jObject:
		return mcpErrorf("\"error\" in %s is not an object", where)
	}
	key, err := idKey(id, where, batch)
	if err != nil {
		return err
	}
	if batch {
		pm.idKey = "r" + key
	}
	pm.item = Item{ID: id.raw, Message: policy.MCPMessage{Response: true}}
	return nil
}

// readMeta reads params._meta, which MCP 2026-07-28 gives the protocol
// version in.
func (pm *parsedMessage) readMeta(params *jvalue, where string) error {
	meta, err := params.lookup("_meta", where, " params")
	if err != nil || meta == nil {
		return err
	}
	if meta.kind != jObject {
		return mcpErrorf("\"params._meta\" in %s is %s, not an object", where, meta.kind)
	}
	pv, err := meta.lookup(MetaKeyProtocolVersion, where, " params._meta")
	if err != nil || pv == nil {
		return err
	}
	if pv.kind != jString || pv.str == "" {
		return mcpErrorf("params._meta[%q] in %s is not a non-empty string", MetaKeyProtocolVersion, where)
	}
	pm.addVersion(versionSource{pv.str, where, " params._meta"})
	return nil
}

// readParams reads what the methods the proxy judges carry in params:
// initialize's protocol version, the tool and arguments of tools/call,
// the prompt's name, the resource's URI.
func (pm *parsedMessage) readParams(method string, params *jvalue, where string, batch bool) error {
	switch method {
	case "initialize":
		if batch {
			return mcpErrorf("initialize (%s) inside a batch", where)
		}
		pv, err := params.lookup("protocolVersion", where, " params")
		if err != nil {
			return err
		}
		if pv == nil || pv.kind != jString || pv.str == "" {
			return mcpErrorf("initialize %s has no params.protocolVersion string", where)
		}
		pm.addVersion(versionSource{pv.str, where, " params.protocolVersion"})
	case "tools/call":
		return pm.readToolCall(params, where)
	case "prompts/get":
		name, err := requiredString(params, "name", method, where)
		if err != nil {
			return err
		}
		pm.item.Message.Prompt = name
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		uri, err := requiredString(params, "uri", method, where)
		if err != nil {
			return err
		}
		pm.item.Message.Resource = uri
	}
	return nil
}

// readToolCall reads a tools/call's params.name and params.arguments.
func (pm *parsedMessage) readToolCall(params *jvalue, where string) error {
	name, err := params.lookup("name", where, " params")
	if err != nil {
		return err
	}
	switch {
	case name == nil:
		return mcpErrorf("tools/call %s has no params.name", where)
	case name.kind != jString:
		return mcpErrorf("params.name in tools/call %s is %s, not a string", where, name.kind)
	}
	pm.item.Message.Tool = name.str
	args, err := params.lookup("arguments", where, " params")
	if err != nil || args == nil {
		return err
	}
	if args.kind != jObject {
		return mcpErrorf("params.arguments in tools/call %s is %s, not an object", where, args.kind)
	}
	pm.item.Message.Arguments = args.raw
	pm.item.Message.ArgumentsRead = true // the strict reader has read them
	return nil
}

// detach copies the ID and arguments, which parse leaves in the body,
// into one new array: an Item does not alias the body.
func (it *Item) detach() {
	id, args := it.ID, it.Message.Arguments
	if len(id)+len(args) == 0 {
		return
	}
	buf := make([]byte, len(id)+len(args))
	copy(buf, id)
	copy(buf[len(id):], args)
	if id != nil {
		it.ID = buf[:len(id):len(id)]
	}
	if args != nil {
		it.Message.Arguments = buf[len(id):]
	}
}

// requiredString reads params.field of a method that must carry it as a
// string (prompts/get's name, the resources methods' uri).
func requiredString(params *jvalue, field, method, where string) (string, error) {
	v, err := params.lookup(field, where, " params")
	if err != nil {
		return "", err
	}
	switch {
	case v == nil:
		return "", mcpErrorf("%s %s has no params.%s", method, where, field)
	case v.kind != jString:
		return "", mcpErrorf("params.%s in %s %s is %s, not a string", field, method, where, v.kind)
	}
	return v.str, nil
}

// idKey checks a JSON-RPC id (a string or an integer; MCP forbids null) and
// returns a canonical form for duplicate detection when build is set
// ("" when not).
func idKey(id *jvalue, where string, build bool) (string, error) {
	switch id.kind {
	case jString:
		if !build {
			return "", nil
		}
		return "s" + id.str, nil
	case jNumber:
		if bytes.ContainsAny(id.raw, ".eE") {
			return "", mcpErrorf("\"id\" in %s is not an integer", where)
		}
		n, err := strconv.ParseInt(string(id.raw), 10, 64)
		if err != nil {
			return "", mcpErrorf("\"id\" in %s is out of range", where)
		}
		if !build {
			return "", nil
		}
		return "n" + strconv.FormatInt(n, 10), nil
	}
	return "", mcpErrorf("\"id\" in %s is %s, not a string or integer", where, id.kind)
}

// checkBatchIDs refuses two requests (or two responses) of a batch with the
// same id: their answers could not be told apart.
func checkBatchIDs(msgs []parsedMessage) error {
	seen := make(map[string]int, len(msgs))
	for i := range msgs {
		pm := &msgs[i]
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
func checkRoutingHeaders(h *headerFields, batch bool, msgs []parsedMessage) error {
	hm, hasMethod, err := singleHeader(h.method, HeaderMCPMethod)
	if err != nil {
		return err
	}
	hn, hasName, err := singleHeader(h.name, HeaderMCPName)
	if err != nil {
		return err
	}
	if batch && (hasMethod || hasName) {
		return mcpErrorf("%s/%s headers on a batch", HeaderMCPMethod, HeaderMCPName)
	}
	if !hasMethod && !hasName {
		return nil
	}
	pm := &msgs[0]
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
		if v, err = pm.params.lookup(field, "message 0 params", ""); err != nil {
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
// member (dropped if it does not marshal). Request.DenyBody also answers
// a batch of one message with an array.
func DenyBody(ids []json.RawMessage, code int, message string, data any) []byte {
	return denyBody(ids, len(ids) > 1, code, message, data)
}

// DenyBody is the denial answer to r: DenyBody of its request ids, and an
// array whenever r is a batch and some message has an id to answer.
func (r *Request) DenyBody(code int, message string, data any) []byte {
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
			id = nil // not from Parse; answer it as unidentifiable
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
