package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/byterelay"
	"github.com/portcullis-dev/portcullis/bench/internal/childproc"
	"github.com/portcullis-dev/portcullis/bench/internal/procs"
)

const (
	pathDirect     = "direct"
	pathPortcullis = "portcullis"
	pathRelay      = "relay"
)

func run(ctx context.Context, cfg config, dir string) error {
	load := loadAverage()
	up, err := startUpstream()
	if err != nil {
		return err
	}
	defer up.close()
	var pprofAddr string
	if cfg.cpuprofile != "" {
		if pprofAddr, err = freeLoopbackAddr(); err != nil {
			return err
		}
	}
	proxy, err := startProxy(ctx, cfg.portcullis, dir, up.port, pprofAddr)
	if err != nil {
		return err
	}
	defer proxy.Stop()
	proxyURL := &url.URL{Scheme: "http", Host: proxy.Addr}
	echoURL := fmt.Sprintf("ws://127.0.0.1:%d%s", up.port, echoPath)
	if err := verify(ctx, up, proxyURL, proxy); err != nil {
		return err
	}
	scs := scenarios(cfg.conns)
	for _, s := range scs {
		s.makePayload()
	}
	var paths []*path
	var relays []*childproc.Proc
	defer func() { // after the connections are closed
		for _, rl := range relays {
			rl.Close()
		}
	}()
	defer func() {
		for _, p := range paths {
			p.close()
		}
	}()
	for _, name := range cfg.paths {
		p := &path{name: name}
		hc, u := client(nil), echoURL
		switch name {
		case pathDirect:
		case pathPortcullis:
			p.hopPID, hc = proxy.Pid(), client(proxyURL)
		case pathRelay:
			rl, addr, err := byterelay.Start(fmt.Sprintf("127.0.0.1:%d", up.port))
			if err != nil {
				return err
			}
			relays = append(relays, rl)
			p.hopPID, u = rl.Pid(), "ws://"+addr+echoPath
		default:
			return benchcli.Usagef("-paths: no path %q (direct, portcullis, relay)", name)
		}
		paths = append(paths, p)
		if err := p.open(ctx, hc, u, cfg.conns); err != nil {
			return fmt.Errorf("%w\nthe proxy's log:\n%s", err, proxy.Log())
		}
	}
	rep, err := measureAll(ctx, cfg, scs, paths, pprofAddr)
	if err != nil {
		return fmt.Errorf("%w\nthe proxy's log:\n%s", err, proxy.Log())
	}
	mem := benchenv.ReadMemory(proxy.Pid())
	rep.Environment = environment{Machine: benchenv.Describe(), LoadAverage: load, ProxyMemory: mem.String()}
	if cfg.json {
		return benchcli.WriteJSON(os.Stdout, rep)
	}
	return rep.writeTable(os.Stdout)
}

// measureAll warms each scenario up on both paths, then measures
// cfg.rounds rounds: each round every scenario on both paths, the path
// first alternating from round to round, so drift hits both alike.
func measureAll(ctx context.Context, cfg config, scs []*scenario, paths []*path, pprofAddr string) (*report, error) {
	per := cfg.duration / time.Duration(len(scs)*len(paths)*cfg.rounds)
	rep := &report{Rounds: cfg.rounds, Conns: cfg.conns, SlotSeconds: per.Seconds()}
	for _, s := range scs {
		for _, p := range paths {
			if cfg.warmup > 0 {
				if _, err := p.measure(ctx, s, cfg.warmup); err != nil {
					return nil, fmt.Errorf("warm-up: %w", err)
				}
			}
		}
		rep.Scenarios = append(rep.Scenarios, &scenarioResult{Scenario: s.Name, s: s})
	}
	var profile <-chan error
	if cfg.cpuprofile != "" {
		profile = startProfile(ctx, pprofAddr, cfg.duration, cfg.cpuprofile)
	}
	for r := range cfg.rounds {
		for i, s := range scs {
			for k := range paths {
				p := paths[(r+k)%len(paths)] // who goes first turns from round to round
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				sl, err := p.measure(ctx, s, per)
				if err != nil {
					return nil, err
				}
				rep.Scenarios[i].add(p.name, sl)
			}
		}
	}
	if profile != nil {
		if err := <-profile; err != nil {
			return nil, err
		}
	}
	for _, s := range rep.Scenarios {
		s.finish()
	}
	return rep, nil
}

// verify checks, before anything is measured, that the proxy carries a
// WebSocket as the benchmark means: the handshake it forwards offers no
// extension though the client offered permessage-deflate (so it reads
// every frame), both message sizes and types echo unchanged, and a path
// the policy does not allow is refused 403 without the upstream seeing
// it.
func verify(ctx context.Context, up *upstream, proxyURL *url.URL, proxy *procs.Proc) error {
	hc := client(proxyURL)
	defer hc.CloseIdleConnections()
	u := fmt.Sprintf("ws://127.0.0.1:%d", up.port)
	// The proxy announces its address before it has read the policy file:
	// retry a refused handshake for a few seconds.
	var c *websocket.Conn
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, _, err = dial(ctx, hc, u+echoPath, websocket.CompressionContextTakeover); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("check: a WebSocket through the proxy: %w\nthe proxy's log:\n%s", err, proxy.Log())
	}
	defer c.CloseNow()
	if n := up.extensions.Load(); n != 0 {
		return fmt.Errorf("check: the proxy forwarded Sec-WebSocket-Extensions (%d handshakes)", n)
	}
	for _, s := range scenarios(1) {
		s.makePayload()
		if err := c.Write(ctx, s.typ, s.payload); err != nil {
			return fmt.Errorf("check: %s through the proxy: %w", s.Name, err)
		}
		var buf bytes.Buffer
		typ, err := readInto(ctx, c, &buf)
		if err != nil {
			return fmt.Errorf("check: %s through the proxy: %w", s.Name, err)
		}
		if typ != s.typ || !bytes.Equal(buf.Bytes(), s.payload) {
			return fmt.Errorf("check: %s through the proxy: the echo is not the message sent", s.Name)
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		return fmt.Errorf("check: closing a WebSocket through the proxy: %w", err)
	}
	_, res, err := dial(ctx, hc, u+deniedPath, websocket.CompressionDisabled)
	if err == nil || res == nil || res.StatusCode != http.StatusForbidden {
		status := "no response"
		if res != nil {
			status = res.Status
		}
		return fmt.Errorf("check: a handshake to %s (not allowed) got %s, want 403 Forbidden (%v)", deniedPath, status, err)
	}
	if n := up.denied.Load(); n != 0 {
		return errors.New("check: the upstream received a handshake the policy does not allow")
	}
	return nil
}

// loadAverage is /proc/loadavg's first three figures, "" if unknown.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
