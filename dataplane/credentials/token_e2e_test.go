package credentials_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/provider"
)

// tokenServer is a real token endpoint: answer writes its answer to each
// request, which it records.
type tokenServer struct {
	*httptest.Server
	calls atomic.Int32
	mu    sync.Mutex
	forms []url.Values
	auths []string
}

func startTokenServer(t *testing.T, answer func(w http.ResponseWriter, form url.Values)) *tokenServer {
	t.Helper()
	ts := &tokenServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.calls.Add(1)
		r.ParseForm()
		ts.mu.Lock()
		ts.forms = append(ts.forms, r.PostForm)
		ts.auths = append(ts.auths, r.Header.Get("Authorization"))
		ts.mu.Unlock()
		answer(w, r.PostForm)
	}))
	t.Cleanup(ts.Close)
	return ts
}

func jsonAnswer(status int, body string) func(http.ResponseWriter, url.Values) {
	return func(w http.ResponseWriter, _ url.Values) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func oauthProvider(e *env, tokenURL string) provider.Provider {
	return provider.Provider{
		Spec: provider.Spec{Name: "oa", Type: provider.TypeOAuth2ClientCredentials, Hosts: []string{"http://oauth.example.com:" + strconv.Itoa(e.plain.port)},
			Settings: map[string]string{provider.SettingTokenURL: tokenURL, provider.SettingScopes: "read write", provider.SettingAudience: "https://api.example.com"}},
		Revision: 1, Secret: map[string]string{provider.FieldClientID: "client-1", provider.FieldClientSecret: clientSec},
	}
}

func exchangeProvider(e *env, tokenURL string) provider.Provider {
	return provider.Provider{
		Spec: provider.Spec{Name: "tx", Type: provider.TypeTokenExchange, Hosts: []string{"http://tx.example.com:" + strconv.Itoa(e.plain.port)},
			Settings: map[string]string{provider.SettingTokenURL: tokenURL, provider.SettingResource: "https://api.example.com/", provider.SettingRequestedTokenType: "urn:ietf:params:oauth:token-type:access_token"}},
		Revision: 1, Secret: map[string]string{provider.FieldSubjectToken: subject, provider.FieldClientID: "client-2", provider.FieldClientSecret: clientSec},
	}
}

func TestOAuthClientCredentials(t *testing.T) {
	e := newEnv(t)
	ts := startTokenServer(t, jsonAnswer(200, `{"access_token":"oauth_access_TOKEN_A1","token_type":"Bearer","expires_in":3600}`))
	e.agent.Credentials().SetCredentials(e.bundle(oauthProvider(e, ts.URL+"/token")))
	for i := range 3 {
		status, body := e.do(t, "GET", e.url("oauth.example.com", false, fmt.Sprintf("/oa/%d", i)), http.Header{"Authorization": {"Bearer portcullis:provider:oa"}}, "")
		if status != 200 {
			t.Fatalf("%d %v", status, body)
		}
		if got := one(t, e.plain).req.Header.Get("Authorization"); got != "Bearer oauth_access_TOKEN_A1" {
			t.Errorf("upstream Authorization %q, want the fetched token", got)
		}
	}
	if n := ts.calls.Load(); n != 1 {
		t.Errorf("%d token fetches, want 1 (the token is kept until it expires)", n)
	}
	f := ts.forms[0]
	if f.Get("grant_type") != "client_credentials" || f.Get("scope") != "read write" || f.Get("audience") != "https://api.example.com" {
		t.Errorf("token request form %v", f)
	}
	if user, pass, ok := (&http.Request{Header: http.Header{"Authorization": {ts.auths[0]}}}).BasicAuth(); !ok || user != "client-1" || pass != clientSec {
		t.Errorf("token request client authentication %q, want HTTP Basic", ts.auths[0])
	}
	// The fetched token is a secret too: the agent may not send it.
	status, body := e.do(t, "GET", e.url("open.example.com", false, "/oa-leak"), http.Header{"X-Token": {"oauth_access_TOKEN_A1"}}, "")
	e.refused(t, status, body, "/oa-leak", "credential_supplied", "X-Token")

	// The token is kept while the provider's spec and secret are the
	// same (a new revision of the same content too), and dropped when
	// they change, whatever the revision: a provider deleted and created
	// again with another secret is at revision 1 again.
	for _, step := range []struct {
		name      string
		revision  uint64
		secret    string
		wantCalls int32
	}{
		{"re-created: revision 1, new secret", 1, secondSecret, 2},
		{"same content, new revision", 2, secondSecret, 2},
		{"re-created again: revision 1, other settings", 1, secondSecret, 3},
	} {
		p := oauthProvider(e, ts.URL+"/token")
		p.Revision, p.Secret[provider.FieldClientSecret] = step.revision, step.secret
		if step.name == "re-created again: revision 1, other settings" {
			p.Settings[provider.SettingScopes] = "read"
		}
		e.agent.Credentials().SetCredentials(e.bundle(p))
		if status, _ := e.do(t, "GET", e.url("oauth.example.com", false, "/oa/step"), nil, ""); status != 200 {
			t.Errorf("%s: %d", step.name, status)
		}
		e.plain.take()
		if n := ts.calls.Load(); n != step.wantCalls {
			t.Errorf("%s: %d token fetches, want %d", step.name, n, step.wantCalls)
		}
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, pass, _ := (&http.Request{Header: http.Header{"Authorization": {ts.auths[len(ts.auths)-1]}}}).BasicAuth(); pass != secondSecret {
		t.Error("the last fetch did not use the re-created provider's secret")
	}
}

func TestTokenFetchFailsClosed(t *testing.T) {
	e := newEnv(t)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	for _, tc := range []struct {
		name   string
		url    func(t *testing.T) string
		exch   bool
		reason string
	}{
		{"oauth: server down", func(*testing.T) string { return downURL + "/token" }, false, "token endpoint"},
		{"oauth: refused", func(t *testing.T) string {
			return startTokenServer(t, jsonAnswer(401, `{"error":"invalid_client","error_description":"client unknown"}`)).URL
		}, false, "answered 401: invalid_client (client unknown)"},
		{"oauth: a token that would split a header", func(t *testing.T) string {
			return startTokenServer(t, jsonAnswer(200, `{"access_token":"abc\r\nX-Evil: 1","token_type":"Bearer"}`)).URL
		}, false, "cannot go in a header"},
		{"oauth: not JSON", func(t *testing.T) string { return startTokenServer(t, jsonAnswer(200, `<html>`)).URL }, false, "token endpoint"},
		{"exchange: server down", func(*testing.T) string { return downURL + "/token" }, true, "token endpoint"},
		{"exchange: refused", func(t *testing.T) string {
			return startTokenServer(t, jsonAnswer(400, `{"error":"invalid_target","error_description":"`+strings.Repeat("x", 500)+`"}`)).URL
		}, true, "answered 400: invalid_target (xxx"},
		{"exchange: no access_token", func(t *testing.T) string {
			return startTokenServer(t, jsonAnswer(200, `{"issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer"}`)).URL
		}, true, "without an access_token"},
		{"exchange: not JSON", func(t *testing.T) string { return startTokenServer(t, jsonAnswer(200, `nope`)).URL }, true, "not a token response"},
		{"token URL on a denied address", func(*testing.T) string { return "http://169.254.169.254/token" }, true, "always denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, p := "oauth.example.com", oauthProvider(e, tc.url(t))
			if tc.exch {
				host, p = "tx.example.com", exchangeProvider(e, tc.url(t))
			}
			e.agent.Credentials().SetCredentials(e.bundle(p))
			path := "/fail/" + strings.NewReplacer(" ", "-", ":", "").Replace(tc.name)
			status, body := e.do(t, "GET", e.url(host, false, path), nil, "")
			e.refused(t, status, body, path, "credential_unavailable", tc.reason)
			if r, _ := body["reason"].(string); len(r) > 600 {
				t.Errorf("the reason is %d bytes: the server's description is not cut short", len(r))
			}
		})
	}
}

// A failed fetch is remembered for 5 s: the requests meanwhile are
// refused with its reason at once, the token server not asked again;
// after, it is.
func TestTokenFailureRemembered(t *testing.T) {
	var offset atomic.Int64 // the proxy's clock runs offset ahead
	e := newEnv(t, func(c *dataplane.Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	})
	var up atomic.Bool
	ts := startTokenServer(t, func(w http.ResponseWriter, form url.Values) {
		if !up.Load() {
			jsonAnswer(503, `{"error":"temporarily_unavailable"}`)(w, form)
			return
		}
		jsonAnswer(200, `{"access_token":"oauth_access_TOKEN_A1","token_type":"Bearer","expires_in":3600}`)(w, form)
	})
	e.agent.Credentials().SetCredentials(e.bundle(oauthProvider(e, ts.URL+"/token")))
	for i := range 3 {
		path := fmt.Sprintf("/down/%d", i)
		status, body := e.do(t, "GET", e.url("oauth.example.com", false, path), nil, "")
		e.refused(t, status, body, path, "credential_unavailable", "answered 503: temporarily_unavailable")
		if i == 0 {
			up.Store(true) // back up: the failure is still answered
		}
	}
	if n := ts.calls.Load(); n != 1 {
		t.Errorf("%d token fetches within 5 s of a failure, want 1", n)
	}
	offset.Store(int64(6 * time.Second))
	if status, body := e.do(t, "GET", e.url("oauth.example.com", false, "/down/after"), nil, ""); status != 200 {
		t.Fatalf("after 5 s: %d %v", status, body)
	}
	e.plain.take()
	if n := ts.calls.Load(); n != 2 {
		t.Errorf("%d token fetches after 5 s, want 2", n)
	}
}

func TestTokenExchange(t *testing.T) {
	e := newEnv(t)
	ts := startTokenServer(t, jsonAnswer(200, `{"access_token":"exchanged_TOKEN_B2","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":600}`))
	e.agent.Credentials().SetCredentials(e.bundle(exchangeProvider(e, ts.URL+"/token")))
	var wg sync.WaitGroup
	statuses := make([]int, 4)
	for i := range statuses {
		wg.Go(func() {
			statuses[i], _ = e.do(t, "GET", e.url("tx.example.com", false, fmt.Sprintf("/tx/%d", i)), nil, "")
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 200 {
			t.Errorf("request %d: %d", i, s)
		}
	}
	for _, got := range e.plain.take() {
		if a := got.req.Header.Get("Authorization"); a != "Bearer exchanged_TOKEN_B2" {
			t.Errorf("upstream Authorization %q", a)
		}
	}
	if n := ts.calls.Load(); n != 1 {
		t.Errorf("%d token fetches for concurrent requests, want 1", n)
	}
	f := ts.forms[0]
	want := url.Values{
		"grant_type": {"urn:ietf:params:oauth:grant-type:token-exchange"}, "subject_token": {subject},
		"subject_token_type": {provider.TokenTypeAccessToken}, "requested_token_type": {"urn:ietf:params:oauth:token-type:access_token"},
		"resource": {"https://api.example.com/"},
	}
	if fmt.Sprint(f) != fmt.Sprint(want) {
		t.Errorf("token exchange form\n  %v\nwant\n  %v", f, want)
	}
	if user, pass, ok := (&http.Request{Header: http.Header{"Authorization": {ts.auths[0]}}}).BasicAuth(); !ok || user != "client-2" || pass != clientSec {
		t.Errorf("client authentication %q, want HTTP Basic", ts.auths[0])
	}
}
