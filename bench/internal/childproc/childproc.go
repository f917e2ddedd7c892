// Package childproc runs a benchmark's helper process — the benchmark's
// own executable started again with other arguments, such as the
// simulated proxies that must not share the measuring process's cores —
// and speaks to it with one JSON object a line: a request on the child's
// stdin, its response on its stdout. Secrets go in the environment or the
// requests, never on a command line. The child dies with this process
// (SIGKILL on the parent's death), however that ends.
package childproc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Proc is the parent's handle on one child. Calls are one at a time.
type Proc struct {
	name string // for errors: "the clients process"
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader

	mu   sync.Mutex
	done chan struct{}
}

// Start runs this executable with args (env added to this process's
// environment); name says what the child is in errors.
func Start(name string, args, env []string) (*Proc, error) { return StartUnder(name, nil, args, env) }

// StartUnder is Start with the executable run by a wrapper command
// (wrapper[0] with wrapper[1:], then the executable and args), such as
// `portcullis run --proxy ADDR --`, which passes stdin and stdout through.
func StartUnder(name string, wrapper, args, env []string) (*Proc, error) {
	exe, err := Executable()
	if err != nil {
		return nil, err
	}
	argv := append(append(slices.Clone(wrapper), exe), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{name: name, cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20), done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Executable is the file a child runs: this program's executable, its
// symbolic links resolved (the path a policy names as the calling
// binary).
func Executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("this program's executable: %w", err)
	}
	return filepath.EvalSymlinks(exe)
}

// Call sends req and reads the child's answer into res; op names the call
// in errors. The answer's own error field is the caller's to read.
func (p *Proc) Call(op string, req, res any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s (%s): %w", p.name, op, err)
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("%s (%s): %w", p.name, op, err)
	}
	if err := json.Unmarshal(line, res); err != nil {
		return fmt.Errorf("%s (%s): %w", p.name, op, err)
	}
	return nil
}

// Close closes the child's stdin (its signal to end) and waits for it;
// after 10 s it is killed.
func (p *Proc) Close() {
	p.in.Close()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }
