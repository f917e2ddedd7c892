package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// The child process: the simulated proxies. Each holds one real
// DistributionService/StreamPolicy stream (stock grpc-go, dialled as
// dataplane/gatewayclient dials: keepalive 30 s, the sandbox token on
// every RPC, reconnect backoff 100 ms … 30 s), says hello with the version
// it holds, ACKs a version as soon as it has read it, and NACKs — never
// applies — one older than it holds (what dataplane/gatewayclient does).
// When its stream breaks it waits a random time up to its backoff (full
// jitter, doubling from 100 ms to 30 s, back to 100 ms after a stream that
// lasted longer than that or a goaway) and reconnects to another replica.
// Like pushload's, it neither verifies signatures nor compiles policies:
// the figures are about delivery.

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Messages between the parent and the child, one JSON object a line.
type childRequest struct {
	Op        string         `json:"op"` // start, await, stop
	Addrs     []string       `json:"addrs,omitempty"`
	Sandboxes []sandboxCreds `json:"sandboxes,omitempty"`
	Proxies   int            `json:"proxies,omitempty"`
	// await: every proxy connected and holding at least its sandbox's
	// target version.
	Targets map[string]uint32 `json:"targets,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"`
}

type sandboxCreds struct {
	Name  string `json:"name"`
	Token string `json:"token"`
}

type childResponse struct {
	Err string `json:"err,omitempty"`
	// await: how long until every proxy was there, and which were not.
	Took    time.Duration `json:"took,omitempty"`
	Missing []string      `json:"missing,omitempty"`
	// stop: every proxy's timeline.
	Proxies []proxyLog `json:"proxies,omitempty"`
}

// proxyLog is one simulated proxy's timeline.
type proxyLog struct {
	ID       string  `json:"id"`
	Sandbox  string  `json:"sandbox"`
	Attempts int     `json:"attempts"` // streams opened that failed before their first version
	Events   []event `json:"events"`
}

// event kinds.
const (
	evUp     = "u" // a stream's first version read and answered: the proxy is connected (V: the version it holds)
	evApply  = "a" // a later version ACKed on a connected stream
	evDown   = "d" // a connected stream ended
	evOlder  = "o" // offered a version older than the one held: NACKed, a regression refused
	evForked = "f" // offered the held version number with another hash: NACKed
)

type event struct {
	K string `json:"k"`
	T int64  `json:"t"`           // Unix ns: when it was ACKed (u, a), or happened
	R int    `json:"r"`           // the replica
	V uint32 `json:"v,omitempty"` // the version
	// a: when the version was committed (SignedPolicy.committed_at) and
	// whether the stream was connected before then (its ACK measures the
	// push; one connected later got it as its first version).
	C    int64  `json:"c,omitempty"`
	Live bool   `json:"l,omitempty"`
	Held uint32 `json:"h,omitempty"` // o: the version held
	Err  string `json:"e,omitempty"` // d: the stream's end, as a gRPC code
}

// simProxy is one simulated proxy. Only its own goroutine writes its
// timeline; held and connected are read by await.
type simProxy struct {
	index    int
	id       string
	sandbox  int
	held     atomic.Uint32
	heldHash string
	up       atomic.Bool
	attempts int
	events   []event
}

type childState struct {
	addrs   []string
	names   []string
	conns   [][]*grpc.ClientConn // [sandbox][replica]
	proxies []*simProxy
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// runChild serves the parent's requests until it says stop.
func runChild(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 16<<20), 16<<20)
	enc := json.NewEncoder(out)
	var c *childState
	for sc.Scan() {
		var req childRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return err
		}
		res := &childResponse{}
		var err error
		switch req.Op {
		case "start":
			c, err = startProxies(req)
		case "await":
			if c == nil {
				err = errors.New("not started")
				break
			}
			res.Took, res.Missing, err = c.await(req.Targets, req.Timeout)
		case "stop":
			if c != nil {
				res.Proxies = c.stop()
			}
		default:
			err = fmt.Errorf("unknown op %q", req.Op)
		}
		if err != nil {
			res.Err = err.Error()
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
		if req.Op == "stop" {
			return nil
		}
	}
	if c != nil {
		c.stop()
	}
	return sc.Err()
}

// bearer sends the sandbox token with every RPC, as the proxy's does.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// dialProxy dials addr as dataplane/gatewayclient does.
func dialProxy(addr, token string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(token)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: minBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxBackoff},
			MinConnectTimeout: 10 * time.Second,
		}),
	)
}

// startProxies dials every sandbox's connection to every replica (the
// proxies of one sandbox share them, as HTTP/2 lets them), starts the
// proxies — proxy i of sandbox i mod S on replica i mod R, each after a
// random wait under a second — and returns once every one is connected
// (within req.Timeout).
func startProxies(req childRequest) (*childState, error) {
	if len(req.Addrs) == 0 || len(req.Sandboxes) == 0 || req.Proxies < 1 {
		return nil, errors.New("start needs addresses, sandboxes and a proxy count")
	}
	c := &childState{addrs: req.Addrs}
	for _, sb := range req.Sandboxes {
		c.names = append(c.names, sb.Name)
		row := make([]*grpc.ClientConn, len(req.Addrs))
		for r, addr := range req.Addrs {
			conn, err := dialProxy(addr, sb.Token)
			if err != nil {
				c.closeConns()
				return nil, err
			}
			row[r] = conn
		}
		c.conns = append(c.conns, row)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	for i := range req.Proxies {
		p := &simProxy{index: i, id: fmt.Sprintf("p%d", i), sandbox: i % len(c.names)}
		c.proxies = append(c.proxies, p)
		c.wg.Go(func() { c.runProxy(ctx, p) })
	}
	if _, missing, err := c.await(nil, req.Timeout); err != nil {
		c.stop()
		return nil, fmt.Errorf("connecting: %w (%v)", err, missing)
	}
	return c, nil
}

// await waits until every proxy is connected and holds at least its
// sandbox's target (0 when targets has none).
func (c *childState) await(targets map[string]uint32, timeout time.Duration) (time.Duration, []string, error) {
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		var missing []string
		for _, p := range c.proxies {
			want := targets[c.names[p.sandbox]]
			if !p.up.Load() || p.held.Load() < want {
				if len(missing) < 10 {
					missing = append(missing, fmt.Sprintf("%s of %s (connected %t, holds %d, want %d)", p.id, c.names[p.sandbox], p.up.Load(), p.held.Load(), want))
				}
			}
		}
		if len(missing) == 0 {
			return time.Since(start), nil, nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), missing, fmt.Errorf("not every proxy connected on its target version within %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends every proxy and returns their timelines.
func (c *childState) stop() []proxyLog {
	if c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	c.wg.Wait()
	c.closeConns()
	out := make([]proxyLog, len(c.proxies))
	for i, p := range c.proxies {
		out[i] = proxyLog{ID: p.id, Sandbox: c.names[p.sandbox], Attempts: p.attempts, Events: p.events}
	}
	return out
}

func (c *childState) closeConns() {
	for _, row := range c.conns {
		for _, conn := range row {
			conn.Close()
		}
	}
	c.conns = nil
}

// runProxy keeps proxy p connected to some replica until ctx ends.
func (c *childState) runProxy(ctx context.Context, p *simProxy) {
	select { // the fleet does not start in one instant
	case <-time.After(rand.N(time.Second)):
	case <-ctx.Done():
		return
	}
	r := p.index % len(c.addrs)
	wait := minBackoff
	for {
		start := time.Now()
		up, err := c.stream(ctx, p, r)
		if ctx.Err() != nil {
			return
		}
		if up {
			p.up.Store(false)
			p.events = append(p.events, event{K: evDown, T: time.Now().UnixNano(), R: r, Err: status.Code(err).String()})
		} else {
			p.attempts++
		}
		var goaway *goawayError
		if time.Since(start) > maxBackoff || errors.As(err, &goaway) {
			wait = minBackoff
		}
		select {
		case <-time.After(rand.N(wait) + 1):
		case <-ctx.Done():
			return
		}
		wait = min(2*wait, maxBackoff)
		if n := len(c.addrs); n > 1 {
			r = (r + 1 + rand.IntN(n-1)) % n // another replica
		}
	}
}

type goawayError struct{ reason string }

func (e *goawayError) Error() string { return "goaway: " + e.reason }

// stream runs one policy stream of p on replica r until it fails; up says
// whether it got as far as its first version.
func (c *childState) stream(ctx context.Context, p *simProxy, r int) (up bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := portcullisv1.NewDistributionServiceClient(c.conns[p.sandbox][r]).StreamPolicy(ctx)
	if err != nil {
		return false, err
	}
	var sendMu sync.Mutex
	send := func(m *portcullisv1.StreamPolicyRequest) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return st.Send(m)
	}
	hello := &portcullisv1.ProxyHello{Sandbox: c.names[p.sandbox], ProxyId: p.id, HeldVersion: p.held.Load(), HeldHash: p.heldHash, Build: "fleetload"}
	if err := send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{Hello: hello}}); err != nil {
		return false, err
	}
	var heartbeats sync.WaitGroup
	defer heartbeats.Wait()
	defer cancel()
	heartbeats.Go(func() {
		// Spread over the interval, then one every interval.
		next := rand.N(gateway.HeartbeatInterval)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(next):
			}
			next = gateway.HeartbeatInterval
			hb := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Heartbeat{Heartbeat: &portcullisv1.Heartbeat{SentAt: timestamppb.Now()}}}
			if send(hb) != nil {
				cancel()
				return
			}
		}
	})
	var upAt time.Time
	for {
		res, err := st.Recv()
		if err != nil {
			return up, err
		}
		if g := res.GetGoaway(); g != nil {
			return up, &goawayError{g.GetReason()}
		}
		sp := res.GetPolicy()
		if sp == nil {
			continue // a heartbeat's answer
		}
		arrived := time.Now()
		v, held := sp.GetVersion(), p.held.Load()
		var answer *portcullisv1.StreamPolicyRequest
		var ev event
		switch {
		case v < held:
			answer = nack(sp, fmt.Sprintf("version %d is older than the version held, %d", v, held))
			ev = event{K: evOlder, V: v, Held: held}
		case v == held && held != 0 && sp.GetHash() != p.heldHash:
			answer = nack(sp, fmt.Sprintf("version %d has another hash than the one held", v))
			ev = event{K: evForked, V: v, Held: held}
		default:
			answer = &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Ack{Ack: &portcullisv1.PolicyAck{
				Nonce: sp.GetNonce(), Version: v, Hash: sp.GetHash()}}}
			ev = event{K: evApply, V: v, C: sp.GetCommittedAt().AsTime().UnixNano()}
		}
		if err := send(answer); err != nil {
			return up, err
		}
		ev.T, ev.R = time.Now().UnixNano(), r
		if ev.K == evApply {
			p.held.Store(v)
			p.heldHash = sp.GetHash()
			ev.Live = up && upAt.UnixNano() < ev.C
		}
		if !up {
			// The first version on this stream: connected.
			up, upAt = true, arrived
			p.up.Store(true)
			if ev.K == evApply {
				p.events = append(p.events, event{K: evUp, T: ev.T, R: r, V: v})
				continue
			}
			p.events = append(p.events, event{K: evUp, T: ev.T, R: r, V: held})
		}
		p.events = append(p.events, ev)
	}
}

func nack(sp *portcullisv1.SignedPolicy, reason string) *portcullisv1.StreamPolicyRequest {
	return &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Nack{Nack: &portcullisv1.PolicyNack{
		Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash(), Error: reason}}}
}
