package main

import (
	"fmt"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/childproc"
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

// child is the parent's handle on the clients process
// (bench/internal/childproc; the sandbox token travels in the
// environment).
type child struct{ *childproc.Proc }

func startChild(gatewayAddr, sandbox, token string) (*child, error) {
	p, err := childproc.Start("the clients process", []string{"-clients", "-gateway", gatewayAddr, "-sandbox", sandbox}, []string{tokenEnv + "=" + token})
	if err != nil {
		return nil, err
	}
	return &child{p}, nil
}

// call sends req and reads its response.
func (c *child) call(req request) (*response, error) {
	var res response
	if err := c.Call(req.Op, req, &res); err != nil {
		return nil, err
	}
	if res.Err != "" {
		return &res, fmt.Errorf("clients process (%s): %s", req.Op, res.Err)
	}
	return &res, nil
}

// stop asks the child to quit and waits; after 10 s it is killed.
func (c *child) stop() {
	c.call(request{Op: opQuit}) // best effort
	c.Close()
}

// pid is the child's process id.
func (c *child) pid() int { return c.Pid() }
