package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/stats"
)

// config is what the flags set.
type config struct {
	counts          []int
	shares          []int
	commits         int
	settle          time.Duration
	timeout         time.Duration
	dialConcurrency int
	databaseURL     string
	baseline        bool
	json            bool
	cpuprofile      string
	memprofile      string
}

// Limits that keep a mistyped flag from running away.
const (
	maxStreams = 100_000
	maxCommits = 100
	// maxShare is Go's HTTP/2 server's default limit of concurrent
	// streams per connection (the gateway sets no other): grpc-go would
	// queue the streams beyond it until others end, and they never do.
	maxShare = 250
)

func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(strings.ReplaceAll(f, "_", ""))
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, benchcli.Usagef("%s: %q is not a number", flagName, f)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, benchcli.Usagef("%s names nothing", flagName)
	}
	return out, nil
}

func (c *config) check() error {
	for _, n := range c.counts {
		if n < 1 || n > maxStreams {
			return benchcli.Usagef("-n: each count must be 1..%d", maxStreams)
		}
	}
	for _, s := range c.shares {
		if s < 1 || s > maxShare {
			return benchcli.Usagef("-share: each value must be 1..%d (Go's HTTP/2 server allows %d concurrent streams per connection)", maxShare, maxShare)
		}
	}
	switch {
	case c.commits < 1 || c.commits > maxCommits:
		return benchcli.Usagef("-commits must be 1..%d", maxCommits)
	case c.settle < 0 || c.settle > time.Minute:
		return benchcli.Usagef("-settle must be 0..1m")
	case c.timeout <= 0 || c.timeout > 30*time.Minute:
		return benchcli.Usagef("-timeout must be >0 and ≤ 30m")
	case c.dialConcurrency < 1 || c.dialConcurrency > 10_000:
		return benchcli.Usagef("-connect-concurrency must be 1..10000")
	case c.databaseURL != "" && !strings.HasPrefix(c.databaseURL, "postgres://") && !strings.HasPrefix(c.databaseURL, "postgresql://"):
		return benchcli.Usagef("-database-url must be a postgres:// URL (leave it unset for SQLite)")
	}
	return nil
}

// fdsNeeded is how many descriptors each process needs at the most for n
// streams shared by share to a connection, or n plain TCP connections.
func fdsNeeded(n, share int, baseline bool) int {
	need := (n + share - 1) / share
	if baseline {
		need = max(need, n)
	}
	return need + 256 // store, listeners, the child's pipes, slack
}

// run starts the gateway and the clients process and measures every
// stream count and mode in turn.
func run(ctx context.Context, cfg config, out, logw io.Writer) error {
	limit := benchenv.FileLimit()
	for _, n := range cfg.counts {
		for _, s := range cfg.shares {
			if need := fdsNeeded(n, s, cfg.baseline); limit != 0 && uint64(need) > limit {
				return benchcli.Usagef("%d streams at -share %d need about %d file descriptors per process; RLIMIT_NOFILE is %d (raise the hard limit, e.g. ulimit -Hn)", n, s, need, limit)
			}
		}
	}

	gw, err := startGateway(ctx, cfg.databaseURL, logw)
	if err != nil {
		return err
	}
	defer func() {
		if err := gw.stop(); err != nil {
			fmt.Fprintln(logw, "gateway stop:", err)
		}
	}()
	token, err := gw.createSandbox(ctx)
	if err != nil {
		return err
	}
	ch, err := startChild(gw.addr, benchSandbox, token)
	if err != nil {
		return err
	}
	defer ch.stop()
	fmt.Fprintf(logw, "gateway (%s) on %s; clients process %d\n", gw.engine, gw.addr, ch.pid())

	res := &results{
		Env:     environment{Machine: benchenv.Describe(), FileLimit: limit},
		Store:   gw.engine,
		Commits: cfg.commits,
		Settle:  cfg.settle.String(),
	}
	m := &measurer{cfg: cfg, gw: gw, ch: ch, logw: logw, version: 1}
	for _, n := range cfg.counts {
		for _, share := range cfg.shares {
			r, err := m.streams(ctx, n, share)
			if err != nil {
				return fmt.Errorf("%d streams, %d per connection: %w", n, share, err)
			}
			res.Push = append(res.Push, r)
			if res.MessageBytes == 0 {
				res.MessageBytes = len(m.message)
			}
		}
		if cfg.baseline {
			f, err := m.floor(ctx, n)
			if err != nil {
				return fmt.Errorf("TCP floor, %d connections: %w", n, err)
			}
			res.Floor = append(res.Floor, f)
		}
	}
	res.derive()
	if cfg.json {
		return benchcli.WriteJSON(out, res)
	}
	return res.writeTable(out)
}

// measurer carries the state shared by the measurements.
type measurer struct {
	cfg     config
	gw      *benchGateway
	ch      *child
	logw    io.Writer
	version uint32 // the sandbox's current version
	variant int    // the last policy variant committed
	message []byte // a pushed StreamPolicyResponse, as received
}

// streams connects n streams, share to a connection, measures the
// gateway's memory with them idle, then times cfg.commits pushes.
func (m *measurer) streams(ctx context.Context, n, share int) (*pushResult, error) {
	cfg := m.cfg
	r := &pushResult{Streams: n, PerConn: share, Conns: (n + share - 1) / share}
	if err := m.gw.waitConnected(ctx, 0, cfg.timeout); err != nil {
		return nil, err
	}
	before := sampleMem()
	childBefore, err := m.ch.call(request{Op: opMem})
	if err != nil {
		return nil, err
	}

	fmt.Fprintf(m.logw, "%d streams on %d connection(s): connecting\n", n, r.Conns)
	stopProfile, err := startCPUProfile(cfg.cpuprofile, n, share, "-connect")
	if err != nil {
		return nil, err
	}
	cpu0 := benchenv.SelfCPU()
	start := time.Now()
	cres, err := m.ch.call(request{Op: opConnect, N: n, Share: share, Concurrency: cfg.dialConcurrency, Timeout: cfg.timeout})
	r.ConnectSeconds = time.Since(start).Seconds()
	r.ConnectCPUMicrosPerStream = float64((benchenv.SelfCPU() - cpu0).Microseconds()) / float64(n)
	stopProfile()
	if err != nil {
		return nil, err
	}
	if cres.Version != m.version {
		return nil, fmt.Errorf("streams got version %d first, want %d", cres.Version, m.version)
	}
	if err := m.gw.waitConnected(ctx, n, cfg.timeout); err != nil {
		return nil, err
	}
	sleep(ctx, cfg.settle)
	after := sampleMem()
	childAfter, err := m.ch.call(request{Op: opMem})
	if err != nil {
		return nil, err
	}
	r.Memory = growth(before, after, n)
	r.ChildMemory = growth(*childBefore.Mem, *childAfter.Mem, n)
	r.GatewayBefore, r.GatewayIdle = before, after
	if cfg.memprofile != "" {
		// The in-use heap after a GC (go tool pprof -sample_index
		// inuse_space): what the idle streams hold.
		runtime.GC()
		if err := benchcli.WriteProfile(profilePath(cfg.memprofile, n, share, ""), "heap"); err != nil {
			return nil, err
		}
	}

	stopProfile, err = startCPUProfile(cfg.cpuprofile, n, share, "")
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	for i := range cfg.commits {
		s, err := m.push(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("commit %d: %w", i+1, err)
		}
		fmt.Fprintf(m.logw, "  commit %d (version %d): ACK p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", i+1, m.version, s.Ack.P50, s.Ack.P99, s.Ack.Max)
		r.Samples = append(r.Samples, s)
		sleep(ctx, cfg.settle)
	}
	if _, err := m.ch.call(request{Op: opClose}); err != nil {
		return nil, err
	}
	return r, m.gw.waitConnected(ctx, 0, cfg.timeout)
}

// push commits the next variant and times its delivery to every stream.
func (m *measurer) push(ctx context.Context, n int) (pushSample, error) {
	cfg := m.cfg
	want := m.version + 1
	if _, err := m.ch.call(request{Op: opArm, Version: want}); err != nil {
		return pushSample{}, err
	}
	m0, err := m.gw.scrape(ctx)
	if err != nil {
		return pushSample{}, err
	}
	m.variant++
	cpu0 := benchenv.SelfCPU()
	t0 := time.Now()
	v, err := m.gw.commit(ctx, m.variant)
	t1 := time.Now()
	if err != nil {
		return pushSample{}, err
	}
	if v != want {
		return pushSample{}, fmt.Errorf("committed version %d, want %d", v, want)
	}
	m.version = v
	res, err := m.ch.call(request{Op: opWait, Timeout: cfg.timeout})
	if err != nil {
		return pushSample{}, err
	}
	cpu := benchenv.SelfCPU() - cpu0
	m.message = res.Message
	s := pushSample{
		Version:  v,
		CommitMs: ms(t1.Sub(t0)),
		Arrival:  distOf(res.Arrivals, t0),
		Ack:      distOf(res.Acks, t0),
		// Until the last client handed its ACK to grpc-go: the gateway may
		// still be reading the last few.
		CPUMicrosPerStream:       float64(cpu.Microseconds()) / float64(n),
		ClientCPUMicrosPerStream: float64(res.CPU.Microseconds()) / float64(n),
	}
	// The gateway's count of the ACKs: read after the clients sent them
	// all (a scrape costs enough that polling would disturb the push).
	deadline := time.Now().Add(10 * time.Second)
	for {
		m1, err := m.gw.scrape(ctx)
		if err != nil {
			return pushSample{}, err
		}
		s.Gateway = deltaOf(m0, m1)
		if s.Gateway.Count >= n || time.Now().After(deadline) {
			break
		}
		sleep(ctx, 20*time.Millisecond)
	}
	if s.Gateway.Count != n {
		return pushSample{}, fmt.Errorf("the gateway counted %d ACKs, want %d", s.Gateway.Count, n)
	}
	return s, nil
}

// floor times the same message over n plain TCP connections.
func (m *measurer) floor(ctx context.Context, n int) (*floorResult, error) {
	cfg := m.cfg
	if len(m.message) == 0 {
		return nil, fmt.Errorf("no pushed message to size the floor with")
	}
	fmt.Fprintf(m.logw, "%d plain TCP connections: connecting\n", n)
	f, err := openFloor(m.ch, n, len(m.message), cfg.dialConcurrency, cfg.timeout)
	if err != nil {
		return nil, err
	}
	r := &floorResult{Conns: n, MessageBytes: len(m.message)}
	pause := min(cfg.settle, 200*time.Millisecond)
	sleep(ctx, pause)
	for i := range cfg.commits {
		if _, err := m.ch.call(request{Op: opArm, TCP: true}); err != nil {
			f.close(m.ch)
			return nil, err
		}
		cpu0 := benchenv.SelfCPU()
		t0, replies, err := f.round(ctx, m.message, cfg.timeout)
		if err != nil {
			f.close(m.ch)
			return nil, err
		}
		cpu := benchenv.SelfCPU() - cpu0
		res, err := m.ch.call(request{Op: opWait, TCP: true, Timeout: cfg.timeout})
		if err != nil {
			f.close(m.ch)
			return nil, err
		}
		s := floorSample{
			Arrival:                  distOf(res.Arrivals, t0),
			Reply:                    distOf(replies.acks, t0),
			CPUMicrosPerStream:       float64(cpu.Microseconds()) / float64(n),
			ClientCPUMicrosPerStream: float64(res.CPU.Microseconds()) / float64(n),
		}
		fmt.Fprintf(m.logw, "  round %d: reply p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", i+1, s.Reply.P50, s.Reply.P99, s.Reply.Max)
		r.Samples = append(r.Samples, s)
		sleep(ctx, pause)
	}
	return r, f.close(m.ch)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// profilePath inserts -nN-shareS and suffix before path's extension.
func profilePath(path string, n, share int, suffix string) string {
	ext := filepath.Ext(path)
	return fmt.Sprintf("%s-n%d-share%d%s%s", strings.TrimSuffix(path, ext), n, share, suffix, ext)
}

// startCPUProfile starts a CPU profile if path is set and returns what
// stops it.
func startCPUProfile(path string, n, share int, suffix string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(profilePath(path, n, share, suffix))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// dist is a distribution of times since t0, in milliseconds.
type dist struct {
	Min float64 `json:"min_ms"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func distOf(times []int64, t0 time.Time) dist {
	if len(times) == 0 {
		return dist{}
	}
	base := t0.UnixNano()
	d := make([]time.Duration, len(times))
	for i, t := range times {
		d[i] = time.Duration(t - base)
	}
	slices.Sort(d)
	return dist{Min: ms(d[0]), P50: ms(stats.Percentile(d, 50)), P99: ms(stats.Percentile(d, 99)), Max: ms(d[len(d)-1])}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
