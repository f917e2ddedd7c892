package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/childproc"
)

// The load generator is this program again, run with -load-child, in a
// process of its own: the clients' CPU is then neither the upstream's nor
// the proxy's, and the proxy sees them as another binary (the one its
// policy names). The program drives it over the child's stdin and stdout,
// one JSON object a line: a request, then its response.

// Operations the load generator serves.
const (
	opSetup = "setup" // make one keep-alive client per target
	opCall  = "call"  // one request on a target; answer its status and body
	opLoad  = "load"  // one round of load on a target
	opQuit  = "quit"
)

type loadRequest struct {
	Op string `json:"op"`
	// setup
	Upstream       string       `json:"upstream,omitempty"` // "fixed" or "sdk": what a valid answer is
	Targets        []targetSpec `json:"targets,omitempty"`
	MaxConcurrency int          `json:"max_concurrency,omitempty"`
	// call and load
	Path string `json:"path,omitempty"`
	// call: a tools/call of Tool with Args, or tools/list when Tool is "".
	Tool string `json:"tool,omitempty"`
	Args string `json:"args,omitempty"`
	ID   int64  `json:"id,omitempty"`
	// load
	Concurrency int           `json:"concurrency,omitempty"`
	Duration    time.Duration `json:"duration,omitempty"`
	PerWorker   int           `json:"per_worker,omitempty"`
}

// targetSpec is one path as the load generator reaches it.
type targetSpec struct {
	Name  string `json:"name"`
	URL   string `json:"url"`
	Proxy string `json:"proxy,omitempty"` // a forward proxy's URL (absolute-form requests)
}

type loadResponse struct {
	Err    string       `json:"err,omitempty"`
	Status int          `json:"status,omitempty"`
	Body   []byte       `json:"body,omitempty"`
	Round  *roundResult `json:"round,omitempty"`
}

// loadProc is the program's handle on the load generator
// (bench/internal/childproc).
type loadProc struct{ *childproc.Proc }

// startLoadProc starts the load generator and sets up its clients.
func startLoadProc(upstream string, targets []targetSpec, maxConcurrency int) (*loadProc, error) {
	return startLoadProcUnder(nil, upstream, targets, maxConcurrency)
}

// startLoadProcUnder is startLoadProc with the load generator run by a
// wrapper command (childproc.StartUnder).
func startLoadProcUnder(wrapper []string, upstream string, targets []targetSpec, maxConcurrency int) (*loadProc, error) {
	p, err := childproc.StartUnder("the load generator", wrapper, []string{"-load-child"}, nil)
	if err != nil {
		return nil, err
	}
	l := &loadProc{p}
	if _, err := l.do(loadRequest{Op: opSetup, Upstream: upstream, Targets: targets, MaxConcurrency: maxConcurrency}); err != nil {
		l.stop()
		return nil, err
	}
	return l, nil
}

// loadBinary is the executable the load generator runs: this program's,
// which the bench policy names as the calling binary.
func loadBinary() (string, error) { return childproc.Executable() }

// do sends one request and reads its response.
func (l *loadProc) do(req loadRequest) (*loadResponse, error) {
	var res loadResponse
	if err := l.Call(req.Op, req, &res); err != nil {
		return nil, err
	}
	if res.Err != "" {
		return nil, fmt.Errorf("load generator (%s): %s", req.Op, res.Err)
	}
	return &res, nil
}

// call sends one tools/call (tools/list when tool is "") on path.
func (l *loadProc) call(path, tool, args string, id int64) (int, []byte, error) {
	res, err := l.do(loadRequest{Op: opCall, Path: path, Tool: tool, Args: args, ID: id})
	if err != nil {
		return 0, nil, err
	}
	return res.Status, res.Body, nil
}

// load runs one round on path.
func (l *loadProc) load(path string, concurrency int, d time.Duration, perWorker int) (roundResult, error) {
	res, err := l.do(loadRequest{Op: opLoad, Path: path, Concurrency: concurrency, Duration: d, PerWorker: perWorker})
	if err != nil {
		return roundResult{}, err
	}
	if res.Round == nil {
		return roundResult{}, errors.New("load generator: no round in its answer")
	}
	return *res.Round, nil
}

// stop ends the load generator (its stdin closed) and waits, killing it
// after 10 s.
func (l *loadProc) stop() { l.Close() }

// loadChild is the load generator: it serves the program's requests on
// in and out until told to quit or in ends.
func loadChild(ctx context.Context, in io.Reader, out io.Writer) error {
	dec := json.NewDecoder(in)
	enc := json.NewEncoder(out)
	targets := map[string]*target{}
	valid := func([]byte) bool { return false }
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	for {
		var req loadRequest
		if err := dec.Decode(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var res loadResponse
		switch req.Op {
		case opSetup:
			valid = validAnswer(req.Upstream)
			for _, ts := range req.Targets {
				var proxy *url.URL
				if ts.Proxy != "" {
					var err error
					if proxy, err = url.Parse(ts.Proxy); err != nil {
						return err
					}
				}
				targets[ts.Name] = newTarget(ts.Name, ts.URL, proxy, req.MaxConcurrency)
			}
		case opCall:
			t := targets[req.Path]
			if t == nil {
				res.Err = "no path " + req.Path
				break
			}
			var body []byte
			if req.Tool == "" {
				body = appendList(nil, req.ID)
			} else {
				body = appendCall(nil, req.ID, req.Tool, req.Args)
			}
			var buf bytes.Buffer
			status, err := t.call(ctx, body, &buf)
			if err != nil {
				res.Err = err.Error()
			}
			res.Status, res.Body = status, buf.Bytes()
		case opLoad:
			t := targets[req.Path]
			if t == nil {
				res.Err = "no path " + req.Path
				break
			}
			r := load(ctx, t, req.Concurrency, req.Duration, req.PerWorker, valid)
			res.Round = &r
		case opQuit:
			return nil
		default:
			res.Err = "unknown op " + req.Op
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
}
