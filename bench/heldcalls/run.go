package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/errgroup"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/procs"
	"github.com/portcullis-dev/portcullis/demo"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// policyDoc is every sandbox's policy: the orders server at 127.0.0.1:port,
// lookup_order allowed, refund_order allowed once a person approves the
// call (held for up to 15 minutes, longer than any run).
func policyDoc(port int) string {
	return `version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: 127.0.0.1
        port: ` + strconv.Itoa(port) + `
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          versions: ["2025-11-25"]
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
          - allow: { method: tools/list }
          - allow: { method: tools/call, tool: lookup_order }
          - allow:
              method: tools/call
              tool: refund_order
              review: { required: true, timeout: 15m }
    binaries: []
`
}

// fleet is what a run drives: the gateway, the proxies and an HTTP client
// through each proxy to the orders server.
type fleet struct {
	gw       *gateway
	proxies  []*procs.Proc
	clients  []*http.Client
	upstream string // the orders server's MCP URL
}

func run(ctx context.Context, cfg config, dir string) (*report, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	upstream := &http.Server{Handler: demo.OrdersHandler(&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})}
	go upstream.Serve(ln)
	defer upstream.Close()

	f := &fleet{upstream: "http://" + ln.Addr().String() + "/mcp"}
	// The memory slope holds more calls on one proxy than a sandbox may by
	// default; the fleet's sandboxes hold at most 16 each either way.
	gwFlags := []string{"--max-held-calls", strconv.Itoa(max(16, cfg.memCalls))}
	if f.gw, err = startGateway(ctx, cfg.bin, filepath.Join(dir, "gateway"), gwFlags); err != nil {
		return nil, err
	}
	defer f.gw.Stop()
	defer func() {
		for _, p := range f.proxies {
			p.Stop()
		}
	}()
	if err := f.startProxies(ctx, cfg, dir, policyDoc(ln.Addr().(*net.TCPAddr).Port)); err != nil {
		return nil, err
	}

	r := &report{Machine: benchenv.Describe().String(), Proxies: cfg.proxies, Calls: cfg.calls, Rounds: cfg.rounds}
	var answers, committed, approves []time.Duration
	for round := range cfg.rounds {
		base, err := f.side(ctx, cfg)
		if err != nil {
			return nil, err
		}
		r.Without = append(r.Without, base)
		before := f.memory()
		h, err := f.hold(ctx, cfg, round)
		if err != nil {
			return nil, err
		}
		held := f.memory()
		r.PerCallKiB = append(r.PerCallKiB, float64(held.RSS-before.RSS)/float64(cfg.calls))
		with, err := f.side(ctx, cfg)
		if err != nil {
			return nil, err
		}
		r.With = append(r.With, with)
		a, c, rpc, err := h.approveAll(ctx, f, cfg)
		if err != nil {
			return nil, err
		}
		answers, committed, approves = append(answers, a...), append(committed, c...), append(approves, rpc...)
	}
	r.ApprovalToAnswer, r.CommittedToAnswer, r.ApproveRPC = summarize(answers), summarize(committed), summarize(approves)
	if cfg.memCalls > 0 {
		if r.Slope, err = f.slope(ctx, cfg, dir, policyDoc(ln.Addr().(*net.TCPAddr).Port)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// startProxies creates a sandbox per proxy and starts its proxy, eight at
// a time, then waits until every one enforces its policy.
func (f *fleet) startProxies(ctx context.Context, cfg config, dir, policy string) error {
	f.proxies = make([]*procs.Proc, cfg.proxies)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range cfg.proxies {
		g.Go(func() error {
			name := fmt.Sprintf("held-%03d", i)
			created, err := f.gw.sandboxes.CreateSandbox(gctx, &portcullisv1.CreateSandboxRequest{Name: name, Policy: policy})
			if err != nil {
				return fmt.Errorf("create sandbox %s: %w", name, err)
			}
			f.proxies[i], err = procs.StartProxy(gctx, cfg.bin, f.gw.Addr, name, created.GetToken(), filepath.Join(dir, name))
			return err
		})
	}
	err := g.Wait()
	f.proxies = slices.DeleteFunc(f.proxies, func(p *procs.Proc) bool { return p == nil })
	if err != nil {
		return err
	}
	for _, p := range f.proxies {
		u := &url.URL{Scheme: "http", Host: p.Addr}
		f.clients = append(f.clients, &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), MaxIdleConnsPerHost: 64}})
	}
	return f.gw.waitApplied(ctx, cfg.proxies)
}

// memory sums the proxies' resident memory.
func (f *fleet) memory() benchenv.Memory {
	var m benchenv.Memory
	for _, p := range f.proxies {
		m.Add(benchenv.ReadMemory(p.Pid()))
	}
	return m
}

// call sends one tools/call through proxy i and returns the answer's
// body; an answer other than 200 with a result is an error.
func (f *fleet) call(ctx context.Context, i int, id int64, tool, orderID string) error {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"order_id":%q}}}`, id, tool, orderID)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.upstream, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = http.Header{
		"Content-Type":         {"application/json"},
		"Accept":               {"application/json, text/event-stream"},
		"Mcp-Protocol-Version": {"2025-11-25"},
	}
	resp, err := f.clients[i].Do(req)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"result"`)) {
		return fmt.Errorf("%s through proxy %d: %s: %.300s", tool, i, resp.Status, b)
	}
	return nil
}

// held is one round's held calls: when each was answered, by order id.
type held struct {
	mu       sync.Mutex
	answered map[string]time.Time
	done     chan error // each call's end
	n        int
}

// hold sends cfg.calls refund_order calls, spread over the proxies, and
// returns once the gateway lists them all held.
func (f *fleet) hold(ctx context.Context, cfg config, round int) (*held, error) {
	h := &held{answered: map[string]time.Time{}, done: make(chan error, cfg.calls), n: cfg.calls}
	for i := range cfg.calls {
		order := fmt.Sprintf("R-%d-%d", round, i)
		go func() {
			err := f.call(ctx, i%len(f.proxies), int64(i+1), "refund_order", order)
			now := time.Now()
			h.mu.Lock()
			h.answered[order] = now
			h.mu.Unlock()
			h.done <- err
		}()
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := f.gw.calls.ListCalls(ctx, &portcullisv1.ListCallsRequest{Status: "held", Limit: 1})
		if err != nil {
			return nil, fmt.Errorf("list held calls: %w", err)
		}
		if int(list.GetHeld()) >= cfg.calls {
			return h, nil
		}
		select {
		case err := <-h.done:
			return nil, fmt.Errorf("a call ended before it was approved: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d calls held after 2 minutes", list.GetHeld(), cfg.calls)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// approveAll approves every held call, cfg.approvers at a time, and
// returns, for each, the time from just before ApproveCall was sent to
// the agent's answer, from ApproveCall's answer (the decision committed)
// to the agent's, and the RPC's own time.
func (h *held) approveAll(ctx context.Context, f *fleet, cfg config) (answers, committed, rpcs []time.Duration, err error) {
	list, err := f.gw.calls.ListCalls(ctx, &portcullisv1.ListCallsRequest{Status: "held", Limit: 1000})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("list held calls: %w", err)
	}
	calls := list.GetCalls()
	if len(calls) != h.n {
		return nil, nil, nil, fmt.Errorf("ListCalls shows %d of %d held calls (its limit is 1,000)", len(calls), h.n)
	}
	sent := make(map[string]time.Time, len(calls))
	decided := make(map[string]time.Time, len(calls))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.approvers)
	for _, c := range calls {
		var args struct {
			OrderID string `json:"order_id"`
		}
		if err := json.Unmarshal([]byte(c.GetArgumentsJson()), &args); err != nil {
			return nil, nil, nil, fmt.Errorf("call %d's arguments: %w", c.GetId(), err)
		}
		g.Go(func() error {
			t0 := time.Now()
			_, err := f.gw.calls.ApproveCall(gctx, &portcullisv1.ApproveCallRequest{Id: c.GetId(), Reason: "benchmark", ArgumentsDigest: c.GetArgumentsDigest()})
			t1 := time.Now()
			mu.Lock()
			sent[args.OrderID], decided[args.OrderID] = t0, t1
			rpcs = append(rpcs, t1.Sub(t0))
			mu.Unlock()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, nil, fmt.Errorf("approve: %w", err)
	}
	for range h.n {
		if err := <-h.done; err != nil {
			return nil, nil, nil, fmt.Errorf("an approved call: %w", err)
		}
	}
	for order, t0 := range sent {
		answers = append(answers, h.answered[order].Sub(t0))
		committed = append(committed, h.answered[order].Sub(decided[order]))
	}
	return answers, committed, rpcs, nil
}

// side sends lookup_order calls (allowed without review) through the
// proxies, cfg.sideClients at once, for cfg.side.
func (f *fleet) side(ctx context.Context, cfg config) (sideRound, error) {
	var (
		mu   sync.Mutex
		lat  []time.Duration
		errs atomic.Int64
		next atomic.Int64
	)
	ctx, cancel := context.WithTimeout(ctx, cfg.side)
	defer cancel()
	var wg sync.WaitGroup
	for range cfg.sideClients {
		wg.Go(func() {
			var mine []time.Duration
			for ctx.Err() == nil {
				n := next.Add(1)
				t0 := time.Now()
				err := f.call(ctx, int(n)%len(f.proxies), n, "lookup_order", "A-1042")
				if ctx.Err() != nil {
					break
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if e := errs.Load(); e > 0 {
		return sideRound{}, fmt.Errorf("%d lookup_order calls failed", e)
	}
	s := summarize(lat)
	return sideRound{PerSecond: float64(len(lat)) / cfg.side.Seconds(), Latency: s}, nil
}

// slope measures one proxy's memory per held call as the calls grow: a
// proxy of its own sandbox, allowed cfg.memCalls held calls
// (--max-held-calls; the default is 16), its RSS read with none held,
// with half and with all, each after a second's settling. The calls are
// then denied.
func (f *fleet) slope(ctx context.Context, cfg config, dir, policy string) (*memSlope, error) {
	created, err := f.gw.sandboxes.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "held-memory", Policy: policy})
	if err != nil {
		return nil, fmt.Errorf("create sandbox held-memory: %w", err)
	}
	pprofAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := procs.StartProxy(ctx, cfg.bin, f.gw.Addr, "held-memory", created.GetToken(), filepath.Join(dir, "held-memory"),
		"--max-held-calls", strconv.Itoa(cfg.memCalls), "--pprof-listen", pprofAddr)
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	one := &fleet{gw: f.gw, proxies: []*procs.Proc{p}, upstream: f.upstream,
		clients: []*http.Client{{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: p.Addr}), MaxIdleConnsPerHost: 64}}}}
	if err := f.gw.waitApplied(ctx, len(f.proxies)+1); err != nil {
		return nil, err
	}
	if err := one.call(ctx, 0, 1, "lookup_order", "A-1042"); err != nil {
		return nil, err
	}
	settle := func() (int, int) {
		time.Sleep(time.Second)
		live, err := liveKiB(ctx, pprofAddr)
		if err != nil {
			live = -1
		}
		return benchenv.ReadMemory(p.Pid()).RSS, live
	}
	s := &memSlope{Calls: cfg.memCalls}
	s.NoneKiB, s.LiveNoneKiB = settle()
	half := cfg.memCalls / 2
	var answered []chan error
	holdN := func(from, to int) error {
		for i := from; i < to; i++ {
			done := make(chan error, 1)
			answered = append(answered, done)
			go func() { done <- one.call(ctx, 0, int64(i+1), "refund_order", fmt.Sprintf("M-%d", i)) }()
		}
		if err := one.waitHeld(ctx, "held-memory", to); err != nil {
			for _, done := range answered {
				select {
				case err2 := <-done:
					return fmt.Errorf("%w: a call ended: %v", err, err2)
				default:
				}
			}
			return err
		}
		return nil
	}
	if err := holdN(0, half); err != nil {
		return nil, err
	}
	s.HalfKiB, s.LiveHalfKiB = settle()
	if err := holdN(half, cfg.memCalls); err != nil {
		return nil, err
	}
	s.AllKiB, s.LiveAllKiB = settle()
	list, err := f.gw.calls.ListCalls(ctx, &portcullisv1.ListCallsRequest{Sandbox: "held-memory", Status: "held", Limit: 1000})
	if err != nil {
		return nil, err
	}
	for _, c := range list.GetCalls() {
		if _, err := f.gw.calls.DenyCall(ctx, &portcullisv1.DenyCallRequest{Id: c.GetId(), Reason: "benchmark"}); err != nil {
			return nil, err
		}
	}
	for _, done := range answered {
		<-done // each is refused review_denied: an error here
	}
	return s, nil
}

// waitHeld waits until sandbox has n calls held.
func (f *fleet) waitHeld(ctx context.Context, sandbox string, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		list, err := f.gw.calls.ListCalls(ctx, &portcullisv1.ListCallsRequest{Sandbox: sandbox, Status: "held", Limit: 1})
		if err != nil {
			return fmt.Errorf("list held calls: %w", err)
		}
		if int(list.GetHeld()) >= n {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s: fewer than %d calls held after 2 minutes", sandbox, n)
}

// liveKiB is the proxy's live Go heap and goroutine stacks after a
// collection, from its --pprof-listen heap profile's runtime.MemStats.
func liveKiB(ctx context.Context, addr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?debug=1&gc=1", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var heap, stack int
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			heap, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		if v, ok := strings.CutPrefix(line, "# Stack = "); ok {
			inuse, _, _ := strings.Cut(v, " / ")
			stack, _ = strconv.Atoi(strings.TrimSpace(inuse))
		}
	}
	if heap == 0 {
		return 0, fmt.Errorf("no HeapAlloc in the heap profile of %s", addr)
	}
	return (heap + stack) / 1024, nil
}

// freeAddr is a loopback address free when asked.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
