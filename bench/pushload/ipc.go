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

// The parent drives the child over the child's stdin and stdout, one JSON
// object a line: a request, then its response. Times cross as Unix
// nanoseconds of each process's wall clock; both run on one machine, so
// the clocks are the same clock.

// tokenEnv carries the sandbox token to the child.
const tokenEnv = "PUSHLOAD_SANDBOX_TOKEN"

// Operations the child serves.
const (
	opConnect    = "connect"     // open N streams, S per connection; wait until each ACKed its first version
	opArm        = "arm"         // record arrivals of Version (gRPC) or of the next message (TCP)
	opWait       = "wait"        // wait until every stream or connection got what was armed; return the times
	opClose      = "close"       // end every stream and connection
	opMem        = "mem"         // garbage-collect and report the child's memory
	opTCPConnect = "tcp-connect" // dial N plain TCP connections to Addr; each reads Size bytes and answers 1
	opTCPClose   = "tcp-close"
	opQuit       = "quit"
	// -rolling: proxies that follow a fleet of replicas (fleetclients.go).
	opFleetConnect = "fleet-connect" // open N proxies over Addrs; wait until each has a first version
	opFleetState   = "fleet-state"   // summarise them (AtLeast: how many hold at least that version)
	opFleetReport  = "fleet-report"  // commit-to-arrival times over Commits
	opFleetClose   = "fleet-close"
)

type request struct {
	Op          string        `json:"op"`
	N           int           `json:"n,omitempty"`
	Share       int           `json:"share,omitempty"`
	Concurrency int           `json:"concurrency,omitempty"`
	Version     uint32        `json:"version,omitempty"`
	TCP         bool          `json:"tcp,omitempty"` // arm/wait: the TCP connections, not the streams
	Addr        string        `json:"addr,omitempty"`
	Size        int           `json:"size,omitempty"`
	Timeout     time.Duration `json:"timeout,omitempty"`
	Addrs       []string      `json:"addrs,omitempty"`
	AtLeast     uint32        `json:"at_least,omitempty"`
	Commits     []commitAt    `json:"commits,omitempty"`
}

type response struct {
	Err string `json:"err,omitempty"`
	// connect: the version every stream ACKed first.
	Version uint32 `json:"version,omitempty"`
	// wait: per stream or connection, when the message arrived (fully
	// read) and when its ACK (or reply byte) was handed to the transport.
	Arrivals []int64 `json:"arrivals,omitempty"`
	Acks     []int64 `json:"acks,omitempty"`
	// wait (gRPC): the pushed StreamPolicyResponse as received, marshalled
	// again: what the TCP floor writes.
	Message []byte `json:"message,omitempty"`
	// wait: the clients process's CPU from arm to the last arrival.
	CPU time.Duration `json:"cpu,omitempty"`
	// mem
	Mem *memSample `json:"mem,omitempty"`
	// fleet-state, fleet-report
	Fleet  *fleetState `json:"fleet,omitempty"`
	Push   *dist       `json:"push,omitempty"`
	Missed int         `json:"missed,omitempty"`
}

// child is the parent's handle on the clients process.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader

	mu   sync.Mutex
	done chan struct{}
	err  error
}

func startChild(gatewayAddr, sandbox, token string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-clients", "-gateway", gatewayAddr, "-sandbox", sandbox)
	cmd.Env = append(os.Environ(), tokenEnv+"="+token)
	cmd.Stderr = os.Stderr
	// The clients must not outlive this process, however it ends.
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
		return nil, fmt.Errorf("start the clients process: %w", err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20), done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// call sends req and reads its response.
func (c *child) call(req request) (*response, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("clients process (%s): %w", req.Op, err)
	}
	line, err := c.out.ReadBytes('\n')
	if err != nil {
		return nil, fmt.Errorf("clients process (%s): %w", req.Op, err)
	}
	var res response
	if err := json.Unmarshal(line, &res); err != nil {
		return nil, fmt.Errorf("clients process (%s): %w", req.Op, err)
	}
	if res.Err != "" {
		return &res, fmt.Errorf("clients process (%s): %s", req.Op, res.Err)
	}
	return &res, nil
}

// stop asks the child to quit and waits; after 10 s it is killed.
func (c *child) stop() {
	c.call(request{Op: opQuit}) // best effort
	c.in.Close()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// pid is the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }
