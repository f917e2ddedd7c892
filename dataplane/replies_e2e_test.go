// MCP 2026-07-28 deprecates sampling, roots and logging (SEP-2577), but the
// versions before it have them, and the proxy must pass them unchanged.
//
//lint:file-ignore SA1019 the deprecated MCP features are what these tests exercise

package dataplane_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const samplingPolicy = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: orders.example.com
        port: PORT
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
          - allow: { method: tools/list }
          - allow: { method: tools/call, tool: summarize }
    binaries:
      - path: /usr/bin/python3
`

// samplingServer has one tool, summarize, that asks the client's model
// (sampling/createMessage) and returns how many bytes the answer held.
func samplingServer() *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "summarizer", Version: "v1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "summarize"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ map[string]any) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
				MaxTokens: 100000,
				Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "summarize the orders"}}},
			})
			if err != nil {
				return nil, nil, err
			}
			text := res.Content.(*mcp.TextContent).Text
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(len(text))}}}, nil, nil
		})
	return server
}

// A client's 200 KB answer to the server's sampling request passes under
// the default limits (mcp.max_body_bytes is 64 KiB): it is judged by the
// request it answers, up to mcp.max_response_bytes; the tool call that
// waited on it completes.
func TestSamplingAnswerLargerThanMaxBody(t *testing.T) {
	up := startUpstream(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return samplingServer() },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true}))
	tp := startProxy(t, samplingPolicy, up)
	answer := strings.Repeat("orders are fine. ", 200<<10/17)
	cs := connectMCP(t, tp, up, "2025-11-25", &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "test", Role: "assistant", Content: &mcp.TextContent{Text: answer}}, nil
		},
	})
	// Refused, the answer would leave the call waiting for ever: bound the
	// wait (a guard against a hang, not a measure of speed).
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "summarize", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("summarize through the proxy = %v, %v; want the server's answer", res, err)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; got != fmt.Sprint(len(answer)) {
		t.Fatalf("the server got %s bytes of the sampling answer, want %d", got, len(answer))
	}
}

// Only answers to requests the server sent may be larger than
// mcp.max_body_bytes: a large request, a large answer when the server
// waits for none, and a large answer to an id the server never used are
// refused before anything is forwarded.
func TestLargeBodiesThatAnswerNothingRefused(t *testing.T) {
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), "tools/call") {
			w.WriteHeader(http.StatusAccepted) // an answer to the server
			return
		}
		// A tool call's stream carries one request of the server: id 5.
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"sampling/createMessage\",\"params\":{\"messages\":[],\"maxTokens\":1}}\n\n")
	}))
	tp := startProxy(t, samplingPolicy, up)
	big := strings.Repeat("x", 100<<10)
	h := http.Header{"Mcp-Protocol-Version": {"2025-11-25"}, "Mcp-Session-Id": {"s1"}}
	answer := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"model":"m","role":"assistant","content":{"type":"text","text":%q}}}`, id, big)
	}
	// Nothing pending yet: a large answer is over max_body_bytes.
	if res, body := rawMCP(t, tp, up, h, answer(5)); res.StatusCode != http.StatusForbidden || !strings.Contains(body, "mcp.max_body_bytes") {
		t.Fatalf("a large answer with nothing pending = %d %s", res.StatusCode, body)
	}
	// The server sends request 5 on a stream.
	if res, _ := rawMCP(t, tp, up, h, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"summarize"}}`); res.StatusCode != http.StatusOK {
		t.Fatalf("tools/call = %d", res.StatusCode)
	}
	seen := up.count()
	for _, tc := range []struct{ name, body string }{
		{"a large request", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"summarize","arguments":{"x":"` + big + `"}}}`},
		{"a large answer to another id", answer(6)},
	} {
		res, body := rawMCP(t, tp, up, h, tc.body)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "only answers to the server's requests may be larger") {
			t.Errorf("%s = %d %s", tc.name, res.StatusCode, body)
		}
	}
	// Another session does not answer session s1's request.
	other := http.Header{"Mcp-Protocol-Version": {"2025-11-25"}, "Mcp-Session-Id": {"s2"}}
	if res, body := rawMCP(t, tp, up, other, answer(5)); res.StatusCode != http.StatusForbidden {
		t.Errorf("another session's large answer = %d %s", res.StatusCode, body)
	}
	if up.count() != seen {
		t.Fatalf("the server saw %d refused bodies", up.count()-seen)
	}
	// The answer to request 5 passes, once.
	if res, body := rawMCP(t, tp, up, h, answer(5)); res.StatusCode != http.StatusAccepted {
		t.Fatalf("the large answer to request 5 = %d %s", res.StatusCode, body)
	}
	if res, _ := rawMCP(t, tp, up, h, answer(5)); res.StatusCode != http.StatusForbidden {
		t.Errorf("a second large answer to request 5 = %d, want 403", res.StatusCode)
	}
}
