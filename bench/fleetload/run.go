package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchdb"
	"github.com/portcullis-dev/portcullis/lifecycle"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// config is what the flags set.
type config struct {
	binary         string
	databaseURL    string
	dbParams       string
	replicas       int
	proxies        int
	fleetSandboxes int
	sandboxes      int
	opsRate        float64
	setEvery       time.Duration
	duration       time.Duration
	killEvery      time.Duration
	timeout        time.Duration
	json           bool
	timeline       string
}

func (c *config) check() error {
	switch {
	case c.databaseURL == "":
		return benchcli.Usagef("-database-url is required: the replicas share one Postgres database")
	case c.replicas < 1 || c.replicas > 16:
		return benchcli.Usagef("-replicas must be 1..16")
	case c.fleetSandboxes < 1 || c.fleetSandboxes > c.sandboxes:
		return benchcli.Usagef("-fleet-sandboxes must be 1..-sandboxes")
	case c.sandboxes > 10_000:
		return benchcli.Usagef("-sandboxes must be at most 10000")
	case c.proxies < c.fleetSandboxes || c.proxies > 20_000:
		return benchcli.Usagef("-proxies must be -fleet-sandboxes..20000 (each fleet sandbox has at least one)")
	case c.opsRate < 0 || c.opsRate > 1000:
		return benchcli.Usagef("-ops must be 0..1000")
	case c.setEvery <= 0:
		return benchcli.Usagef("-set-every must be > 0")
	case c.duration < 10*time.Second || c.duration > time.Hour:
		return benchcli.Usagef("-duration must be 10s..1h")
	case c.killEvery < 0 || c.killEvery > 0 && c.killEvery < 10*time.Second:
		return benchcli.Usagef("-kill-every must be 0 (no kills) or at least 10s")
	}
	// Round-robin, each sandbox gets this many proposals in the gateway's
	// rate window (or the whole run, if shorter); more are refused.
	window := min(c.duration, lifecycle.DefaultProposalRateWindow)
	perSandbox := c.opsRate / 2 * window.Seconds() / float64(c.sandboxes)
	if perSandbox > lifecycle.DefaultProposalRateMax {
		return benchcli.Usagef("-ops %.0f over -sandboxes %d makes %.0f proposals per sandbox in %s: the gateway refuses more than %d; give more -sandboxes",
			c.opsRate, c.sandboxes, perSandbox, window, lifecycle.DefaultProposalRateMax)
	}
	return nil
}

// kill is one SIGKILL of a replica and its restart.
type kill struct {
	Replica int       `json:"replica"`
	At      time.Time `json:"at"`
	Ready   time.Time `json:"ready"` // the restarted replica printed its banner
	Err     string    `json:"err,omitempty"`
}

// run builds the binary (unless -binary names one), starts the fleet on a
// fresh database, runs the workload with its kills, and reports.
func run(ctx context.Context, cfg config, out, logw io.Writer) (err error) {
	bin := cfg.binary
	if bin == "" {
		dir, err := os.MkdirTemp("", "fleetload-bin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(logw, "building ./cmd/portcullis")
		if bin, err = buildBinary(ctx, dir); err != nil {
			return err
		}
	}
	dbURL, drop, err := benchdb.Fresh(ctx, cfg.databaseURL, "fleetload")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, drop()) }()
	dir, err := os.MkdirTemp("", "fleetload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var b [24]byte
	rand.Read(b[:])
	admin := "pcs_fleetload-" + hex.EncodeToString(b[:])
	gwURL := dbURL
	if cfg.dbParams != "" {
		sep := "?"
		if strings.Contains(gwURL, "?") {
			sep = "&"
		}
		gwURL += sep + cfg.dbParams
	}
	env := append(os.Environ(), "PORTCULLIS_BOOTSTRAP_TOKEN="+admin, "PORTCULLIS_DATABASE_URL="+gwURL)
	pids := &pidSet{}
	reps := make([]*replica, cfg.replicas)
	addrs := make([]string, cfg.replicas)
	for i := range reps {
		if addrs[i], err = freePort(); err != nil {
			return err
		}
		reps[i] = &replica{index: i, pids: pids, bin: bin, addr: addrs[i], env: env, dir: filepath.Join(dir, fmt.Sprintf("replica-%d", i))}
	}
	defer func() {
		for _, r := range reps {
			if serr := r.stop(); serr != nil {
				fmt.Fprintln(logw, "stop:", serr)
			}
		}
		if err != nil {
			for _, r := range reps {
				fmt.Fprintf(logw, "replica %d's last warnings and errors:\n%s\n", r.index, r.tail(15))
			}
		}
	}()
	// The first replica migrates the database and stores the admin token;
	// the others start on what it made.
	if err := reps[0].start(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(reps))
	for i, r := range reps[1:] {
		wg.Go(func() { errs[i+1] = r.start(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintf(logw, "%d replicas of %s on one Postgres database: %v\n", cfg.replicas, bin, addrs)

	fc, err := dialFleet(addrs)
	if err != nil {
		return err
	}
	defer fc.close()
	w := &workload{fc: fc, admin: admin, fleet: cfg.fleetSandboxes, tokens: map[string]string{}}
	if err := w.setup(ctx, cfg.sandboxes, logw); err != nil {
		return err
	}

	pp, err := startProxiesProc()
	if err != nil {
		return err
	}
	defer pp.close()
	creds := make([]sandboxCreds, cfg.fleetSandboxes)
	for i := range creds {
		creds[i] = sandboxCreds{Name: w.names[i], Token: w.tokens[w.names[i]]}
	}
	fmt.Fprintf(logw, "%d simulated proxies on %d sandboxes: connecting\n", cfg.proxies, cfg.fleetSandboxes)
	connectStart := time.Now()
	if _, err := pp.call(childRequest{Op: "start", Addrs: addrs, Sandboxes: creds, Proxies: cfg.proxies, Timeout: cfg.timeout}); err != nil {
		return err
	}
	fmt.Fprintf(logw, "  every proxy connected in %s\n", time.Since(connectStart).Round(time.Millisecond))

	fmt.Fprintf(logw, "workload for %s: %.0f proposal and approval operations/s, a policy set every %s, a replica killed every %s\n",
		cfg.duration, cfg.opsRate, cfg.setEvery, cfg.killEvery)
	t0 := time.Now()
	samples := []cpuSample{sampleCPU(pids, pp.pid())}
	var sampler sync.WaitGroup
	sctx, stopSampling := context.WithCancel(ctx)
	sampler.Go(func() {
		// One sample a minute, and one when the workload ends.
		for m := 1; ; m++ {
			select {
			case <-sctx.Done():
				return
			case <-time.After(time.Until(t0.Add(time.Duration(m) * time.Minute))):
			}
			if time.Since(t0) < cfg.duration {
				samples = append(samples, sampleCPU(pids, pp.pid()))
			}
		}
	})
	kills := drive(ctx, cfg, w, reps, t0, logw)
	stopSampling()
	sampler.Wait()
	samples = append(samples, sampleCPU(pids, pp.pid()))
	if ctx.Err() != nil {
		return ctx.Err()
	}

	// Every proxy must end connected, on its sandbox's last version.
	targets := map[string]uint32{}
	for _, sb := range w.names[:cfg.fleetSandboxes] {
		var v *portcullisv1.PolicyVersion
		if _, err := fc.do(ctx, admin, func(ctx context.Context, conn *grpc.ClientConn) error {
			v, err = portcullisv1.NewPolicyServiceClient(conn).GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: sb})
			return err
		}); err != nil {
			return fmt.Errorf("read %s's current version: %w", sb, err)
		}
		targets[sb] = v.GetVersion()
	}
	final, ferr := pp.call(childRequest{Op: "await", Targets: targets, Timeout: cfg.timeout})
	switch {
	case final == nil:
		return ferr
	case ferr != nil:
		fmt.Fprintf(logw, "at the end: %v: %v\n", ferr, final.Missing)
	}
	stopped, serr := pp.call(childRequest{Op: "stop"})
	if serr != nil {
		return serr
	}

	fmt.Fprintln(logw, "reading the history back")
	hist, err := w.readBack(ctx, cfg.fleetSandboxes)
	if err != nil {
		return err
	}
	if cfg.timeline != "" {
		if err := writeTimeline(cfg.timeline, t0, kills, w.results, stopped.Proxies, hist); err != nil {
			return err
		}
	}
	res := analyze(cfg, t0, kills, w.results, stopped.Proxies, hist)
	res.Shed = w.shed
	for i := 1; i < len(samples) && i <= len(res.Minutes); i++ {
		res.Minutes[i-1].CPU = coresBetween(samples[i-1], samples[i])
	}
	res.FinalConverged = ferr == nil
	res.FinalConvergeMs = ms(final.Took)
	res.FinalMissing = final.Missing
	res.ReplicaLog = map[string]int{}
	for _, r := range reps {
		res.ReplicaWarnings = append(res.ReplicaWarnings, r.warnings)
		for m, n := range r.messages() {
			res.ReplicaLog[m] += n
		}
	}
	if cfg.json {
		return benchcli.WriteJSON(out, res)
	}
	res.writeTable(out)
	if res.Lost > 0 || res.Regressions > 0 || res.Forks > 0 || !res.FinalConverged || !res.AuditOK {
		return fmt.Errorf("LOST=%d, regressions=%d, forks=%d, every proxy on its last version at the end: %t, audit chain verifies: %t",
			res.Lost, res.Regressions, res.Forks, res.FinalConverged, res.AuditOK)
	}
	return nil
}

// drive runs the workload from t0 for cfg.duration: the proposals and
// approvals, the policy sets, and the kills. It returns once every
// operation it started has ended and every killed replica is back.
func drive(ctx context.Context, cfg config, w *workload, reps []*replica, t0 time.Time, logw io.Writer) []kill {
	ctx, cancel := context.WithDeadline(ctx, t0.Add(cfg.duration))
	defer cancel()
	var ops sync.WaitGroup
	var loops sync.WaitGroup
	// Policy sets: one every setEvery, at most 8 in flight.
	loops.Go(func() {
		sem := make(chan struct{}, 8)
		t := time.NewTicker(cfg.setEvery)
		defer t.Stop()
		for k := 1; ; k++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				continue // eight still in flight: this one is skipped
			}
			ops.Go(func() {
				defer func() { <-sem }()
				w.setPolicy(context.WithoutCancel(ctx), k)
			})
		}
	})
	// Proposals, each followed by its approval: ops/2 a second, at most
	// 256 pairs in flight (more are shed and counted).
	if cfg.opsRate > 0 {
		loops.Go(func() {
			sem := make(chan struct{}, 256)
			every := time.Duration(float64(time.Second) / (cfg.opsRate / 2))
			start := time.Now()
			for k := 0; ; k++ {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(start.Add(time.Duration(k) * every))):
				}
				select {
				case sem <- struct{}{}:
				default:
					w.mu.Lock()
					w.shed++
					w.mu.Unlock()
					continue
				}
				ops.Go(func() {
					defer func() { <-sem }()
					w.proposeApprove(context.WithoutCancel(ctx), k)
				})
			}
		})
	}
	// Kills: the first half an interval in, then one every interval, each
	// replica in turn; the killed replica is restarted at once.
	var kills []kill
	if cfg.killEvery > 0 {
		loops.Go(func() {
			for i := 0; ; i++ {
				at := t0.Add(cfg.killEvery/2 + time.Duration(i)*cfg.killEvery)
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(at)):
				}
				r := reps[i%len(reps)]
				k := kill{Replica: r.index, At: time.Now()}
				r.kill()
				if err := r.start(context.WithoutCancel(ctx)); err != nil {
					k.Err = err.Error()
					fmt.Fprintf(logw, "  restart of replica %d failed: %v\n", r.index, err)
				}
				k.Ready = time.Now()
				kills = append(kills, k)
				fmt.Fprintf(logw, "  %5.1fs: killed replica %d (SIGKILL); serving again %s later\n",
					k.At.Sub(t0).Seconds(), r.index, k.Ready.Sub(k.At).Round(time.Millisecond))
			}
		})
	}
	loops.Wait()
	ops.Wait()
	return kills
}
