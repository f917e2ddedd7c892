package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proxiesProc is the parent's handle on the child process that runs the
// simulated proxies. Requests and responses are one JSON object a line
// on the child's stdin and stdout (the sandbox tokens too: never on a
// command line). Times cross as Unix nanoseconds; both processes run on
// one machine, so the clocks are one clock.
type proxiesProc struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	mu   sync.Mutex
	done chan struct{}
}

func startProxiesProc() (*proxiesProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-proxies-child")
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
		return nil, fmt.Errorf("start the proxies process: %w", err)
	}
	p := &proxiesProc{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20), done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// call sends req and reads its response.
func (p *proxiesProc) call(req childRequest) (*childResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("proxies process (%s): %w", req.Op, err)
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("proxies process (%s): %w", req.Op, err)
	}
	var res childResponse
	if err := json.Unmarshal(line, &res); err != nil {
		return nil, fmt.Errorf("proxies process (%s): %w", req.Op, err)
	}
	if res.Err != "" {
		return &res, fmt.Errorf("proxies process (%s): %s", req.Op, res.Err)
	}
	return &res, nil
}

// close ends the child: stdin closed, killed after 10 s.
func (p *proxiesProc) close() {
	p.in.Close()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proxiesProc) pid() int { return p.cmd.Process.Pid }
