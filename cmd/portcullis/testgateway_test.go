package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// testGateway is the real gateway (gatewaytest: SQLite in a temporary
// directory, the real handler, a real listener) behind a recorder that
// notes each call the CLI makes: which RPC, with which Authorization
// header. The answers are all the gateway's own; the recorder is there for
// the tests that are about the calls themselves (which token was sent,
// whether the CLI fell back from ApprovalService to AdvisorService, that
// an approval with --hash and -o json shows nothing first).
//
// Its clock stands still at t0, so the times the gateway computes (a
// proposal's expiry) are known; the times the store records are the
// machine's.
type testGateway struct {
	*gatewaytest.Gateway
	// url is the recorder's address: point the CLI here.
	url string

	mu    sync.Mutex
	calls []gatewayCall
}

// gatewayCall is one RPC as the recorder saw it.
type gatewayCall struct {
	method string // "ServiceName.Method", e.g. "ApprovalService.GetProposal"
	auth   string // the Authorization header
}

// t0 is the test gateway's clock, which stands still.
var t0 = mustTime("2026-01-02T03:04:05Z")

// startGateway starts a test gateway on SQLite. configure adjusts the
// gateway's Config further (its clock is set here).
func startGateway(t *testing.T, configure ...func(*gateway.Config)) *testGateway {
	t.Helper()
	g := &testGateway{}
	configure = append([]func(*gateway.Config){func(c *gateway.Config) { c.Now = func() time.Time { return t0 } }}, configure...)
	g.Gateway = gatewaytest.Start(t, "sqlite", configure...)
	// The recorder forwards to whatever address the gateway has now, so
	// a Restart is followed.
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			target, err := url.Parse(g.Gateway.URL)
			if err != nil {
				panic(err)
			}
			r.SetURL(target)
		},
		FlushInterval: -1,
		// A stopped gateway is answered 502, which the CLI reports as
		// unavailable; the proxy's own log line would only be noise.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		service, method, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/portcullis.v1."), "/")
		g.mu.Lock()
		g.calls = append(g.calls, gatewayCall{method: service + "." + method, auth: r.Header.Get("Authorization")})
		g.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	g.url = ts.URL
	return g
}

// cli runs the CLI against the gateway with token.
func (g *testGateway) cli(t *testing.T, token string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return g.cliWith(t, cliInput{}, token, args...)
}

// cliWith is cli with stdin and environment variables.
func (g *testGateway) cliWith(t *testing.T, in cliInput, token string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLIWith(t, in, append([]string{"--gateway", g.url, "--token", token}, args...)...)
}

// must runs the CLI and requires exit 0.
func (g *testGateway) must(t *testing.T, token string, args ...string) string {
	t.Helper()
	return g.mustWith(t, cliInput{}, token, args...)
}

// mustWith is must with stdin and environment variables.
func (g *testGateway) mustWith(t *testing.T, in cliInput, token string, args ...string) string {
	t.Helper()
	stdout, stderr, code := g.cliWith(t, in, token, args...)
	if code != exitOK {
		t.Fatalf("%v: exit %d, stderr %s", args, code, stderr)
	}
	return stdout
}

// json runs a command with -o json, requires exit 0 and decodes stdout.
func (g *testGateway) json(t *testing.T, token string, args ...string) map[string]any {
	t.Helper()
	return decodeJSON(t, g.must(t, token, append(args, "-o", "json")...))
}

// took returns the calls since the last took and forgets them.
func (g *testGateway) took() []gatewayCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.calls
	g.calls = nil
	return c
}

// methods are the calls' methods, in order, joined by commas.
func methods(calls []gatewayCall) string {
	var out []string
	for _, c := range calls {
		out = append(out, c.method)
	}
	return strings.Join(out, ",")
}

// decodeJSON parses stdout as a JSON object.
func decodeJSON(t *testing.T, stdout string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, stdout)
	}
	return m
}

// hasKeys fails unless m has every key.
func hasKeys(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON has no %q: %v", k, m)
		}
	}
}

func ok(t *testing.T, code int, stderr string) {
	t.Helper()
	if code != exitOK {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", code, stderr)
	}
}

// short is a hash as tables and headers print it: 12 digits and "…".
func short(hash any) string {
	s, _ := hash.(string)
	if len(s) < 12 {
		return s + "?"
	}
	return s[:12] + "…"
}

// secondsOf is an RFC 3339 time from JSON as the text output prints it:
// UTC, whole seconds.
func secondsOf(t *testing.T, v any) string {
	t.Helper()
	s, _ := v.(string)
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %v: %v", v, err)
	}
	return ts.UTC().Format(time.RFC3339)
}
