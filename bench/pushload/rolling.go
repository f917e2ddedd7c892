package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchdb"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
)

// -rolling: a rolling restart of a fleet of replicas under N simulated
// proxies that follow the fleet (fleetclients.go). Every replica runs in
// this process on one fresh Postgres database, each on a fixed port; the
// proxies run in the child. While a policy version is committed every
// -rolling-interval (through any replica that is up), each replica in
// turn is stopped in order (its streams are sent away), a marker version
// is committed through another, and the time until every proxy holds it
// is measured; then the replica starts again on its port.
//
// Figures: per step, how long the stop took and how long until every
// proxy held the marker (from the stop's start, and from the marker's
// commit); over the whole restart, the commit-to-arrival times of every
// commit at every proxy (p50, p99, max), how many arrivals never came,
// the reconnections (in all, and the most one proxy made) and any
// version a proxy was offered older than the one it held.

type rollingResult struct {
	Env            environment   `json:"environment"`
	Streams        int           `json:"streams"`
	PerConn        int           `json:"streams_per_connection"`
	Replicas       int           `json:"replicas"`
	CommitInterval string        `json:"commit_interval"`
	Steps          []rollingStep `json:"steps"`
	Commits        int           `json:"commits"`
	FailedCommits  int           `json:"failed_commit_attempts"`
	Push           dist          `json:"push"`
	// Baseline: the same commits with every replica up, before.
	Baseline        dist    `json:"baseline"`
	BaselineCommits int     `json:"baseline_commits"`
	Missed          int     `json:"missed"`
	Reconnects      int     `json:"reconnects"`
	MaxReconnects   int     `json:"max_reconnects_per_proxy"`
	Regressed       int     `json:"regressed"`
	Seconds         float64 `json:"seconds"`
}

type rollingStep struct {
	Replica         int     `json:"replica"`
	StopMs          float64 `json:"stop_ms"`
	ConvergeMs      float64 `json:"converge_ms"`
	AfterCommitMs   float64 `json:"after_commit_ms"`
	MarkerVersion   uint32  `json:"marker_version"`
	ConnectedBefore int     `json:"connected_before"`
}

// fleet is the replicas under test.
type rollingFleet struct {
	ctx   context.Context
	dbURL string
	admin string
	logw  io.Writer
	addrs []string

	mu      sync.Mutex
	reps    []*benchGateway // nil while down
	variant int
	failed  int
}

func (f *rollingFleet) start(i int) error {
	d, err := postgres.Open(f.ctx, f.dbURL, postgres.Config{})
	if err != nil {
		return fmt.Errorf("replica %d: %w", i, err)
	}
	g, err := serveGateway(f.ctx, store.New(d), f.addrs[i], f.admin, f.logw, func() error { return nil })
	if err != nil {
		return fmt.Errorf("replica %d: %w", i, err)
	}
	g.engine = "postgres"
	f.mu.Lock()
	f.reps[i] = g
	f.mu.Unlock()
	return nil
}

// stop takes replica i out of the committers' choice and stops it.
func (f *rollingFleet) stop(i int) error {
	f.mu.Lock()
	g := f.reps[i]
	f.reps[i] = nil
	f.mu.Unlock()
	if g == nil {
		return nil
	}
	return g.stop()
}

// commit sets the next variant through a replica that is up (another
// after a failure) and returns its version and when the call began.
func (f *rollingFleet) commit(ctx context.Context) (commitAt, error) {
	f.mu.Lock()
	f.variant++
	k := f.variant
	f.mu.Unlock()
	var errs []error
	for range 3 * len(f.addrs) {
		f.mu.Lock()
		var up []*benchGateway
		for _, g := range f.reps {
			if g != nil {
				up = append(up, g)
			}
		}
		f.mu.Unlock()
		if len(up) == 0 {
			return commitAt{}, errors.New("no replica is up")
		}
		g := up[mrand.IntN(len(up))]
		t0 := time.Now()
		v, err := g.commit(ctx, k)
		if err == nil {
			return commitAt{Version: v, At: t0.UnixNano()}, nil
		}
		if ctx.Err() != nil {
			return commitAt{}, ctx.Err()
		}
		errs = append(errs, err)
		f.mu.Lock()
		f.failed++
		if f.failed <= 3 {
			fmt.Fprintf(f.logw, "a commit attempt failed (retried): %v\n", err)
		}
		f.mu.Unlock()
		sleep(ctx, 50*time.Millisecond)
	}
	return commitAt{}, errors.Join(errs...)
}

// commitDuring commits a version every interval while fn runs, and
// returns the commits made.
func (f *rollingFleet) commitDuring(ctx context.Context, interval time.Duration, fn func() error) ([]commitAt, error) {
	var (
		mu      sync.Mutex
		commits []commitAt
	)
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
			c, err := f.commit(cctx)
			if err != nil {
				if cctx.Err() == nil {
					fmt.Fprintln(f.logw, "commit:", err)
				}
				continue
			}
			mu.Lock()
			commits = append(commits, c)
			mu.Unlock()
		}
	})
	err := fn()
	stop()
	wg.Wait()
	return commits, err
}

// runRolling measures a rolling restart of replicas replicas under n
// simulated proxies, share to a connection.
func runRolling(ctx context.Context, cfg config, n, replicas int, interval time.Duration, out, logw io.Writer) error {
	if cfg.databaseURL == "" {
		return benchcli.Usagef("-rolling needs -database-url: replicas share one Postgres database")
	}
	share := cfg.shares[0]
	if limit := benchenv.FileLimit(); limit != 0 && uint64(replicas*fdsNeeded(n, share, false)) > limit {
		return benchcli.Usagef("%d streams on %d replicas need more than RLIMIT_NOFILE (%d) descriptors", n, replicas, limit)
	}
	dbURL, dropDB, err := benchdb.Fresh(ctx, cfg.databaseURL, "pushload")
	if err != nil {
		return err
	}
	defer func() {
		if err := dropDB(); err != nil {
			fmt.Fprintln(logw, "drop database:", err)
		}
	}()
	var b [24]byte
	rand.Read(b[:])
	f := &rollingFleet{ctx: ctx, dbURL: dbURL, admin: "pcs_pushload-" + hex.EncodeToString(b[:]), logw: logw, reps: make([]*benchGateway, replicas)}
	for range replicas {
		port, err := fixedPort()
		if err != nil {
			return err
		}
		f.addrs = append(f.addrs, "127.0.0.1:"+strconv.Itoa(port))
	}
	defer func() {
		for i := range f.reps {
			if err := f.stop(i); err != nil {
				fmt.Fprintf(logw, "replica %d stop: %v\n", i, err)
			}
		}
	}()
	for i := range replicas {
		if err := f.start(i); err != nil {
			return err
		}
	}
	token, err := f.reps[0].createSandbox(ctx)
	if err != nil {
		return err
	}
	ch, err := startChild(f.addrs[0], benchSandbox, token)
	if err != nil {
		return err
	}
	defer ch.stop()
	fmt.Fprintf(logw, "%d replicas on %v (Postgres); %d simulated proxies, %d per connection, in process %d\n", replicas, f.addrs, n, share, ch.pid())
	if _, err := ch.call(request{Op: opFleetConnect, Addrs: f.addrs, N: n, Share: share, Timeout: cfg.timeout}); err != nil {
		return err
	}
	defer ch.call(request{Op: opFleetClose})
	sleep(ctx, cfg.settle)

	res := &rollingResult{Env: environment{Machine: benchenv.Describe(), FileLimit: benchenv.FileLimit()}, Streams: n, PerConn: share, Replicas: replicas, CommitInterval: interval.String()}
	// The baseline, in the same run: as many seconds of commits with
	// every replica up.
	quiet, err := f.commitDuring(ctx, interval, func() error { sleep(ctx, 3*time.Second); return nil })
	if err != nil {
		return err
	}
	sleep(ctx, min(cfg.settle, 2*time.Second))
	rep, err := ch.call(request{Op: opFleetReport, Commits: quiet})
	if err != nil {
		return err
	}
	res.Baseline, res.BaselineCommits = *rep.Push, len(quiet)
	fmt.Fprintf(logw, "baseline, every replica up: %d commits, commit → arrival p99 %.1f ms\n", len(quiet), res.Baseline.P99)

	begin := time.Now()
	commits, err := f.commitDuring(ctx, interval, func() error {
		for i := range replicas {
			st, err := ch.call(request{Op: opFleetState})
			if err != nil {
				return err
			}
			step := rollingStep{Replica: i, ConnectedBefore: st.Fleet.Connected}
			t0 := time.Now()
			if err := f.stop(i); err != nil {
				return fmt.Errorf("stop replica %d: %w", i, err)
			}
			step.StopMs = ms(time.Since(t0))
			marker, err := f.commit(ctx)
			if err != nil {
				return err
			}
			step.MarkerVersion = marker.Version
			deadline := time.Now().Add(cfg.timeout)
			for {
				st, err := ch.call(request{Op: opFleetState, AtLeast: marker.Version})
				if err != nil {
					return err
				}
				if st.Fleet.AtLeast == n && st.Fleet.Connected == n {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("after replica %d stopped: %d of %d proxies hold version %d, %d connected, within %s", i, st.Fleet.AtLeast, n, marker.Version, st.Fleet.Connected, cfg.timeout)
				}
				sleep(ctx, 5*time.Millisecond)
			}
			step.ConvergeMs = ms(time.Since(t0))
			step.AfterCommitMs = ms(time.Since(time.Unix(0, marker.At)))
			fmt.Fprintf(logw, "replica %d: stopped in %.0f ms; every proxy on version %d %.0f ms after the stop began (%.0f ms after its commit)\n",
				i, step.StopMs, marker.Version, step.ConvergeMs, step.AfterCommitMs)
			res.Steps = append(res.Steps, step)
			if err := f.start(i); err != nil {
				return err
			}
			sleep(ctx, cfg.settle)
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.Seconds = time.Since(begin).Seconds()
	// Let the last commits arrive before reading the times.
	sleep(ctx, min(cfg.settle, 2*time.Second))
	res.Commits = len(commits)
	if rep, err = ch.call(request{Op: opFleetReport, Commits: commits}); err != nil {
		return err
	}
	res.Push, res.Missed = *rep.Push, rep.Missed
	st, err := ch.call(request{Op: opFleetState})
	if err != nil {
		return err
	}
	res.Reconnects, res.MaxReconnects, res.Regressed = st.Fleet.Reconnects, st.Fleet.MaxPerProx, st.Fleet.Regressed
	f.mu.Lock()
	res.FailedCommits = f.failed
	f.mu.Unlock()
	if cfg.json {
		return benchcli.WriteJSON(out, res)
	}
	return res.writeTable(out)
}

func (r *rollingResult) writeTable(out io.Writer) error {
	fmt.Fprintf(out, "Rolling restart: %d replicas (Postgres), %d simulated proxies (%d per connection), a commit every %s, %.1f s\n\n",
		r.Replicas, r.Streams, r.PerConn, r.CommitInterval, r.Seconds)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "replica\tconnected before\tstop ms\tall on marker, from stop ms\tfrom marker commit ms\t")
	for _, s := range r.Steps {
		fmt.Fprintf(w, "%d\t%d\t%.0f\t%.0f\t%.0f\t\n", s.Replica, s.ConnectedBefore, s.StopMs, s.ConvergeMs, s.AfterCommitMs)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nPush during the restart (%d commits × %d proxies): commit → arrival p50 %.1f ms, p99 %.1f ms, max %.1f ms; never arrived %d\n",
		r.Commits, r.Streams, r.Push.P50, r.Push.P99, r.Push.Max, r.Missed)
	ratio := 0.0
	if r.Baseline.P99 > 0 {
		ratio = r.Push.P99 / r.Baseline.P99
	}
	fmt.Fprintf(out, "Baseline, every replica up (%d commits): p50 %.1f ms, p99 %.1f ms, max %.1f ms; p99 during ÷ baseline %.1f×\n",
		r.BaselineCommits, r.Baseline.P50, r.Baseline.P99, r.Baseline.Max, ratio)
	fmt.Fprintf(out, "Reconnections: %d in all, at most %d by one proxy; versions older than held offered: %d; commit attempts that failed (retried): %d\n",
		r.Reconnects, r.MaxReconnects, r.Regressed, r.FailedCommits)
	return nil
}

// fixedPort returns a free loopback port below Linux's ephemeral range:
// a replica restarts on its port, which an outgoing connection could
// take meanwhile if it were in that range.
func fixedPort() (int, error) {
	for range 100 {
		port := 20000 + mrand.IntN(12000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			ln.Close()
			return port, nil
		}
	}
	return 0, errors.New("no free port between 20000 and 32000")
}
