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
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/gateway"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// The child process: N simulated proxies, each a StreamPolicy stream over
// stock grpc-go dialled the way gatewayclient.Subscriber dials (keepalive 30 s,
// bearer token per RPC). A simulated proxy ACKs every version as soon as
// it has read it: it neither verifies the signature nor compiles the
// policy, so the figures are about the delivery, not about the proxies'
// work (which real proxies do on their own machines). Every stream sends a
// heartbeat every gateway.HeartbeatInterval, spread evenly, as proxies do.

type clients struct {
	addr, sandbox, token string

	conns   []*grpc.ClientConn
	streams []*simStream
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the streams' receive loops
	hbStop  chan struct{}
	hbDone  chan struct{}
	closing atomic.Bool
	// streamErr is the first unexpected end of a stream after connecting.
	streamErr atomic.Pointer[string]

	collect atomic.Pointer[collect]

	tcp        []net.Conn
	tcpWG      sync.WaitGroup
	tcpCollect atomic.Pointer[collect]
}

// simStream is one simulated proxy's stream.
type simStream struct {
	mu sync.Mutex // grpc-go streams allow one sender at a time
	st portcullisv1.DistributionService_StreamPolicyClient
}

func (s *simStream) send(m *portcullisv1.StreamPolicyRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Send(m)
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

// bearer sends the sandbox token with every RPC, as the proxy's does.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// runClients serves the parent's requests until it says quit or closes
// stdin.
func runClients(addr, sandbox, token string, in io.Reader, out io.Writer) error {
	if addr == "" || sandbox == "" || token == "" {
		return errors.New("-clients needs -gateway, -sandbox and the token in " + tokenEnv)
	}
	c := &clients{addr: addr, sandbox: sandbox, token: token}
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
		conn, err := grpc.NewClient("passthrough:///"+c.addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithPerRPCCredentials(bearer(c.token)),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		)
		if err != nil {
			c.closeStreams()
			return 0, err
		}
		c.conns[i] = conn
	}
	streams := make([]*simStream, n)
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
			s := &simStream{}
			streams[i] = s
			c.wg.Add(1)
			go c.runStream(ctx, i, s, c.conns[i/share], func() { <-sem }, readyc)
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
	go c.heartbeats(c.streams, c.hbStop, c.hbDone)
	return version, nil
}

func (c *clients) runStream(ctx context.Context, i int, s *simStream, conn *grpc.ClientConn, release func(), readyc chan<- ready) {
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
	st, err := portcullisv1.NewDistributionServiceClient(conn).StreamPolicy(ctx)
	if err != nil {
		fail(err)
		return
	}
	s.st = st
	hello := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{Hello: &portcullisv1.ProxyHello{
		Sandbox: c.sandbox, ProxyId: fmt.Sprintf("p%d", i), Build: "pushload"}}}
	if err := s.send(hello); err != nil {
		fail(err)
		return
	}
	for {
		res, err := st.Recv()
		if err != nil {
			fail(err)
			return
		}
		sp := res.GetPolicy()
		if sp == nil {
			continue // a heartbeat's answer
		}
		arrived := time.Now()
		col := c.collect.Load()
		err = s.send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Ack{Ack: &portcullisv1.PolicyAck{
			Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash()}}})
		acked := time.Now()
		if err != nil {
			fail(err)
			return
		}
		if first {
			first = false
			release()
			readyc <- ready{version: sp.GetVersion()}
			continue
		}
		if col != nil && sp.GetVersion() == col.version {
			if i == 0 {
				col.message, _ = proto.Marshal(res)
			}
			col.record(i, arrived, acked)
		}
	}
}

// heartbeats sends each stream a heartbeat every HeartbeatInterval,
// spread evenly over the interval.
func (c *clients) heartbeats(streams []*simStream, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	perTick := float64(len(streams)) * float64(tick) / float64(gateway.HeartbeatInterval)
	owed, next := 0.0, 0
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for owed += perTick; owed >= 1; owed-- {
			hb := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Heartbeat{Heartbeat: &portcullisv1.Heartbeat{SentAt: timestamppb.Now()}}}
			streams[next].send(hb) // a failed stream reports itself through Recv
			next = (next + 1) % len(streams)
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
