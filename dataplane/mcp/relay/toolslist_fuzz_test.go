package relay

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/dataplane/mcp/ssetest"
)

// FuzzCopyEvents relays a server's event stream as the proxy does, with
// no policy in force (no tool may be shown), as the answer to a
// tools/list POST and as a GET stream, and reads what the agent gets as
// two clients would: one following the HTML standard (lines end at CRLF,
// CR or LF), and one ending lines only at LF and trimming data (the MCP Go
// SDK's). Neither may find a tool in any message: whatever a client can
// take for a message is one the proxy read and filtered. Events without a
// message (priming events, comments) pass as they came. And both clients
// read the same data in every event: with no policy every tool is
// filtered out, so "no tool" alone never checked an event relayed
// unchanged, where a lone CR made the Go SDK read other JSON than the
// proxy judged (a key given twice, say).
func FuzzCopyEvents(f *testing.F) {
	const list = `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"hidden","inputSchema":{"type":"object"}}]}}`
	for _, s := range []string{
		"id: 1\nretry: 1000\ndata: \n\ndata: " + list + "\n\n",
		"event: prime\nid: 0_1\ndata: \n\n: keep-alive\n\nretry: 5\n\nid: 2\n\nevent: x\n\ndata: " + list + "\n\n",
		"data: \r" + list + "\n\n",
		"data:  \r" + list + "\n\n",
		"data:\r\rdata: " + list + "\n\n",
		"data: [\r" + list + "]\n\n",
		": c\rdata: " + list + "\r\r",
		"id: 1\rdata: x\n\ndata: " + list + "\n\n",
		"data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"x\":1\r,\"x\":2\ndata: }}\n\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	rl := New(Config{Logger: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, stream []byte, get bool) {
		l := &Response{relay: rl, session: Session{Endpoint: Endpoint{Host: "mcp.example.com", Port: 443, Path: "/mcp"}}, shows: showNone{}, get: get}
		if !get {
			l.ids = []json.RawMessage{json.RawMessage("1")}
			key, err := mcp.IDKey(l.ids[0])
			if err != nil {
				t.Fatal(err)
			}
			l.answers = mcp.ListResponse{IDs: map[string]bool{key: true}, Only: true}
		}
		w := httptest.NewRecorder()
		res := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(bytes.NewReader(stream))}
		l.copyEvents(w, res)
		out := w.Body.Bytes()

		events := mcp.NewEventReader(bytes.NewReader(out), len(out)+1)
		var html [][]byte
		for {
			ev, err := events.Next()
			if err != nil {
				break
			}
			if ev.HasData && listsTools(ev.Data) {
				t.Fatalf("a client reading lines as the HTML standard does finds a tool in %q; the agent got %q", ev.Data, out)
			}
			if ev.HasData {
				html = append(html, ssetest.TrimLines(ev.Data))
			}
		}
		// The Go SDK's client does not drop a byte order mark: it reads
		// no data in a first event that starts with one, not other data.
		lf := ssetest.LFOnlyData(bytes.TrimPrefix(out, []byte("\xEF\xBB\xBF")))
		for _, data := range lf {
			if listsTools(data) {
				t.Fatalf("a client ending lines only at LF finds a tool in %q; the agent got %q", data, out)
			}
		}
		if len(lf) != len(html) {
			t.Fatalf("a client ending lines only at LF reads %d events with data, one ending them at CR too %d; the agent got %q", len(lf), len(html), out)
		}
		for i := range lf {
			if !bytes.Equal(lf[i], html[i]) {
				t.Fatalf("event %d: a client ending lines only at LF reads %q, one ending them at CR too %q; the agent got %q", i, lf[i], html[i], out)
			}
		}
	})
}

// showNone shows no tool, as the proxy with no policy in force.
type showNone struct{}

func (showNone) Shows(string, string) bool { return false }

// listsTools reports whether data, read as encoding/json reads it (keys
// matched ignoring case), is a message or batch whose result holds a tool.
func listsTools(data []byte) bool {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return false
	}
	msgs := []any{v}
	if batch, ok := v.([]any); ok {
		msgs = batch
	}
	for _, m := range msgs {
		obj, _ := m.(map[string]any)
		for k, result := range obj {
			r, _ := result.(map[string]any)
			if !strings.EqualFold(k, "result") || r == nil {
				continue
			}
			for k, tools := range r {
				if list, _ := tools.([]any); strings.EqualFold(k, "tools") && len(list) > 0 {
					return true
				}
			}
		}
	}
	return false
}
