package mcp

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReadListAnswer(t *testing.T) {
	answer := `{"jsonrpc":"2.0","id":"v1","result":{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"c2"}}`
	other := `{"jsonrpc":"2.0","method":"notifications/message","params":{}}`
	for _, tt := range []struct {
		name   string
		body   string
		stream bool
		max    int
		found  bool
		err    string
	}{
		{"a JSON answer", answer, false, 1 << 10, true, ""},
		{"a JSON body answering another request", strings.Replace(answer, `"v1"`, `"v2"`, 1), false, 1 << 10, false, ""},
		{"a JSON body over max", answer, false, 20, false, "over 20 bytes"},
		{"an event stream: priming event, a notification, the answer", "id: 0\ndata: \n\ndata: " + other + "\n\ndata: " + answer + "\n\n", true, 1 << 10, true, ""},
		{"an event stream that ends without it", "data: " + other + "\n\n", true, 1 << 10, false, ""},
		{"an answer that is an error", `{"jsonrpc":"2.0","id":"v1","error":{"code":-32601,"message":"no"}}`, false, 1 << 10, true, "answered tools/list with an error"},
	} {
		tools, next, found, err := ReadListAnswer(strings.NewReader(tt.body), tt.stream, json.RawMessage(`"v1"`), tt.max)
		if found != tt.found || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: found %v, %v; want %v, %q", tt.name, found, err, tt.found, tt.err)
			continue
		}
		if found && err == nil && (len(tools) != 1 || tools[0].Name != "a" || next != "c2") {
			t.Errorf("%s: %v, next %q", tt.name, tools, next)
		}
	}
}
