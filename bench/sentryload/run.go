package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/stats"
)

// config is what the flags set.
type config struct {
	binary       string
	gatewayLog   io.Writer // every line of the gateway's stderr, copied (-gateway-log)
	databaseURL  string
	dbParams     string
	eventsURL    string
	sqlite       bool
	senders      int
	batch        int
	warmup       time.Duration
	duration     time.Duration
	rounds       int
	floorRows    int
	inflight     []int
	memDuration  time.Duration
	sandboxes    int
	quarantines  int
	qInterval    time.Duration
	loadFraction float64
	loadRate     float64
	findings     bool
	json         bool
}

func (c *config) check() error {
	switch {
	case c.databaseURL == "" && !c.sqlite:
		return benchcli.Usagef("nothing to measure: give -database-url or -sqlite")
	case c.databaseURL != "" && !strings.HasPrefix(c.databaseURL, "postgres://") && !strings.HasPrefix(c.databaseURL, "postgresql://"):
		return benchcli.Usagef("-database-url must be a postgres:// URL (or empty to skip Postgres)")
	case c.senders < 1 || c.senders > 256:
		return benchcli.Usagef("-senders must be 1..256")
	case c.batch < 1 || c.batch > 1000:
		return benchcli.Usagef("-batch must be 1..1000 (the intake takes at most 1,000 events a batch)")
	case c.duration < time.Second || c.duration > 30*time.Minute:
		return benchcli.Usagef("-duration must be 1s..30m")
	case c.warmup < 0 || c.memDuration < time.Second:
		return benchcli.Usagef("-warmup must be ≥ 0 and -mem-duration ≥ 1s")
	case c.rounds < 1 || c.rounds > 20:
		return benchcli.Usagef("-rounds must be 1..20")
	case c.eventsURL != "" && (c.databaseURL == "" || !strings.HasPrefix(c.eventsURL, "postgres://") && !strings.HasPrefix(c.eventsURL, "postgresql://")):
		return benchcli.Usagef("-events-database-url must be a postgres:// URL, beside a -database-url")
	case c.floorRows != 0 && c.floorRows < c.batch:
		return benchcli.Usagef("-floor-rows must be 0 (as many as the round stored) or at least -batch")
	case c.sandboxes < 1 || c.sandboxes > 10_000:
		return benchcli.Usagef("-sandboxes must be 1..10000")
	case c.quarantines < 0 || c.quarantines > c.sandboxes:
		return benchcli.Usagef("-quarantines must be 0..-sandboxes (each round freezes each sandbox at most once)")
	case c.qInterval <= 0:
		return benchcli.Usagef("-quarantine-interval must be > 0")
	case c.loadFraction <= 0 || c.loadFraction > 1:
		return benchcli.Usagef("-load must be in (0, 1]")
	case c.loadRate < 0:
		return benchcli.Usagef("-load-rate must be ≥ 0")
	}
	for _, n := range c.inflight {
		if n < 1 || n > 1000 {
			return benchcli.Usagef("-inflight: each count must be 1..1000")
		}
	}
	return nil
}

// run builds the binary (unless -binary names one) and measures each
// engine with its own gateway process.
func run(ctx context.Context, cfg config, out, logw io.Writer) error {
	bin := cfg.binary
	if bin == "" {
		dir, err := os.MkdirTemp("", "sentryload-bin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintln(logw, "building ./cmd/portcullis")
		if bin, err = buildBinary(ctx, dir); err != nil {
			return err
		}
	}
	res := &results{Env: benchenv.Describe(), Findings: cfg.findings, Senders: cfg.senders, Batch: cfg.batch, Duration: cfg.duration.String(), Rounds: cfg.rounds}
	if cfg.databaseURL != "" {
		r, err := measure(ctx, cfg, bin, cfg.databaseURL, logw)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		res.Engines = append(res.Engines, r)
	}
	if cfg.sqlite {
		r, err := measure(ctx, cfg, bin, "", logw)
		if err != nil {
			return fmt.Errorf("sqlite: %w", err)
		}
		res.Engines = append(res.Engines, r)
	}
	if cfg.json {
		return benchcli.WriteJSON(out, res)
	}
	return res.writeTable(out)
}

// measure runs one gateway and measures, in order: sustained ingest (and
// on Postgres the raw COPY floor after each round), memory per in-flight
// event, and on Postgres the quarantine lane idle and under load.
func measure(ctx context.Context, cfg config, bin, serverURL string, logw io.Writer) (_ *engineResult, err error) {
	g, err := startGateway(ctx, bin, serverURL, cfg.eventsURL, cfg.dbParams, logw, cfg.gatewayLog)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			// What the gateway logged (its warnings and errors) says why.
			log := g.stderrText()
			fmt.Fprintf(logw, "the gateway's log (warnings and errors, last 4 KiB):\n%s\n", log[max(0, len(log)-4096):])
		}
		if err := g.stop(); err != nil {
			fmt.Fprintln(logw, "gateway stop:", err)
		}
	}()
	r := &engineResult{Engine: g.engine}
	sources := make([]*source, cfg.senders)
	for i := range sources {
		if sources[i], err = g.createSource(ctx, sourceName(i)); err != nil {
			return nil, err
		}
	}
	// The proxies are connected (and heartbeating) from the start: the
	// gateway ingests while it serves them, as it would in production.
	// SQLite gets them too, for the same gateway work, but no quarantine
	// rounds.
	// By default the bulk events agree with the data plane: each names the
	// hash its sandbox's proxy applied, and the proxies ship decision
	// records of the tool call they report, so the gateway derives no
	// findings. With -findings, every event is a drift and an unmediated
	// finding (the worst case: the gateway flags every stored row).
	fmt.Fprintf(logw, "%d sandboxes, one simulated proxy each: connecting (%s)\n", cfg.sandboxes, modeLine(cfg.findings))
	f, err := g.connectFleet(ctx, cfg.sandboxes, !cfg.findings)
	if err != nil {
		return nil, err
	}
	defer f.close()
	subjects := subjectsOf(f, cfg.findings)

	// One batch alone first. On a fresh Postgres database, the first
	// batches of several senders at once deadlock in the intake creating
	// the day's partition (see README.md): a long-running gateway has it.
	src0 := sources[0]
	first, err := g.post(ctx, src0.token, batchMedia, batchBody(new(bytes.Buffer), src0.name, src0.take(cfg.batch), cfg.batch, subjects))
	if err != nil {
		return nil, fmt.Errorf("first batch: %w", err)
	}
	stored := first.Stored // events stored before the findings are read
	copied := 0            // rows the floor has copied in earlier rounds
	for round := range cfg.rounds {
		if cfg.warmup > 0 && round == 0 {
			wctx, cancel := context.WithTimeout(ctx, cfg.warmup)
			w, err := g.load(wctx, sources, cfg.senders, cfg.batch, 0, subjects)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("warm-up: %w", err)
			}
			stored += w.Stored
		}
		in, err := g.ingest(ctx, cfg, sources, subjects)
		if err != nil {
			return nil, fmt.Errorf("ingest round %d: %w", round+1, err)
		}
		stored += in.Events
		if err := f.shipped(); err != nil {
			return nil, err
		}
		fmt.Fprintf(logw, "  ingest round %d: %.0f events/s (POST p50 %.0f ms, p99 %.0f ms), gateway %.2f cores, postgres %.2f cores\n",
			round+1, in.EventsPerSec, in.PostP50Ms, in.PostP99Ms, in.GatewayCores, in.PostgresCores)
		if g.engine == "postgres" {
			rows := cfg.floorRows
			if rows == 0 {
				rows = in.Events
			}
			fl, err := copyFloor(ctx, g.eventsURL, sources, copied, rows, cfg.batch, cfg.senders)
			if err != nil {
				return nil, fmt.Errorf("floor round %d: %w", round+1, err)
			}
			in.Floor = &fl
			copied += fl.Rows
			in.Ratio = in.EventsPerSec / fl.EventsPerSec
			fmt.Fprintf(logw, "  raw COPY round %d: %.0f events/s (%d rows, %d streams, postgres %.2f cores): intake ÷ raw %.2f\n",
				round+1, fl.EventsPerSec, fl.Rows, fl.Streams, fl.PostgresCores, in.Ratio)
		}
		r.Ingest = append(r.Ingest, in)
	}
	if g.engine == "postgres" {
		if r.Checked, err = g.findings(ctx, stored, cfg.findings, logw); err != nil {
			return nil, err
		}
	}
	// Idempotency: the first batch of source 0 again is all duplicates.
	a, err := g.post(ctx, src0.token, batchMedia, batchBody(new(bytes.Buffer), src0.name, 1, cfg.batch, subjects))
	if err != nil {
		return nil, fmt.Errorf("resend: %w", err)
	}
	if a.Stored != 0 || a.Duplicates != cfg.batch {
		return nil, fmt.Errorf("resending the first batch stored %d and counted %d duplicates, want 0 and %d", a.Stored, a.Duplicates, cfg.batch)
	}
	r.ResendDuplicates = a.Duplicates

	if len(cfg.inflight) > 0 {
		if r.Memory, err = g.memory(ctx, cfg, sources, subjects, logw); err != nil {
			return nil, err
		}
	}
	if g.engine == "postgres" && cfg.quarantines > 0 {
		if r.Quarantine, err = g.quarantineRounds(ctx, cfg, f, sources, subjects, r.maxRate(), logw); err != nil {
			return nil, err
		}
	}
	if err := f.shipped(); err != nil {
		return nil, err
	}
	return r, nil
}

// maxFindingShare is the most findings the checked events may have in
// the default mode, whose events agree with the data plane.
const maxFindingShare = 0.01

// findings waits 3 s (the gateway checks an event 2 s after storing it)
// and reads the findings it derived from the stored events so far
// (portcullis_sentry_findings_total, every kind) and the checks its full
// queue dropped (those events are never checked). Unless every event is
// meant to be a finding (-findings), more findings than maxFindingShare
// of the events checked fails the benchmark: the events or the decision
// records no longer match what the gateway checks.
func (g *gatewayProc) findings(ctx context.Context, stored int, worst bool, logw io.Writer) (*findingsResult, error) {
	sleep(ctx, 3*time.Second)
	m, err := g.scrape(ctx)
	if err != nil {
		return nil, err
	}
	fr := &findingsResult{
		Events:        stored,
		Flagged:       int(m.values["portcullis_sentry_findings_total"]),
		ChecksDropped: int(m.values["portcullis_sentry_checks_dropped_total"]),
	}
	fmt.Fprintf(logw, "  %s\n", fr)
	if checked := fr.Events - fr.ChecksDropped; !worst && float64(fr.Flagged) > maxFindingShare*float64(checked) {
		return fr, fmt.Errorf("the gateway flagged %d findings in %d events checked, more than %.0f%%: the bulk events should agree with the proxies' applied hashes and decision records (see the gateway's \"sentry findings\" log lines)",
			fr.Flagged, checked, 100*maxFindingShare)
	}
	return fr, nil
}

// ingest sends batches as fast as the gateway answers, one sender per
// source, for cfg.duration, and reads what it cost.
func (g *gatewayProc) ingest(ctx context.Context, cfg config, sources []*source, subjects []subject) (ingestResult, error) {
	gw0, pg0, self0 := g.cpu(), postgresCPU(), benchenv.SelfCPU()
	lctx, cancel := context.WithTimeout(ctx, cfg.duration)
	res, err := g.load(lctx, sources, cfg.senders, cfg.batch, 0, subjects)
	cancel()
	if err != nil {
		return ingestResult{}, err
	}
	if ctx.Err() != nil {
		return ingestResult{}, ctx.Err()
	}
	secs := res.Elapsed.Seconds()
	in := ingestResult{
		Batches: res.Batches, Events: res.Stored, Seconds: secs,
		EventsPerSec:  float64(res.Stored) / secs,
		GatewayCores:  (g.cpu() - gw0).Seconds() / secs,
		PostgresCores: pg0.Since(postgresCPU()).Seconds() / secs,
		ClientCores:   (benchenv.SelfCPU() - self0).Seconds() / secs,
	}
	if res.Duplicates != 0 {
		return in, fmt.Errorf("%d fresh events were counted as duplicates", res.Duplicates)
	}
	slices.Sort(res.Latencies)
	in.PostP50Ms, in.PostP99Ms = ms(stats.Percentile(res.Latencies, 50)), ms(stats.Percentile(res.Latencies, 99))
	if in.GatewayCores > 0 {
		in.EventsPerGatewayCore = in.EventsPerSec / in.GatewayCores
	}
	return in, nil
}

// memory keeps n batches in flight at once for cfg.memDuration, for each n
// of cfg.inflight, and reads the gateway's live heap from its gctrace
// lines (the heap marked live by each collection in the stretch, after
// its first second). Memory per 1,000 in-flight events is the growth of
// the median live heap from the smallest n to each larger one, divided
// by the events added in flight.
func (g *gatewayProc) memory(ctx context.Context, cfg config, sources []*source, subjects []subject, logw io.Writer) ([]memResult, error) {
	var out []memResult
	for _, n := range cfg.inflight {
		lctx, cancel := context.WithTimeout(ctx, cfg.memDuration)
		from := time.Now().Add(time.Second)
		res, err := g.load(lctx, sources, n, cfg.batch, 0, subjects)
		to := time.Now()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%d batches in flight: %w", n, err)
		}
		m := memResult{InFlight: n, Events: n * cfg.batch, EventsPerSec: float64(res.Stored) / res.Elapsed.Seconds()}
		live := g.gcsBetween(from, to)
		m.GCs = len(live)
		if len(live) > 0 {
			slices.Sort(live)
			m.LiveMedianMiB, m.LiveMaxMiB = float64(live[len(live)/2]), float64(live[len(live)-1])
		}
		if len(out) > 0 && m.GCs > 0 && out[0].GCs > 0 && n > out[0].InFlight {
			m.KiBPer1000 = (m.LiveMedianMiB - out[0].LiveMedianMiB) * 1024 / (float64(m.Events-out[0].Events) / 1000)
		}
		fmt.Fprintf(logw, "  %d batches in flight: %d collections, live heap median %.0f MiB, max %.0f MiB (%.0f events/s)\n", n, m.GCs, m.LiveMedianMiB, m.LiveMaxMiB, m.EventsPerSec)
		out = append(out, m)
	}
	return out, nil
}

// quarantineRounds times cfg.quarantines quarantines with no bulk ingest
// (the baseline), releases the sandboxes, then times as many again while
// bulk ingest runs at cfg.loadFraction of maxRate.
func (g *gatewayProc) quarantineRounds(ctx context.Context, cfg config, f *fleet, sources []*source, subjects []subject, maxRate float64, logw io.Writer) (*quarantineResult, error) {
	qsrc, err := g.createSource(ctx, "sentry://bench-quarantine")
	if err != nil {
		return nil, err
	}
	q := &quarantineResult{Proxies: len(f.names), Count: cfg.quarantines, Interval: cfg.qInterval.String(), MaxRate: maxRate, TargetRate: cfg.loadFraction * maxRate}
	if cfg.loadRate > 0 {
		q.TargetRate = cfg.loadRate // the same load for runs compared with each other
	}

	fmt.Fprintf(logw, "  %d quarantines, no bulk ingest\n", cfg.quarantines)
	logged := len(g.appliedLogs())
	idle, err := g.quarantines(ctx, f, qsrc, 0, cfg.quarantines, cfg.qInterval, 2)
	if err != nil {
		return nil, err
	}
	if err := g.gatewayTimes(ctx, idle, logged); err != nil {
		return nil, err
	}
	q.Idle = summarize(idle)
	released, err := g.unfreeze(ctx, f, 0, cfg.quarantines)
	if err != nil {
		return nil, err
	}

	// The bulk load: each sender a batch every interval, so that all of
	// them together send TargetRate events a second.
	interval := time.Duration(float64(cfg.senders*cfg.batch) / q.TargetRate * float64(time.Second))
	fmt.Fprintf(logw, "  %d quarantines, bulk ingest paced at %.0f events/s (%d senders, a batch each every %s)\n", cfg.quarantines, q.TargetRate, cfg.senders, interval.Round(time.Millisecond))
	m0, err := g.scrape(ctx)
	if err != nil {
		return nil, err
	}
	lctx, stopLoad := context.WithCancel(ctx)
	type loaded struct {
		res loadResult
		err error
	}
	done := make(chan loaded, 1)
	gw0 := g.cpu()
	go func() {
		res, err := g.load(lctx, sources, cfg.senders, cfg.batch, interval, subjects)
		done <- loaded{res, err}
	}()
	sleep(ctx, 2*time.Second) // let the load settle first
	logged = len(g.appliedLogs())
	busy, qerr := g.quarantines(ctx, f, qsrc, 0, cfg.quarantines, cfg.qInterval, released+1)
	stopLoad()
	l := <-done
	q.GatewayCores = (g.cpu() - gw0).Seconds() / l.res.Elapsed.Seconds()
	if qerr != nil {
		return nil, qerr
	}
	if l.err != nil {
		return nil, fmt.Errorf("bulk load: %w", l.err)
	}
	q.AchievedRate = float64(l.res.Stored) / l.res.Elapsed.Seconds()
	if err := g.gatewayTimes(ctx, busy, logged); err != nil {
		return nil, err
	}
	q.Loaded = summarize(busy)
	m1, err := g.scrape(ctx)
	if err != nil {
		return nil, err
	}
	q.Histogram = histogramDelta(m0, m1, "portcullis_sentry_quarantine_applied_seconds")
	q.Samples = busy
	return q, nil
}

// summary is a distribution of each of a quarantine's figures, ms.
type summary struct {
	N        int  `json:"n"`
	Ack      dist `json:"client_post_to_ack"`
	Post     dist `json:"client_post_answer"`
	GwLog    dist `json:"gateway_log_ingest_to_last_ack"`
	GwCommit dist `json:"gateway_log_ingest_to_commit"`
	GwRow    dist `json:"gateway_action_received_to_acked"`
}

func summarize(samples []quarantineSample) summary {
	pick := func(f func(quarantineSample) float64) dist {
		d := make([]time.Duration, len(samples))
		for i, s := range samples {
			d[i] = time.Duration(f(s) * float64(time.Millisecond))
		}
		return distOf(d)
	}
	return summary{
		N:        len(samples),
		Ack:      pick(func(s quarantineSample) float64 { return s.AckMs }),
		Post:     pick(func(s quarantineSample) float64 { return s.PostMs }),
		GwLog:    pick(func(s quarantineSample) float64 { return s.GwLogMs }),
		GwCommit: pick(func(s quarantineSample) float64 { return s.GwCommitMs }),
		GwRow:    pick(func(s quarantineSample) float64 { return s.GwRowMs }),
	}
}

// dist is a distribution, ms.
type dist struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func distOf(d []time.Duration) dist {
	if len(d) == 0 {
		return dist{}
	}
	slices.Sort(d)
	return dist{P50: ms(stats.Percentile(d, 50)), P99: ms(stats.Percentile(d, 99)), Max: ms(d[len(d)-1])}
}

// histDelta is the gateway's histogram over one stretch: how many it
// counted, their mean, and the upper bound of the bucket holding the
// 99th percentile (buckets double from 1 ms, so it is coarse).
type histDelta struct {
	Count   int     `json:"count"`
	MeanMs  float64 `json:"mean_ms"`
	P99LeMs float64 `json:"p99_le_ms"`
}

func histogramDelta(before, after scraped, name string) histDelta {
	n := after.values[name+"_count"] - before.values[name+"_count"]
	h := histDelta{Count: int(n)}
	if n <= 0 {
		return h
	}
	h.MeanMs = (after.values[name+"_sum"] - before.values[name+"_sum"]) / n * 1000
	h.P99LeMs = math.Inf(1)
	prev := before.buckets[name]
	for i, b := range after.buckets[name] {
		c := b.count
		if i < len(prev) {
			c -= prev[i].count
		}
		if c >= math.Ceil(0.99*n) {
			h.P99LeMs = b.le * 1000
			break
		}
	}
	return h
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
