package h1

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// Procs runs the proxy on one P (GOMAXPROCS=1) while it serves one
// request at a time, and on every CPU it is given (Go's default) as soon
// as two overlap.
//
// Why: a sidecar whose agent sends one request at a time pays, on the
// default of two or more Ps, for the scheduler's second P: each time a
// goroutine is woken by the network poller the runtime wakes another
// thread to look for work, which finds none and sleeps again — thread
// wakeups on the request's path and on the cores the agent and the
// upstream run on. On one P the same requests were answered 10–15 µs
// sooner; under load one P carried a tenth less (BENCHMARKS.md). So the
// proxy starts on one P and widens the moment a request begins while
// another is still being served, and narrows again once no two have
// overlapped for quiet.
//
// A request counts from its head being read until its response head is
// written (or it ends): the proxy's own work and the upstream's answer,
// not a stream it then relays, so a client's idle event stream does not
// keep the proxy wide. Tunnels count as their requests.
//
// Changing GOMAXPROCS stops the world for a few microseconds; it happens
// at most twice per quiet period. An explicit GOMAXPROCS in the
// environment turns the scaler off (the CLI decides;
// dataplane.Config.AdaptProcs).
type Procs struct {
	active  atomic.Int32
	wide    atomic.Bool   // running on the default P count
	overlap atomic.Bool   // two requests overlapped since the last look
	wake    chan struct{} // a request began while another was served
	quiet   time.Duration
	// setWide sets GOMAXPROCS: the default (true) or one (false).
	setWide func(bool)
}

// procsQuiet is how long no two requests must overlap before the proxy
// narrows to one P again.
const procsQuiet = time.Second

// NewProcs returns a switch that does nothing until Run; a Server counts
// its requests with it (Config.Procs).
func NewProcs() *Procs {
	return &Procs{wake: make(chan struct{}, 1), quiet: procsQuiet, setWide: setDefaultProcs}
}

func setDefaultProcs(wide bool) {
	if wide {
		runtime.SetDefaultGOMAXPROCS()
	} else {
		runtime.GOMAXPROCS(1)
	}
}

// begin counts a request as served; s may be nil (no scaling).
func (s *Procs) begin() {
	if s == nil {
		return
	}
	if s.active.Add(1) < 2 {
		return
	}
	if !s.overlap.Load() {
		s.overlap.Store(true)
	}
	if !s.wide.Load() {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// end counts a request begun with begin as no longer served.
func (s *Procs) end() {
	if s != nil {
		s.active.Add(-1)
	}
}

// Run narrows the proxy to one P and widens and narrows it as requests
// overlap, until ctx ends; then the default is restored.
func (s *Procs) Run(ctx context.Context) {
	s.setWide(false)
	defer s.setWide(true)
	for {
		if s.active.Load() < 2 { // else a request overlapped while wide was being cleared
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			}
		}
		s.wide.Store(true)
		s.setWide(true)
		if !s.untilQuiet(ctx) {
			return
		}
		s.setWide(false)
		s.wide.Store(false)
		select { // a wake sent while wide is stale
		case <-s.wake:
		default:
		}
	}
}

// untilQuiet returns once no two requests have overlapped for s.quiet
// (looking twice in that time), or false when ctx ends.
func (s *Procs) untilQuiet(ctx context.Context) bool {
	t := time.NewTicker(s.quiet / 2)
	defer t.Stop()
	s.overlap.Store(false)
	for quiet := 0; quiet < 2; {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if s.overlap.Swap(false) || s.active.Load() >= 2 {
			quiet = 0
		} else {
			quiet++
		}
	}
	return true
}
