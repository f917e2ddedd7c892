package dataplane_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolNames lists the tools a tools/list through cs shows, every page.
func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// The agent sees only the tools the policy lets it call, in both MCP
// transports' shapes (a session's event stream, a stateless JSON
// answer); lookup_order, allowed for some arguments only, stays listed.
// mcp.filter_tools_list: false and audit endpoints show every tool.
func TestToolsListFiltered(t *testing.T) {
	unfiltered := strings.Replace(ordersPolicy, "versions: [", "filter_tools_list: false\n          versions: [", 1)
	audit := strings.Replace(ordersPolicy, "enforcement: enforce", "enforcement: audit", 1)
	for _, tc := range []struct {
		name      string
		stateless bool
		version   string
	}{
		{"2025-11-25 with sessions", false, "2025-11-25"},
		{"2026-07-28 stateless", true, "2026-07-28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, pc := range []struct {
				name, doc string
				want      []string
			}{
				{"filtered", ordersPolicy, []string{"lookup_order"}},
				{"filter_tools_list false", unfiltered, []string{"lookup_order", "refund_order"}},
				{"audit", audit, []string{"lookup_order", "refund_order"}},
			} {
				up := startUpstream(t, ordersHandler(tc.stateless))
				tp := startProxy(t, pc.doc, up)
				cs := connectMCP(t, tp, up, tc.version, nil)
				if got := toolNames(t, cs); !slices.Equal(got, pc.want) {
					t.Errorf("%s: tools through the proxy = %v, want %v", pc.name, got, pc.want)
				}
			}
		})
	}
}

// Every page is filtered and the cursor kept: a server listing six tools
// two at a time shows, through the proxy, the three the policy allows
// (by name, by glob, and despite a deny rule on another).
func TestToolsListEveryPage(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "paged", Version: "v1"}, &mcp.ServerOptions{PageSize: 2})
	for _, name := range []string{"alpha", "beta", "gamma", "report_daily", "report_weekly", "zeta"} {
		mcp.AddTool(server, &mcp.Tool{Name: name, Description: "tool " + name},
			func(context.Context, *mcp.CallToolRequest, map[string]any) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{}, nil, nil
			})
	}
	up := startUpstream(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true}))
	doc := `
version: 1
network_policies:
  paged:
    name: paged
    endpoints:
      - host: orders.example.com
        port: PORT
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
          - allow: { method: tools/list }
          - allow: { method: tools/call, tool: { any: [alpha, "report_*"] } }
        deny_rules:
          - { method: tools/call, tool: report_weekly }
    binaries:
      - path: /usr/bin/python3
`
	tp := startProxy(t, doc, up)
	cs := connectMCP(t, tp, up, "2025-11-25", nil)
	if got, want := toolNames(t, cs), []string{"alpha", "report_daily"}; !slices.Equal(got, want) {
		t.Fatalf("tools through the proxy = %v, want %v", got, want)
	}
	// Page by page: three pages of two, each kept whole or cut, the
	// cursor passed on (the last page has none).
	var pages [][]string
	var cursor string
	for {
		res, err := cs.ListTools(t.Context(), &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range res.Tools {
			names = append(names, tool.Name)
		}
		pages = append(pages, names)
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	if len(pages) != 3 || fmt.Sprint(pages) != "[[alpha] [report_daily] []]" {
		t.Fatalf("pages through the proxy = %v, want [[alpha] [report_daily] []]", pages)
	}
}

// A tools/list answer the proxy cannot read strictly — a client could read
// it otherwise — never reaches the agent: its request gets a JSON-RPC
// error (502), in a JSON answer and in an event stream alike, and the
// tool the policy denies is not in what the client receives.
func TestToolsListUnreadableAnswerRefused(t *testing.T) {
	const list = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}}}`
	h := http.Header{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/list"}}
	for _, tc := range []struct{ name, result string }{
		{"duplicate name", `{"tools":[{"name":"lookup_order","name":"refund_order","inputSchema":{"type":"object"}}]}`},
		{"name in another case", `{"tools":[{"name":"lookup_order","NAME":"refund_order","inputSchema":{"type":"object"}}]}`},
		{"tools in another case", `{"tools":[],"Tools":[{"name":"refund_order","inputSchema":{"type":"object"}}]}`},
		{"a tool without a name", `{"tools":[{"title":"refund_order","inputSchema":{"type":"object"}}]}`},
		{"tools not an array", `{"tools":{"name":"refund_order"}}`},
		{"duplicate key deep in a schema", `{"tools":[{"name":"lookup_order","inputSchema":{"type":"object","type":"string"}}]}`},
	} {
		for _, stream := range []bool{false, true} {
			answer := `{"jsonrpc":"2.0","id":1,"result":` + tc.result + `}`
			up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if stream {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprintf(w, "event: message\ndata: %s\n\n", answer)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, answer)
			}))
			tp := startProxy(t, ordersPolicy, up)
			res, body := rawMCP(t, tp, up, h, list)
			if strings.Contains(body, "refund_order") || !strings.Contains(body, `"code":-32003`) || !strings.Contains(body, `"id":1`) {
				t.Errorf("%s (stream %v): the client got %d %s; want a JSON-RPC error answering id 1, without refund_order", tc.name, stream, res.StatusCode, body)
			}
			if !stream && res.StatusCode != http.StatusBadGateway {
				t.Errorf("%s: status %d, want 502", tc.name, res.StatusCode)
			}
		}
	}
}

// An event stream is filtered event by event: the server's own requests
// and notifications (notifications/tools/list_changed among them) pass as
// sent (re-encoded with LF line ends when a line ends in a lone CR), the
// result is cut, and a GET stream that replays a tools/list
// answer (resumption) is filtered too.
func TestToolsListEventStreams(t *testing.T) {
	const (
		changed = "event: message\r\nid: 7\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\r\n\r\n"
		ping    = ": keep-alive\rdata: {\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"ping\"}\r\r"
		// Its lines end in lone CRs: it goes with LF line ends, as the
		// proxy read it (a client ending lines only at LF would read it
		// as a comment), without the comment.
		pingLF = "data: {\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"ping\"}\n\n"
		// The result spread over two data lines, as a server may write it.
		result = "id: 8\ndata: {\"jsonrpc\":\"2.0\",\"id\":ID,\"result\":{\"nextCursor\":\"c2\",\n" +
			"data: \"tools\":[{\"name\":\"refund_order\",\"inputSchema\":{\"type\":\"object\"}},{\"name\":\"lookup_order\",\"inputSchema\":{\"type\":\"object\"}}]}}\n\n"
	)
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		id := "1"
		if r.Method == http.MethodGet {
			id = "42" // a replayed answer to some earlier POST
		}
		io.WriteString(w, changed+ping+strings.Replace(result, "ID", id, 1))
	}))
	tp := startProxy(t, ordersPolicy, up)
	const list = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	h := http.Header{"Mcp-Protocol-Version": {"2025-11-25"}, "Mcp-Session-Id": {"s"}}
	want := func(id string) string {
		return changed + pingLF + "id: 8\ndata: {\"jsonrpc\":\"2.0\",\"id\":" + id + ",\"result\":{\"nextCursor\":\"c2\",\n" +
			"data: \"tools\":[{\"name\":\"lookup_order\",\"inputSchema\":{\"type\":\"object\"}}]}}\n\n"
	}
	if _, body := rawMCP(t, tp, up, h, list); body != want("1") {
		t.Errorf("POST stream through the proxy:\n%q\nwant\n%q", body, want("1"))
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, fmt.Sprintf("https://orders.example.com:%d/mcp", up.port), nil)
	req.Header = http.Header{"Accept": {"text/event-stream"}, "Mcp-Session-Id": {"s"}, "Last-Event-Id": {"6"}}
	res, err := tp.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != want("42") {
		t.Errorf("GET stream through the proxy:\n%q\nwant\n%q", body, want("42"))
	}
}

// In a 2025-03-26 batch only the tools/list request's answer is cut; the
// answer to another request that happens to carry "tools" passes as sent.
func TestToolsListInBatch(t *testing.T) {
	const answer = `[{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"refund_order"}]}},` +
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"refund_order","inputSchema":{}},{"name":"lookup_order","inputSchema":{}}]}}]`
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answer)
	}))
	tp := startProxy(t, ordersPolicy, up)
	batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"lookup_order","arguments":{"order_id":"A-1042"}}}]`
	res, body := rawMCP(t, tp, up, http.Header{"Mcp-Protocol-Version": {"2025-03-26"}}, batch)
	want := `[{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"refund_order"}]}},` +
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"lookup_order","inputSchema":{}}]}}]`
	if res.StatusCode != http.StatusOK || body != want {
		t.Fatalf("batch answer through the proxy = %d %s\nwant %s", res.StatusCode, body, want)
	}
	if res.ContentLength != int64(len(want)) {
		t.Errorf("Content-Length %d, want %d", res.ContentLength, len(want))
	}
}
