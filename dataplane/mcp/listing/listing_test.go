package listing

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pmcp "github.com/portcullis-dev/portcullis/dataplane/mcp"
)

// Two pages of tools; the second tool carries a field the SDK's Tool does
// not know, which its fingerprint covers all the same.
var pages = map[string]string{
	"":   `{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"p2"}`,
	"p2": `{"tools":[{"name":"b","inputSchema":{"type":"object"},"x-unknown":{"k":1}}]}`,
}

// server is an MCP server (2025-11-25, no session) answering tools/list
// from pages, as JSON or (stream) as an event stream with a priming event
// first. It records the Authorization header of every request.
func server(t *testing.T, pages map[string]string, stream bool, auth *[]string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*auth = append(*auth, r.Header.Get("Authorization"))
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Cursor string `json:"cursor"`
			} `json:"params"`
		}
		json.NewDecoder(r.Body).Decode(&msg)
		var result string
		switch msg.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"t","version":"1"}}`
		case "tools/list":
			result = pages[msg.Params.Cursor]
		default:
			w.WriteHeader(http.StatusAccepted)
			return
		}
		answer := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, msg.ID, result)
		if stream && msg.Method == "tools/list" {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "id: 0\ndata: \n\nevent: message\ndata: %s\n\n", answer)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestFingerprints(t *testing.T) {
	var want []Tool
	for _, page := range []string{"", "p2"} {
		var res struct{ Tools []json.RawMessage }
		if err := json.Unmarshal([]byte(pages[page]), &res); err != nil {
			t.Fatal(err)
		}
		for _, def := range res.Tools {
			var tool struct{ Name string }
			json.Unmarshal(def, &tool)
			fp, err := pmcp.Fingerprint(def)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, Tool{Name: tool.Name, Fingerprint: fp})
		}
	}
	for _, stream := range []bool{false, true} {
		var auth []string
		srv := server(t, pages, stream, &auth)
		got, err := Fingerprints(t.Context(), Config{Endpoint: srv.URL, ProtocolVersion: "2025-11-25", Header: http.Header{"Authorization": {"Bearer x"}}})
		if err != nil {
			t.Fatalf("stream %v: %v", stream, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("stream %v: %v, want %v", stream, got, want)
		}
		for _, a := range auth {
			if a != "Bearer x" {
				t.Errorf("stream %v: a request without the header given: %q", stream, a)
			}
		}
	}
}

// A tool listed twice, on one page or on two, has no one definition.
func TestFingerprintsToolListedTwice(t *testing.T) {
	for _, pages := range []map[string]string{
		{"": `{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"a","description":"again","inputSchema":{"type":"object"}}]}`},
		{"": `{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"p2"}`, "p2": `{"tools":[{"name":"a","inputSchema":{"type":"object"}}]}`},
	} {
		var auth []string
		srv := server(t, pages, false, &auth)
		got, err := Fingerprints(t.Context(), Config{Endpoint: srv.URL, ProtocolVersion: "2025-11-25"})
		if err == nil || !strings.Contains(err.Error(), "lists tool a twice") {
			t.Errorf("%v: %v, %v; want an error naming the tool", pages, got, err)
		}
	}
}
