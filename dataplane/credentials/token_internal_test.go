package credentials

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/provider"
)

// Without DevAllowLoopback a token URL on loopback is never dialled: the
// request is denied and the token server hears nothing.
func TestTokenURLOnLoopbackRefused(t *testing.T) {
	var calls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.Write([]byte(`{"access_token":"t","token_type":"Bearer"}`))
	}))
	defer ts.Close()
	h := New(Config{Logger: slog.New(slog.DiscardHandler)})
	h.SetCredentials(&provider.Bundle{Providers: []provider.Provider{{
		Spec:   provider.Spec{Name: "oa", Type: provider.TypeOAuth2ClientCredentials, Hosts: []string{"api.example.com"}, Settings: map[string]string{provider.SettingTokenURL: ts.URL}},
		Secret: map[string]string{provider.FieldClientID: "c", provider.FieldClientSecret: "client-secret-1"},
	}}})
	r := httptest.NewRequest("GET", "https://api.example.com/x", nil)
	ep := &policy.Endpoint{Host: "api.example.com", Port: 443, Protocol: policy.ProtocolREST, CredentialBinding: &policy.CredentialBinding{Provider: "oa"}}
	plan, _, d := h.Check(t.Context(), httptest.NewRecorder(), r, Request{Host: "api.example.com", Port: 443, TLS: true, Endpoint: ep})
	if plan != nil || d == nil || d.Code != CodeUnavailable || !strings.Contains(d.Reason, "always denied") {
		t.Fatalf("Check = %v, %v; want credential_unavailable, the address always denied", plan, d)
	}
	if strings.Contains(d.Reason, "client-secret-1") {
		t.Errorf("the reason shows the client secret: %s", d.Reason)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the token server was called %d times", n)
	}
}

// A request waits for another's token fetch only so long: then it is
// refused, without fetching itself.
func TestTokenWaitBounded(t *testing.T) {
	c := newTokenCache()
	c.wait = time.Millisecond
	*c.sem <- struct{}{} // another request's fetch, in progress
	_, err := c.get(t.Context(), time.Now, func(context.Context) (token, error) {
		t.Error("fetched while another fetch was in progress")
		return token{}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "another request's token fetch") {
		t.Fatalf("get = %v, want the wait's end", err)
	}
}

// A fetch that failed because its requester went away is not remembered:
// the next request fetches.
func TestTokenCancelledFetchNotRemembered(t *testing.T) {
	c := newTokenCache()
	ctx, cancel := context.WithCancel(t.Context())
	_, err := c.get(ctx, time.Now, func(ctx context.Context) (token, error) {
		cancel()
		return token{}, ctx.Err()
	})
	if err == nil {
		t.Fatal("a cancelled fetch succeeded")
	}
	v, err := c.get(t.Context(), time.Now, func(context.Context) (token, error) { return token{value: "fresh"}, nil })
	if err != nil || v != "fresh" {
		t.Fatalf("after a cancelled fetch: %q, %v; want a new fetch", v, err)
	}
}
