package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildBinary builds ./cmd/portcullis (the shipped binary) into dir.
func buildBinary(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "portcullis")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/portcullis")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/portcullis (run from the repository's root): %w", err)
	}
	return bin, nil
}

// freePort returns a loopback address no one listens on now. Each
// replica keeps its address across restarts, as a replica behind a fixed
// name would, so the proxies that left it can come back to it.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// replica is one `portcullis gateway` process and what restarts it:
// the same binary, address, database and environment each time.
type replica struct {
	index int
	pids  *pidSet // every run's process id, for the CPU figures
	bin   string
	addr  string // host:port, fixed
	env   []string
	dir   string // its --data-dir (unused on Postgres, but given)

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan error
	starts int
	// logTail keeps the warnings and errors of every run, for when
	// something fails, and counts them.
	logTail  []string
	warnings int
	byMsg    map[string]int // warnings and errors by level and message
}

// start runs the replica and returns once it prints the end of its
// banner (it then serves).
func (r *replica) start(ctx context.Context) error {
	cmd := exec.Command(r.bin, "gateway", "--listen", r.addr, "--data-dir", r.dir)
	cmd.Env = r.env
	// The replicas must not outlive this process, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start replica %d: %w", r.index, err)
	}
	done := make(chan error, 1)
	banner := make(chan struct{}, 1)
	var readers sync.WaitGroup
	readers.Go(func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "  console: ") { // the banner's last line
				banner <- struct{}{}
			}
		}
		io.Copy(io.Discard, stdout)
	})
	readers.Go(func() { r.readLog(stderr) })
	go func() {
		readers.Wait()
		done <- cmd.Wait()
	}()
	r.pids.add(cmd.Process.Pid)
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.starts++
	r.mu.Unlock()
	select {
	case <-banner:
		return nil
	case err := <-done:
		done <- err
		return fmt.Errorf("replica %d exited before serving: %v\n%s", r.index, err, r.tail(20))
	case <-time.After(60 * time.Second):
		return fmt.Errorf("replica %d did not print its banner within 60s\n%s", r.index, r.tail(20))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readLog keeps the gateway's warnings and errors (JSON lines on stderr);
// the info lines (one per connecting proxy, and the like) are dropped.
func (r *replica) readLog(rd io.Reader) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"level":"INFO"`) || strings.Contains(line, `"level":"DEBUG"`) {
			continue
		}
		var entry struct{ Level, Msg string }
		json.Unmarshal([]byte(line), &entry)
		r.mu.Lock()
		if r.byMsg == nil {
			r.byMsg = map[string]int{}
		}
		r.byMsg[entry.Level+" "+entry.Msg]++
		r.warnings++
		r.logTail = append(r.logTail, line)
		if len(r.logTail) > 200 {
			r.logTail = r.logTail[len(r.logTail)-100:]
		}
		r.mu.Unlock()
	}
	io.Copy(io.Discard, rd)
}

func (r *replica) tail(n int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.logTail[max(0, len(r.logTail)-n):], "\n")
}

// kill ends the replica with SIGKILL and waits until it is gone.
func (r *replica) kill() {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGKILL)
	err := <-done
	done <- err
}

// stop ends the replica with SIGTERM (it tells its proxies to go away and
// drains), SIGKILL after 20 s.
func (r *replica) stop() error {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case err := <-done: // already gone
		done <- err
		return nil
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		done <- err
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 0) {
			return fmt.Errorf("replica %d: %w", r.index, err)
		}
		return nil
	case <-time.After(20 * time.Second):
		r.kill()
		return fmt.Errorf("replica %d did not stop within 20s of SIGTERM", r.index)
	}
}

// messages returns the warnings and errors logged so far, by message.
func (r *replica) messages() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.byMsg)
}
