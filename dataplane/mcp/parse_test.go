package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// hdr builds a header; keys are kept as written (not canonicalised), as a
// hand-built http.Header may be.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return h
}

// sdkMeta is the params._meta the official Go SDK (v1.8.0) sends on every
// 2026-07-28 request.
const sdkMeta = `"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"agent","version":"0.1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`

// named sets the prompt name and resource URI of an item.
func named(it Item, prompt, resource string) Item {
	it.Message.Prompt, it.Message.Resource = prompt, resource
	return it
}

func item(id, method, tool, args, version string) Item {
	it := Item{Message: policy.MCPMessage{Method: method, Tool: tool, ProtocolVersion: version}}
	if id != "" {
		it.ID = json.RawMessage(id)
	}
	if args != "" {
		it.Message.Arguments = json.RawMessage(args)
		it.Message.ArgumentsRead = true
	}
	return it
}

func response(id, version string) Item {
	return Item{ID: json.RawMessage(id), Message: policy.MCPMessage{Response: true, ProtocolVersion: version}}
}

func TestParseMCPValid(t *testing.T) {
	cases := []struct {
		name   string
		header http.Header
		body   string
		want   Request
	}{
		// Captured from the official Go SDK v1.8.0 client (stateful server,
		// which answers server/discover with 2025-11-25 and falls back).
		{"sdk initialize 2025-11-25", hdr("Content-Type", "application/json"),
			`{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"clientInfo":{"name":"agent","version":"0.1"},"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"form":{}},"roots":{"listChanged":true}}}}`,
			Request{Version: "2025-11-25", Messages: []Item{item("2", "initialize", "", "", "2025-11-25")}}},
		{"sdk notifications/initialized", hdr("Mcp-Protocol-Version", "2025-11-25"),
			`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`,
			Request{Version: "2025-11-25", Messages: []Item{item("", "notifications/initialized", "", "", "2025-11-25")}}},
		{"sdk tools/list", hdr("Mcp-Protocol-Version", "2025-11-25"),
			`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`,
			Request{Version: "2025-11-25", Messages: []Item{item("3", "tools/list", "", "", "2025-11-25")}}},
		{"sdk tools/call", hdr("Mcp-Protocol-Version", "2025-11-25"),
			`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`,
			Request{Version: "2025-11-25", Messages: []Item{item("4", "tools/call", "lookup_order", `{"order_id":"A-1042"}`, "2025-11-25")}}},
		{"sdk elicitation response", hdr("Mcp-Protocol-Version", "2025-11-25"),
			`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"ok":true}}}`,
			Request{Version: "2025-11-25", Messages: []Item{response("1", "2025-11-25")}}},
		// Captured from the SDK against a Stateless server (2026-07-28).
		{"sdk server/discover 2026-07-28", hdr("Mcp-Method", "server/discover", "Mcp-Protocol-Version", "2026-07-28"),
			`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + sdkMeta + `}}`,
			Request{Version: "2026-07-28", Messages: []Item{item("1", "server/discover", "", "", "2026-07-28")}}},
		{"sdk stateless tools/list", hdr("Mcp-Method", "tools/list", "Mcp-Protocol-Version", "2026-07-28"),
			`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + sdkMeta + `}}`,
			Request{Version: "2026-07-28", Messages: []Item{item("2", "tools/list", "", "", "2026-07-28")}}},
		{"sdk stateless tools/call", hdr("Content-Type", "application/json", "Mcp-Method", "tools/call", "Mcp-Name", "lookup_order", "Mcp-Protocol-Version", "2026-07-28"),
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{` + sdkMeta + `,"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`,
			Request{Version: "2026-07-28", Messages: []Item{item("3", "tools/call", "lookup_order", `{"order_id":"A-1042"}`, "2026-07-28")}}},
		{"_meta version without the header", nil,
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{` + sdkMeta + `,"name":"lookup_order"}}`,
			Request{Version: "2026-07-28", Messages: []Item{item("3", "tools/call", "lookup_order", "", "2026-07-28")}}},

		{"batch 2025-03-26: request, notification, response", hdr("Mcp-Protocol-Version", "2025-03-26"),
			`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}},
			  {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}},
			  {"jsonrpc":"2.0","id":"s-1","error":{"code":-1,"message":"declined"}},
			  {"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"refund_order","arguments":{}}}]`,
			Request{Batch: true, Version: "2025-03-26", Messages: []Item{
				item("1", "tools/call", "lookup_order", `{"order_id":"A-1042"}`, "2025-03-26"),
				item("", "notifications/progress", "", "", "2025-03-26"),
				response(`"s-1"`, "2025-03-26"),
				item(`"x"`, "tools/call", "refund_order", `{}`, "2025-03-26"),
			}}},
		{"batch: a request and a response may share an id", nil,
			`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":1,"result":{}}]`,
			Request{Batch: true, Messages: []Item{item("1", "ping", "", "", ""), response("1", "")}}},
		{"no version anywhere", nil, `{"jsonrpc":"2.0","id":0,"method":"ping"}`,
			Request{Messages: []Item{item("0", "ping", "", "", "")}}},
		{"string id, negative id", nil, `[{"jsonrpc":"2.0","id":"abc","method":"ping"},{"jsonrpc":"2.0","id":-7,"method":"ping"}]`,
			Request{Batch: true, Messages: []Item{item(`"abc"`, "ping", "", "", ""), item("-7", "ping", "", "", "")}}},
		{"whitespace around and inside, trailing whitespace", hdr("Content-Encoding", "identity"),
			" \t\r\n{ \"jsonrpc\" : \"2.0\" , \"id\" : 5 , \"method\" : \"tools/call\" , \"params\" : { \"name\" : \"t\" , \"arguments\" : { \"a\" : [ 1 , 2.5e-3 , true , null ] } } } \n\t ",
			Request{Messages: []Item{item("5", "tools/call", "t", `{ "a" : [ 1 , 2.5e-3 , true , null ] }`, "")}}},
		{"escapes are decoded", nil, `{"jsonrpc":"2\u002e0","id":"\u00e9\ud83d\ude00","method":"tools\/call","params":{"name":"lookup\u005forder"}}`,
			Request{Messages: []Item{item(`"\u00e9\ud83d\ude00"`, "tools/call", "lookup_order", "", "")}}},
		{"non-canonical header keys", hdr("mcp-method", "tools/call", "MCP-NAME", "t", "mcp-protocol-version", "2025-11-25"),
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}`,
			Request{Version: "2025-11-25", Messages: []Item{item("1", "tools/call", "t", "", "2025-11-25")}}},
		{"Mcp-Name on prompts/get", hdr("Mcp-Method", "prompts/get", "Mcp-Name", "greet"),
			`{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"greet"}}`,
			Request{Messages: []Item{named(item("1", "prompts/get", "", "", ""), "greet", "")}}},
		{"Mcp-Name on resources/read", hdr("Mcp-Method", "resources/read", "Mcp-Name", "file:///a"),
			`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}`,
			Request{Messages: []Item{named(item("1", "resources/read", "", "", ""), "", "file:///a")}}},
		{"prompts/get with arguments", nil,
			`{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"a b/c","arguments":{"x":"1"}}}`,
			Request{Messages: []Item{named(item("1", "prompts/get", "", "", ""), "a b/c", "")}}},
		{"resources/subscribe", nil,
			`{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"file:///docs/../x"}}`,
			Request{Messages: []Item{named(item("1", "resources/subscribe", "", "", ""), "", "file:///docs/../x")}}},
		{"resources/unsubscribe", nil,
			`{"jsonrpc":"2.0","id":1,"method":"resources/unsubscribe","params":{"uri":"ui://w"}}`,
			Request{Messages: []Item{named(item("1", "resources/unsubscribe", "", "", ""), "", "ui://w")}}},
		{"Mcp-Method on a notification", hdr("Mcp-Method", "notifications/initialized", "Mcp-Protocol-Version", "2026-07-28"),
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			Request{Version: "2026-07-28", Messages: []Item{item("", "notifications/initialized", "", "", "2026-07-28")}}},
		{"initialize with agreeing header", hdr("Mcp-Protocol-Version", "2025-06-18"),
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
			Request{Version: "2025-06-18", Messages: []Item{item("1", "initialize", "", "", "2025-06-18")}}},
		{"same key in different objects, case variants in arguments' values", nil,
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":{"a":{"a":1}},"b":["A","a"],"c":{"x":1},"d":{"x":1}}}}`,
			Request{Messages: []Item{item("1", "tools/call", "t", `{"a":{"a":{"a":1}},"b":["A","a"],"c":{"x":1},"d":{"x":1}}`, "")}}},
		{"a large object without duplicates", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"k0":1,"k1":1,"k2":1,"k3":1,"k4":1,"k5":1,"k6":1,"k7":1,"k8":1,"k9":1,"K10":1,"ſ":1}}}`,
			Request{Messages: []Item{item("1", "tools/call", "t", `{"k0":1,"k1":1,"k2":1,"k3":1,"k4":1,"k5":1,"k6":1,"k7":1,"k8":1,"k9":1,"K10":1,"ſ":1}`, "")}}},
		{"empty keys in different objects", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"":{"":1}}}}`,
			Request{Messages: []Item{item("1", "tools/call", "t", `{"":{"":1}}`, "")}}},
		{"id at the int64 limit", nil, `{"jsonrpc":"2.0","id":-9223372036854775808,"method":"ping"}`,
			Request{Messages: []Item{item("-9223372036854775808", "ping", "", "", "")}}},
		{"result may be any value", nil, `{"jsonrpc":"2.0","id":"r","result":null}`,
			Request{Messages: []Item{response(`"r"`, "")}}},
		{"nesting at the limit", nil,
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":` + strings.Repeat("[", mcpMaxDepth-4) + strings.Repeat("]", mcpMaxDepth-4) + `}}}`,
			Request{Messages: []Item{item("1", "tools/call", "t", `{"a":`+strings.Repeat("[", mcpMaxDepth-4)+strings.Repeat("]", mcpMaxDepth-4)+`}`, "")}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.header, []byte(tc.body))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("Parse =\n%s\nwant\n%s", dump(got), dump(&tc.want))
			}
		})
	}
}

func dump(r *Request) string {
	b, _ := json.MarshalIndent(r, "", "  ")
	return string(b)
}

func TestParseMCPRefused(t *testing.T) {
	const (
		call  = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`
		ping  = `{"jsonrpc":"2.0","id":1,"method":"ping"}`
		notif = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
		resp  = `{"jsonrpc":"2.0","id":1,"result":{}}`
	)
	callWith := func(params string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + params + `}`
	}
	withArgs := func(args string) string { return callWith(`{"name":"t","arguments":` + args + `}`) }
	var keys []string
	for i := range 20 {
		keys = append(keys, `"k`+strconv.Itoa(i)+`":`+strconv.Itoa(i))
	}
	manyKeys := strings.Join(keys, ",")
	cases := []struct {
		name   string
		header http.Header
		body   string
		reason string
	}{
		// Transport.
		{"gzip", hdr("Content-Encoding", "gzip"), call, `Content-Encoding "gzip" is not identity`},
		{"identity then gzip", hdr("Content-Encoding", "identity, gzip"), call, `Content-Encoding "identity, gzip" is not identity`},
		{"second Content-Encoding", hdr("Content-Encoding", "identity", "Content-Encoding", "br"), call, `Content-Encoding "br" is not identity`},
		{"empty Content-Encoding", hdr("Content-Encoding", ""), call, `Content-Encoding "" is not identity`},
		{"lowercase content-encoding key", hdr("content-encoding", "deflate"), call, `Content-Encoding "deflate" is not identity`},

		// Bytes.
		{"empty body", nil, "", "empty body"},
		{"only whitespace", nil, " \r\n\t", "body holds no JSON value"},
		{"invalid UTF-8 in a string", nil, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pi\xffng\"}", "invalid UTF-8 at byte 36"},
		{"invalid UTF-8 in a key", nil, "{\"jsonrpc\":\"2.0\",\"i\xc3\":1}", "invalid UTF-8 at byte 19"},
		{"overlong UTF-8", nil, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xc0\xaf\"}", "invalid UTF-8 at byte 34"},
		{"UTF-8-encoded surrogate", nil, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xed\xa0\x80\"}", "invalid UTF-8 at byte 34"},
		{"invalid UTF-8 after the value", nil, call + "\xff", "invalid UTF-8 at byte 113"},
		{"BOM", nil, "\xef\xbb\xbf" + ping, "invalid JSON at byte 0: expected a value"},

		// Exactly one JSON value.
		{"trailing garbage", nil, ping + "x", "trailing data after the JSON value at byte 40"},
		{"whitespace then garbage", nil, ping + " \n x", "trailing data after the JSON value at byte 43"},
		{"two objects", nil, ping + ping, "trailing data after the JSON value at byte 40"},
		{"trailing bracket", nil, ping + "]", "trailing data after the JSON value at byte 40"},
		{"trailing NUL", nil, ping + "\x00", "trailing data after the JSON value at byte 40"},
		{"truncated", nil, ping[:23], "invalid JSON: unexpected end of body (expected ',' or '}')"},
		{"truncated in a string", nil, `{"jsonrpc":"2.`, `invalid JSON: unexpected end of body (unterminated string)`},

		// JSON syntax.
		{"single quotes", nil, `{'jsonrpc':'2.0'}`, "invalid JSON at byte 1: expected a string key"},
		{"trailing comma", nil, `{"jsonrpc":"2.0",}`, "invalid JSON at byte 17: expected a string key"},
		{"trailing comma in array", nil, `[` + ping + `,]`, "invalid JSON at byte 42: expected a value"},
		{"missing colon", nil, `{"jsonrpc" "2.0"}`, "invalid JSON at byte 11: expected ':'"},
		{"bare word", nil, `{"jsonrpc":"2.0","id":1,"method":ping}`, "invalid JSON at byte 33: expected a value"},
		{"comment", nil, `{"jsonrpc":"2.0"/*x*/}`, "invalid JSON at byte 16: expected ',' or '}'"},
		{"leading zero", nil, `{"jsonrpc":"2.0","id":01,"method":"ping"}`, "invalid JSON at byte 23: expected ',' or '}'"},
		{"plus sign", nil, withArgs(`{"a":+1}`), "invalid JSON at byte 84: expected a value"},
		{"bare minus", nil, withArgs(`{"a":-}`), "invalid JSON at byte 85: invalid number"},
		{"no fraction digits", nil, withArgs(`{"a":1.}`), "invalid JSON at byte 86: invalid number"},
		{"no integer part", nil, withArgs(`{"a":.5}`), "invalid JSON at byte 84: expected a value"},
		{"no exponent digits", nil, withArgs(`{"a":1e+}`), "invalid JSON at byte 87: invalid number"},
		{"NaN", nil, withArgs(`{"a":NaN}`), "invalid JSON at byte 84: expected a value"},
		{"Infinity", nil, withArgs(`{"a":-Infinity}`), "invalid JSON at byte 85: invalid number"},
		{"hex number", nil, withArgs(`{"a":0x10}`), "invalid JSON at byte 85: expected ',' or '}'"},
		{"raw control character in a string", nil, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pi\nng\"}", "invalid JSON at byte 36: control character in string"},
		{"raw tab in an escaped string", nil, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\\npi\tng\"}", "invalid JSON at byte 38: control character in string"},
		{"invalid escape", nil, `{"jsonrpc":"2.0","id":1,"method":"\x41"}`, "invalid JSON at byte 35: invalid escape"},
		{"short \\u escape", nil, `{"jsonrpc":"2.0","id":1,"method":"\u41"}`, "invalid JSON at byte 36: invalid \\u escape"},
		{"lone high surrogate", nil, `{"jsonrpc":"2.0","id":1,"method":"\ud800"}`, "invalid JSON at byte 40: \\u escape names a lone surrogate"},
		{"lone low surrogate", nil, `{"jsonrpc":"2.0","id":1,"method":"\udc00\ud800"}`, "invalid JSON at byte 40: \\u escape names a lone surrogate"},
		{"high surrogate then a letter escape", nil, `{"jsonrpc":"2.0","id":1,"method":"\ud800\u0041"}`, "invalid JSON at byte 46: \\u escape names a lone surrogate"},
		{"lone surrogate in arguments", nil, withArgs(`{"a":"\udfff"}`), "invalid JSON at byte 91: \\u escape names a lone surrogate"},
		{"too deep", nil, withArgs(`{"a":` + strings.Repeat("[", mcpMaxDepth) + strings.Repeat("]", mcpMaxDepth) + `}`), "JSON nested deeper than 1000"},

		// Duplicate keys, at every depth.
		{"duplicate method", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}`, `duplicate key "method" in message 0`},
		{"duplicate jsonrpc", nil, `{"jsonrpc":"2.0","jsonrpc":"1.0","id":1,"method":"ping"}`, `duplicate key "jsonrpc" in message 0`},
		{"duplicate id", nil, `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, `duplicate key "id" in message 0`},
		{"duplicate params", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"},"params":{"name":"b"}}`, `duplicate key "params" in message 0`},
		{"duplicate params.name", nil, callWith(`{"name":"lookup_order","name":"refund_order"}`), `duplicate key "name" in message 0 at params`},
		{"duplicate argument", nil, withArgs(`{"order_id":"A-1042","order_id":"x"}`), `duplicate key "order_id" in message 0 at params.arguments`},
		{"duplicate deep in arguments", nil, withArgs(`{"a":[{"b":{"c":1,"c":2}}]}`), `duplicate key "c" in message 0 at params.arguments.a[0].b`},
		{"duplicate in _meta", nil, callWith(`{"name":"t","_meta":{"k":1,"k":1}}`), `duplicate key "k" in message 0 at params._meta`},
		{"duplicate spelled with an escape", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","m\u0065thod":"tools/call"}`, `duplicate key "method" in message 0`},
		{"duplicate differing in case", nil, callWith(`{"name":"lookup_order","Name":"refund_order"}`), `duplicate key "Name" in message 0 at params (same as "name" ignoring case)`},
		{"duplicate argument differing in case", nil, withArgs(`{"order_id":"A-1042","ORDER_ID":"x"}`), `duplicate key "ORDER_ID" in message 0 at params.arguments (same as "order_id" ignoring case)`},
		{"duplicate through the Kelvin sign", nil, withArgs(`{"kind":1,"\u212aind":2}`), `duplicate key "` + "\u212a" + `ind" in message 0 at params.arguments (same as "kind" ignoring case)`},
		{"duplicate through the long s", nil, withArgs(`{"ſ":1,"s":2}`), `duplicate key "s" in message 0 at params.arguments (same as "ſ" ignoring case)`},
		{"duplicate empty key", nil, withArgs(`{"":1,"":2}`), `duplicate key "" in message 0 at params.arguments`},
		{"duplicate in a large object", nil, withArgs(`{` + manyKeys + `,"k7":0,"k3":0}`), `duplicate key "k7" in message 0 at params.arguments`},
		{"duplicate in a large object differing in case", nil, withArgs(`{` + manyKeys + `,"K15":0}`), `duplicate key "K15" in message 0 at params.arguments (same as "k15" ignoring case)`},
		{"duplicate in a large object through the Kelvin sign", nil, withArgs(`{` + manyKeys + `,"\u212a1":0}`), `duplicate key "` + "\u212a" + `1" in message 0 at params.arguments (same as "k1" ignoring case)`},
		{"duplicate deep in a batch", nil, `[` + ping + `,{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t","arguments":{"a":[0,{"b":{"c":1,"C":2}}]}}}]`, `duplicate key "C" in message 1 at params.arguments.a[1].b (same as "c" ignoring case)`},
		{"duplicate in a batch's second message", nil, `[` + ping + `,{"jsonrpc":"2.0","id":2,"method":"ping","id":3}]`, `duplicate key "id" in message 1`},
		{"duplicate in a response's result", nil, `{"jsonrpc":"2.0","id":1,"result":{"action":"accept","action":"decline"}}`, `duplicate key "action" in message 0 at result`},

		// Top level.
		{"string", nil, `"ping"`, "top-level JSON value is a string, not an object or array"},
		{"number", nil, `1`, "top-level JSON value is a number, not an object or array"},
		{"null", nil, `null`, "top-level JSON value is null, not an object or array"},
		{"bool", nil, `true`, "top-level JSON value is a boolean, not an object or array"},
		{"empty batch", nil, `[]`, "empty batch"},
		{"empty batch with spaces", nil, " [ \n ] ", "empty batch"},
		{"batch of a number", nil, `[1]`, "batch item 0 is a number, not an object"},
		{"nested batch", nil, `[[` + ping + `]]`, "batch item 0 is an array, not an object"},
		{"batch with a string", nil, `[` + ping + `,"x"]`, "batch item 1 is a string, not an object"},
		{"batch with null", nil, `[` + ping + `,null]`, "batch item 1 is null, not an object"},

		// jsonrpc.
		{"jsonrpc missing", nil, `{"id":1,"method":"ping"}`, `message 0 has no "jsonrpc"`},
		{"jsonrpc 1.0", nil, `{"jsonrpc":"1.0","id":1,"method":"ping"}`, `"jsonrpc" in message 0 is not "2.0"`},
		{"jsonrpc number", nil, `{"jsonrpc":2.0,"id":1,"method":"ping"}`, `"jsonrpc" in message 0 is not "2.0"`},
		{"jsonrpc with space", nil, `{"jsonrpc":"2.0 ","id":1,"method":"ping"}`, `"jsonrpc" in message 0 is not "2.0"`},
		{"jsonrpc missing in batch", nil, `[` + ping + `,{"id":2,"method":"ping"}]`, `message 1 has no "jsonrpc"`},

		// Members.
		{"unknown member", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","extra":1}`, `unknown member "extra" in message 0`},
		{"member differing in case", nil, `{"jsonrpc":"2.0","id":1,"Method":"tools/call"}`, `member "Method" in message 0 differs from "method" only in case`},

		// method.
		{"method number", nil, `{"jsonrpc":"2.0","id":1,"method":7}`, `"method" in message 0 is a number, not a string`},
		{"method null", nil, `{"jsonrpc":"2.0","id":1,"method":null}`, `"method" in message 0 is null, not a string`},
		{"method array", nil, `{"jsonrpc":"2.0","id":1,"method":["tools/call"]}`, `"method" in message 0 is an array, not a string`},
		{"method empty", nil, `{"jsonrpc":"2.0","id":1,"method":""}`, `empty "method" in message 0`},
		{"method and result", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}`, `message 0 has both "method" and "result"`},
		{"method and error", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","error":{"code":1,"message":"x"}}`, `message 0 has both "method" and "error"`},
		{"notification and result", nil, `{"jsonrpc":"2.0","method":"notifications/x","result":{}}`, `message 0 has both "method" and "result"`},

		// id.
		{"id object", nil, `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, `"id" in message 0 is an object, not a string or integer`},
		{"id array", nil, `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, `"id" in message 0 is an array, not a string or integer`},
		{"id bool", nil, `{"jsonrpc":"2.0","id":true,"method":"ping"}`, `"id" in message 0 is a boolean, not a string or integer`},
		{"id null", nil, `{"jsonrpc":"2.0","id":null,"method":"ping"}`, `"id" in message 0 is null, not a string or integer`},
		{"id fraction", nil, `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, `"id" in message 0 is not an integer`},
		{"id 1.0", nil, `{"jsonrpc":"2.0","id":1.0,"method":"ping"}`, `"id" in message 0 is not an integer`},
		{"id exponent", nil, `{"jsonrpc":"2.0","id":1e3,"method":"ping"}`, `"id" in message 0 is not an integer`},
		{"id out of range", nil, `{"jsonrpc":"2.0","id":9223372036854775808,"method":"ping"}`, `"id" in message 0 is out of range`},
		{"response id bool", nil, `{"jsonrpc":"2.0","id":false,"result":{}}`, `"id" in message 0 is a boolean, not a string or integer`},
		{"duplicate request ids in a batch", nil, `[{"jsonrpc":"2.0","id":"a","method":"ping"},` + notif + `,{"jsonrpc":"2.0","id":"\u0061","method":"tools/list"}]`, `messages 0 and 2 of the batch share the id "\u0061"`},
		{"duplicate response ids in a batch", nil, `[` + resp + `,` + resp + `]`, `messages 0 and 1 of the batch share the id 1`},
		{"-0 and 0 in a batch", nil, `[{"jsonrpc":"2.0","id":0,"method":"ping"},{"jsonrpc":"2.0","id":-0,"method":"ping"}]`, `messages 0 and 1 of the batch share the id -0`},

		// Responses.
		{"response without id", nil, `{"jsonrpc":"2.0","result":{}}`, `response message 0 has no "id"`},
		{"response with result and error", nil, `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}`, `message 0 has both "result" and "error"`},
		{"neither method nor result", nil, `{"jsonrpc":"2.0","id":1}`, `message 0 has neither "method" nor "result"/"error"`},
		{"error not an object", nil, `{"jsonrpc":"2.0","id":1,"error":"no"}`, `"error" in message 0 is not an object`},
		{"response with params", nil, `{"jsonrpc":"2.0","id":1,"result":{},"params":{}}`, `message 0 is a response but has "params"`},

		// params and _meta.
		{"params array", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","params":[]}`, `"params" in message 0 is an array, not an object`},
		{"params null", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","params":null}`, `"params" in message 0 is null, not an object`},
		{"_meta string", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":"x"}}`, `"params._meta" in message 0 is a string, not an object`},
		{"_meta null", nil, callWith(`{"name":"t","_meta":null}`), `"params._meta" in message 0 is null, not an object`},
		{"_meta in another case", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_META":{}}}`, `key "_META" in message 0 params differs from "_meta" only in case`},
		{"_meta version not a string", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":20260728}}}`, `params._meta["io.modelcontextprotocol/protocolVersion"] in message 0 is not a non-empty string`},
		{"_meta version empty", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":""}}}`, `params._meta["io.modelcontextprotocol/protocolVersion"] in message 0 is not a non-empty string`},
		{"_meta version key in another case", nil, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolversion":"2025-11-25"}}}`, `key "io.modelcontextprotocol/protocolversion" in message 0 params._meta differs from "io.modelcontextprotocol/protocolVersion" only in case`},

		// tools/call.
		{"tools/call without params", nil, `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`, `tools/call message 0 has no "params"`},
		{"tools/call params string", nil, callWith(`"lookup_order"`), `"params" in message 0 is a string, not an object`},
		{"tools/call params array", nil, callWith(`["lookup_order"]`), `"params" in message 0 is an array, not an object`},
		{"tools/call without name", nil, callWith(`{"arguments":{}}`), `tools/call message 0 has no params.name`},
		{"tools/call name number", nil, callWith(`{"name":1}`), `params.name in tools/call message 0 is a number, not a string`},
		{"tools/call name null", nil, callWith(`{"name":null}`), `params.name in tools/call message 0 is null, not a string`},
		{"tools/call name array", nil, callWith(`{"name":["lookup_order"]}`), `params.name in tools/call message 0 is an array, not a string`},
		{"tools/call Name only", nil, callWith(`{"Name":"refund_order"}`), `key "Name" in message 0 params differs from "name" only in case`},
		{"tools/call Arguments", nil, callWith(`{"name":"t","Arguments":{}}`), `key "Arguments" in message 0 params differs from "arguments" only in case`},
		{"arguments array", nil, withArgs(`[]`), `params.arguments in tools/call message 0 is an array, not an object`},
		{"arguments string", nil, withArgs(`"{}"`), `params.arguments in tools/call message 0 is a string, not an object`},
		{"arguments null", nil, withArgs(`null`), `params.arguments in tools/call message 0 is null, not an object`},
		{"tools/call notification without params", nil, `{"jsonrpc":"2.0","method":"tools/call"}`, `tools/call message 0 has no "params"`},
		{"bad tools/call in a batch", nil, `[` + ping + `,{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":7}}]`, `params.name in tools/call message 1 is a number, not a string`},

		// initialize.
		{"initialize without params", nil, `{"jsonrpc":"2.0","id":1,"method":"initialize"}`, `initialize message 0 has no "params"`},
		{"initialize without protocolVersion", nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, `initialize message 0 has no params.protocolVersion string`},
		{"initialize protocolVersion number", nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":2025}}`, `initialize message 0 has no params.protocolVersion string`},
		{"initialize protocolVersion in another case", nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolversion":"2025-11-25"}}`, `key "protocolversion" in message 0 params differs from "protocolVersion" only in case`},
		{"initialize in a batch", nil, `[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26"}}]`, `initialize (message 0) inside a batch`},

		// Routing headers.
		{"Mcp-Method differs", hdr("Mcp-Method", "tools/list"), call, `Mcp-Method header "tools/list" does not match method "tools/call"`},
		{"Mcp-Method differs in case", hdr("Mcp-Method", "Tools/Call"), call, `Mcp-Method header "Tools/Call" does not match method "tools/call"`},
		{"Mcp-Method on a response", hdr("Mcp-Method", "tools/call"), resp, `Mcp-Method header "tools/call" on a JSON-RPC response`},
		{"Mcp-Method twice", hdr("Mcp-Method", "tools/call", "Mcp-Method", "tools/call"), call, `Mcp-Method header given 2 times`},
		{"Mcp-Method under two spellings", hdr("Mcp-Method", "tools/call", "mcp-method", "tools/list"), call, `Mcp-Method header given 2 times`},
		{"lowercase mcp-method differs", hdr("mcp-method", "tools/list"), call, `Mcp-Method header "tools/list" does not match method "tools/call"`},
		{"Mcp_Method differs", hdr("Mcp_Method", "tools/list"), call, `Mcp-Method header "tools/list" does not match method "tools/call"`},
		{"MCP_NAME differs", hdr("MCP_NAME", "refund_order"), call, `Mcp-Name header "refund_order" does not match params.name "lookup_order"`},
		{"Mcp-Method and Mcp_Method", hdr("Mcp-Method", "tools/call", "Mcp_Method", "tools/list"), call, `Mcp-Method header given 2 times`},
		{"Mcp-Name and mcp_name", hdr("Mcp-Name", "lookup_order", "mcp_name", "lookup_order"), call, `Mcp-Name header given 2 times`},
		{"Mcp_Protocol_Version and Mcp-Protocol-Version", hdr("Mcp-Protocol-Version", "2025-11-25", "Mcp_Protocol_Version", "2025-06-18"), call, `Mcp-Protocol-Version header given 2 times`},
		{"Mcp-Method empty", hdr("Mcp-Method", ""), call, `Mcp-Method header "" does not match method "tools/call"`},
		{"Mcp-Name differs", hdr("Mcp-Method", "tools/call", "Mcp-Name", "lookup_order"), callWith(`{"name":"refund_order"}`), `Mcp-Name header "lookup_order" does not match params.name "refund_order"`},
		{"Mcp-Name without Mcp-Method differs", hdr("Mcp-Name", "refund_order"), call, `Mcp-Name header "refund_order" does not match params.name "lookup_order"`},
		{"Mcp-Name on tools/list", hdr("Mcp-Method", "tools/list", "Mcp-Name", "lookup_order"), ping[:len(ping)-6] + `tools/list"}`, `Mcp-Name header "lookup_order" on method "tools/list", which names nothing`},
		{"Mcp-Name on a notification", hdr("Mcp-Name", "x"), notif, `Mcp-Name header "x" on method "notifications/initialized", which names nothing`},
		{"Mcp-Name on a response", hdr("Mcp-Name", "x"), resp, `Mcp-Name header "x" on a JSON-RPC response`},
		{"Mcp-Name twice", hdr("Mcp-Name", "lookup_order", "Mcp-Name", "lookup_order"), call, `Mcp-Name header given 2 times`},
		{"Mcp-Name on prompts/get without a name", hdr("Mcp-Name", "greet"), `{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{}}`, `prompts/get message 0 has no params.name`},
		{"Mcp-Name differs from prompts/get name", hdr("Mcp-Name", "greet"), `{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"admin"}}`, `Mcp-Name header "greet" does not match params.name "admin"`},
		{"Mcp-Name on resources/subscribe", hdr("Mcp-Name", "file:///a"), `{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"file:///a"}}`, `Mcp-Name header "file:///a" on method "resources/subscribe", which names nothing`},
		{"prompts/get without params", nil, `{"jsonrpc":"2.0","id":1,"method":"prompts/get"}`, `prompts/get message 0 has no "params"`},
		{"prompts/get name not a string", nil, `{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":["a"]}}`, `params.name in prompts/get message 0 is an array, not a string`},
		{"prompts/get name twice in case", nil, `{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"a","Name":"b"}}`, `duplicate key "Name" in message 0 at params (same as "name" ignoring case)`},
		{"resources/read without params", nil, `{"jsonrpc":"2.0","id":1,"method":"resources/read"}`, `resources/read message 0 has no "params"`},
		{"resources/read without uri", nil, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"name":"x"}}`, `resources/read message 0 has no params.uri`},
		{"resources/read uri null", nil, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":null}}`, `params.uri in resources/read message 0 is null, not a string`},
		{"resources/subscribe uri number", nil, `{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":1}}`, `params.uri in resources/subscribe message 0 is a number, not a string`},
		{"resources/unsubscribe without uri in a batch", hdr("Mcp-Protocol-Version", "2025-03-26"), `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"resources/unsubscribe","params":{}}]`, `resources/unsubscribe message 1 has no params.uri`},
		{"Mcp-Name differs from resources/read uri", hdr("Mcp-Name", "file:///a"), `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///b"}}`, `Mcp-Name header "file:///a" does not match params.uri "file:///b"`},
		{"Mcp-Method on a batch", hdr("Mcp-Method", "tools/call"), `[` + call + `]`, `Mcp-Method/Mcp-Name headers on a batch`},
		{"Mcp-Name on a batch", hdr("Mcp-Name", "lookup_order"), `[` + call + `]`, `Mcp-Method/Mcp-Name headers on a batch`},

		// Versions.
		{"version header twice", hdr("Mcp-Protocol-Version", "2025-11-25", "Mcp-Protocol-Version", "2025-11-25"), ping, `Mcp-Protocol-Version header given 2 times`},
		{"version header empty", hdr("MCP-Protocol-Version", ""), ping, `empty Mcp-Protocol-Version header`},
		{"header vs initialize", hdr("MCP-Protocol-Version", "2025-11-25"), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}`,
			`protocol version disagreement: Mcp-Protocol-Version header says "2025-11-25", message 0 params.protocolVersion says "2025-06-18"`},
		{"header vs _meta", hdr("Mcp-Protocol-Version", "2025-11-25", "Mcp-Method", "tools/call", "Mcp-Name", "t"), callWith(`{` + sdkMeta + `,"name":"t"}`),
			`protocol version disagreement: Mcp-Protocol-Version header says "2025-11-25", message 0 params._meta says "2026-07-28"`},
		{"initialize vs its _meta", nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",` + sdkMeta + `}}`,
			`protocol version disagreement: message 0 params._meta says "2026-07-28", message 0 params.protocolVersion says "2025-11-25"`},
		{"batch messages disagree", nil, `[{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-03-26"}}},` + notif + `,{"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}]`,
			`protocol version disagreement: message 0 params._meta says "2025-03-26", message 2 params._meta says "2026-07-28"`},
		{"batch message disagrees with header", hdr("Mcp-Protocol-Version", "2025-03-26"), `[` + ping + `,{"jsonrpc":"2.0","method":"notifications/x","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18"}}}]`,
			`protocol version disagreement: Mcp-Protocol-Version header says "2025-03-26", message 1 params._meta says "2025-06-18"`},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		if seen[tc.name] {
			t.Fatalf("two cases named %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.header, []byte(tc.body))
			if err == nil {
				t.Fatalf("Parse accepted it: %s", dump(got))
			}
			var me *Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if got != nil {
				t.Errorf("Parse returned a request with its error")
			}
			if me.Reason != tc.reason {
				t.Errorf("reason\n got %s\nwant %s", me.Reason, tc.reason)
			}
		})
	}
}

func TestBatchAllowedAndVersions(t *testing.T) {
	for _, v := range KnownVersions {
		if BatchAllowed(v) != (v == "2025-03-26") {
			t.Errorf("BatchAllowed(%q) = %v", v, BatchAllowed(v))
		}
	}
	if BatchAllowed("") {
		t.Errorf("BatchAllowed(\"\") = true")
	}
	if KnownVersions[len(KnownVersions)-1] != "2026-07-28" || !contains(KnownVersions, policy.DefaultMCPVersion) {
		t.Errorf("KnownVersions = %v", KnownVersions)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestDenyBody(t *testing.T) {
	data := map[string]any{"denial_id": "d-1", "rule": "tools/call refund_order"}
	const e = `"error":{"code":-32001,"message":"denied","data":{"denial_id":"d-1","rule":"tools/call refund_order"}}`
	cases := []struct {
		name string
		ids  []json.RawMessage
		code int
		data any
		want string
	}{
		{"one id", []json.RawMessage{json.RawMessage(`1`)}, -32001, data, `{"jsonrpc":"2.0","id":1,` + e + `}`},
		{"string id", []json.RawMessage{json.RawMessage(`"a"`)}, -32001, data, `{"jsonrpc":"2.0","id":"a",` + e + `}`},
		{"batch in order, notifications skipped", []json.RawMessage{json.RawMessage(`2`), nil, json.RawMessage(`"x"`)}, -32001, data,
			`[{"jsonrpc":"2.0","id":2,` + e + `},{"jsonrpc":"2.0","id":"x",` + e + `}]`},
		{"batch with one id left", []json.RawMessage{nil, json.RawMessage(`7`)}, -32001, data, `[{"jsonrpc":"2.0","id":7,` + e + `}]`},
		{"no ids", nil, -32001, data, `{"jsonrpc":"2.0","id":null,` + e + `}`},
		{"only notifications", []json.RawMessage{nil, nil}, -32001, data, `{"jsonrpc":"2.0","id":null,` + e + `}`},
		{"no data", []json.RawMessage{json.RawMessage(`1`)}, -32001, nil, `{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"denied"}}`},
		{"code out of range", []json.RawMessage{json.RawMessage(`1`)}, -32600, nil, `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"denied"}}`},
		{"data that does not marshal", []json.RawMessage{json.RawMessage(`1`)}, -32099, make(chan int), `{"jsonrpc":"2.0","id":1,"error":{"code":-32099,"message":"denied"}}`},
		{"an id that is not JSON", []json.RawMessage{json.RawMessage(`{`)}, -32001, nil, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"denied"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := DenyBody(tc.ids, tc.code, "denied", tc.data)
			if string(got) != tc.want {
				t.Errorf("DenyBody\n got %s\nwant %s", got, tc.want)
			}
			if !json.Valid(got) {
				t.Errorf("not JSON: %s", got)
			}
		})
	}

	// Request.DenyBody knows a batch of one is a batch, and skips
	// client responses.
	req, err := Parse(nil, []byte(`[{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"name":"refund_order"}}]`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(req.DenyBody(-32001, "m", nil)), `[{"jsonrpc":"2.0","id":"q","error":{"code":-32001,"message":"m"}}]`; got != want {
		t.Errorf("batch of one: %s, want %s", got, want)
	}
	req, err = Parse(nil, []byte(`[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","method":"notifications/x"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(req.DenyBody(-32001, "m", nil)), `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"m"}}`; got != want {
		t.Errorf("batch without requests: %s, want %s", got, want)
	}
	req, err = Parse(nil, []byte(`{"jsonrpc":"2.0","id":9,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(req.DenyBody(-32001, "m", nil)), `{"jsonrpc":"2.0","id":9,"error":{"code":-32001,"message":"m"}}`; got != want {
		t.Errorf("single: %s, want %s", got, want)
	}
}

// normalized is r with the raw ids and arguments compacted, so that two
// spellings of one request compare equal.
func normalized(t *testing.T, r *Request) Request {
	out := Request{Batch: r.Batch, Version: r.Version}
	compact := func(raw json.RawMessage) json.RawMessage {
		if raw == nil {
			return nil
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			t.Fatalf("raw value %q is not JSON: %v", raw, err)
		}
		return b.Bytes()
	}
	for _, m := range r.Messages {
		m.ID = compact(m.ID)
		m.Message.Arguments = compact(m.Message.Arguments)
		out.Messages = append(out.Messages, m)
	}
	return out
}

func FuzzParseMCP(f *testing.F) {
	seeds := []string{
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientInfo":{"name":"agent","version":"0.1"},"protocolVersion":"2025-11-25","capabilities":{}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"action":"accept","content":{"ok":true}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{` + sdkMeta + `,"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"x"}},{"jsonrpc":"2.0","method":"n"}]`,
		`{"jsonrpc":"2.0","id":"\ud83d\ude00","method":"tools/call","params":{"name":"a\u0062","arguments":{"k":[1,-0.5e+3,"\n",null,true,{}]}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","name":"u"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"kind":1,"\u212aind":2}}}`,
		`[]`, ``, ` `, `{} x`, `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
	}
	headers := [][4]string{
		{"", "", "", ""},
		{"2025-11-25", "", "", ""},
		{"2026-07-28", "tools/call", "lookup_order", ""},
		{"2025-03-26", "", "", "identity"},
		{"", "ping", "", "gzip"},
	}
	for _, s := range seeds {
		for _, h := range headers {
			f.Add([]byte(s), h[0], h[1], h[2], h[3])
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, version, method, name, encoding string) {
		h := http.Header{}
		for _, kv := range [][2]string{{HeaderMCPProtocolVersion, version}, {HeaderMCPMethod, method}, {HeaderMCPName, name}, {"Content-Encoding", encoding}} {
			if kv[1] != "" {
				h.Set(kv[0], kv[1])
			}
		}
		got, err := Parse(h, body)
		if err != nil {
			var me *Error
			if !errors.As(err, &me) || me.Reason == "" || got != nil {
				t.Fatalf("error %#v (%T) with result %v", err, err, got)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if len(got.Messages) == 0 {
			t.Fatalf("accepted a request without messages")
		}
		trimmed := bytes.TrimLeft(body, " \t\r\n")
		if got.Batch != (trimmed[0] == '[') {
			t.Fatalf("Batch = %v for %q", got.Batch, body)
		}

		// The same input parses the same; so does any re-spacing of it.
		again, err := Parse(h, bytes.Clone(body))
		if err != nil || !reflect.DeepEqual(got, again) {
			t.Fatalf("re-parse differs: %v\n%s\n%s", err, dump(got), dump(again))
		}
		want := normalized(t, got)
		var compact, indented bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			t.Fatal(err)
		}
		if err := json.Indent(&indented, body, "\t", "  "); err != nil {
			t.Fatal(err)
		}
		for _, b := range [][]byte{compact.Bytes(), indented.Bytes()} {
			r, err := Parse(h, b)
			if err != nil {
				t.Fatalf("re-spaced %q refused: %v", b, err)
			}
			if n := normalized(t, r); !reflect.DeepEqual(n, want) {
				t.Fatalf("re-spaced parse differs:\n%s\n%s", dump(&n), dump(&want))
			}
		}

		// The result does not alias the body.
		scribbled := bytes.Clone(body)
		for i := range body {
			body[i] = 'x'
		}
		if !reflect.DeepEqual(got, again) {
			t.Fatalf("result changed with the body: %s", dump(got))
		}
		copy(body, scribbled)

		// encoding/json reads the same method, tool and arguments (the
		// body has no duplicate keys, so its last-one-wins cannot differ).
		var msgs []map[string]json.RawMessage
		if got.Batch {
			if err := json.Unmarshal(body, &msgs); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
		} else {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			msgs = append(msgs, m)
		}
		for i, m := range msgs {
			it := got.Messages[i]
			var method string
			if raw, ok := m["method"]; ok {
				if err := json.Unmarshal(raw, &method); err != nil {
					t.Fatalf("message %d method: %v", i, err)
				}
			}
			if method != it.Message.Method || it.Message.Response != (method == "") {
				t.Fatalf("message %d: method %q, parsed %+v", i, method, it.Message)
			}
			if it.Message.ProtocolVersion != got.Version {
				t.Fatalf("message %d version %q, request %q", i, it.Message.ProtocolVersion, got.Version)
			}
			if method == "tools/call" {
				var p struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				}
				if err := json.Unmarshal(m["params"], &p); err != nil {
					t.Fatalf("message %d params: %v", i, err)
				}
				if p.Name != it.Message.Tool || !bytes.Equal(p.Arguments, it.Message.Arguments) {
					t.Fatalf("message %d: encoding/json reads %q %s, parsed %q %s", i, p.Name, p.Arguments, it.Message.Tool, it.Message.Arguments)
				}
			}
		}

		// Its denial is JSON with one entry per request id.
		deny := got.DenyBody(-32001, "denied", map[string]string{"k": "v"})
		if !json.Valid(deny) {
			t.Fatalf("DenyBody not JSON: %s", deny)
		}
	})
}

func BenchmarkParseMCP(b *testing.B) {
	h := hdr("Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "lookup_order")
	wrap := func(args string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{` + sdkMeta + `,"name":"lookup_order","arguments":` + args + `}}`)
	}
	var manyKeys, escapes, unicodeKeys strings.Builder
	manyKeys.WriteString("{")
	unicodeKeys.WriteString("{")
	for i := 0; manyKeys.Len() < 60000; i++ {
		if i > 0 {
			manyKeys.WriteString(",")
			unicodeKeys.WriteString(",")
		}
		manyKeys.WriteString(`"k` + strconv.Itoa(i) + `":1`)
		unicodeKeys.WriteString(`"ſκ` + strconv.Itoa(i) + `":1`)
	}
	manyKeys.WriteString("}")
	unicodeKeys.WriteString("}")
	escapes.WriteString(`{"s":"`)
	for escapes.Len() < 60000 {
		escapes.WriteString(`\n\u00e9\ud83d\ude00`)
	}
	escapes.WriteString(`"}`)
	deep := `{"a":` + strings.Repeat(`[`, mcpMaxDepth-4) + strings.Repeat(`]`, mcpMaxDepth-4) + `}`
	var deepMany strings.Builder
	deepMany.WriteString(`{"a":[`)
	for i := 0; deepMany.Len() < 60000; i++ {
		if i > 0 {
			deepMany.WriteString(",")
		}
		deepMany.WriteString(strings.Repeat(`{"x":`, 200) + "1" + strings.Repeat(`}`, 200))
	}
	deepMany.WriteString(`]}`)
	for _, bc := range []struct {
		name string
		body []byte
	}{
		{"sdk-tools-call", wrap(`{"order_id":"A-1042"}`)},
		{"64KiB-many-keys", wrap(manyKeys.String())},
		{"64KiB-unicode-keys", wrap(unicodeKeys.String())},
		{"64KiB-escapes", wrap(escapes.String())},
		{"deepest", wrap(deep)},
		{"64KiB-deep-objects", wrap(deepMany.String())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if _, err := Parse(h, bc.body); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				Parse(h, bc.body)
			}
		})
	}
}
