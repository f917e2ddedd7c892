package mcp

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
)

// TestUndiciWebSocket: the WebSocket client Node.js ships (undici's, the
// WHATWG API browsers have) through the real proxy, in both proxy forms,
// to an echo server, against the same client straight to the server.
// It offers permessage-deflate, as browsers do: through the proxy none is
// negotiated, text and binary messages come back as sent, and a message
// holding a placeholder the proxy does not rewrite closes the WebSocket
// with 1008 before the server sees it (directly, it is echoed).
func TestUndiciWebSocket(t *testing.T) {
	tl := setup(t)
	var mu sync.Mutex
	var got []string // what the server received, in order
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionContextTakeover})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		for {
			typ, data, err := c.Read(context.Background())
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, string(data))
			mu.Unlock()
			if c.Write(context.Background(), typ, data) != nil {
				return
			}
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	addr, _ := startProxy(t, tl, writePolicy(t, "websocket-policy.yaml", "PORT", strconv.Itoa(port)))
	dir := workDir(t, tl)

	big := strings.Repeat("0123456789abcdef", 4096) // 64 KiB: a length in 16 bits
	messages, _ := json.Marshal([]any{"hello", map[string]string{"binary": "AAEC/w=="}, big, "token portcullis:provider:gh", "after"})
	for _, rt := range routes(addr) {
		t.Run(rt.name, func(t *testing.T) {
			mu.Lock()
			got = nil
			mu.Unlock()
			cmd := exec.Command(tl.node, "--require", "./proxy.cjs", "ws.cjs", "ws://127.0.0.1:"+strconv.Itoa(port)+"/echo")
			cmd.Dir, cmd.Env = dir, rt.env("MESSAGES="+string(messages))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("ws.cjs: %v\n%s", err, out)
			}
			var events []map[string]any
			for line := range strings.Lines(string(out)) {
				var e map[string]any
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Fatalf("ws.cjs printed %q", line)
				}
				events = append(events, e)
			}
			want := []map[string]any{{"open": ""}, {"recv": "hello"}, {"recvBinary": "AAEC/w=="}, {"recv": big}}
			sent := []string{"hello", "\x00\x01\x02\xff", big}
			if rt.proxy == "" {
				// Directly: the placeholder is echoed, and the client
				// closes when it has sent everything.
				want = append(want, map[string]any{"recv": "token portcullis:provider:gh"}, map[string]any{"recv": "after"},
					map[string]any{"close": float64(1000), "reason": "done"})
				sent = append(sent, "token portcullis:provider:gh", "after")
			} else {
				want = append(want, map[string]any{"close": float64(1008),
					"reason": `a WebSocket message holds the placeholder of provider "gh", which this endpoint does not rewrite`})
			}
			if rt.proxy == "" && len(events) > 0 && events[0]["open"] != "" {
				want[0]["open"] = events[0]["open"] // directly, the server may take the extension
			}
			if !slices.EqualFunc(events, want, func(a, b map[string]any) bool { return strings.EqualFold(jsonOf(a), jsonOf(b)) }) {
				t.Errorf("the client saw\n%s\nwant\n%s", jsonLines(events), jsonLines(want))
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got, sent) {
				t.Errorf("the server received %d messages %.60q, want %.60q", len(got), got, sent)
			}
		})
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonLines(events []map[string]any) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("  " + jsonOf(e))
		if len(b.String()) > 4000 {
			break
		}
		b.WriteString("\n")
	}
	return b.String()
}
