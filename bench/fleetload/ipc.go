package main

import (
	"fmt"

	"github.com/portcullis-dev/portcullis/bench/internal/childproc"
)

// proxiesProc is the parent's handle on the child process that runs the
// simulated proxies (bench/internal/childproc: one JSON object a line;
// the sandbox tokens travel in the requests, never on a command line).
// Times cross as Unix nanoseconds; both processes run on one machine, so
// the clocks are one clock.
type proxiesProc struct{ *childproc.Proc }

func startProxiesProc() (*proxiesProc, error) {
	p, err := childproc.Start("the proxies process", []string{"-proxies-child"}, nil)
	if err != nil {
		return nil, err
	}
	return &proxiesProc{p}, nil
}

// call sends req and reads its response.
func (p *proxiesProc) call(req childRequest) (*childResponse, error) {
	var res childResponse
	if err := p.Call(req.Op, req, &res); err != nil {
		return nil, err
	}
	if res.Err != "" {
		return &res, fmt.Errorf("proxies process (%s): %s", req.Op, res.Err)
	}
	return &res, nil
}

// close ends the child: stdin closed, killed after 10 s.
func (p *proxiesProc) close() { p.Close() }

func (p *proxiesProc) pid() int { return p.Pid() }
