package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	pmcp "github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/demo"
	"github.com/portcullis-dev/portcullis/policy"
)

// rawFingerprints lists the tools of a stateless MCP server with one raw
// POST and fingerprints each definition from the bytes (the path the
// command does not take: no SDK, no recorder).
func rawFingerprints(t *testing.T, endpoint string) map[string]string {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}}}`
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint, strings.NewReader(body))
	req.Header = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"},
		"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/list"}}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		ev, err := pmcp.NewEventReader(bytes.NewReader(b), 1<<20).Next()
		if err != nil {
			t.Fatal(err)
		}
		b = ev.Data
	}
	tools, _, found, err := pmcp.ReadToolsList(b, json.RawMessage("7"))
	if err != nil || !found {
		t.Fatalf("raw tools/list = %s: %v", b, err)
	}
	out := map[string]string{}
	for _, tool := range tools {
		fp, err := pmcp.Fingerprint(tool.Definition)
		if err != nil {
			t.Fatal(err)
		}
		out[tool.Name] = fp
	}
	return out
}

// `portcullis mcp fingerprint` prints what a pin needs, for a server with
// sessions and one without, direct and through a proxy (which shows only
// the tools the policy lets the agent call); the fingerprints are those
// of the bytes the server sends.
func TestMCPFingerprint(t *testing.T) {
	stateless := httptest.NewServer(demo.OrdersHandler(&mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true}))
	defer stateless.Close()
	sessions := httptest.NewServer(demo.OrdersHandler(&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true}))
	defer sessions.Close()
	// A resumable server starts each stream with a priming event (an id
	// and empty data), which holds no answer.
	primed := httptest.NewServer(demo.OrdersHandler(&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true, EventStore: mcp.NewMemoryEventStore(nil)}))
	defer primed.Close()
	want := rawFingerprints(t, stateless.URL+"/mcp")
	if len(want) != 2 {
		t.Fatalf("the demo server lists %v", want)
	}
	parse := func(stdout string) map[string]string {
		var got struct {
			Tools []struct{ Name, Fingerprint string }
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("-o json printed %q: %v", stdout, err)
		}
		m := map[string]string{}
		for _, tool := range got.Tools {
			m[tool.Name] = tool.Fingerprint
		}
		return m
	}
	for _, tc := range []struct{ url, version string }{
		{stateless.URL + "/mcp", "2026-07-28"},
		{sessions.URL + "/mcp", "2025-11-25"},
		{primed.URL + "/mcp", "2025-11-25"},
	} {
		stdout, stderr, code := runCLI(t, "mcp", "fingerprint", tc.url, "--protocol-version", tc.version, "-o", "json")
		if code != exitOK {
			t.Fatalf("mcp fingerprint %s: exit %d: %s", tc.version, code, stderr)
		}
		if got := parse(stdout); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: fingerprints %v, want %v", tc.version, got, want)
		}
	}
	stdout, _, code := runCLI(t, "mcp", "fingerprint", stateless.URL+"/mcp", "--protocol-version", "2026-07-28")
	if code != exitOK || !strings.Contains(stdout, want["lookup_order"]+"  lookup_order") {
		t.Errorf("table output:\n%s", stdout)
	}

	// Through a proxy whose policy allows lookup_order alone.
	port := stateless.Listener.Addr().(*net.TCPAddr).Port
	agent, err := dataplane.New(dataplane.Config{
		DevAllowLoopback: true,
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		CallerBinary: func(net.Conn) (string, error) { return "/usr/bin/curl", nil },
		Logger:       slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	pol, _, err := policy.Parse([]byte(strings.NewReplacer("PORT", strconv.Itoa(port), "binaries: []", "binaries: [{path: /usr/bin/curl}]").Replace(consolePolicy)))
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.SetPolicy(pol, "v1"); err != nil {
		t.Fatal(err)
	}
	proxyURL := dataplanetest.Serve(t, agent)
	stdout, stderr, code := runCLI(t, "mcp", "fingerprint", fmt.Sprintf("http://orders.example.com:%d/mcp", port),
		"--proxy", proxyURL.String(), "--protocol-version", "2026-07-28", "-o", "json")
	if code != exitOK {
		t.Fatalf("through the proxy: exit %d: %s", code, stderr)
	}
	if got := parse(stdout); len(got) != 1 || got["lookup_order"] != want["lookup_order"] {
		t.Errorf("through the proxy: %v, want lookup_order %s alone", got, want["lookup_order"])
	}

	// Bad flags are refused before anything is sent.
	for _, args := range [][]string{
		{"mcp", "fingerprint", stateless.URL + "/mcp", "--header", "no colon"},
		{"mcp", "fingerprint", stateless.URL + "/mcp", "--proxy", "::"},
		{"mcp", "fingerprint"},
	} {
		if _, _, code := runCLI(t, args...); code != exitInvalid {
			t.Errorf("%q: exit %d, want %d", args, code, exitInvalid)
		}
	}
}

// A server that lists a tool twice has no one definition to pin: `mcp
// fingerprint` says so instead of printing either entry's fingerprint.
func TestMCPFingerprintToolListedTwice(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.NewDecoder(r.Body).Decode(&msg)
		result := ""
		switch msg.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"twice","version":"1"}}`
		case "tools/list":
			result = `{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"a","description":"again","inputSchema":{"type":"object"}}]}`
		default:
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, msg.ID, result)
	}))
	defer srv.Close()
	stdout, stderr, code := runCLI(t, "mcp", "fingerprint", srv.URL+"/mcp", "-o", "json")
	if code == exitOK || strings.Contains(stdout, "sha256:") || !strings.Contains(stderr, "lists tool a twice") {
		t.Fatalf("mcp fingerprint of a list naming a twice: exit %d, stdout %q, stderr %q; want an error naming the tool", code, stdout, stderr)
	}
}
