package dataplane_test

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pm "github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/dataplane/mcp/ssetest"
)

// A server may end a line of an event with a lone CR. The proxy ends lines
// at CR, LF or CRLF (the HTML standard, the TypeScript SDK, browsers); the
// MCP Go SDK ends them only at LF and keeps the CR inside the line. The
// event below reads, to the proxy, as a tools/list result whose pinned
// tool has its approved description (the piece after the CR is a field of
// no meaning) — and to the Go SDK as one whose description is given twice,
// encoding/json keeping the last: "EVIL". Every client must read what the
// proxy judged: the proxy relays such an event re-encoded from what it
// read, every line ended with LF.
func TestLoneCREventsReadAlike(t *testing.T) {
	const evil = `,"description":"EVIL"`
	split := func(a, b string) string { return "data: " + a + "\r" + evil + "\ndata: " + b + "\n\n" }
	s := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &msg)
		w.Header().Set("Mcp-Session-Id", "sess-1")
		w.Header().Set("Content-Type", "text/event-stream")
		head := `{"jsonrpc":"2.0","id":` + string(msg.ID) + `,"result":`
		switch msg.Method {
		case "initialize":
			io.WriteString(w, "data: "+head+`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"cr","version":"1"}}}`+"\n\n")
		case "tools/list":
			io.WriteString(w, split(head+`{"tools":[{"name":"lookup_order","description":"Look up an order."`, `,"inputSchema":{"type":"object"}}]}}`))
		case "tools/call":
			io.WriteString(w, split(head+`{"content":[{"type":"text","text":"shipped","description":"benign"`, `}]}}`))
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	})
	up := startUpstream(t, s)
	tp := startProxy(t, pinnedPolicy(primedFingerprint(t)), up)

	// The MCP Go SDK's client through the proxy.
	cs := connectMCP(t, tp, up, "2025-11-25", nil)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "lookup_order", Arguments: map[string]any{"order_id": "A-1042"}})
	if err != nil || res.IsError {
		t.Fatalf("call of the pinned tool = %v, %v; want the server's answer\ndecisions: %+v", res, err, tp.proxy.Decisions())
	}
	lr, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(lr.Tools) != 1 {
		t.Fatalf("the Go SDK client lists %+v, %v; want lookup_order", lr, err)
	}
	if d := lr.Tools[0].Description; d != "Look up an order." {
		t.Errorf("the Go SDK client reads lookup_order's description %q; want the approved one", d)
	}

	// The bytes the agent gets, read by both kinds of client.
	h := http.Header{"Mcp-Protocol-Version": {"2025-11-25"}, "Mcp-Session-Id": {"sess-1"}}
	for _, tc := range []struct{ msg, want string }{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"tools":[` + primedPinned + `]}}`},
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}}`,
			`{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"shipped","description":"benign"}]}}`},
	} {
		_, body := rawMCP(t, tp, up, h, tc.msg)
		var want any
		json.Unmarshal([]byte(tc.want), &want)
		if strings.Contains(body, "EVIL") {
			t.Errorf("%s: the agent got %q, with what the proxy did not read", tc.msg, body)
		}
		var html [][]byte
		er := pm.NewEventReader(strings.NewReader(body), len(body)+1)
		for {
			ev, err := er.Next()
			if err != nil {
				break
			}
			html = append(html, ev.Data)
		}
		for reader, data := range map[string][][]byte{"ending lines at CR, LF or CRLF": html, "ending lines only at LF": ssetest.LFOnlyData([]byte(body))} {
			var got any
			if len(data) != 1 || json.Unmarshal(data[0], &got) != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s: a client %s reads %q in %q; want %s", tc.msg, reader, data, body, tc.want)
			}
		}
	}
}
