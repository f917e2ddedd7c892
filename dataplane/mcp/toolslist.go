package mcp

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/portcullis-dev/portcullis/policy"
)

// ---- tools/list results, as a server sends them ----
//
// The proxy shows an agent only the tools it may call: FilterToolsList
// takes the tools/list results out of a server's message (one JSON-RPC
// message, or a 2025-03-26 batch) and keeps the tools keep says. The
// message is read as strictly as a request (duplicate keys, keys equal
// ignoring case, invalid UTF-8 … are errors), since a client that reads
// it differently from the proxy could see a tool the proxy removed; the
// bytes the proxy does not change are passed on as the server sent them.

// ListResponse says which of a server's responses answer a tools/list
// request. A client routes a response by its id, whatever stream or body
// brings it, so a server can answer a pending tools/list on the stream of
// any other request: every response is looked at, not only those on the
// tools/list request's own stream.
type ListResponse struct {
	// IDs are the ids (IDKey) of the tools/list requests the answered
	// request carried: their responses must be tools/list results, read
	// strictly. A response whose id is neither a string nor an integer
	// is an error, when IDs or Own names any id.
	IDs map[string]bool
	// Own are the ids of the answered request's other requests: their
	// responses are those requests' answers, passed as they are.
	Own []json.RawMessage
	// Only says the request that the stream answers held one request, a
	// tools/list: the one response on the stream is its answer, whatever
	// its id.
	Only bool
}

// answerKind is what a response is to ListResponse.classify. Every
// response that is neither a tools/list answer nor another request's — an
// id the answered request did not carry, or any response on a stream the
// proxy cannot tie to its requests (a GET stream's replay) — is a
// tools/list result when its result has a "tools" member: it is filtered
// by its shape.
type answerKind uint8

const (
	byShape     answerKind = iota // a tools/list result if it looks like one
	listAnswer                    // the answer to a tools/list request: must be one
	otherAnswer                   // the answer to another request of the POST
)

func (l ListResponse) classify(id *jvalue, where string) (answerKind, error) {
	switch {
	case l.Only:
		return listAnswer, nil
	case len(l.IDs) == 0 && len(l.Own) == 0, id == nil:
		return byShape, nil
	}
	key, err := idKey(id, where, true)
	if err != nil {
		return byShape, err
	}
	if l.IDs[key] {
		return listAnswer, nil
	}
	for _, own := range l.Own {
		if k, err := IDKey(own); err == nil && k == key {
			return otherAnswer, nil
		}
	}
	return byShape, nil
}

// mayListTools reports whether msg can hold a "tools" member under any
// reading a client may give it: the name in any case (encoding/json
// folds case; t, o and l have no other folding), or spelled with a \u
// escape. A message that cannot is not read at all.
func mayListTools(msg []byte) bool {
	if bytes.Contains(msg, []byte(`\u`)) {
		return true
	}
	for i := 0; i+4 <= len(msg); i++ {
		if msg[i]|0x20 == 't' && msg[i+1]|0x20 == 'o' && msg[i+2]|0x20 == 'o' && msg[i+3]|0x20 == 'l' {
			return true
		}
	}
	return false
}

// IDKey is a request's JSON-RPC id (Item.ID) as ListResponse.IDs holds
// it: its kind and value, so that a server that writes "\u0061" for "a"
// still answers the same request.
func IDKey(id json.RawMessage) (string, error) {
	v, err := parseJSON(id, false)
	if err != nil {
		return "", err
	}
	return idKey(v, "the request", true)
}

// FilterToolsList returns msg with the tools keep refuses removed from each
// tools/list result among its responses (l says which are), and how many
// were removed; msg itself when none was. keep is given each tool's name,
// its definition's bytes as sent, and whether the result names the tool
// more than once (then every entry of that name has twice set, and keep
// has its answer for each before the list is passed on). An error (an
// *Error) means msg could not be read strictly, or a tools/list result is
// malformed: the caller must not pass msg on.
func FilterToolsList(msg []byte, l ListResponse, keep func(name string, def []byte, twice bool) bool) ([]byte, int, error) {
	if !l.Only && len(l.IDs) == 0 && !mayListTools(msg) {
		return msg, 0, nil // no tools/list answer is due, and none can be there
	}
	root, err := parseJSON(msg, true)
	if err != nil {
		return nil, 0, err
	}
	messages := []*jvalue{root}
	if root.kind == jArray {
		messages = root.elems
	}
	type splice struct {
		from, to int
		with     []byte
	}
	var splices []splice
	removed := 0
	for i, m := range messages {
		tools, err := listedTools(m, i, l)
		if err != nil {
			return nil, 0, err
		}
		if tools == nil {
			continue
		}
		names, twice, err := toolNames(tools, i)
		if err != nil {
			return nil, 0, err
		}
		kept := make([]byte, 0, len(tools.raw))
		kept = append(kept, '[')
		n := 0
		for j, t := range tools.elems {
			name := names[j]
			if !keep(name, t.raw, twice[name]) {
				removed++
				continue
			}
			if n > 0 {
				kept = append(kept, ',')
			}
			kept = append(kept, t.raw...)
			n++
		}
		kept = append(kept, ']')
		if n < len(tools.elems) {
			from := offset(msg, tools.raw)
			splices = append(splices, splice{from, from + len(tools.raw), kept})
		}
	}
	if len(splices) == 0 {
		return msg, 0, nil
	}
	out := make([]byte, 0, len(msg))
	at := 0
	for _, s := range splices {
		out = append(out, msg[at:s.from]...)
		out = append(out, s.with...)
		at = s.to
	}
	return append(out, msg[at:]...), removed, nil
}

// listedTools returns the tools array of message m (the i-th of its
// batch) when m is a tools/list result l names, nil otherwise.
func listedTools(m *jvalue, i int, l ListResponse) (*jvalue, error) {
	where := "message " + strconv.Itoa(i)
	if m.kind != jObject {
		return nil, nil // not a JSON-RPC message: the client refuses it too
	}
	for _, key := range []string{"method", "id", "error"} {
		if _, err := m.lookup(key, where, ""); err != nil {
			return nil, err
		}
	}
	result, err := m.lookup("result", where, "")
	if err != nil || result == nil || m.get("method") != nil {
		return nil, err
	}
	kind, err := l.classify(m.get("id"), where)
	if err != nil || kind == otherAnswer {
		return nil, err
	}
	strict := kind == listAnswer
	if result.kind != jObject {
		if !strict {
			return nil, nil // some other method's result
		}
		return nil, mcpErrorf("the tools/list result in %s is %s, not an object", where, result.kind)
	}
	tools, err := result.lookup("tools", where, " at result")
	switch {
	case err != nil:
		return nil, err
	case tools == nil && !strict:
		return nil, nil
	case tools == nil:
		return nil, mcpErrorf("the tools/list result in %s has no tools", where)
	case tools.kind != jArray:
		return nil, mcpErrorf("result.tools in %s is %s, not an array", where, tools.kind)
	}
	return tools, nil
}

// toolNames are the names of the tools of message i's tools/list result,
// in order, and the names it lists more than once (nil when none is).
func toolNames(tools *jvalue, i int) ([]string, map[string]bool, error) {
	names := make([]string, len(tools.elems))
	var seen, twice map[string]bool
	if len(names) > 16 {
		seen = make(map[string]bool, len(names))
	}
	for j, t := range tools.elems {
		name, err := toolName(t, i, j)
		if err != nil {
			return nil, nil, err
		}
		names[j] = name
		again := false
		if seen != nil {
			again = seen[name]
			seen[name] = true
		} else {
			again = slices.Contains(names[:j], name)
		}
		if again {
			if twice == nil {
				twice = map[string]bool{}
			}
			twice[name] = true
		}
	}
	return names, twice, nil
}

// toolName is the name of tool j of message i's tools/list result.
func toolName(t *jvalue, i, j int) (string, error) {
	where := "message " + strconv.Itoa(i) + " at result.tools[" + strconv.Itoa(j) + "]"
	if t.kind != jObject {
		return "", mcpErrorf("%s is %s, not a tool object", where, t.kind)
	}
	name, err := t.lookup("name", where, "")
	switch {
	case err != nil:
		return "", err
	case name == nil:
		return "", mcpErrorf("%s has no name", where)
	case name.kind != jString:
		return "", mcpErrorf("the name of %s is %s, not a string", where, name.kind)
	}
	return name.str, nil
}

// offset is where sub, a slice of b, starts in b.
func offset(b, sub []byte) int { return cap(b) - cap(sub) }

// ResponseErrorBody is a JSON-RPC error response to id (null when nil),
// for a server's answer the proxy cannot pass on.
func ResponseErrorBody(id json.RawMessage, code int, message string) []byte {
	if len(bytes.TrimSpace(id)) == 0 {
		id = nil
	}
	return denyBody([]json.RawMessage{id}, false, code, message, nil)
}

// Fingerprint is the fingerprint rules pin a tool's definition by:
// "sha256:" and the hex SHA-256 of def, the tool object exactly as a server
// lists it, canonicalised with RFC 8785 (JSON Canonicalization Scheme).
func Fingerprint(def []byte) (string, error) { return policy.DefinitionFingerprint(def) }

// Tool is one tool of a tools/list result: its name and its definition's
// bytes as the server sent them.
type Tool struct {
	Name       string
	Definition []byte
}

// ReadToolsList reads msg, a server's message, as the answer to the
// tools/list request whose id is id: its tools and next cursor. found is
// false when msg answers something else (another id, a notification, a
// server's request); an error when msg cannot be read strictly, the answer
// is a JSON-RPC error, or its result is malformed.
func ReadToolsList(msg []byte, id json.RawMessage) (tools []Tool, next string, found bool, err error) {
	key, err := IDKey(id)
	if err != nil {
		return nil, "", false, err
	}
	root, err := parseJSON(msg, true)
	if err != nil {
		return nil, "", false, err
	}
	messages := []*jvalue{root}
	if root.kind == jArray {
		messages = root.elems
	}
	l := ListResponse{IDs: map[string]bool{key: true}}
	for i, m := range messages {
		if m.kind != jObject || m.get("method") != nil {
			continue
		}
		if kind, err := l.classify(m.get("id"), "message "+strconv.Itoa(i)); err != nil || kind != listAnswer {
			if err != nil {
				return nil, "", false, err
			}
			continue
		}
		if e := m.get("error"); e != nil {
			return nil, "", true, mcpErrorf("the server answered tools/list with an error: %s", clipBytes(e.raw))
		}
		list, err := listedTools(m, i, l)
		if err != nil || list == nil {
			if err == nil {
				err = mcpErrorf("the server's answer to tools/list has no result")
			}
			return nil, "", true, err
		}
		for j, t := range list.elems {
			name, err := toolName(t, i, j)
			if err != nil {
				return nil, "", true, err
			}
			tools = append(tools, Tool{Name: name, Definition: t.raw})
		}
		result := m.get("result")
		if c := result.get("nextCursor"); c != nil {
			if c.kind != jString {
				return nil, "", true, mcpErrorf("result.nextCursor in message %d is %s, not a string", i, c.kind)
			}
			next = c.str
		}
		return tools, next, true, nil
	}
	return nil, "", false, nil
}

// ServerEvent is what the proxy reads of a message a server sends on an
// event stream besides answers: whether it says the server's tools
// changed, and the requests it sends the client (their IDKeys), whose
// answers the proxy will judge by mcp.max_response_bytes.
type ServerEvent struct {
	ListChanged bool
	Requests    []string
}

// ReadServerEvent reads msg, a server's message (or batch). A message that
// cannot be read strictly is an error (an *Error: the caller must not pass
// it on) and counts as a list_changed and no request: the proxy then
// forgets what it verified, and judges no answer to it by the larger
// limit.
func ReadServerEvent(msg []byte) (ServerEvent, error) {
	root, err := parseJSON(msg, true)
	if err != nil {
		return ServerEvent{ListChanged: true}, err
	}
	messages := []*jvalue{root}
	if root.kind == jArray {
		messages = root.elems
	}
	var ev ServerEvent
	for i, m := range messages {
		if m.kind != jObject {
			continue
		}
		method, err := m.lookup("method", "", "")
		if err != nil {
			return ServerEvent{ListChanged: true}, err
		}
		if method == nil || method.kind != jString {
			continue
		}
		if method.str == "notifications/tools/list_changed" {
			ev.ListChanged = true
		}
		if id := m.get("id"); id != nil {
			if key, err := idKey(id, "message "+strconv.Itoa(i), true); err == nil {
				ev.Requests = append(ev.Requests, key)
			}
		}
	}
	return ev, nil
}

func clipBytes(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
