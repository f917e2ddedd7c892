package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/bench/internal/orderspolicy"
	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/policy"
)

// benchPolicy is the article's orders policy with the argument gate on
// lookup_order, for the upstream at 127.0.0.1:PORT. BINARIES is replaced
// by a binaries list when the caller binary is stubbed (see
// startPortcullis).
const benchPolicy = orderspolicy.Head + `      - host: 127.0.0.1
        port: PORT
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          versions: ["2025-11-25"]
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
` + orderspolicy.ToolRules + `BINARIES`

// stubBinary is the caller every connection has with --caller-binary stub.
const stubBinary = "/usr/bin/python3"

// portcullisProxy is an in-process dataplane.Agent on 127.0.0.1:0.
type portcullisProxy struct {
	url  *url.URL
	stop func()
}

// startPortcullis runs the enforcing proxy in front of upstreamAddr.
//
// callerBinary "proc" keeps the proxy's default CallerBinary, the /proc
// lookup production uses. It runs once per new client connection (a scan
// of every process's fd directory, milliseconds), so with keep-alive
// clients it is paid once per connection, during the warm-up. Here the
// client end is held by the proxy's own process, which CallerBinary
// reports as unknown, so the policy names no binaries. "stub" replaces the
// lookup with a fixed path and the policy names that binary, so binary
// matching is exercised at no /proc cost.
func startPortcullis(upstreamAddr, callerBinary string) (*portcullisProxy, error) {
	_, port, err := net.SplitHostPort(upstreamAddr)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "proxyload-ca-")
	if err != nil {
		return nil, fmt.Errorf("proxy CA dir: %w", err)
	}
	cleanupDir := func() { os.RemoveAll(dir) }
	proxyCA, err := ca.LoadOrCreate(dir)
	if err != nil {
		cleanupDir()
		return nil, fmt.Errorf("proxy CA: %w", err)
	}
	cfg := dataplane.Config{
		DevAllowLoopback: true,
		Logger:           slog.New(slog.DiscardHandler),
		CA:               proxyCA,
	}
	binaries := ""
	if callerBinary == "stub" {
		cfg.CallerBinary = func(net.Conn) (string, error) { return stubBinary, nil }
		binaries = "    binaries:\n      - path: " + stubBinary + "\n"
	}
	doc := strings.NewReplacer("PORT", port, "BINARIES", binaries).Replace(benchPolicy)
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		cleanupDir()
		return nil, fmt.Errorf("bench policy: %w", err)
	}
	p, err := dataplane.New(cfg)
	if err != nil {
		cleanupDir()
		return nil, err
	}
	if err := p.SetPolicy(pol, "proxyload-1"); err != nil {
		cleanupDir()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cleanupDir()
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		// The proxy's goroutines (connections, upstream transport) inherit
		// the label, so a CPU profile tells its work apart.
		pprof.Do(ctx, pprof.Labels("component", "portcullis"), func(ctx context.Context) { p.Run(ctx, ln) })
		close(done)
	}()
	return &portcullisProxy{
		url:  &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)},
		stop: func() { cancel(); <-done; cleanupDir() },
	}, nil
}
