package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// The processes the benchmark runs are the shipped binary as users run
// it: `portcullis gateway` with its defaults (embedded SQLite in a temp
// dir) and one `portcullis proxy --gateway … --sandbox …` per sandbox,
// each in its own process group so a ^C reaches only this program.

// proc is one child process that announced its address on stdout.
type proc struct {
	cmd    *exec.Cmd
	addr   string
	exited chan error // receives Wait's result once
	logAt  string
}

// start runs bin with args and env, its stderr in logAt, and returns once
// a stdout line begins with prefix (the rest of the line is its address).
func start(ctx context.Context, bin string, args, env []string, logAt, prefix string) (*proc, error) {
	logf, err := os.Create(logAt)
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: exec.Command(bin, args...), exited: make(chan error, 1), logAt: logAt}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s %s: %w", bin, args[0], err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), prefix); ok {
				addr <- strings.Fields(a)[0]
			}
		}
		io.Copy(io.Discard, stdout)
		p.exited <- p.cmd.Wait()
		logf.Close()
	}()
	select {
	case p.addr = <-addr:
		return p, nil
	case err := <-p.exited:
		return nil, fmt.Errorf("%s %s exited before listening: %v\n%s", bin, args[0], err, p.log())
	case <-time.After(60 * time.Second):
		p.stop()
		return nil, fmt.Errorf("%s %s not listening after 60s\n%s", bin, args[0], p.log())
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
}

// log is the end of what the process wrote to stderr.
func (p *proc) log() string {
	b, _ := os.ReadFile(p.logAt)
	if len(b) > 4096 {
		b = append([]byte("…"), b[len(b)-4096:]...)
	}
	return string(b)
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop ends the process (SIGTERM, then SIGKILL after 10 s) and waits.
func (p *proc) stop() {
	syscall.Kill(p.pid(), syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(10 * time.Second):
		syscall.Kill(p.pid(), syscall.SIGKILL)
		p.exited <- <-p.exited
	}
}

// gateway is `portcullis gateway` and the API clients the run uses.
type gateway struct {
	*proc
	admin     *connect.Client
	operator  *connect.Client
	sandboxes portcullisv1connect.SandboxServiceClient
	proxies   portcullisv1connect.ProxyServiceClient
	calls     portcullisv1connect.CallServiceClient
}

// startGateway runs the gateway with its data in dir, with an admin token
// of our own and an operator token made through the API (an operator
// decides held calls).
func startGateway(ctx context.Context, bin, dir string, extra []string) (*gateway, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	admin := "pcs_heldcalls-" + randomHex()
	args := append([]string{"gateway", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")}, extra...)
	p, err := start(ctx, bin, args, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + admin, "PORTCULLIS_DATABASE_URL="},
		filepath.Join(dir, "gateway.log"), "Portcullis gateway listening on ")
	if err != nil {
		return nil, err
	}
	transport := connecthttp.NewTransport(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, "http://"+p.addr)
	g := &gateway{proc: p, admin: connect.NewClient(transport, gatewaytest.Bearer(admin))}
	g.sandboxes = portcullisv1connect.NewSandboxServiceClient(g.admin)
	g.proxies = portcullisv1connect.NewProxyServiceClient(g.admin)
	tok, err := portcullisv1connect.NewTokenServiceClient(g.admin).CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "bench-operator", Role: "operator"})
	if err != nil {
		g.stop()
		return nil, fmt.Errorf("create the operator token: %w", err)
	}
	g.operator = connect.NewClient(transport, gatewaytest.Bearer(tok.GetToken()))
	g.calls = portcullisv1connect.NewCallServiceClient(g.operator)
	return g, nil
}

// startProxy runs one proxy of sandbox, its token in a file, its data in
// dir, listening on a free loopback port.
func startProxy(ctx context.Context, bin, gatewayAddr, sandbox, token, dir string, extra ...string) (*proc, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return nil, err
	}
	args := []string{"proxy", "--gateway", "http://" + gatewayAddr, "--sandbox", sandbox, "--token-file", tokenFile,
		"--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--dev-allow-loopback"}
	args = append(args, extra...)
	return start(ctx, bin, args, nil, filepath.Join(dir, "proxy.log"), "Portcullis proxy listening on ")
}

// waitApplied waits until every sandbox's proxy enforces its first
// version (the gateway has its ACK).
func (g *gateway) waitApplied(ctx context.Context, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := g.proxies.ListProxies(ctx, &portcullisv1.ListProxiesRequest{})
		if err != nil {
			return fmt.Errorf("list proxies: %w", err)
		}
		applied := 0
		for _, p := range list.GetProxies() {
			if p.GetConnected() && p.GetAppliedVersion() >= 1 {
				applied++
			}
		}
		if applied >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d proxies enforce their policy after 2 minutes", applied, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func randomHex() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
