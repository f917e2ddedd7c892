package credentials_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	pmcp "github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/provider"
)

// Real parts: an Agent, upstreams on 127.0.0.1 (plain HTTP and TLS the
// proxy terminates) recording what they receive, real token servers.

// received is one request an upstream got.
type received struct {
	req  *http.Request
	body string
}

// recorder is an upstream that records every request.
type recorder struct {
	port int
	mu   sync.Mutex
	got  []received
}

func (u *recorder) take() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	g := u.got
	u.got = nil
	return g
}

func startRecorder(t *testing.T, tlsConfig *tls.Config) *recorder {
	t.Helper()
	u := &recorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{TLSConfig: tlsConfig, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.got = append(u.got, received{req: r.Clone(context.Background()), body: string(body)})
		u.mu.Unlock()
		if r.URL.Path == "/pinned" {
			serveMCP(w, body)
			return
		}
		io.WriteString(w, "ok")
	})}
	if tlsConfig != nil {
		go srv.ServeTLS(ln, "", "")
	} else {
		go srv.Serve(ln)
	}
	t.Cleanup(func() { srv.Close() })
	return u
}

// syncBuffer is a buffer written by the proxy while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is a proxy in front of a plain and a TLS upstream.
type env struct {
	agent        *dataplane.Agent
	client       *http.Client
	decisionLog  *syncBuffer
	logs         *syncBuffer
	spans        *tracetest.SpanRecorder
	plain, https *recorder
}

const credPolicy = `
version: 1
network_policies:
  creds:
    name: creds
    endpoints:
      - { host: bearer.example.com, ports: [PLAIN, TLS], protocol: rest, access: full, credential_binding: { provider: gh } }
      - { host: header.example.com, port: PLAIN, protocol: rest, access: full, credential_binding: { provider: key } }
      - { host: basic.example.com, port: PLAIN, protocol: rest, access: full, credential_binding: { provider: bas } }
      - { host: rewrite.example.com, port: PLAIN, protocol: rest, access: full, request_body_credential_rewrite: true, credential_binding: { provider: gh } }
      - { host: uncovered.example.com, port: PLAIN, protocol: rest, access: full, credential_binding: { provider: gh } }
      - { host: missing.example.com, port: PLAIN, protocol: rest, access: full, credential_binding: { provider: nope } }
      - { host: oauth.example.com, port: PLAIN, protocol: rest, access: full, credential_binding: { provider: oa } }
      - { host: tx.example.com, port: PLAIN, protocol: rest, access: full, credential_binding: { provider: tx } }
      - { host: bedrock.example.com, port: TLS, protocol: rest, access: full, credential_binding: { provider: aw }, credential_signing: sigv4, signing_service: bedrock, signing_region: us-east-1 }
      - { host: s3.us-west-2.example.com, port: PLAIN, protocol: rest, access: full, credential_binding: { provider: aw }, credential_signing: "sigv4:no_body", signing_service: s3 }
      - { host: signed.example.com, port: PLAIN, protocol: rest, access: full, credential_binding: { provider: aw }, credential_signing: "sigv4:body", signing_service: sts, signing_region: eu-west-1 }
      - { host: open.example.com, port: PLAIN, protocol: rest, access: full }
      - host: heldbound.example.com
        port: PLAIN
        protocol: rest
        credential_binding: { provider: gh }
        rules: [ { allow: { method: POST, path: /pay, review: { required: true, timeout: 60s } } } ]
      - host: pinned.example.com
        port: PLAIN
        path: /pinned
        protocol: mcp
        mcp: { versions: ["2025-11-25"] }
        credential_binding: { provider: gh }
        rules: [ { allow: { method: tools/call, tool: search, definition: "FINGERPRINT" } } ]
      - host: held.example.com
        port: PLAIN
        protocol: rest
        rules: [ { allow: { method: POST, path: /pay, review: { required: true, timeout: 60s } } } ]
      - host: mcp.example.com
        port: PLAIN
        path: /mcp
        protocol: mcp
        mcp: { versions: ["2025-11-25"] }
        rules: [ { allow: { method: initialize } }, { allow: { method: tools/call, tool: search } } ]
`

// The secrets, each searched for in every log afterwards.
const (
	ghToken   = "ghp_bearer_SECRET_0001"
	apiKey    = "key_header_SECRET_0002"
	password  = "basic_pw_SECRET_0003"
	awsKeyID  = "AKIDSECRET00000004"
	awsSecret = "aws_secret_SECRET_0005"
	awsToken  = "aws_session_SECRET_0006"
	clientSec = "client_secret_SECRET_0007"
	subject   = "subject_token_SECRET_0008"
	// secondSecret is clientSec rotated.
	secondSecret = "client_secret_SECOND_0010"
)

var allSecrets = []string{ghToken, apiKey, password, awsKeyID, awsSecret, awsToken, clientSec, subject, secondSecret}

func newEnv(t *testing.T, options ...func(*dataplane.Config)) *env {
	t.Helper()
	upstreamCA, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	proxyCA, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{decisionLog: &syncBuffer{}, logs: &syncBuffer{}, spans: tracetest.NewSpanRecorder(), plain: startRecorder(t, nil), https: startRecorder(t, upstreamCA.TLSConfig())}
	upRoots := x509.NewCertPool()
	upRoots.AppendCertsFromPEM(upstreamCA.CertPEM())
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	t.Cleanup(func() { tracer.Shutdown(context.Background()) })
	cfg := dataplane.Config{
		Tracer:           tracer,
		DevAllowLoopback: true,
		UpstreamRoots:    upRoots,
		CA:               proxyCA,
		DecisionLog:      e.decisionLog,
		Logger:           slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			if strings.HasSuffix(host, ".example.com") {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
	}
	for _, o := range options {
		o(&cfg)
	}
	a, err := dataplane.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fp, err := pmcp.Fingerprint([]byte(searchTool))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.NewReplacer("PLAIN", strconv.Itoa(e.plain.port), "TLS", strconv.Itoa(e.https.port), "FINGERPRINT", fp).Replace(credPolicy)
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	if err := a.SetPolicy(pol, "v1"); err != nil {
		t.Fatal(err)
	}
	e.agent = a
	proxyURL := dataplanetest.Serve(t, a)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(proxyCA.CertPEM())
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	e.client = &http.Client{Transport: tr}
	t.Cleanup(func() { e.noSecretLogged(t) })
	return e
}

// bundle is the providers the tests hold: gh, key, bas, aw, and the
// extra ones given (oauth, token exchange).
func (e *env) bundle(extra ...provider.Provider) *provider.Bundle {
	// The plain upstream's hosts are opted in to plain HTTP (http://).
	p, h := ":"+strconv.Itoa(e.plain.port), ":"+strconv.Itoa(e.https.port)
	b := &provider.Bundle{Sandbox: "sb", Generation: 1, Providers: []provider.Provider{
		{Spec: provider.Spec{Name: "gh", Type: provider.TypeBearer, Hosts: []string{"http://bearer.example.com" + p, "bearer.example.com" + h, "http://rewrite.example.com" + p, "http://pinned.example.com" + p, "http://heldbound.example.com" + p}},
			Revision: 1, Secret: map[string]string{provider.FieldToken: ghToken}},
		{Spec: provider.Spec{Name: "key", Type: provider.TypeHeader, Hosts: []string{"http://header.example.com" + p}, Settings: map[string]string{provider.SettingHeader: "X-Api-Key"}},
			Revision: 1, Secret: map[string]string{provider.FieldValue: apiKey}},
		{Spec: provider.Spec{Name: "bas", Type: provider.TypeBasic, Hosts: []string{"http://basic.example.com" + p}, Settings: map[string]string{provider.SettingUsername: "robot"}},
			Revision: 1, Secret: map[string]string{provider.FieldPassword: password}},
		{Spec: provider.Spec{Name: "aw", Type: provider.TypeAWS, Hosts: []string{"bedrock.example.com" + h, "http://s3.us-west-2.example.com" + p, "http://signed.example.com" + p}},
			Revision: 1, Secret: map[string]string{provider.FieldAccessKeyID: awsKeyID, provider.FieldSecretAccessKey: awsSecret, provider.FieldSessionToken: awsToken}},
	}}
	b.Providers = append(b.Providers, extra...)
	return b
}

func (e *env) url(host string, tls bool, path string) string {
	if tls {
		return fmt.Sprintf("https://%s:%d%s", host, e.https.port, path)
	}
	return fmt.Sprintf("http://%s:%d%s", host, e.plain.port, path)
}

// do sends a request through the proxy: its status and the 403's JSON.
func (e *env) do(t *testing.T, method, url string, header http.Header, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body, req.ContentLength = nil, 0
	}
	for k, vv := range header {
		req.Header[k] = vv
	}
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var m map[string]any
	json.Unmarshal(raw, &m)
	return res.StatusCode, m
}

// recordsFor returns the decision records of path.
func (e *env) recordsFor(path string) []decision.Record {
	var out []decision.Record
	for _, r := range e.agent.Decisions() {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// refused checks a refusal: 403 with the reason code, exactly one record
// (the denial, with the code and a reason that names want), and nothing
// upstream.
func (e *env) refused(t *testing.T, status int, body map[string]any, path, code, want string) {
	t.Helper()
	if status != http.StatusForbidden || body["reason_code"] != code {
		t.Errorf("%s: %d %v, want 403 with reason_code %s", path, status, body, code)
	}
	if r, _ := body["reason"].(string); !strings.Contains(r, want) {
		t.Errorf("%s: reason %q, want it to say %q", path, r, want)
	}
	recs := e.recordsFor(path)
	if len(recs) != 1 || recs[0].Decision != decision.Deny || recs[0].ReasonCode != code {
		t.Errorf("%s: records %+v, want one denial with reason_code %s", path, recs, code)
	}
	if got := append(e.plain.take(), e.https.take()...); len(got) != 0 {
		t.Errorf("%s: the upstream received %d requests, want none", path, len(got))
	}
}

// noSecretLogged: no secret, and no token fetched, is in the decision log,
// the proxy's logs or its traces.
func (e *env) noSecretLogged(t *testing.T) {
	spans := e.spans.Ended()
	if len(spans) == 0 {
		t.Error("no spans were recorded: the trace check checks nothing")
	}
	var traced strings.Builder
	for _, sp := range spans {
		fmt.Fprintln(&traced, sp.Name(), sp.Attributes(), sp.Status().Description, sp.Events())
	}
	for _, s := range append(allSecrets, fetchedTokens...) {
		if strings.Contains(traced.String(), s) {
			t.Errorf("a trace holds the secret %s", s)
		}
		if strings.Contains(e.decisionLog.String(), s) {
			t.Errorf("the decision log holds the secret %s", s)
		}
		if strings.Contains(e.logs.String(), s) {
			t.Errorf("the proxy's log holds the secret %s", s)
		}
		for _, r := range e.agent.Decisions() {
			if b, _ := json.Marshal(r); bytes.Contains(b, []byte(s)) {
				t.Errorf("a decision record holds the secret %s: %s", s, b)
			}
		}
	}
}

// The tokens the token servers issue, searched for in the logs too.
var fetchedTokens = []string{"oauth_access_TOKEN_A1", "exchanged_TOKEN_B2"}

func one(t *testing.T, u *recorder) received {
	t.Helper()
	got := u.take()
	if len(got) != 1 {
		t.Fatalf("the upstream received %d requests, want 1", len(got))
	}
	return got[0]
}

func TestInjectsBoundCredential(t *testing.T) {
	e := newEnv(t)
	e.agent.Credentials().SetCredentials(e.bundle())
	basic := "Basic " + b64("robot:"+password)
	for _, tc := range []struct {
		name, host string
		tls        bool
		header     http.Header
		wantName   string
		wantValue  string
	}{
		{"bearer, placeholder", "bearer.example.com", false, http.Header{"Authorization": {"Bearer portcullis:provider:gh"}}, "Authorization", "Bearer " + ghToken},
		{"bearer, nothing sent", "bearer.example.com", false, nil, "Authorization", "Bearer " + ghToken},
		{"bearer through TLS", "bearer.example.com", true, http.Header{"Authorization": {"Bearer portcullis:provider:gh"}}, "Authorization", "Bearer " + ghToken},
		{"header, whole value", "header.example.com", false, http.Header{"X-Api-Key": {"portcullis:provider:key"}}, "X-Api-Key", apiKey},
		{"header, nothing sent", "header.example.com", false, nil, "X-Api-Key", apiKey},
		{"basic, placeholder password", "basic.example.com", false, http.Header{"Authorization": {"Basic " + b64("robot:portcullis:provider:bas")}}, "Authorization", basic},
		{"basic, nothing sent", "basic.example.com", false, nil, "Authorization", basic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := e.plain
			if tc.tls {
				up = e.https
			}
			path := "/ok/" + strings.ReplaceAll(tc.name, " ", "-")
			status, body := e.do(t, "GET", e.url(tc.host, tc.tls, path), tc.header, "")
			if status != 200 {
				t.Fatalf("%d %v", status, body)
			}
			got := one(t, up)
			if v := got.req.Header.Values(tc.wantName); len(v) != 1 || v[0] != tc.wantValue {
				t.Errorf("upstream %s = %q, want the credential", tc.wantName, v)
			}
			if recs := e.recordsFor(path); len(recs) != 1 || recs[0].Decision != decision.Allow {
				t.Errorf("records %+v, want one allow", recs)
			}
		})
	}
}

func b64(s string) string {
	r := &http.Request{Header: http.Header{}}
	r.SetBasicAuth(strings.Split(s, ":")[0], strings.SplitN(s, ":", 2)[1])
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

func TestRefusals(t *testing.T) {
	e := newEnv(t)
	e.agent.Credentials().SetCredentials(e.bundle())
	for _, tc := range []struct {
		name, host, path string
		header           http.Header
		code, want       string
	}{
		{"not attached", "missing.example.com", "/r/missing", nil, "credential_unavailable", "provider nope is not attached to this sandbox or not delivered yet"},
		{"not covered", "uncovered.example.com", "/r/uncovered", nil, "credential_unavailable", "does not cover uncovered.example.com:"},
		{"own bearer", "bearer.example.com", "/r/own", http.Header{"Authorization": {"Bearer sk-own-token"}}, "credential_supplied", "must not hold a credential"},
		{"own header", "header.example.com", "/r/ownheader", http.Header{"X-Api-Key": {"my-own-key"}}, "credential_supplied", "X-Api-Key"},
		{"placeholder of another provider", "bearer.example.com", "/r/other", http.Header{"X-Extra": {"portcullis:provider:key"}}, "credential_placeholder", `provider "key"`},
		{"placeholder to an unbound endpoint", "open.example.com", "/r/open", http.Header{"Authorization": {"Bearer portcullis:provider:gh"}}, "credential_placeholder", `provider "gh"`},
		{"placeholder in the query", "open.example.com", "/r/query", nil, "credential_placeholder", "request target"},
		{"held secret to another host", "open.example.com", "/r/secret", http.Header{"X-Leak": {"token=" + ghToken}}, "credential_supplied", "X-Leak"},
		{"aws: a real access key", "signed.example.com", "/r/awskey", http.Header{"Authorization": {"AWS4-HMAC-SHA256 Credential=AKIAOTHERKEY/20260101/eu-west-1/sts/aws4_request, SignedHeaders=host, Signature=00"}}, "credential_supplied", "access key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := e.url(tc.host, false, tc.path)
			if tc.name == "placeholder in the query" {
				url += "?key=portcullis%3Aprovider%3Agh"
			}
			status, body := e.do(t, "GET", url, tc.header, "")
			e.refused(t, status, body, tc.path, tc.code, tc.want)
			for _, s := range allSecrets {
				if b, _ := json.Marshal(body); bytes.Contains(b, []byte(s)) {
					t.Errorf("the denial shows a secret: %s", b)
				}
			}
		})
	}
}

// A credential goes over plain HTTP only to a host written http://: plain
// HTTP to a TLS-only host's port (curl -x proxy http://host:443/) is
// refused, nothing written upstream.
func TestNoCredentialInCleartext(t *testing.T) {
	e := newEnv(t)
	b := e.bundle()
	b.Providers[0].Hosts = []string{"bearer.example.com:" + strconv.Itoa(e.https.port), "bearer.example.com:" + strconv.Itoa(e.plain.port)}
	e.agent.Credentials().SetCredentials(b)
	for _, port := range []int{e.https.port, e.plain.port} {
		path := fmt.Sprintf("/cleartext/%d", port)
		status, body := e.do(t, "GET", fmt.Sprintf("http://bearer.example.com:%d%s", port, path), http.Header{"Authorization": {"Bearer portcullis:provider:gh"}}, "")
		e.refused(t, status, body, path, "credential_unavailable", fmt.Sprintf("provider gh's credential goes only over TLS to bearer.example.com:%d", port))
	}
	// Over TLS, the same host takes it.
	if status, body := e.do(t, "GET", e.url("bearer.example.com", true, "/cleartext/tls"), nil, ""); status != 200 {
		t.Fatalf("over TLS: %d %v", status, body)
	}
	if got := one(t, e.https); got.req.Header.Get("Authorization") != "Bearer "+ghToken {
		t.Error("over TLS, the upstream did not get the credential")
	}
}

// A placeholder is found in the request target and headers whatever the
// case of its prefix, and in a target's valid escapes even when another
// escape is invalid.
func TestPlaceholderAnyCaseAnyEscape(t *testing.T) {
	e := newEnv(t)
	e.agent.Credentials().SetCredentials(e.bundle())
	for _, tc := range []struct {
		path, query string
		header      http.Header
	}{
		{"/case/query", "?x=PORTCULLIS:PROVIDER:gh", nil},
		{"/case/escaped", "?q=Portcullis%3AProvider%3Agh", nil},
		{"/escape/invalid", "?bad=%zz&q=portcullis%3Aprovider%3Agh", nil},
		{"/escape/trailing", "?q=portcullis%3aprovider%3agh&end=%", nil},
		{"/case/header", "", http.Header{"X-Extra": {"PORTCULLIS:PROVIDER:KEY"}}},
	} {
		status, body := e.do(t, "GET", e.url("open.example.com", false, tc.path)+tc.query, tc.header, "")
		e.refused(t, status, body, tc.path, "credential_placeholder", "placeholder")
	}
}

// Standalone (--policy FILE) holds nothing: bound requests are
// credential_unavailable, and unbound ones pass.
func TestNothingHeld(t *testing.T) {
	e := newEnv(t)
	status, body := e.do(t, "GET", e.url("bearer.example.com", false, "/none"), nil, "")
	e.refused(t, status, body, "/none", "credential_unavailable", "not attached to this sandbox or not delivered yet")
	if status, _ := e.do(t, "GET", e.url("open.example.com", false, "/free"), nil, ""); status != 200 {
		t.Errorf("an unbound request: %d", status)
	}
	e.plain.take()
	// A bundle, then none: dropped.
	e.agent.Credentials().SetCredentials(e.bundle())
	e.agent.Credentials().SetCredentials(&provider.Bundle{Sandbox: "sb", Generation: 2})
	status, body = e.do(t, "GET", e.url("bearer.example.com", false, "/dropped"), nil, "")
	e.refused(t, status, body, "/dropped", "credential_unavailable", "provider gh")
}

func TestBodyRewrite(t *testing.T) {
	e := newEnv(t)
	e.agent.Credentials().SetCredentials(e.bundle())
	status, body := e.do(t, "POST", e.url("rewrite.example.com", false, "/rw"), http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, "token=portcullis:provider:gh&again=portcullis:provider:gh")
	if status != 200 {
		t.Fatalf("%d %v", status, body)
	}
	got := one(t, e.plain)
	if want := "token=" + ghToken + "&again=" + ghToken; got.body != want || got.req.ContentLength != int64(len(want)) {
		t.Errorf("upstream body %q (length %d), want %q", got.body, got.req.ContentLength, want)
	}

	status, body = e.do(t, "POST", e.url("rewrite.example.com", false, "/rw-other"), nil, "token=portcullis:provider:key")
	e.refused(t, status, body, "/rw-other", "credential_placeholder", `provider "key"`)

	big := strings.Repeat("a", 256<<10+1)
	status, body = e.do(t, "POST", e.url("rewrite.example.com", false, "/rw-big"), nil, big)
	e.refused(t, status, body, "/rw-big", "credential_unavailable", "262144 bytes")
}

// An MCP body, read to be judged, is searched for placeholders: one
// where no binding puts it is refused as a JSON-RPC error, with one
// record, and the server receives nothing.
func TestMCPBodyPlaceholder(t *testing.T) {
	e := newEnv(t)
	e.agent.Credentials().SetCredentials(e.bundle())
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Mcp-Protocol-Version": {"2025-11-25"}}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"q":"portcullis:provider:gh"}}}`
	status, res := e.do(t, "POST", e.url("mcp.example.com", false, "/mcp"), h, body)
	if status != http.StatusForbidden {
		t.Fatalf("%d %v, want 403", status, res)
	}
	errObj, _ := res["error"].(map[string]any)
	data, _ := errObj["data"].(map[string]any)
	if data["reason_code"] != "credential_placeholder" || !strings.Contains(fmt.Sprint(data["reason"]), `provider "gh"`) {
		t.Errorf("JSON-RPC error %v, want reason_code credential_placeholder naming gh", errObj)
	}
	recs := e.recordsFor("/mcp")
	if len(recs) != 1 || recs[0].Decision != decision.Deny || recs[0].ReasonCode != "credential_placeholder" || recs[0].Tool != "search" {
		t.Errorf("records %+v, want one denial of the call", recs)
	}
	if got := e.plain.take(); len(got) != 0 {
		t.Errorf("the server received %d requests", len(got))
	}
}

// A held call's body, read to be shown to a person, is searched too: a
// placeholder there is refused before the call is held.
func TestHeldBodyPlaceholder(t *testing.T) {
	e := newEnv(t)
	status, res := e.do(t, "POST", e.url("held.example.com", false, "/pay"), http.Header{"Content-Type": {"application/json"}}, `{"to":"portcullis:provider:gh"}`)
	e.refused(t, status, res, "/pay", "credential_placeholder", `provider "gh"`)
	if n, _ := e.agent.HeldCalls(); n != 0 {
		t.Errorf("%d calls held, want none", n)
	}
}
