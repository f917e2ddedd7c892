package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The Portcullis path is the shipped binary as a user runs it:
// `portcullis proxy --policy FILE` in its own process, with its defaults
// (the decision log in DATA-DIR/decisions.jsonl, the /proc caller lookup),
// plus --dev-allow-loopback because the upstream is on 127.0.0.1.

// modulePackage is the command the program builds when -portcullis is not
// given.
const modulePackage = "github.com/portcullis-dev/portcullis/cmd/portcullis"

// buildPortcullis builds the portcullis binary into dir with `go build`
// (run from inside the module, as `go run ./bench/proxyload` is).
func buildPortcullis(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "portcullis")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, modulePackage)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s (run from inside the module, or pass -portcullis PATH): %v\n%s", modulePackage, err, out)
	}
	return bin, nil
}

// portcullisProc is `portcullis proxy` running as a child process.
type portcullisProc struct {
	bin string
	url *url.URL // the proxy, for the load clients' Proxy
	// transparent is its --transparent-listen address, when started with one.
	transparent string
	pprof       string // its /debug/pprof/ URL, when started with one
	dataDir     string
	cmd         *exec.Cmd
	exit        chan error // receives Wait's result once
	stderr      *os.File
	stderrAt    string
}

// startPortcullis runs bin as a proxy with policy, its data in dir, on a
// free 127.0.0.1 port, and returns once it listens. withPprof adds
// --pprof-listen 127.0.0.1:0 (for -cpuprofile); extra flags follow.
func startPortcullis(ctx context.Context, bin, dir string, policy []byte, withPprof bool, extra ...string) (*portcullisProc, error) {
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, policy, 0o600); err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	p := &portcullisProc{bin: bin, dataDir: filepath.Join(dir, "data"), exit: make(chan error, 1), stderrAt: filepath.Join(dir, "proxy.log")}
	var err error
	if p.stderr, err = os.Create(p.stderrAt); err != nil {
		return nil, fmt.Errorf("proxy log: %w", err)
	}
	args := []string{"proxy", "--policy", policyFile, "--data-dir", p.dataDir, "--listen", "127.0.0.1:0", "--dev-allow-loopback"}
	if withPprof {
		args = append(args, "--pprof-listen", "127.0.0.1:0")
	}
	args = append(args, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = p.stderr
	// Its own process group: a ^C in the terminal reaches only us, and we
	// stop the proxy ourselves (SIGTERM: it writes out its decision log).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		p.stderr.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		p.stderr.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	// The proxy prints where it listens, then its policy, CA, decision
	// log and (with --pprof-listen) profile lines.
	type started struct {
		addr, pprof, transparent string
		decisions                bool
	}
	wantTransparent := slices.Contains(extra, "--transparent-listen")
	ready := make(chan started, 1)
	go func() {
		var s started
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if a, ok := strings.CutPrefix(line, "Portcullis proxy listening on "); ok {
				s.addr = a
			}
			if u, ok := strings.CutPrefix(line, "pprof:"); ok {
				s.pprof = strings.TrimSpace(u)
			}
			if a, ok := strings.CutPrefix(line, "transparent:"); ok {
				s.transparent = strings.Fields(a)[0]
			}
			s.decisions = s.decisions || strings.HasPrefix(line, "decisions:")
			if s.decisions && (s.pprof != "" || !withPprof) && (s.transparent != "" || !wantTransparent) {
				ready <- s
				break
			}
		}
		io.Copy(io.Discard, stdout)
		p.exit <- p.cmd.Wait()
	}()
	select {
	case s := <-ready:
		p.url = &url.URL{Scheme: "http", Host: s.addr}
		p.pprof, p.transparent = s.pprof, s.transparent
		return p, nil
	case err := <-p.exit:
		p.exit <- err
		p.stderr.Close()
		return nil, fmt.Errorf("portcullis proxy exited before listening: %v\n%s", err, p.log())
	case <-time.After(30 * time.Second):
		p.stop()
		return nil, fmt.Errorf("portcullis proxy did not start listening in 30s\n%s", p.log())
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
}

// log is what the proxy wrote to stderr (its log), for error messages.
func (p *portcullisProc) log() string {
	b, _ := os.ReadFile(p.stderrAt)
	if len(b) > 4096 {
		b = append([]byte("…"), b[len(b)-4096:]...)
	}
	return string(b)
}

func (p *portcullisProc) pid() int { return p.cmd.Process.Pid }

// stop ends the proxy (SIGTERM, then SIGKILL after 10s) and waits for it.
func (p *portcullisProc) stop() {
	syscall.Kill(p.pid(), syscall.SIGTERM)
	select {
	case err := <-p.exit:
		p.exit <- err
	case <-time.After(10 * time.Second):
		syscall.Kill(-p.pid(), syscall.SIGKILL)
		p.exit <- <-p.exit
	}
	p.stderr.Close()
}

// decisionRecords counts the lines of the proxy's decision log (after
// stop, so that it has written every record out): decisions.jsonl and
// the files it was rotated into (decisions.jsonl.1, .2, …; a default run
// writes more than the 100 MiB at which the log rotates).
func (p *portcullisProc) decisionRecords() (int, error) {
	rotated, err := filepath.Glob(filepath.Join(p.dataDir, "decisions.jsonl.*"))
	if err != nil {
		return 0, err
	}
	total := 0
	buf := make([]byte, 256<<10)
	for _, name := range append(rotated, filepath.Join(p.dataDir, "decisions.jsonl")) {
		n, err := countLines(name, buf)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// countLines counts the newlines in the file name, reading it through buf.
func countLines(name string, buf []byte) (int, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		k, err := f.Read(buf)
		n += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
