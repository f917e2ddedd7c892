package transport

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/mem"

	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// grpcRoute is the gateway's route: its policy streams and decision
// shipping to grpc-go.
var grpcRoute = GRPCRoute(portcullisv1connect.DistributionServiceStreamPolicyProcedure, portcullisv1connect.DistributionServiceShipDecisionsProcedure)

// startRouter routes 127.0.0.1:0 with grpcRoute and returns its address
// and the router; accepted connections arrive on r.http and r.grpc.
func startRouter(t *testing.T, timeout time.Duration) (string, *router) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := newRouter(ln, slog.New(slog.DiscardHandler), grpcRoute)
	r.timeout = timeout
	done := make(chan error, 1)
	go func() { done <- r.serve() }()
	t.Cleanup(func() {
		r.close()
		r.http.Close()
		r.grpc.Close()
		if err := <-done; err != nil {
			t.Errorf("router serve: %v", err)
		}
	})
	return ln.Addr().String(), r
}

// h2Start is what an HTTP/2 client sends before its first response: the
// preface, SETTINGS, a WINDOW_UPDATE, the first request's HEADERS (with a
// CONTINUATION; see h2First) and a DATA frame.
func h2Start(t *testing.T, path, contentType string) []byte {
	t.Helper()
	start, _ := h2First(path, contentType, false)
	out := bytes.NewBuffer(start)
	http2.NewFramer(out, nil).WriteData(1, false, []byte("\x00\x00\x00\x00\x02hi"))
	return out.Bytes()
}

var settingsAck = []byte{0, 0, 0, byte(http2.FrameSettings), byte(http2.FlagSettingsAck), 0, 0, 0, 0}

// dialAndSend connects, sends first, reads the router's SETTINGS and, if
// ack, acknowledges it and sends after.
func dialAndSend(t *testing.T, addr string, first []byte, ack bool, after []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	if ack {
		f, err := http2.NewFramer(nil, c).ReadFrame()
		if err != nil {
			t.Fatalf("read the router's SETTINGS: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() || sf.NumSettings() != 0 {
			t.Fatalf("the router sent %v, want an empty SETTINGS frame", f)
		}
		if _, err := c.Write(append(append([]byte{}, settingsAck...), after...)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// accept returns the next connection routed to l.
func accept(t *testing.T, l *connListener) net.Conn {
	t.Helper()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- nil
			return
		}
		got <- c
	}()
	select {
	case c := <-got:
		if c == nil {
			t.Fatal("listener closed")
		}
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection routed")
		return nil
	}
}

// readN reads n bytes from c.
func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func TestRouterSendsPolicyStreamsToGRPC(t *testing.T) {
	for _, tc := range []struct {
		name, path, contentType string
		grpc                    bool
	}{
		{"gRPC StreamPolicy", portcullisv1connect.DistributionServiceStreamPolicyProcedure, "application/grpc", true},
		{"gRPC+proto ShipDecisions", portcullisv1connect.DistributionServiceShipDecisionsProcedure, "application/grpc+proto", true},
		{"Connect StreamPolicy", portcullisv1connect.DistributionServiceStreamPolicyProcedure, "application/connect+proto", false},
		{"gRPC-Web StreamPolicy", portcullisv1connect.DistributionServiceStreamPolicyProcedure, "application/grpc-web+proto", false},
		{"gRPC another service", portcullisv1connect.PolicyServiceGetPolicyProcedure, "application/grpc", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, r := startRouter(t, 5*time.Second)
			first := h2Start(t, tc.path, tc.contentType)
			later := []byte("later bytes")
			c := dialAndSend(t, addr, first, true, later)
			want, other := r.http, r.grpc
			if tc.grpc {
				want, other = r.grpc, r.http
			}
			sc := accept(t, want)
			// The server reads what the client sent, without the ACK of
			// the router's SETTINGS, then what follows, from the socket.
			if got := readN(t, sc, len(first)+len(later)); !bytes.Equal(got, append(append([]byte{}, first...), later...)) {
				t.Fatalf("the server read %q,\nwant %q", got, append(first, later...))
			}
			// And what it writes reaches the client.
			sc.Write([]byte("answer"))
			if got := readN(t, c, 6); string(got) != "answer" {
				t.Fatalf("client read %q", got)
			}
			select {
			case oc := <-other.conns:
				oc.Close()
				t.Fatal("the connection also reached the other server")
			default:
			}
		})
	}
}

func TestRouterSendsEverythingElseToHTTP(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first []byte
	}{
		{"HTTP/1.1 GET", []byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"HTTP/1.1 POST", []byte("POST /portcullis.v1.DistributionService/StreamPolicy HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"TLS", []byte{0x16, 0x03, 0x01, 0x00, 0x05, 'h', 'e', 'l', 'l', 'o'}},
		{"PRI, not HTTP/2", []byte("PRI * HTTP/1.1\r\n\r\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, r := startRouter(t, 5*time.Second)
			dialAndSend(t, addr, tc.first, false, nil)
			sc := accept(t, r.http)
			if got := readN(t, sc, len(tc.first)); !bytes.Equal(got, tc.first) {
				t.Fatalf("net/http read %q, want %q", got, tc.first)
			}
		})
	}
}

func TestRouterClosesBadOrSlowStarts(t *testing.T) {
	headers := h2Start(t, portcullisv1connect.DistributionServiceStreamPolicyProcedure, "application/grpc")
	for _, tc := range []struct {
		name  string
		first []byte
		ack   bool
		after []byte
	}{
		{"silent", nil, false, nil},
		{"half a preface", []byte(http2.ClientPreface[:10]), false, nil},
		{"preface, then nothing", []byte(http2.ClientPreface), true, nil},
		{"headers, never an ACK", headers, false, nil},
		{"preface, then garbage", []byte(http2.ClientPreface), true, []byte("\xff\xff\xff\x00\x00\x00\x00\x00\x01garbage")},
		{"too many bytes first", []byte(http2.ClientPreface), true, bytes.Repeat([]byte{0, 0, 8, byte(http2.FramePing), 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, 5000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, r := startRouter(t, 300*time.Millisecond)
			c := dialAndSend(t, addr, tc.first, tc.ack, tc.after)
			start := time.Now()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			for {
				// The router's SETTINGS (unless read already), then EOF.
				_, err := c.Read(make([]byte, 64))
				if err == nil {
					continue
				}
				if !errors.Is(err, io.EOF) && !isReset(err) {
					t.Fatalf("read: %v, want the connection closed", err)
				}
				break
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("closed after %v", d)
			}
			select {
			case sc := <-r.http.conns:
				sc.Close()
				t.Fatal("routed to net/http")
			case sc := <-r.grpc.conns:
				sc.Close()
				t.Fatal("routed to grpc-go")
			default:
			}
		})
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// grpc-go reads a routed connection through ReadOnReady: the replayed
// bytes first, then the socket, then EOF.
func TestPeekedConnReadOnReady(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	pc := &peekedConn{Conn: server, replay: []byte("replayed")}
	if rawReads {
		pc.raw, _ = server.(*net.TCPConn).SyscallConn()
	}
	pool := mem.DefaultBufferPool()
	read := func() (string, error) {
		buf, n, err := pc.ReadOnReady(4, pool)
		if buf == nil {
			return "", err
		}
		defer pool.Put(buf)
		return string((*buf)[:n]), err
	}
	var got string
	for len(got) < len("replayed") {
		s, err := read()
		if err != nil {
			t.Fatal(err)
		}
		got += s
	}
	client.Write([]byte("live"))
	client.Close()
	for {
		s, err := read()
		got += s
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got != "replayedlive" {
		t.Fatalf("read %q", got)
	}
}
