package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// wsUpstream is a WebSocket server (github.com/coder/websocket) that
// records each handshake's Authorization and every message, and echoes
// each message back.
type wsUpstream struct {
	mu   sync.Mutex
	auth []string
	msgs []string
}

func (u *wsUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.auth = append(u.auth, r.Header.Get("Authorization"))
	u.mu.Unlock()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	for {
		typ, data, err := c.Read(context.Background())
		if err != nil {
			return
		}
		u.mu.Lock()
		u.msgs = append(u.msgs, string(data))
		u.mu.Unlock()
		if c.Write(context.Background(), typ, append([]byte("echo:"), data...)) != nil {
			return
		}
	}
}

func (u *wsUpstream) seen() (auth, msgs []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auth...), append([]string(nil), u.msgs...)
}

// TestWebSocketCredentialsEndToEnd: issue 39's websocket_credential_rewrite
// with the real binaries. Through the proxy a gateway feeds, an agent's
// WebSocket gets the provider's token on its handshake and in place of
// the placeholder in its messages; `provider rotate` reaches the open
// WebSocket's next message; another provider's placeholder closes it
// (1008) unforwarded; and `sandbox freeze` closes an open one.
func TestWebSocketCredentialsEndToEnd(t *testing.T) {
	t.Setenv("PORTCULLIS_LOG_LEVEL", "debug") // the processes' logs too must hold no secret
	up := &wsUpstream{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: up}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	const first, second = "ws-s3cr3t-first-41c9", "ws-s3cr3t-second-8e02"
	dir := t.TempDir()
	gwDir, pxDir := filepath.Join(dir, "gateway"), filepath.Join(dir, "p1")
	gw := startGatewayProcess(t, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="}, "--data-dir", gwDir)
	gatewayURL := "http://" + gw.addr
	api := newPushAPI(gatewayURL)
	doc := fmt.Sprintf(`version: 1
network_policies:
  chat:
    name: chat
    endpoints:
      - host: 127.0.0.1
        port: %d
        protocol: rest
        websocket_credential_rewrite: true
        credential_binding: { provider: up }
        rules: [ { allow: { method: GET, path: "/ws/**" } } ]
`, port)
	created, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: doc})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	px := startOCSFProxy(t, gatewayURL, tokenFile, pxDir, "p1")
	api.waitStatuses(t, []string{"p1"}, "version 1 applied", func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() && p.GetAppliedVersion() == 1 })
	env := []string{"PORTCULLIS_GATEWAY=" + gatewayURL, "PORTCULLIS_TOKEN=" + pushAdminToken}
	cli := func(args ...string) {
		t.Helper()
		if out, code := runBinary(t, env, args...); code != 0 {
			t.Fatalf("portcullis %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}
	cli("provider", "create", "up", "--type", "bearer", "--hosts", fmt.Sprintf("http://127.0.0.1:%d", port), "--secret-file", writeFile(t, "up.token", first+"\n"))
	cli("provider", "create", "other", "--type", "bearer", "--hosts", "elsewhere.example.com", "--secret-file", writeFile(t, "other.token", "other-s3cr3t-0b7d\n"))
	cli("sandbox", "providers", "attach", "agent-1", "up")
	cli("sandbox", "providers", "attach", "agent-1", "other")

	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: px.addr})}}
	dial := func() *websocket.Conn {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		c, res, err := websocket.Dial(ctx, fmt.Sprintf("ws://127.0.0.1:%d/ws/chat", port), &websocket.DialOptions{HTTPClient: client})
		if err != nil {
			t.Fatalf("dial through the proxy: %v (%v)", err, res)
		}
		t.Cleanup(func() { c.CloseNow() })
		return c
	}
	say := func(c *websocket.Conn, msg string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			return "", err
		}
		_, got, err := c.Read(ctx)
		return string(got), err
	}

	c := dial()
	if got, err := say(c, `{"auth":"portcullis:provider:up"}`); err != nil || got != `echo:{"auth":"`+first+`"}` {
		t.Fatalf("first message: %q, %v", got, err)
	}
	cli("provider", "rotate", "up", "--secret-file", writeFile(t, "up2.token", second+"\n")) // waits for the proxy's ACK
	if got, err := say(c, `{"auth":"portcullis:provider:up"}`); err != nil || got != `echo:{"auth":"`+second+`"}` {
		t.Fatalf("after the rotation, on the same WebSocket: %q, %v", got, err)
	}
	if _, err := say(c, "portcullis:provider:other"); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("another provider's placeholder: %v, want a close with 1008", err)
	}
	auth, msgs := up.seen()
	if len(auth) != 1 || auth[0] != "Bearer "+first {
		t.Errorf("the handshakes' Authorization = %q, want the first token once", auth)
	}
	if len(msgs) != 2 || strings.Contains(strings.Join(msgs, " "), "other") {
		t.Errorf("the upstream received %q, want the two rewritten messages only", msgs)
	}

	// A frozen sandbox's deny-all closes an open WebSocket.
	c = dial()
	if got, err := say(c, "hello"); err != nil || got != "echo:hello" {
		t.Fatalf("before the freeze: %q, %v", got, err)
	}
	cli("sandbox", "freeze", "agent-1", "--reason", "test")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("after the freeze the open WebSocket read %v, want a close with 1008", err)
	}

	// No secret in anything the proxy or the gateway wrote.
	for _, root := range []string{gwDir, pxDir} {
		filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(path, ".db") || strings.Contains(path, ".db-") {
				return nil
			}
			b, _ := os.ReadFile(path)
			for _, s := range []string{first, second} {
				if strings.Contains(string(b), s) {
					t.Errorf("%s holds a secret", path)
				}
			}
			return nil
		})
	}
	for _, out := range []string{gw.stderr.String(), px.stderr.String()} {
		for _, s := range []string{first, second} {
			if strings.Contains(out, s) {
				t.Errorf("a process's log holds a secret")
			}
		}
	}
}
