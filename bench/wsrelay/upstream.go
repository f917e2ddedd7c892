package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/portcullis-dev/portcullis/bench/internal/procs"
)

// maxMessage is the largest message either end reads: the largest the
// program sends (64 KiB), with room. coder/websocket's default limit is
// 32 KiB.
const maxMessage = 1 << 20

// echoPath is the path the policy allows; deniedPath is one it does not.
const (
	echoPath   = "/echo"
	deniedPath = "/denied"
)

// upstream is the WebSocket echo server both paths reach: it answers each
// message with the same message (one frame, the same type), and counts
// what the checks look at.
type upstream struct {
	srv  *http.Server
	port int
	// extensions counts handshakes that offered Sec-WebSocket-Extensions;
	// denied, requests for deniedPath.
	extensions, denied atomic.Int64
}

func startUpstream() (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{port: ln.Addr().(*net.TCPAddr).Port}
	u.srv = &http.Server{Handler: http.HandlerFunc(u.serve), ReadHeaderTimeout: 10 * time.Second}
	go u.srv.Serve(ln)
	return u, nil
}

func (u *upstream) close() { u.srv.Close() }

func (u *upstream) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Sec-WebSocket-Extensions") != "" {
		u.extensions.Add(1)
	}
	if r.URL.Path == deniedPath {
		u.denied.Add(1)
	}
	// No compression: a direct client that offers none gets none, and the
	// proxy never offers it.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(maxMessage)
	ctx := context.Background()
	var buf bytes.Buffer
	for {
		typ, err := readInto(ctx, c, &buf)
		if err != nil {
			return
		}
		if err := c.Write(ctx, typ, buf.Bytes()); err != nil {
			return
		}
	}
}

// policyDoc carries WebSockets to the upstream at 127.0.0.1:port on
// echoPath alone, their messages read (no credential is bound: a proxy
// with --policy holds none).
func policyDoc(port int) string {
	return fmt.Sprintf(`version: 1
network_policies:
  echo:
    name: echo
    endpoints:
      - host: 127.0.0.1
        port: %d
        protocol: rest
        websocket_credential_rewrite: true
        rules: [ { allow: { method: GET, path: %s } } ]
`, port, echoPath)
}

// startProxy runs `portcullis proxy --policy FILE` with its defaults (the
// decision log in its data dir), on a free loopback port, allowed to reach
// loopback upstreams; with pprofAddr, serving its profiles there.
func startProxy(ctx context.Context, bin, dir string, port int, pprofAddr string) (*procs.Proc, error) {
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policyDoc(port)), 0o600); err != nil {
		return nil, err
	}
	args := []string{"proxy", "--policy", policyFile, "--data-dir", filepath.Join(dir, "data"),
		"--listen", "127.0.0.1:0", "--dev-allow-loopback"}
	if pprofAddr != "" {
		args = append(args, "--pprof-listen", pprofAddr)
	}
	return procs.Start(ctx, bin, args, nil, filepath.Join(dir, "proxy.log"), "Portcullis proxy listening on ")
}
