package dataplane_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"context"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/policy"
)

// rawServer is a TCP server on rawAddr that records, per connection, every
// byte it receives until the proxy closes (or half-closes) the connection.
// With a banner it speaks first, as SSH and SMTP servers do.
type rawServer struct {
	port int
	got  chan []byte
}

func startRawServer(t *testing.T, banner string) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(rawAddr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{port: ln.Addr().(*net.TCPAddr).Port, got: make(chan []byte, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if banner != "" {
					io.WriteString(c, banner)
				}
				b, _ := io.ReadAll(c)
				s.got <- b
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return s
}

// received waits for one connection's bytes.
func (s *rawServer) received(t *testing.T) []byte {
	t.Helper()
	select {
	case b := <-s.got:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection did not end")
		return nil
	}
}

// helloFor is a real ClientHello for serverName, as Go's client sends it.
func helloFor(t *testing.T, serverName string) []byte {
	t.Helper()
	c, s := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	}()
	head := make([]byte, 5)
	if _, err := io.ReadFull(s, head); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(head[3])<<8|int(head[4]))
	if _, err := io.ReadFull(s, body); err != nil {
		t.Fatal(err)
	}
	s.Close()
	c.Close()
	<-done
	return append(head, body...)
}

// An L4 grant is for the CONNECT host: the tunnel's first bytes may not
// ask the server at that address for another name (issue 11, finding 5).
// A TLS server name or an HTTP Host naming another host closes the tunnel
// before any byte reaches the upstream; other protocols, and servers that
// speak first, are relayed as before.
func TestL4TunnelStartMustNameConnectHost(t *testing.T) {
	silent := startRawServer(t, "")
	ssh := startRawServer(t, "SSH-2.0-upstream\r\n")
	doc := fmt.Sprintf(`
version: 1
network_policies:
  raw:
    endpoints:
      - { host: raw.good.test, port: %d }
      - { host: ssh.good.test, port: %d }
`, silent.port, ssh.port)
	p := newAgent(t, dataplane.Config{
		DevAllowLoopback: true,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr(rawAddr)}, nil
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetPolicy(pol, "v1"); err != nil {
		t.Fatal(err)
	}
	pu := dataplanetest.Serve(t, p)
	raw := "raw.good.test:" + strconv.Itoa(silent.port)
	lastDenial := func() decision.Record {
		t.Helper()
		recs := p.Decisions()
		if len(recs) == 0 || recs[len(recs)-1].Decision != decision.Deny {
			t.Fatalf("no denial recorded last: %+v", recs)
		}
		return recs[len(recs)-1]
	}

	// Plain HTTP naming another host: a 403 from the proxy, nothing sent.
	for _, head := range []string{
		"POST /mcp HTTP/1.1\r\nHost: api.good.test\r\nContent-Length: 2\r\n\r\n{}",
		"POST /mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
		"\r\nGET http://api.good.test/ HTTP/1.1\r\nHost: " + raw + "\r\n\r\n",
	} {
		conn := connectOK(t, pu, raw)
		conn.SetDeadline(time.Now().Add(10 * time.Second)) // fail, not hang, if the proxy relays
		io.WriteString(conn, head)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		var body map[string]any
		json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden || body["denial_id"] == "" || body["denial_id"] != lastDenial().DenialID {
			t.Errorf("%q: %d %v, want a recorded 403", head, res.StatusCode, body)
		}
		if b := silent.received(t); len(b) != 0 {
			t.Errorf("%q: the upstream received %q", head, b)
		}
	}
	// A start cut short (the client stops sending mid-head) is not
	// relayed either.
	conn := connectOK(t, pu, raw)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "POST /mcp HTTP/1.1\r\nHost: "+raw+"\r\n")
	conn.(*net.TCPConn).CloseWrite()
	if res, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("a cut-short head = %v, %v; want 403", res, err)
	}
	if b := silent.received(t); len(b) != 0 {
		t.Errorf("the upstream received %q of a cut-short head", b)
	}
	// TLS for another name: closed, nothing sent.
	conn = connectOK(t, pu, raw)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write(helloFor(t, "api.good.test"))
	if b, _ := io.ReadAll(conn); len(b) != 0 {
		t.Errorf("a ClientHello for another name was answered %q", b)
	}
	if b := silent.received(t); len(b) != 0 {
		t.Errorf("the upstream received %d bytes of a ClientHello for another name", len(b))
	}
	if r := lastDenial(); !strings.Contains(r.Reason, `TLS server name "api.good.test"`) {
		t.Errorf("denial reason %q", r.Reason)
	}

	// Allowed starts reach the upstream byte for byte.
	relayed := func(authority string, data []byte) {
		t.Helper()
		conn := connectOK(t, pu, authority)
		conn.Write(data)
		conn.(*net.TCPConn).CloseWrite()
		var up *rawServer = silent
		if strings.HasPrefix(authority, "ssh.") {
			up = ssh
		}
		if b := up.received(t); !bytes.Equal(b, data) {
			t.Errorf("the upstream received %q, want %q", b, data)
		}
	}
	relayed(raw, helloFor(t, "raw.good.test"))
	relayed(raw, helloFor(t, ""))
	relayed(raw, []byte("GET / HTTP/1.1\r\nHost: "+raw+"\r\n\r\n"))
	relayed(raw, []byte("\x00\x00\x00\x08\x04\xd2\x16\x2f")) // a Postgres SSLRequest
	// A server that speaks first is heard before the client says anything.
	sshAuthority := "ssh.good.test:" + strconv.Itoa(ssh.port)
	conn = connectOK(t, pu, sshAuthority)
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "SSH-2.0-upstream\r\n" {
		t.Fatalf("banner = %q, %v", line, err)
	}
	io.WriteString(conn, "SSH-2.0-client\r\n")
	conn.(*net.TCPConn).CloseWrite()
	if b := ssh.received(t); string(b) != "SSH-2.0-client\r\n" {
		t.Errorf("the SSH upstream received %q", b)
	}
}

// The case: an L4 grant and an MCP endpoint on one server, reached
// under two names. The validator refuses the spellings it can see
// (localhost and 127.0.0.1); a name that resolves there is refused when
// the proxy connects, so refund_order never reaches the server.
func TestL4RefusedWhereInspectedEndpointLives(t *testing.T) {
	up := startUpstream(t, ordersHandler(false))
	port := strconv.Itoa(up.port)
	side := "side.example.com:" + port
	for _, tc := range []struct{ name, mcpHost string }{
		{"mcp by name", "orders.example.com"},
		{"mcp by address", "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(ordersPolicy, "host: orders.example.com", "host: "+tc.mcpHost, 1) + `
  side:
    name: side
    endpoints:
      - { host: side.example.com, port: PORT }
    binaries:
      - path: /usr/bin/python3
`
			p := newAgent(t, dataplane.Config{
				DevAllowLoopback: true,
				UpstreamRoots:    up.roots,
				Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
					return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
				},
				CallerBinary: func(net.Conn) (string, error) { return "/usr/bin/python3", nil },
				Logger:       slog.New(slog.DiscardHandler),
			})
			pol, _, err := policy.Parse([]byte(strings.ReplaceAll(doc, "PORT", port)))
			if err != nil {
				t.Fatalf("policy: %v", err)
			}
			if err := p.SetPolicy(pol, "v1"); err != nil {
				t.Fatal(err)
			}
			pu := dataplanetest.Serve(t, p)
			res, conn := dialConnect(t, pu, side)
			if res.StatusCode == http.StatusOK {
				// The attack: TLS for the CONNECT host, then the MCP call.
				tc := tls.Client(conn, &tls.Config{ServerName: "side.example.com", InsecureSkipVerify: true})
				body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"refund_order","arguments":{"order_id":"A-0001"}}}`
				fmt.Fprintf(tc, "POST /mcp HTTP/1.1\r\nHost: orders.example.com:%s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Protocol-Version: 2025-11-25\r\nContent-Length: %d\r\n\r\n%s", port, len(body), body)
				if res, err := http.ReadResponse(bufio.NewReader(tc), nil); err == nil {
					res.Body.Close()
				}
			}
			if res.StatusCode != http.StatusForbidden || up.count() != 0 {
				t.Fatalf("CONNECT %s = %d, upstream saw %d requests (refund_order: %v); want 403 and nothing", side, res.StatusCode, up.count(), up.saw("refund_order"))
			}
			recs := p.Decisions()
			if r := recs[len(recs)-1]; !strings.Contains(r.Reason, "inspected endpoint") {
				t.Errorf("denial reason %q", r.Reason)
			}
		})
	}
	// The spellings the validator can compare are refused at load.
	doc := strings.Replace(ordersPolicy, "host: orders.example.com", "host: 127.0.0.1", 1) + `
  side:
    name: side
    endpoints:
      - { host: localhost, port: PORT }
`
	if _, _, err := policy.Parse([]byte(strings.ReplaceAll(doc, "PORT", port))); err == nil || !strings.Contains(err.Error(), "shares 127.0.0.1:"+port) {
		t.Fatalf("a policy with L4 localhost and MCP 127.0.0.1 on one port = %v, want refused", err)
	}
}

// An upstream that says its piece and closes ends the tunnel for the
// client too: the proxy half-closes the client's side (through its own
// connection wrappers), so a client reading to the end gets EOF instead
// of waiting for its own deadline.
func TestL4TunnelPassesUpstreamClose(t *testing.T) {
	ln, err := net.Listen("tcp", net.JoinHostPort(rawAddr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.WriteString(c, "220 bye\r\n")
		c.Close()
	}()
	t.Cleanup(func() { ln.Close(); <-served })
	port := ln.Addr().(*net.TCPAddr).Port
	p := newAgent(t, dataplane.Config{
		DevAllowLoopback: true,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr(rawAddr)}, nil
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	pol, _, err := policy.Parse(fmt.Appendf(nil, "version: 1\nnetwork_policies:\n  raw:\n    endpoints:\n      - { host: smtp.good.test, port: %d }\n", port))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetPolicy(pol, "v1"); err != nil {
		t.Fatal(err)
	}
	conn := connectOK(t, dataplanetest.Serve(t, p), "smtp.good.test:"+strconv.Itoa(port))
	defer conn.Close()
	// A guard against hanging, not a measure: the close arrives at once.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "220 bye\r\n" {
		t.Fatalf("read %q, %v; want the upstream's bytes, then EOF", got, err)
	}
}
