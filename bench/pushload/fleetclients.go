package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/portcullis-dev/portcullis/bench/internal/simproxy"
	"github.com/portcullis-dev/portcullis/bench/internal/stats"
	"github.com/portcullis-dev/portcullis/gateway"
)

// The child's side of -rolling: N simulated proxies that follow a fleet
// of replicas as dataplane/gatewayclient does. Proxy i starts on replica
// i mod R; when its stream ends it reconnects to another replica drawn at
// random, at once after a goaway and after a random wait up to 100 ms
// after a failure, saying in its hello the version it holds. It ACKs every
// version and keeps when it first read each one; it counts its
// reconnections and any version older than the one it held (a
// regression: there should be none).

type fleetClients struct {
	addrs          []string
	sandbox, token string
	conns          [][]*grpc.ClientConn // by replica: ⌈N/share⌉ connections each
	procs          []*fleetProxy
	cancel         context.CancelFunc
	wg             sync.WaitGroup
}

type fleetProxy struct {
	mu         sync.Mutex
	held       uint32
	arrivals   map[uint32]int64 // version → when first read (Unix ns)
	reconnects int
	regressed  int
	connected  bool
}

// fleetState summarises the proxies for the parent's polling.
type fleetState struct {
	Connected  int    `json:"connected"`
	MinHeld    uint32 `json:"min_held"`
	Reconnects int    `json:"reconnects"`
	MaxPerProx int    `json:"max_reconnects_per_proxy"`
	Regressed  int    `json:"regressed"`
	// AtLeast: proxies holding at least the version asked about.
	AtLeast int `json:"at_least"`
}

// commitAt is a commit the parent made: its version and when it began.
type commitAt struct {
	Version uint32 `json:"version"`
	At      int64  `json:"at"`
}

// fleetConnect opens n proxies over the replicas at addrs and returns
// once each has its first version.
func (c *fleetClients) connect(addrs []string, n, share int, timeout time.Duration) (uint32, error) {
	if len(c.procs) > 0 {
		return 0, errors.New("fleet proxies already running")
	}
	c.addrs = addrs
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	per := (n + share - 1) / share
	c.conns = make([][]*grpc.ClientConn, len(addrs))
	for r, addr := range addrs {
		for range per {
			conn, err := simproxy.Dial(addr, c.token)
			if err != nil {
				c.close()
				return 0, err
			}
			c.conns[r] = append(c.conns[r], conn)
		}
	}
	c.procs = make([]*fleetProxy, n)
	for i := range c.procs {
		c.procs[i] = &fleetProxy{arrivals: map[uint32]int64{}}
	}
	for i := range n {
		c.wg.Go(func() { c.run(ctx, i) })
	}
	deadline := time.Now().Add(timeout)
	for {
		st := c.state(0)
		if st.MinHeld > 0 {
			return st.MinHeld, nil
		}
		if time.Now().After(deadline) {
			c.close()
			return 0, fmt.Errorf("not every proxy got a first version within %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run is proxy i, until ctx ends.
func (c *fleetClients) run(ctx context.Context, i int) {
	p := c.procs[i]
	r := i % len(c.addrs)
	id := fmt.Sprintf("p%d", i)
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			p.mu.Lock()
			p.reconnects++
			p.mu.Unlock()
		}
		p.mu.Lock()
		held := p.held
		p.mu.Unlock()
		conns := c.conns[r]
		err := c.stream(ctx, p, conns[i%len(conns)], id, held)
		if ctx.Err() != nil {
			return
		}
		r = (r + 1 + rand.IntN(len(c.addrs)-1)) % len(c.addrs) // another, at random
		if !errors.Is(err, simproxy.ErrGoaway) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(rand.Int64N(int64(100*time.Millisecond))) + 1):
			}
		}
	}
}

// stream runs one policy stream of p until it ends.
func (c *fleetClients) stream(ctx context.Context, p *fleetProxy, conn *grpc.ClientConn, id string, held uint32) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := simproxy.OpenHeld(ctx, conn, c.sandbox, id, "pushload", held)
	if err != nil {
		return err
	}
	defer func() {
		p.mu.Lock()
		p.connected = false
		p.mu.Unlock()
	}()
	var hb sync.WaitGroup
	defer hb.Wait()
	defer cancel()
	hb.Go(func() {
		t := time.NewTimer(time.Duration(rand.Int64N(int64(gateway.HeartbeatInterval))))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.Heartbeat()
				t.Reset(gateway.HeartbeatInterval)
			}
		}
	})
	for {
		res, arrived, _, err := s.Next()
		if err != nil {
			return err
		}
		v := res.GetPolicy().GetVersion()
		p.mu.Lock()
		p.connected = true
		switch {
		case v < p.held:
			p.regressed++
		case v > p.held:
			p.held = v
		}
		if _, ok := p.arrivals[v]; !ok {
			p.arrivals[v] = arrived.UnixNano()
		}
		p.mu.Unlock()
	}
}

// state summarises the proxies; AtLeast counts those holding atLeast.
func (c *fleetClients) state(atLeast uint32) fleetState {
	st := fleetState{}
	for i, p := range c.procs {
		p.mu.Lock()
		if p.connected {
			st.Connected++
		}
		if i == 0 || p.held < st.MinHeld {
			st.MinHeld = p.held
		}
		if p.held >= atLeast {
			st.AtLeast++
		}
		st.Reconnects += p.reconnects
		st.MaxPerProx = max(st.MaxPerProx, p.reconnects)
		st.Regressed += p.regressed
		p.mu.Unlock()
	}
	return st
}

// report returns, over every proxy and commit, the time from the commit
// to the proxy's first read of that version or a newer one (latest wins:
// a proxy may skip a version); a proxy that never got it counts as
// missed.
func (c *fleetClients) report(commits []commitAt) (dist, int) {
	var ds []time.Duration
	missed := 0
	for _, p := range c.procs {
		p.mu.Lock()
		for _, cm := range commits {
			var first int64
			for v, at := range p.arrivals {
				if v >= cm.Version && (first == 0 || at < first) {
					first = at
				}
			}
			if first == 0 {
				missed++
				continue
			}
			ds = append(ds, time.Duration(first-cm.At))
		}
		p.mu.Unlock()
	}
	if len(ds) == 0 {
		return dist{}, missed
	}
	slices.Sort(ds)
	return dist{Min: ms(ds[0]), P50: ms(stats.Percentile(ds, 50)), P99: ms(stats.Percentile(ds, 99)), Max: ms(ds[len(ds)-1])}, missed
}

func (c *fleetClients) close() {
	if c.cancel != nil {
		c.cancel()
	}
	for _, conns := range c.conns {
		for _, conn := range conns {
			conn.Close()
		}
	}
	c.wg.Wait()
	c.procs, c.conns, c.cancel = nil, nil, nil
}
