package credentials_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// searchTool is the one tool the MCP server on /pinned lists; the policy
// pins its definition.
const searchTool = `{"name":"search","inputSchema":{"type":"object"}}`

// serveMCP answers one JSON-RPC request of an MCP POST: tools/list with
// searchTool, tools/call with a text result.
func serveMCP(w http.ResponseWriter, body []byte) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.ID == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	result := `{"content":[{"type":"text","text":"found"}]}`
	if req.Method == "tools/list" {
		result = `{"tools":[` + searchTool + `]}`
	}
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, result)
}

// methodOf is the JSON-RPC method of a request the upstream received.
func methodOf(r received) string {
	var m struct {
		Method string `json:"method"`
	}
	json.Unmarshal([]byte(r.body), &m)
	return m.Method
}

func mcpHeader(extra http.Header) http.Header {
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Mcp-Protocol-Version": {"2025-11-25"}}
	for k, v := range extra {
		h[k] = v
	}
	return h
}

const searchCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":"x"}}}`

// A call of a pinned tool whose definition the proxy has not seen makes
// the proxy list the server's tools as the caller: on an endpoint that
// binds a provider, that listing carries the credential, as the call
// does, and not the agent's placeholder.
func TestMCPListingCarriesCredential(t *testing.T) {
	e := newEnv(t)
	e.agent.Credentials().SetCredentials(e.bundle())
	status, res := e.do(t, "POST", e.url("pinned.example.com", false, "/pinned"), mcpHeader(http.Header{"Authorization": {"Bearer portcullis:provider:gh"}}), searchCall)
	if status != 200 {
		t.Fatalf("%d %v", status, res)
	}
	got := e.plain.take()
	var methods []string
	for _, g := range got {
		methods = append(methods, methodOf(g))
		if a := g.req.Header.Get("Authorization"); a != "Bearer "+ghToken {
			t.Errorf("the server's %s carried Authorization %q, want the credential", methodOf(g), a)
		}
	}
	if strings.Join(methods, ",") != "tools/list,tools/call" {
		t.Errorf("the server received %v, want the proxy's tools/list then the call", methods)
	}
}

// The agent's headers are judged for placeholders and held secrets
// before the proxy's own listing copies its Authorization and Cookie:
// such a call is refused and the server receives nothing, the listing
// included.
func TestMCPListingAfterCredentialCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header http.Header
		code   string
	}{
		{"held secret in a cookie", http.Header{"Cookie": {"s=" + ghToken}}, "credential_supplied"},
		{"placeholder of another provider", http.Header{"Authorization": {"Bearer portcullis:provider:key"}}, "credential_placeholder"},
		{"own credential", http.Header{"Authorization": {"Bearer sk-agent-own-token"}}, "credential_supplied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.agent.Credentials().SetCredentials(e.bundle())
			status, res := e.do(t, "POST", e.url("pinned.example.com", false, "/pinned"), mcpHeader(tc.header), searchCall)
			errObj, _ := res["error"].(map[string]any)
			data, _ := errObj["data"].(map[string]any)
			if status != http.StatusForbidden || data["reason_code"] != tc.code {
				t.Errorf("%d %v, want 403 with reason_code %s", status, res, tc.code)
			}
			if got := e.plain.take(); len(got) != 0 {
				t.Errorf("the server received %d requests (%s first), want none", len(got), methodOf(got[0]))
			}
		})
	}
}
