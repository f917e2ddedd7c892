package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/simproxy"
)

// The child process: N simulated proxies (bench/internal/simproxy), each a
// StreamPolicy stream that ACKs every version as soon as it has read it,
// so the figures are about the delivery. Every stream sends a heartbeat
// every gateway.HeartbeatInterval, spread evenly, as proxies do.

type clients struct {
	addr, sandbox, token string

	conns   []*grpc.ClientConn
	streams []*simproxy.Stream
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the streams' receive loops
	hbStop  chan struct{}
	hbDone  chan struct{}
	closing atomic.Bool
	// streamErr is the first unexpected end of a stream after connecting.
	streamErr atomic.Pointer[string]

	collect atomic.Pointer[collect]

	fleet fleetClients // -rolling

	tcp        []net.Conn
	tcpWG      sync.WaitGroup
	tcpCollect atomic.Pointer[collect]
}

// collect gathers one push's arrival and ACK times, by stream.
type collect struct {
	version   uint32
	arrivals  []int64
	acks      []int64
	remaining atomic.Int64
	done      chan struct{}
	message   []byte // written by stream 0 before it counts down
	// cpu is this process's CPU from arming to the last record.
	cpu0, cpu time.Duration
}

func newCollect(version uint32, n int) *collect {
	c := &collect{version: version, arrivals: make([]int64, n), acks: make([]int64, n), done: make(chan struct{}), cpu0: benchenv.SelfCPU()}
	c.remaining.Store(int64(n))
	if n == 0 {
		close(c.done)
	}
	return c
}

func (c *collect) record(i int, arrived, acked time.Time) {
	if c.arrivals[i] != 0 {
		return
	}
	c.arrivals[i], c.acks[i] = arrived.UnixNano(), acked.UnixNano()
	if c.remaining.Add(-1) == 0 {
		c.cpu = benchenv.SelfCPU() - c.cpu0
		close(c.done)
	}
}

// runClients serves the parent's requests until it says quit or closes
// stdin.
func runClients(addr, sandbox, token string, in io.Reader, out io.Writer) error {
	if addr == "" || sandbox == "" || token == "" {
		return errors.New("-clients needs -gateway, -sandbox and the token in " + tokenEnv)
	}
	c := &clients{addr: addr, sandbox: sandbox, token: token}
	c.fleet.sandbox, c.fleet.token = sandbox, token
	dec := bufio.NewScanner(in)
	dec.Buffer(make([]byte, 1<<20), 1<<20)
	enc := json.NewEncoder(out)
	for dec.Scan() {
		var req request
		if err := json.Unmarshal(dec.Bytes(), &req); err != nil {
			return err
		}
		res, err := c.serve(req)
		if res == nil {
			res = &response{}
		}
		if err != nil {
			res.Err = err.Error()
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
		if req.Op == opQuit {
			break
		}
	}
	c.closeStreams()
	c.closeTCP()
	c.fleet.close()
	return dec.Err()
}

func (c *clients) serve(req request) (*response, error) {
	switch req.Op {
	case opConnect:
		v, err := c.connect(req.N, req.Share, req.Concurrency, req.Timeout)
		return &response{Version: v}, err
	case opArm:
		if req.TCP {
			c.tcpCollect.Store(newCollect(0, len(c.tcp)))
		} else {
			c.collect.Store(newCollect(req.Version, len(c.streams)))
		}
		return nil, nil
	case opWait:
		return c.wait(req.TCP, req.Timeout)
	case opClose:
		c.closeStreams()
		return nil, nil
	case opMem:
		m := sampleMem()
		return &response{Mem: &m}, nil
	case opTCPConnect:
		return nil, c.tcpConnect(req.Addr, req.N, req.Size, req.Concurrency)
	case opTCPClose:
		c.closeTCP()
		return nil, nil
	case opFleetConnect:
		v, err := c.fleet.connect(req.Addrs, req.N, req.Share, req.Timeout)
		return &response{Version: v}, err
	case opFleetState:
		st := c.fleet.state(req.AtLeast)
		return &response{Fleet: &st}, nil
	case opFleetReport:
		d, missed := c.fleet.report(req.Commits)
		return &response{Push: &d, Missed: missed}, nil
	case opFleetClose:
		c.fleet.close()
		return nil, nil
	case opQuit:
		return nil, nil
	}
	return nil, fmt.Errorf("unknown op %q", req.Op)
}

type ready struct {
	version uint32
	err     error
}

// connect opens n streams, share to a connection, at most concurrency
// at a time, and returns once every stream has ACKed its first version.
func (c *clients) connect(n, share, concurrency int, timeout time.Duration) (uint32, error) {
	if len(c.streams) > 0 {
		return 0, errors.New("streams already open")
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.closing.Store(false)
	c.streamErr.Store(nil)
	nconns := (n + share - 1) / share
	c.conns = make([]*grpc.ClientConn, nconns)
	for i := range c.conns {
		conn, err := simproxy.Dial(c.addr, c.token)
		if err != nil {
			c.closeStreams()
			return 0, err
		}
		c.conns[i] = conn
	}
	streams := make([]*simproxy.Stream, n)
	readyc := make(chan ready, n)
	sem := make(chan struct{}, concurrency)
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		for i := range n {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			c.wg.Add(1)
			go c.runStream(ctx, i, &streams[i], c.conns[i/share], func() { <-sem }, readyc)
		}
	}()
	fail := func(err error) (uint32, error) {
		cancel()
		<-dispatched
		c.closeStreams()
		return 0, err
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var version uint32
	for got := 0; got < n; got++ {
		select {
		case r := <-readyc:
			if r.err != nil {
				return fail(fmt.Errorf("after %d of %d streams: %w", got, n, r.err))
			}
			if version == 0 {
				version = r.version
			} else if r.version != version {
				return fail(fmt.Errorf("streams got first versions %d and %d", version, r.version))
			}
		case <-deadline.C:
			return fail(fmt.Errorf("only %d of %d streams got a first version within %s", got, n, timeout))
		}
	}
	<-dispatched
	c.streams = streams
	c.hbStop, c.hbDone = make(chan struct{}), make(chan struct{})
	go simproxy.Heartbeats(c.streams, c.hbStop, c.hbDone)
	return version, nil
}

// runStream runs simulated proxy p<i>: it opens the stream into *slot,
// reports its first version on readyc and records the armed version.
func (c *clients) runStream(ctx context.Context, i int, slot **simproxy.Stream, conn *grpc.ClientConn, release func(), readyc chan<- ready) {
	defer c.wg.Done()
	first := true
	fail := func(err error) {
		if first {
			release()
			readyc <- ready{err: fmt.Errorf("stream p%d: %w", i, err)}
			return
		}
		if !c.closing.Load() {
			msg := fmt.Sprintf("stream p%d: %v", i, err)
			c.streamErr.CompareAndSwap(nil, &msg)
		}
	}
	s, err := simproxy.Open(ctx, conn, c.sandbox, fmt.Sprintf("p%d", i), "pushload")
	if err != nil {
		fail(err)
		return
	}
	*slot = s
	for {
		res, arrived, acked, err := s.Next()
		if err != nil {
			fail(err)
			return
		}
		version := res.GetPolicy().GetVersion()
		if first {
			first = false
			release()
			readyc <- ready{version: version}
			continue
		}
		if col := c.collect.Load(); col != nil && version == col.version {
			if i == 0 {
				col.message, _ = proto.Marshal(res)
			}
			col.record(i, arrived, acked)
		}
	}
}

// wait returns the armed push's times once every stream (or TCP
// connection) has recorded them.
func (c *clients) wait(tcp bool, timeout time.Duration) (*response, error) {
	p := &c.collect
	if tcp {
		p = &c.tcpCollect
	}
	col := p.Load()
	if col == nil {
		return nil, errors.New("nothing armed")
	}
	defer p.Store(nil)
	select {
	case <-col.done:
	case <-time.After(timeout):
		msg := ""
		if e := c.streamErr.Load(); e != nil {
			msg = "; first stream failure: " + *e
		}
		return nil, fmt.Errorf("%d of %d did not receive within %s%s", col.remaining.Load(), len(col.arrivals), timeout, msg)
	}
	return &response{Arrivals: col.arrivals, Acks: col.acks, Message: col.message, CPU: col.cpu}, nil
}

// closeStreams ends every stream and connection and waits for the
// receive loops.
func (c *clients) closeStreams() {
	c.closing.Store(true)
	if c.hbStop != nil {
		close(c.hbStop)
		<-c.hbDone
		c.hbStop, c.hbDone = nil, nil
	}
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	for _, conn := range c.conns {
		if conn != nil {
			conn.Close()
		}
	}
	c.wg.Wait()
	c.conns, c.streams = nil, nil
	c.collect.Store(nil)
}

// tcpConnect dials n connections to addr; each reads size bytes at a
// time and answers each message with one byte.
func (c *clients) tcpConnect(addr string, n, size, concurrency int) error {
	if len(c.tcp) > 0 {
		return errors.New("TCP connections already open")
	}
	c.tcp = make([]net.Conn, n)
	errc := make(chan error, n)
	sem := make(chan struct{}, concurrency)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				errc <- err
				return
			}
			c.tcp[i] = conn
			errc <- nil
		}()
	}
	var first error
	for range n {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		c.closeTCP()
		return first
	}
	for i, conn := range c.tcp {
		c.tcpWG.Add(1)
		go func() {
			defer c.tcpWG.Done()
			buf := make([]byte, size)
			one := []byte{1}
			for {
				if _, err := io.ReadFull(conn, buf); err != nil {
					return
				}
				arrived := time.Now()
				col := c.tcpCollect.Load()
				if _, err := conn.Write(one); err != nil {
					return
				}
				if col != nil {
					col.record(i, arrived, time.Now())
				}
			}
		}()
	}
	return nil
}

func (c *clients) closeTCP() {
	for _, conn := range c.tcp {
		if conn != nil {
			conn.Close()
		}
	}
	c.tcpWG.Wait()
	c.tcp = nil
	c.tcpCollect.Store(nil)
}
