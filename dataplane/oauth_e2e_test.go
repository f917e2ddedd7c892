package dataplane_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// An MCP server that is its own OAuth resource and authorization server
// (2025-03-26 flows) on one host:port: with mcp.oauth declared, its
// metadata, /authorize, /token and /register pass through the proxy as
// plain HTTP (POST /register is not read as JSON-RPC), MCP keeps working,
// and other paths stay denied; without the declaration they are denied.
func TestMCPOAuthPathsThroughProxy(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/mcp", ordersHandler(false))
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"resource":"https://%s/mcp","authorization_servers":["https://%s"]}`, r.Host, r.Host)
	})
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"issuer":"https://%s","registration_endpoint":"https://%s/register"}`, r.Host, r.Host)
	})
	mux.HandleFunc("POST /register", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"client_id":"c1","echo":%s}`, body)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		fmt.Fprintf(w, `{"access_token":"t-%s","token_type":"Bearer"}`, r.PostForm.Get("code"))
	})
	mux.HandleFunc("/admin", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secret") })
	up := startUpstream(t, mux)
	declared := strings.Replace(ordersPolicy, "versions: [", "oauth: { resource_metadata: true, authorization_server: true }\n          versions: [", 1)
	base := fmt.Sprintf("https://orders.example.com:%d", up.port)
	do := func(tp *testProxy, method, path, contentType, body string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		res, err := tp.httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	tp := startProxy(t, declared, up)
	for _, tc := range []struct {
		method, path, contentType, body string
		status                          int
		want                            string
	}{
		{"GET", "/.well-known/oauth-protected-resource/mcp", "", "", 200, `"authorization_servers"`},
		{"GET", "/.well-known/oauth-authorization-server", "", "", 200, `"registration_endpoint"`},
		{"POST", "/register", "application/json", `{"redirect_uris":["http://localhost/cb"]}`, 201, `"client_id":"c1"`},
		{"POST", "/token", "application/x-www-form-urlencoded", "grant_type=authorization_code&code=abc", 200, `"access_token":"t-abc"`},
		{"GET", "/admin", "", "", 403, "policy_denied"},
	} {
		status, body := do(tp, tc.method, tc.path, tc.contentType, tc.body)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("declared: %s %s = %d %s; want %d with %s", tc.method, tc.path, status, body, tc.status, tc.want)
		}
	}
	if up.saw("/admin") {
		t.Error("the denied /admin reached the server")
	}
	cs := connectMCP(t, tp, up, "2025-11-25", nil)
	if got := toolNames(t, cs); len(got) != 1 || got[0] != "lookup_order" {
		t.Errorf("MCP beside the OAuth paths: tools %v", got)
	}

	plain := startProxy(t, ordersPolicy, up)
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/register"} {
		method := "GET"
		if path == "/register" {
			method = "POST"
		}
		if status, body := do(plain, method, path, "application/json", "{}"); status != 403 {
			t.Errorf("undeclared: %s %s = %d %s; want 403", method, path, status, body)
		}
	}
}
