package wsproxy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/provider"
)

// Real parts: an Agent, WebSocket servers on 127.0.0.1 (plain, and TLS
// the proxy terminates) written with github.com/coder/websocket and
// recording what they receive, and that library's client through the
// proxy (an HTTP proxy: CONNECT for wss, absolute-form for ws).

const wsPolicy = `
version: 1
network_policies:
  ws:
    name: ws
    endpoints:
      - { host: chat.example.com, ports: [PLAIN, TLS], protocol: rest, access: read-only, websocket_credential_rewrite: true, credential_binding: { provider: gh } }
      - { host: unbound.example.com, port: PLAIN, protocol: rest, access: read-only, websocket_credential_rewrite: true }
      - { host: plainrest.example.com, port: PLAIN, protocol: rest, access: read-only, credential_binding: { provider: gh } }
      - { host: held.example.com, port: PLAIN, protocol: rest, websocket_credential_rewrite: true, rules: [ { allow: { method: GET, path: /**, review: { required: true, timeout: 60s } } } ] }
      - { host: typed.example.com, port: PLAIN, protocol: websocket, rules: [ { allow: { method: GET, path: /** } } ] }
`

const (
	ghToken = "ghp_websocket_SECRET_0001"
	// other is a provider the sandbox holds that no endpoint here binds.
	otherToken = "other_SECRET_0002"
)

// message is one message a server received.
type message struct {
	typ  websocket.MessageType
	data string
}

// server is a WebSocket upstream that records each handshake's header
// and every message, and answers each with "echo:" and the message.
type server struct {
	port int
	mu   sync.Mutex
	hdrs []http.Header
	msgs []message
	// closed receives the close status each connection ended with.
	closed chan websocket.StatusCode
}

func (s *server) handshakes() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.hdrs...)
}

func (s *server) messages() []message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]message(nil), s.msgs...)
}

func startServer(t *testing.T, tlsConfig *tls.Config) *server {
	t.Helper()
	s := &server{closed: make(chan websocket.StatusCode, 16)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{TLSConfig: tlsConfig, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hdrs = append(s.hdrs, r.Header.Clone())
		s.mu.Unlock()
		if r.URL.Path == "/unauthorized" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		// The server would compress if asked: the proxy must not ask.
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionContextTakeover})
		if err != nil {
			return
		}
		c.SetReadLimit(8 << 20)
		for {
			typ, data, err := c.Read(context.Background())
			if err != nil {
				s.closed <- websocket.CloseStatus(err)
				return
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, message{typ, string(data)})
			s.mu.Unlock()
			if err := c.Write(context.Background(), typ, append([]byte("echo:"), data...)); err != nil {
				return
			}
		}
	})}
	if tlsConfig != nil {
		go srv.ServeTLS(ln, "", "")
	} else {
		go srv.Serve(ln)
	}
	t.Cleanup(func() { srv.Close() })
	return s
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

type env struct {
	agent         *dataplane.Agent
	proxyURL      *url.URL
	client        *http.Client
	decisions     *syncBuffer
	logs          *syncBuffer
	plain, secure *server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	upstreamCA, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	proxyCA, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{decisions: &syncBuffer{}, logs: &syncBuffer{}, plain: startServer(t, nil), secure: startServer(t, upstreamCA.TLSConfig())}
	upRoots := x509.NewCertPool()
	upRoots.AppendCertsFromPEM(upstreamCA.CertPEM())
	a, err := dataplane.New(dataplane.Config{
		DevAllowLoopback: true,
		UpstreamRoots:    upRoots,
		CA:               proxyCA,
		DecisionLog:      e.decisions,
		Logger:           slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			if strings.HasSuffix(host, ".example.com") {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.NewReplacer("PLAIN", strconv.Itoa(e.plain.port), "TLS", strconv.Itoa(e.secure.port)).Replace(wsPolicy)
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	if err := a.SetPolicy(pol, "v1"); err != nil {
		t.Fatal(err)
	}
	p, h := ":"+strconv.Itoa(e.plain.port), ":"+strconv.Itoa(e.secure.port)
	a.Proxy.Credentials().SetCredentials(&provider.Bundle{Sandbox: "sb", Generation: 1, Providers: []provider.Provider{
		{Spec: provider.Spec{Name: "gh", Type: provider.TypeBearer, Hosts: []string{"http://chat.example.com" + p, "chat.example.com" + h, "http://plainrest.example.com" + p}},
			Revision: 1, Secret: map[string]string{provider.FieldToken: ghToken}},
		{Spec: provider.Spec{Name: "other", Type: provider.TypeBearer, Hosts: []string{"elsewhere.example.com:443"}},
			Revision: 1, Secret: map[string]string{provider.FieldToken: otherToken}},
	}})
	e.agent = a
	e.proxyURL = dataplanetest.Serve(t, a)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(proxyCA.CertPEM())
	tr := &http.Transport{Proxy: http.ProxyURL(e.proxyURL), TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	e.client = &http.Client{Transport: tr}
	t.Cleanup(func() {
		for name, s := range map[string]string{"the decision log": e.decisions.String(), "the proxy's log": e.logs.String()} {
			if strings.Contains(s, ghToken) || strings.Contains(s, otherToken) {
				t.Errorf("%s holds a secret:\n%s", name, s)
			}
		}
	})
	return e
}

func (e *env) url(host string, secure bool, path string) string {
	if secure {
		return fmt.Sprintf("wss://%s:%d%s", host, e.secure.port, path)
	}
	return fmt.Sprintf("ws://%s:%d%s", host, e.plain.port, path)
}

// dial opens a WebSocket through the proxy, offering permessage-deflate
// as a browser does.
func (e *env) dial(t *testing.T, u string, header http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, res, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: e.client, HTTPHeader: header, CompressionMode: websocket.CompressionContextTakeover})
	if c != nil {
		c.SetReadLimit(8 << 20)
		t.Cleanup(func() { c.CloseNow() })
	}
	return c, res, err
}

// denials are the proxy's denials of requests to host.
func (e *env) denials(host string) []decision.Record {
	var out []decision.Record
	for _, r := range e.agent.Decisions() {
		if r.Decision == decision.Deny && r.Host == host {
			out = append(out, r)
		}
	}
	return out
}

// nextDenial waits for a denial of a request to host after the first
// seen (the one of a refused message is recorded as the WebSocket
// closes); nil if none comes.
func (e *env) nextDenial(host string, seen int) *decision.Record {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if d := e.denials(host); len(d) > seen {
			return &d[seen]
		}
	}
	return nil
}

func roundTrip(t *testing.T, c *websocket.Conn, typ websocket.MessageType, msg string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, typ, []byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	gotTyp, got, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read the answer to %q: %v", msg, err)
	}
	if gotTyp != typ {
		t.Errorf("answer of type %v, want %v", gotTyp, typ)
	}
	return string(got)
}

// TestWebSocketCredentialRewrite: through a rest endpoint with
// websocket_credential_rewrite, the handshake gets the bound provider's
// header, the client's text messages have its placeholder replaced, the
// server's answers come back, and no extension is negotiated though both
// ends would compress — over TLS the proxy terminates and plain HTTP.
func TestWebSocketCredentialRewrite(t *testing.T) {
	e := newEnv(t)
	for _, secure := range []bool{true, false} {
		t.Run(map[bool]string{true: "wss", false: "ws"}[secure], func(t *testing.T) {
			up := map[bool]*server{true: e.secure, false: e.plain}[secure]
			c, res, err := e.dial(t, e.url("chat.example.com", secure, "/v1/realtime?model=m"), nil)
			if err != nil {
				t.Fatalf("dial: %v (%v)", err, res)
			}
			if ext := res.Header.Get("Sec-WebSocket-Extensions"); ext != "" {
				t.Errorf("the client was answered the extension %q", ext)
			}
			hs := up.handshakes()
			if len(hs) != 1 {
				t.Fatalf("the server got %d handshakes, want 1", len(hs))
			}
			if got := hs[0].Get("Authorization"); got != "Bearer "+ghToken {
				t.Errorf("the handshake's Authorization = %q, want the provider's bearer token", got)
			}
			if ext := hs[0].Get("Sec-WebSocket-Extensions"); ext != "" {
				t.Errorf("the server was offered %q: the proxy must not offer an extension", ext)
			}

			cases := []struct {
				typ       websocket.MessageType
				sent, got string
			}{
				{websocket.MessageText, `{"type":"session.update","token":"portcullis:provider:gh"}`, `{"type":"session.update","token":"` + ghToken + `"}`},
				{websocket.MessageText, "no placeholder here", "no placeholder here"},
				{websocket.MessageText, "two: portcullis:provider:gh portcullis:provider:gh.", "two: " + ghToken + " " + ghToken + "."},
				{websocket.MessageBinary, "\x00\x01binary\xff", "\x00\x01binary\xff"},
				{websocket.MessageText, strings.Repeat("x", 200<<10) + "portcullis:provider:gh", strings.Repeat("x", 200<<10) + ghToken},
			}
			for i, tc := range cases {
				answer := roundTrip(t, c, tc.typ, tc.sent)
				if answer != "echo:"+tc.got {
					t.Errorf("message %d: the answer came back as %.80q, want the echo of the rewritten message", i, answer)
				}
			}
			msgs := up.messages()
			if len(msgs) != len(cases) {
				t.Fatalf("the server got %d messages, want %d", len(msgs), len(cases))
			}
			for i, tc := range cases {
				if msgs[i].typ != tc.typ || msgs[i].data != tc.got {
					t.Errorf("message %d reached the server as %v %.80q, want %v %.80q", i, msgs[i].typ, msgs[i].data, tc.typ, tc.got)
				}
			}
			if err := c.Close(websocket.StatusNormalClosure, "bye"); err != nil {
				t.Errorf("close: %v", err)
			}
			select {
			case code := <-up.closed:
				if code != websocket.StatusNormalClosure {
					t.Errorf("the server saw close %v, want 1000", code)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the server never saw the close")
			}
			e.plain.msgs, e.secure.msgs, e.plain.hdrs, e.secure.hdrs = nil, nil, nil, nil
		})
	}
}

// TestWebSocketPlaceholderRefused: a message with another provider's
// placeholder, or the bound one's in a binary message, closes the
// WebSocket with 1008; that message and nothing after it reaches the
// server, and a denial is recorded with reason_code
// credential_placeholder.
func TestWebSocketPlaceholderRefused(t *testing.T) {
	e := newEnv(t)
	for i, tc := range []struct {
		host string
		typ  websocket.MessageType
		msg  string
	}{
		{"chat.example.com", websocket.MessageText, "token portcullis:provider:other"},
		{"chat.example.com", websocket.MessageText, "token PORTCULLIS:PROVIDER:GH in capitals"},
		{"chat.example.com", websocket.MessageBinary, "portcullis:provider:gh"},
		{"unbound.example.com", websocket.MessageText, "portcullis:provider:gh"},
	} {
		before, seen := len(e.plain.messages()), len(e.denials(tc.host))
		c, res, err := e.dial(t, e.url(tc.host, false, "/socket"), nil)
		if err != nil {
			t.Fatalf("case %d: dial: %v (%v)", i, err, res)
		}
		if got := roundTrip(t, c, websocket.MessageText, "hello"); got != "echo:hello" {
			t.Fatalf("case %d: first message answered %q", i, got)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		if err := c.Write(ctx, tc.typ, []byte(tc.msg)); err != nil {
			t.Fatalf("case %d: write: %v", i, err)
		}
		_, _, err = c.Read(ctx)
		cancel()
		if code := websocket.CloseStatus(err); code != websocket.StatusPolicyViolation {
			t.Errorf("case %d: the client read %v, want a close with 1008", i, err)
		}
		msgs := e.plain.messages()[before:]
		if len(msgs) != 1 || msgs[0].data != "hello" {
			t.Errorf("case %d: the server received %+v, want only the first message", i, msgs)
		}
		denied := e.nextDenial(tc.host, seen)
		if denied == nil || denied.ReasonCode != "credential_placeholder" || !strings.Contains(denied.Reason, "placeholder") {
			t.Errorf("case %d: the denial recorded = %+v, want reason_code credential_placeholder", i, denied)
		}
	}
}

// TestWebSocketRefusedEndpoints: a handshake that an endpoint without
// websocket_credential_rewrite, a held one or a protocol websocket one
// allows is refused with 403 and never reaches the server.
func TestWebSocketRefusedEndpoints(t *testing.T) {
	e := newEnv(t)
	for _, host := range []string{"plainrest.example.com", "held.example.com", "typed.example.com", "nowhere.example.com"} {
		_, res, err := e.dial(t, e.url(host, false, "/socket"), nil)
		if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
			t.Errorf("%s: dial = %v, %v; want 403", host, err, res)
		}
	}
	if hs := e.plain.handshakes(); len(hs) != 0 {
		t.Errorf("the server got %d handshakes, want none", len(hs))
	}
	var reasons []string
	for _, r := range e.agent.Decisions() {
		if r.Decision != decision.Deny {
			t.Errorf("record %+v, want only denials", r)
		}
		reasons = append(reasons, r.Reason)
	}
	if len(reasons) != 4 || !strings.Contains(reasons[0], "websocket_credential_rewrite") || !strings.Contains(reasons[1], "held for review") {
		t.Errorf("the denials' reasons = %q", reasons)
	}
}
