package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// consoleEnv is a gateway with an operator token and a sandbox (and its
// token), for the console session tests.
type consoleEnv struct {
	gw       *gatewaytest.Gateway
	admin    api
	operator string
	sandbox  string
}

func startConsole(t *testing.T) *consoleEnv {
	t.Helper()
	gw := gatewaytest.Start(t, "sqlite")
	admin := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	op, err := admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: "ops-alice", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := admin.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "support", Policy: advisorPolicy})
	if err != nil {
		t.Fatal(err)
	}
	return &consoleEnv{gw: gw, admin: admin, operator: op.GetToken(), sandbox: sb.GetToken()}
}

// do sends one request; header values are set as given (Cookie included).
func do(t *testing.T, method, url, contentType, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func signInJSON(t *testing.T, baseURL, token string, header map[string]string) (*http.Response, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]string{"token": token})
	return do(t, http.MethodPost, baseURL+gateway.SessionPath, "application/json", string(b), header)
}

func sessionCookieOf(res *http.Response) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == gateway.SessionCookie {
			return c
		}
	}
	return nil
}

type sessionBody struct {
	Name, Role, CSRF, Message string
}

func decodeSession(t *testing.T, body string) sessionBody {
	t.Helper()
	var s sessionBody
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("session answer %q: %v", body, err)
	}
	return s
}

func TestConsoleSignIn(t *testing.T) {
	e := startConsole(t)

	res, body := signInJSON(t, e.gw.URL, e.operator, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("operator sign-in = %d %s", res.StatusCode, body)
	}
	s := decodeSession(t, body)
	if s.Name != "ops-alice" || s.Role != "operator" || s.CSRF != gateway.CSRFToken(e.operator) {
		t.Errorf("sign-in answered %+v", s)
	}
	c := sessionCookieOf(res)
	if c == nil {
		t.Fatalf("no session cookie in %q", res.Header.Values("Set-Cookie"))
	}
	raw := res.Header.Get("Set-Cookie")
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.MaxAge != 12*3600 || c.Secure || c.Value != e.operator {
		t.Errorf("session cookie %q: want HttpOnly, SameSite=Strict, Path=/, Max-Age=43200, not Secure over plaintext", raw)
	}
	if res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("sign-in answer is cacheable: %q", res.Header.Get("Cache-Control"))
	}

	// A form works as well as JSON.
	form := url.Values{"token": {gatewaytest.AdminToken}}.Encode()
	res, body = do(t, http.MethodPost, e.gw.URL+gateway.SessionPath, "application/x-www-form-urlencoded", form, nil)
	if res.StatusCode != http.StatusOK || sessionCookieOf(res) == nil || decodeSession(t, body).Role != "admin" {
		t.Errorf("admin form sign-in = %d %s", res.StatusCode, body)
	}

	// GET returns the session (and its CSRF token) to the page.
	cookie := map[string]string{"Cookie": gateway.SessionCookie + "=" + e.operator}
	res, body = do(t, http.MethodGet, e.gw.URL+gateway.SessionPath, "", "", cookie)
	if res.StatusCode != http.StatusOK || decodeSession(t, body).CSRF != gateway.CSRFToken(e.operator) {
		t.Errorf("GET session = %d %s", res.StatusCode, body)
	}
	if res, _ := do(t, http.MethodGet, e.gw.URL+gateway.SessionPath, "", "", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET session without a cookie = %d, want 401", res.StatusCode)
	}

	// Sign-out clears the cookie.
	res, _ = do(t, http.MethodDelete, e.gw.URL+gateway.SessionPath, "", "", cookie)
	if c := sessionCookieOf(res); res.StatusCode != http.StatusNoContent || c == nil || c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("sign-out = %d, Set-Cookie %q: want the cookie deleted", res.StatusCode, res.Header.Values("Set-Cookie"))
	}
}

func TestConsoleSignInRefused(t *testing.T) {
	e := startConsole(t)
	gone, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: "gone", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.token.RevokeToken(t.Context(), &portcullisv1.RevokeTokenRequest{Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	watchdog, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: "sentry/node-17", Role: "sentry"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		token       string
		header      map[string]string
		status      int
		messageWant string
	}{
		{"sandbox token", e.sandbox, nil, http.StatusForbidden, "a sandbox token cannot sign in to the console"},
		// A watchdog's token writes its own source's events and nothing else.
		{"sentry token", watchdog.GetToken(), nil, http.StatusForbidden, "a sentry token cannot sign in to the console"},
		{"unknown token", "pcs_not-a-token", nil, http.StatusUnauthorized, "invalid token"},
		{"revoked token", gone.GetToken(), nil, http.StatusUnauthorized, "revoked"},
		{"empty token", "", nil, http.StatusBadRequest, "token is required"},
		{"cross-site", e.operator, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "cross-origin"},
		// Another port of the same host is the same site, not the same origin.
		{"same-site", e.operator, map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden, "cross-origin"},
		{"foreign origin", e.operator, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden, "cross-origin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := signInJSON(t, e.gw.URL, tc.token, tc.header)
			if res.StatusCode != tc.status || !strings.Contains(decodeSession(t, body).Message, tc.messageWant) {
				t.Errorf("sign-in = %d %s, want %d with %q", res.StatusCode, body, tc.status, tc.messageWant)
			}
			if sessionCookieOf(res) != nil {
				t.Errorf("a refused sign-in set a cookie: %q", res.Header.Values("Set-Cookie"))
			}
		})
	}

	// A cross-site form cannot sign a browser out either.
	res, _ := do(t, http.MethodDelete, e.gw.URL+gateway.SessionPath, "", "", map[string]string{"Sec-Fetch-Site": "cross-site"})
	if res.StatusCode != http.StatusForbidden || sessionCookieOf(res) != nil {
		t.Errorf("cross-site sign-out = %d", res.StatusCode)
	}
}

// connectCall posts a Connect JSON request and returns the status and the
// error code (empty on success).
func connectCall(t *testing.T, baseURL, procedure, body string, header map[string]string) (int, string) {
	t.Helper()
	res, out := do(t, http.MethodPost, baseURL+procedure, "application/json", body, header)
	var e struct{ Code string }
	if res.StatusCode != http.StatusOK {
		json.Unmarshal([]byte(out), &e)
		if e.Code == "" {
			e.Code = "http " + res.Status
		}
	}
	return res.StatusCode, e.Code
}

func TestConsoleSessionAuthenticatesRPCs(t *testing.T) {
	e := startConsole(t)
	const list = "/portcullis.v1.SandboxService/ListSandboxes"
	const validate = "/portcullis.v1.PolicyService/ValidatePolicy"
	const create = "/portcullis.v1.TokenService/CreateToken"
	cookie := gateway.SessionCookie + "=" + e.operator
	csrf := gateway.CSRFToken(e.operator)

	for _, tc := range []struct {
		name      string
		procedure string
		header    map[string]string
		code      string
	}{
		{"cookie and CSRF header", list, map[string]string{"Cookie": cookie, gateway.CSRFHeader: csrf}, ""},
		{"cookie without CSRF header", list, map[string]string{"Cookie": cookie}, "permission_denied"},
		{"cookie with a wrong CSRF header", list, map[string]string{"Cookie": cookie, gateway.CSRFHeader: gateway.CSRFToken("other")}, "permission_denied"},
		{"cookie, CSRF, cross-site fetch", list, map[string]string{"Cookie": cookie, gateway.CSRFHeader: csrf, "Sec-Fetch-Site": "cross-site"}, "permission_denied"},
		{"cookie, CSRF, same-origin fetch", list, map[string]string{"Cookie": cookie, gateway.CSRFHeader: csrf, "Sec-Fetch-Site": "same-origin"}, ""},
		// The role table still applies: an operator cannot create tokens.
		{"operator cookie, admin RPC", create, map[string]string{"Cookie": cookie, gateway.CSRFHeader: csrf}, "permission_denied"},
		// A sandbox token in the cookie (set by hand: sign-in refuses it)
		// is refused even for RPCs a sandbox token may call.
		{"sandbox cookie", validate, map[string]string{"Cookie": gateway.SessionCookie + "=" + e.sandbox, gateway.CSRFHeader: gateway.CSRFToken(e.sandbox)}, "permission_denied"},
		{"unknown cookie", list, map[string]string{"Cookie": gateway.SessionCookie + "=pcs_nope", gateway.CSRFHeader: gateway.CSRFToken("pcs_nope")}, "unauthenticated"},
		// The Authorization header wins over the cookie and needs no CSRF
		// header, as for every client today.
		{"bearer beside a sandbox cookie", list, map[string]string{"Authorization": "Bearer " + e.operator, "Cookie": gateway.SessionCookie + "=" + e.sandbox}, ""},
		{"no credentials", list, nil, "unauthenticated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := "{}"
			if tc.procedure == validate {
				body = `{"document":"version: 1\n"}`
			}
			if _, code := connectCall(t, e.gw.URL, tc.procedure, body, tc.header); code != tc.code {
				t.Errorf("%s = %q, want %q", tc.procedure, code, tc.code)
			}
		})
	}

	// Revoking the token ends its console sessions at once, everywhere.
	if _, err := e.admin.token.RevokeToken(t.Context(), &portcullisv1.RevokeTokenRequest{Name: "ops-alice"}); err != nil {
		t.Fatal(err)
	}
	if _, code := connectCall(t, e.gw.URL, list, "{}", map[string]string{"Cookie": cookie, gateway.CSRFHeader: csrf}); code != "unauthenticated" {
		t.Errorf("revoked session = %q, want unauthenticated", code)
	}
	res, _ := do(t, http.MethodGet, e.gw.URL+gateway.SessionPath, "", "", map[string]string{"Cookie": cookie})
	if c := sessionCookieOf(res); res.StatusCode != http.StatusUnauthorized || c == nil || c.MaxAge >= 0 {
		t.Errorf("GET session with a revoked token = %d, Set-Cookie %q: want 401 and the cookie deleted", res.StatusCode, res.Header.Values("Set-Cookie"))
	}
}

func TestConsoleCookieSecureOverTLS(t *testing.T) {
	ctx := context.Background()
	lite, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	defer st.Close()
	gw, err := gateway.New(gateway.Config{BootstrapToken: gatewaytest.AdminToken, Logger: slog.New(slog.DiscardHandler)}, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := gw.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(gw.Handler())
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()
	res, err := client.Post(srv.URL+gateway.SessionPath, "application/json", strings.NewReader(`{"token":"`+gatewaytest.AdminToken+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if c := sessionCookieOf(res); res.StatusCode != http.StatusOK || c == nil || !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("sign-in over TLS = %d, Set-Cookie %q: want Secure, HttpOnly, SameSite=Strict", res.StatusCode, res.Header.Values("Set-Cookie"))
	}
}

func TestConsoleHeaders(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	for _, path := range []string{"/", "/app.js", "/style.css", gateway.SessionPath} {
		res, _ := do(t, http.MethodGet, gw.URL+path, "", "", nil)
		csp := res.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: Content-Security-Policy %q allows inline code", path, csp)
		}
	}
	if res, _ := do(t, http.MethodGet, gw.URL+"/app.js", "", "", nil); !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") {
		t.Errorf("app.js Content-Type = %q: a module script needs a JavaScript type", res.Header.Get("Content-Type"))
	}
}
