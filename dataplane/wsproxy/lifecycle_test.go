package wsproxy_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/provider"
)

// TestWebSocketFollowsTheCredentials: an open WebSocket takes the
// credential held when each message is sent: after a rotation the new
// value, after the provider is detached a refusal (1008,
// credential_unavailable) with nothing forwarded.
func TestWebSocketFollowsTheCredentials(t *testing.T) {
	e := newEnv(t)
	c, res, err := e.dial(t, e.url("chat.example.com", true, "/socket"), nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, res)
	}
	if got := roundTrip(t, c, websocket.MessageText, "a portcullis:provider:gh"); got != "echo:a "+ghToken {
		t.Fatalf("before the rotation: %q", got)
	}
	const rotated = "ghp_websocket_ROTATED_0003"
	hosts := []string{"chat.example.com:" + strconv.Itoa(e.secure.port)}
	e.agent.Proxy.Credentials().SetCredentials(&provider.Bundle{Sandbox: "sb", Generation: 2, Providers: []provider.Provider{
		{Spec: provider.Spec{Name: "gh", Type: provider.TypeBearer, Hosts: hosts}, Revision: 2, Secret: map[string]string{provider.FieldToken: rotated}},
	}})
	if got := roundTrip(t, c, websocket.MessageText, "b portcullis:provider:gh"); got != "echo:b "+rotated {
		t.Errorf("after the rotation: %q, want the rotated token", got)
	}
	e.agent.Proxy.Credentials().SetCredentials(&provider.Bundle{Sandbox: "sb", Generation: 3})
	seen := len(e.denials("chat.example.com"))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte("c portcullis:provider:gh")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Errorf("after the detach: read %v, want a close with 1008", err)
	}
	if d := e.nextDenial("chat.example.com", seen); d == nil || d.ReasonCode != "credential_unavailable" {
		t.Errorf("the denial = %+v, want credential_unavailable", d)
	}
	msgs := e.secure.messages()
	if len(msgs) != 2 || strings.Contains(msgs[len(msgs)-1].data, "c ") {
		t.Errorf("the server received %+v, want the two messages before the detach", msgs)
	}
	if strings.Contains(e.logs.String(), rotated) || strings.Contains(e.decisions.String(), rotated) {
		t.Error("a log holds the rotated token")
	}
}

// TestWebSocketClosedByANewPolicy: an open WebSocket is judged again when
// a new policy version comes; one that no longer carries it closes the
// client with 1008 and records why, as a quarantine's deny-all would.
func TestWebSocketClosedByANewPolicy(t *testing.T) {
	e := newEnv(t)
	c, res, err := e.dial(t, e.url("chat.example.com", false, "/socket"), nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, res)
	}
	if got := roundTrip(t, c, websocket.MessageText, "hello"); got != "echo:hello" {
		t.Fatalf("first message: %q", got)
	}
	// The same endpoint, but its messages no longer read: not carried.
	doc := fmt.Sprintf(`
version: 1
network_policies:
  ws:
    name: ws
    endpoints:
      - { host: chat.example.com, port: %d, protocol: rest, access: read-only, credential_binding: { provider: gh } }
`, e.plain.port)
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.agent.SetPolicy(pol, "v2"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, _, err = c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("after the new version the client read %v, want a close with 1008", err)
	}
	if !strings.Contains(err.Error(), "websocket_credential_rewrite") {
		t.Errorf("the close's reason = %v, want the policy's", err)
	}
	d := e.nextDenial("chat.example.com", 0)
	if d == nil || !strings.Contains(d.Reason, "open tunnel closed") || d.PolicyVersion != "v2" {
		t.Errorf("the record of the close = %+v", d)
	}
}

// TestWebSocketHandshakeRefused: handshakes the proxy does not carry are
// refused with 403 before any policy or DNS, and nothing reaches the
// server; written raw, as a client that is not a browser may.
func TestWebSocketHandshakeRefused(t *testing.T) {
	e := newEnv(t)
	target := fmt.Sprintf("http://chat.example.com:%d/socket", e.plain.port)
	good := "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	for name, raw := range map[string]string{
		"POST":           "POST " + target + " HTTP/1.1\r\nHost: chat.example.com\r\nContent-Length: 0\r\n" + good + "\r\n",
		"HTTP/1.0":       "GET " + target + " HTTP/1.0\r\nHost: chat.example.com\r\n" + good + "\r\n",
		"version 8":      "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\n" + strings.Replace(good, ": 13", ": 8", 1) + "\r\n",
		"no key":         "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n",
		"short key":      "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\n" + strings.Replace(good, "dGhlIHNhbXBsZSBub25jZQ==", "c2hvcnQ=", 1) + "\r\n",
		"two keys":       "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\n" + good + "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n",
		"not upgrade":    "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\n" + strings.Replace(good, "Connection: Upgrade", "Connection: keep-alive", 1) + "\r\n",
		"h2c":            "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\n" + strings.Replace(good, "Upgrade: websocket", "Upgrade: h2c", 1) + "\r\n",
		"two protocols":  "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\n" + strings.Replace(good, "Upgrade: websocket", "Upgrade: websocket, h2c", 1) + "\r\n",
		"with a body":    "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\nContent-Length: 5\r\n" + good + "\r\nhello",
		"chunked body":   "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\nTransfer-Encoding: chunked\r\n" + good + "\r\n5\r\nhello\r\n0\r\n\r\n",
		"two upgrades":   "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\nUpgrade: websocket\r\n" + good + "\r\n",
		"version twice":  "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\n" + good + "Sec-WebSocket-Version: 13\r\n\r\n",
		"key not base64": "GET " + target + " HTTP/1.1\r\nHost: chat.example.com\r\n" + strings.Replace(good, "dGhlIHNhbXBsZSBub25jZQ==", "!!!!!!!!!!!!!!!!!!!!!!==", 1) + "\r\n",
	} {
		status, body := rawRequest(t, e, raw)
		if status != http.StatusForbidden && status != http.StatusBadRequest {
			t.Errorf("%s: answered %d %s, want 403 (or 400 for a malformed request)", name, status, body)
		}
	}
	if hs := e.plain.handshakes(); len(hs) != 0 {
		t.Errorf("the server got %d requests, want none", len(hs))
	}
}

// rawRequest writes raw to the proxy and returns the status and body of
// its answer.
func rawRequest(t *testing.T, e *env, raw string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", e.proxyURL.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// TestWebSocketUpstreamAnswers: an upstream that refuses the handshake is
// relayed as it answered; one whose 101 is not a WebSocket server's (a
// wrong accept key, an extension not offered) is a 502 and the client's
// connection never switches.
func TestWebSocketUpstreamAnswers(t *testing.T) {
	e := newEnv(t)
	_, res, err := e.dial(t, e.url("chat.example.com", false, "/unauthorized"), nil)
	if err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Errorf("an upstream's 401: dial = %v, %v; want the 401 relayed", err, res)
	}
	for name, answer := range map[string]string{
		"wrong accept": "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n",
		"extension":    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ACCEPT\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
		"other proto":  "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ACCEPT\r\n\r\n",
	} {
		port := cannedUpstream(t, answer)
		doc := fmt.Sprintf("version: 1\nnetwork_policies:\n  ws:\n    name: ws\n    endpoints:\n      - { host: canned.example.com, port: %d, protocol: rest, access: read-only, websocket_credential_rewrite: true }\n", port)
		pol, _, err := policy.Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.agent.SetPolicy(pol, name); err != nil {
			t.Fatal(err)
		}
		_, res, err := e.dial(t, fmt.Sprintf("ws://canned.example.com:%d/x", port), nil)
		if err == nil || res == nil || res.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: dial = %v, %v; want 502", name, err, res)
		}
	}
}

// cannedUpstream answers every connection's request with answer, its
// ACCEPT the request's accept key, and then waits for the peer to close.
func cannedUpstream(t *testing.T, answer string) int {
	t.Helper()
	return rawUpstream(t, func(conn net.Conn, key string) {
		io.WriteString(conn, strings.Replace(answer, "ACCEPT", acceptKey(key), 1))
		io.Copy(io.Discard, conn)
	})
}

// TestWebSocketMessageTooLarge: a message over the bound the proxy reads
// whole (1 MiB) is refused with 1008, none of it forwarded.
func TestWebSocketMessageTooLarge(t *testing.T) {
	e := newEnv(t)
	c, res, err := e.dial(t, e.url("chat.example.com", false, "/socket"), nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, res)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(strings.Repeat("y", 1<<20+1))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("read %v, want a close with 1008 saying the message is too large", err)
	}
	if msgs := e.plain.messages(); len(msgs) != 0 {
		t.Errorf("the server received %d messages, want none", len(msgs))
	}
}

// acceptKey is the Sec-WebSocket-Accept of key (RFC 6455 §4.2.2).
func acceptKey(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// TestWebSocketClosedWhenTheBindingChanges: a new policy version that
// keeps the endpoint's websocket_credential_rewrite but drops its
// credential_binding closes an open WebSocket, which would otherwise go on
// putting the provider's token in its messages (found in review).
func TestWebSocketClosedWhenTheBindingChanges(t *testing.T) {
	e := newEnv(t)
	c, res, err := e.dial(t, e.url("chat.example.com", false, "/socket"), nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, res)
	}
	if got := roundTrip(t, c, websocket.MessageText, "a portcullis:provider:gh"); got != "echo:a "+ghToken {
		t.Fatalf("first message: %q", got)
	}
	doc := fmt.Sprintf(`
version: 1
network_policies:
  ws:
    name: ws
    endpoints:
      - { host: chat.example.com, port: %d, protocol: rest, access: read-only, websocket_credential_rewrite: true }
`, e.plain.port)
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.agent.SetPolicy(pol, "v2"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c.Write(ctx, websocket.MessageText, []byte("b portcullis:provider:gh"))
	if _, got, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation || !strings.Contains(err.Error(), "credential_binding") {
		t.Errorf("after the binding was dropped the client read %q, %v; want a close with 1008 naming credential_binding", got, err)
	}
	for _, m := range e.plain.messages() {
		if strings.HasPrefix(m.data, "b ") {
			t.Errorf("the server received %q after the binding was dropped", m.data)
		}
	}
}

// TestWebSocketServerGoneWhileWriting: a server that stops reading and
// then half-closes while the client's messages fill the buffers ends the
// relay; nothing of the proxy's stays blocked writing to it (found in
// review).
func TestWebSocketServerGoneWhileWriting(t *testing.T) {
	e := newEnv(t)
	fin := make(chan struct{})
	port := rawUpstream(t, func(conn net.Conn, key string) {
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+acceptKey(key)+"\r\n\r\n")
		<-fin // not reading: the client's messages fill the buffers
		conn.(*net.TCPConn).CloseWrite()
		<-t.Context().Done()
	})
	doc := fmt.Sprintf("version: 1\nnetwork_policies:\n  ws:\n    name: ws\n    endpoints:\n      - { host: mute.example.com, port: %d, protocol: rest, access: read-only, websocket_credential_rewrite: true }\n", port)
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.agent.SetPolicy(pol, "mute"); err != nil {
		t.Fatal(err)
	}
	c, res, err := e.dial(t, fmt.Sprintf("ws://mute.example.com:%d/x", port), nil)
	if err != nil {
		t.Fatalf("dial: %v (%v)", err, res)
	}
	wrote := make(chan error, 1)
	go func() {
		msg := []byte(strings.Repeat("m", 64<<10))
		for {
			if err := c.Write(context.Background(), websocket.MessageText, msg); err != nil {
				wrote <- err
				return
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // long enough to fill the buffers
	close(fin)
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("the client's writes never failed after the server left")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "wsproxy.relay") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the relay is still running 10 s after the server half-closed:\n%s", stacks)
		}
	}
}

// rawUpstream runs serve for each connection, after reading its request,
// with the request's Sec-WebSocket-Key.
func rawUpstream(t *testing.T, serve func(conn net.Conn, key string)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				serve(conn, req.Header.Get("Sec-WebSocket-Key"))
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
