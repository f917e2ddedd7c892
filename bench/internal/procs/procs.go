// Package procs runs the shipped binary's processes for the benchmark
// programs, as users run them: `portcullis gateway` with its defaults
// (embedded SQLite in a directory of the run's) and `portcullis proxy
// --gateway … --sandbox …`, each in its own process group so a ^C
// reaches only the benchmark, its stderr in a file, its address read from
// the line it announces on stdout.
package procs

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
)

// Proc is one child process that announced its address (Addr) on stdout.
type Proc struct {
	cmd    *exec.Cmd
	Addr   string
	exited chan error // receives Wait's result once
	logAt  string
}

// Start runs bin with args and env, its stderr in logAt, and returns once
// a stdout line begins with prefix (the rest of the line is its address).
func Start(ctx context.Context, bin string, args, env []string, logAt, prefix string) (*Proc, error) {
	logf, err := os.Create(logAt)
	if err != nil {
		return nil, err
	}
	p := &Proc{cmd: exec.Command(bin, args...), exited: make(chan error, 1), logAt: logAt}
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
	case p.Addr = <-addr:
		return p, nil
	case err := <-p.exited:
		return nil, fmt.Errorf("%s %s exited before listening: %v\n%s", bin, args[0], err, p.Log())
	case <-time.After(60 * time.Second):
		p.Stop()
		return nil, fmt.Errorf("%s %s not listening after 60s\n%s", bin, args[0], p.Log())
	case <-ctx.Done():
		p.Stop()
		return nil, ctx.Err()
	}
}

// Log is the end of what the process wrote to stderr.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.logAt)
	if len(b) > 4096 {
		b = append([]byte("…"), b[len(b)-4096:]...)
	}
	return string(b)
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stop ends the process (SIGTERM, then SIGKILL after 10 s) and waits.
func (p *Proc) Stop() {
	syscall.Kill(p.Pid(), syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(10 * time.Second):
		syscall.Kill(p.Pid(), syscall.SIGKILL)
		p.exited <- <-p.exited
	}
}

// StartGateway runs `portcullis gateway` on a free loopback port with its
// data in dir/data (embedded SQLite unless env sets
// PORTCULLIS_DATABASE_URL), its log in dir/gateway.log, admin as its
// bootstrap admin token and extra flags.
func StartGateway(ctx context.Context, bin, dir, admin string, env, extra []string) (*Proc, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	args := append([]string{"gateway", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")}, extra...)
	env = append([]string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + admin, "PORTCULLIS_DATABASE_URL="}, env...) // the last of a name wins
	return Start(ctx, bin, args, env, filepath.Join(dir, "gateway.log"), "Portcullis gateway listening on ")
}

// StartProxy runs one proxy of sandbox, its token in a file, its data in
// dir, listening on a free loopback port.
func StartProxy(ctx context.Context, bin, gatewayAddr, sandbox, token, dir string, extra ...string) (*Proc, error) {
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
	return Start(ctx, bin, args, nil, filepath.Join(dir, "proxy.log"), "Portcullis proxy listening on ")
}

// RandomHex is 16 random bytes in hex, for tokens and names.
func RandomHex() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Build builds ./cmd/portcullis into dir (run from the repository's
// root) and returns the binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "portcullis")
	fmt.Fprintln(os.Stderr, "building ./cmd/portcullis…")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/portcullis").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/portcullis (run from the repository's root, or pass -portcullis): %v\n%s", err, out)
	}
	return bin, nil
}

// FetchProfile gets a profile from a process's pprof endpoint (the URL
// of one profile under /debug/pprof/) into file.
func FetchProfile(ctx context.Context, profileURL, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, profileURL, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("profile %s: %s: %s", profileURL, res.Status, b)
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile: %w", err)
	}
	return f.Close()
}
