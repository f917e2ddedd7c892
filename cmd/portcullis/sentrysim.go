//go:build !proxyonly

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/gateway"
)

// simSource is one simulated watchdog: its source and its sentry token.
type simSource struct{ source, token string }

// simConfig is what sentry simulate was asked for.
type simConfig struct {
	rate           int
	duration       time.Duration
	sources        int
	source         string
	quarantine     string
	sandboxes      []string
	duplicateShare float64 // events sent twice
	lateShare      float64 // events held back, leaving a gap filled later
	lateBy         time.Duration
}

// simTally is one source's count.
type simTally struct {
	Source        string      `json:"source"`
	Sent          int         `json:"sent"`
	Stored        int         `json:"stored"`
	Duplicates    int         `json:"duplicates"`
	Refused       int         `json:"refused"`
	AckedSequence uint64      `json:"acked_sequence"`
	Gaps          [][2]uint64 `json:"gaps"`
	Quarantines   int         `json:"quarantines"`
	Failures      int         `json:"failed_requests"`
	FirstRefusal  string      `json:"first_refusal,omitempty"`
}

func newSentrySimulateCmd(env *environment) *cobra.Command {
	cfg := simConfig{duplicateShare: 0.03, lateShare: 0.01, lateBy: 2 * time.Second}
	var sandboxes string
	cmd := &cobra.Command{
		Use:   "simulate --token-file F --rate N --duration D [--sources K] [--quarantine SANDBOX]",
		Short: "Send realistic watchdog event streams to a gateway (tests, demos, benchmarks)",
		Long: `Send streams of Sentry events to the gateway's HTTP intake
(POST /v1/sentry/events, batches every 100 ms) as watchdogs would:
tool_access, policy_decision, identity_check and heartbeat events about
the sandboxes of --sandboxes, each source numbering its events from 1.
Like real senders it delivers at least once and not in order: about 3% of
events are sent twice, each batch is shuffled, and about 1% are held back
for 2 seconds, leaving gaps that close when they arrive.

The token: --token-file F holds either one sentry token (then --source
names its source, the token's name) or lines "SOURCE TOKEN", one per
watchdog (--sources K uses the first K). --token and PORTCULLIS_TOKEN work
as elsewhere, with --source.

--rate is events a second across all sources; --quarantine SANDBOX sends
one quarantine (processing remediate) for that sandbox half-way through,
from the first source, which freezes it unless the gateway runs with
--sentry-dry-run or its --quarantine-budget is spent.

Progress goes to stderr every second; the summary per source (sent,
stored, duplicates, refused, acknowledged sequence, gaps left) to stdout,
or {"sources": [...]} with -o json.`,
		Example: `  portcullis token create --role sentry --name urn:dpu:node-17 -o json | jq -r .token > node-17.token
  portcullis sentry simulate --token-file node-17.token --source urn:dpu:node-17 --rate 500 --duration 30s --quarantine orders
  portcullis sentry simulate --token-file watchdogs.txt --sources 4 --rate 2000 --duration 1m`,
		Args: args(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.rate < 1 || cfg.rate > 1_000_000 {
				return usagef("--rate must be from 1 to 1000000 events a second, got %d", cfg.rate)
			}
			if cfg.duration <= 0 {
				return usagef("--duration must be positive, got %s", cfg.duration)
			}
			for _, s := range strings.Split(sandboxes, ",") {
				if s = strings.TrimSpace(s); s != "" {
					cfg.sandboxes = append(cfg.sandboxes, s)
				}
			}
			if len(cfg.sandboxes) == 0 {
				cfg.sandboxes = []string{cmp.Or(cfg.quarantine, "sandbox-1")}
			}
			srcs, err := env.simSources(cfg)
			if err != nil {
				return err
			}
			u, err := env.gatewayURL()
			if err != nil {
				return err
			}
			tallies := simulate(cmd.Context(), env, u.JoinPath(gateway.SentryEventsPath).String(), srcs, cfg)
			if env.jsonOutput() {
				b, err := json.MarshalIndent(map[string]any{"sources": tallies}, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(env.stdout, "%s\n", b)
				return err
			}
			tw := env.table("SOURCE", "SENT", "STORED", "DUPLICATES", "REFUSED", "ACKED", "GAPS", "QUARANTINES", "FAILED REQUESTS")
			for _, t := range tallies {
				row(tw, logField(t.Source), fmt.Sprint(t.Sent), fmt.Sprint(t.Stored), fmt.Sprint(t.Duplicates), fmt.Sprint(t.Refused),
					fmt.Sprint(t.AckedSequence), pairsCell(t.Gaps), fmt.Sprint(t.Quarantines), fmt.Sprint(t.Failures))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, t := range tallies {
				if t.FirstRefusal != "" {
					fmt.Fprintf(env.stderr, "%s: first refusal: %s\n", logField(t.Source), t.FirstRefusal)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.rate, "rate", 100, "events a second, across all sources")
	f.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to send")
	f.IntVar(&cfg.sources, "sources", 0, "use the first `K` sources of a \"SOURCE TOKEN\" token file (default all)")
	f.StringVar(&cfg.source, "source", "", "the `SOURCE` of a single token (the token's name)")
	f.StringVar(&cfg.quarantine, "quarantine", "", "send one quarantine (remediate) for `SANDBOX` half-way through")
	f.StringVar(&sandboxes, "sandboxes", "", "comma-separated `SANDBOXES` the events are about (default the --quarantine sandbox, or sandbox-1)")
	return cmd
}

// pairsCell is gaps as "6-7, 10", or "none".
func pairsCell(gaps [][2]uint64) string {
	if len(gaps) == 0 {
		return "none"
	}
	var parts []string
	for _, g := range gaps {
		if g[0] == g[1] {
			parts = append(parts, fmt.Sprint(g[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", g[0], g[1]))
		}
	}
	return strings.Join(parts, ", ")
}

// simSources reads the watchdogs to simulate from the token options.
func (e *environment) simSources(cfg simConfig) ([]simSource, error) {
	if e.tokenFileFlag != "" && e.tokenFlag == "" {
		data, err := os.ReadFile(e.tokenFileFlag)
		if err != nil {
			return nil, inputErr(fmt.Errorf("read token file: %w", err))
		}
		var pairs []simSource
		var single []string
		for i, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 0 || strings.HasPrefix(f[0], "#"):
			case len(f) == 1:
				single = append(single, f[0])
			case len(f) == 2:
				pairs = append(pairs, simSource{source: f[0], token: f[1]})
			default:
				return nil, usagef("token file %s line %d: want a token, or SOURCE TOKEN", e.tokenFileFlag, i+1)
			}
		}
		switch {
		case len(pairs) > 0 && len(single) > 0:
			return nil, usagef("token file %s mixes lone tokens and SOURCE TOKEN lines", e.tokenFileFlag)
		case len(pairs) > 0:
			if cfg.source != "" {
				return nil, usagef("--source: the token file names each token's source")
			}
			if cfg.sources > len(pairs) {
				return nil, usagef("--sources %d: the token file has %d", cfg.sources, len(pairs))
			}
			if cfg.sources > 0 {
				pairs = pairs[:cfg.sources]
			}
			return pairs, nil
		case len(single) > 1:
			return nil, usagef("token file %s has %d tokens: write them as SOURCE TOKEN lines", e.tokenFileFlag, len(single))
		case len(single) == 0:
			return nil, inputErr(fmt.Errorf("token file %s is empty", e.tokenFileFlag))
		}
		return e.singleSource(cfg, single[0])
	}
	tok, err := e.token()
	if err != nil {
		return nil, err
	}
	return e.singleSource(cfg, tok)
}

func (e *environment) singleSource(cfg simConfig, token string) ([]simSource, error) {
	switch {
	case cfg.source == "":
		return nil, usagef("--source is required with a single token: the token's name")
	case cfg.sources > 1:
		return nil, usagef("--sources %d needs a token file of SOURCE TOKEN lines", cfg.sources)
	case token == "":
		return nil, usagef("give the sentry token with --token-file (or --token, or PORTCULLIS_TOKEN)")
	}
	return []simSource{{source: cfg.source, token: token}}, nil
}

// simulate runs every source's stream for cfg.duration, then sends what it
// held back, and returns the tallies in source order.
func simulate(ctx context.Context, env *environment, url string, srcs []simSource, cfg simConfig) []*simTally {
	start := time.Now()
	tallies := make([]*simTally, len(srcs))
	var mu sync.Mutex // guards tallies while streams run
	var wg sync.WaitGroup
	for i, s := range srcs {
		tallies[i] = &simTally{Source: s.source, Gaps: [][2]uint64{}}
		w := &simStream{src: s, url: url, client: &http.Client{Timeout: 30 * time.Second}, cfg: cfg, first: i == 0,
			rng: rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(i))), tally: tallies[i], mu: &mu,
			rate: max(1, cfg.rate/len(srcs))}
		wg.Go(func() { w.run(ctx, start) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return tallies
		case <-tick.C:
			mu.Lock()
			var sent, stored, dups, refused, gaps int
			for _, t := range tallies {
				sent, stored, dups, refused, gaps = sent+t.Sent, stored+t.Stored, dups+t.Duplicates, refused+t.Refused, gaps+len(t.Gaps)
			}
			mu.Unlock()
			fmt.Fprintf(env.stderr, "%s: sent %d (stored %d, duplicates %d, refused %d), open gaps %d\n",
				time.Since(start).Round(time.Second), sent, stored, dups, refused, gaps)
		}
	}
}

// simStream is one source's sender.
type simStream struct {
	src    simSource
	url    string
	client *http.Client
	cfg    simConfig
	first  bool // sends the quarantine
	rng    *rand.Rand
	rate   int
	tally  *simTally
	mu     *sync.Mutex

	seq  uint64
	late []lateEvent
	prev []map[string]any // the last batch, some of which is sent again
}

type lateEvent struct {
	due time.Time
	ev  map[string]any
}

func (w *simStream) run(ctx context.Context, start time.Time) {
	const every = 100 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	quarantineAt := start.Add(w.cfg.duration / 2)
	quarantined := w.cfg.quarantine == "" || !w.first
	carry := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if now.Sub(start) >= w.cfg.duration {
				w.flushLate(ctx, now, true)
				return
			}
			carry += float64(w.rate) * every.Seconds()
			n := int(carry)
			carry -= float64(n)
			batch := w.batch(now, n)
			if !quarantined && !now.Before(quarantineAt) {
				quarantined = true
				batch = append(batch, w.quarantineEvent(now))
				w.count(func(t *simTally) { t.Quarantines++ })
			}
			batch = append(batch, w.dueLate(now, false)...)
			w.rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			w.send(ctx, batch)
		}
	}
}

// batch makes n new events, some held back, plus some of the last batch
// again.
func (w *simStream) batch(now time.Time, n int) []map[string]any {
	var out []map[string]any
	for _, ev := range w.prev {
		if w.rng.Float64() < w.cfg.duplicateShare {
			out = append(out, ev)
		}
	}
	w.prev = w.prev[:0]
	for range n {
		ev := w.event(now)
		if w.rng.Float64() < w.cfg.lateShare {
			w.late = append(w.late, lateEvent{due: now.Add(w.cfg.lateBy), ev: ev})
			continue
		}
		out = append(out, ev)
		w.prev = append(w.prev, ev)
	}
	return out
}

func (w *simStream) dueLate(now time.Time, all bool) []map[string]any {
	var out []map[string]any
	keep := w.late[:0]
	for _, l := range w.late {
		if all || !now.Before(l.due) {
			out = append(out, l.ev)
		} else {
			keep = append(keep, l)
		}
	}
	w.late = keep
	return out
}

func (w *simStream) flushLate(ctx context.Context, now time.Time, all bool) {
	if batch := w.dueLate(now, all); len(batch) > 0 {
		w.send(ctx, batch)
	}
}

var simTools = []string{"lookup_order", "list_orders", "refund_order", "update_address"}

func (w *simStream) envelope(now time.Time, class string) map[string]any {
	w.seq++
	return map[string]any{
		"specversion": "1.0", "id": fmt.Sprintf("sim-%d-%d", now.UnixNano(), w.seq), "source": w.src.source,
		"sequence": w.seq, "type": "portcullis.sentry.v1." + class, "time": now.UTC().Format(time.RFC3339Nano),
		"subject": w.cfg.sandboxes[w.rng.IntN(len(w.cfg.sandboxes))],
	}
}

// event is one bulk event: mostly tool calls, then policy decisions,
// identity checks and heartbeats.
func (w *simStream) event(now time.Time) map[string]any {
	switch p := w.rng.IntN(100); {
	case p < 70:
		ev := w.envelope(now, "tool_access")
		ev["data"] = map[string]any{"severity": "info", "tool_call": map[string]any{
			"server": "orders", "tool": simTools[w.rng.IntN(len(simTools))],
			"arguments_digest": fmt.Sprintf("sha256:%064x", w.rng.Uint64()),
		}}
		return ev
	case p < 85:
		ev := w.envelope(now, "policy_decision")
		ev["data"] = map[string]any{"severity": "low", "policy": map[string]any{"version": 1, "hash": fmt.Sprintf("%064x", w.rng.Uint64()%4)}}
		return ev
	case p < 95:
		ev := w.envelope(now, "identity_check")
		ev["data"] = map[string]any{"severity": "info", "agent": map[string]any{"id": "agent-" + fmt.Sprint(w.rng.IntN(8)), "delegated_scope": []string{"orders:read"}}}
		return ev
	default:
		ev := w.envelope(now, "heartbeat")
		delete(ev, "subject")
		ev["data"] = map[string]any{"severity": "info"}
		return ev
	}
}

func (w *simStream) quarantineEvent(now time.Time) map[string]any {
	ev := w.envelope(now, "quarantine")
	ev["subject"] = w.cfg.quarantine
	ev["data"] = map[string]any{"severity": "critical", "processing": "remediate",
		"finding": map[string]any{"title": "simulated: agent exfiltrating data", "confidence": 0.99}}
	return ev
}

func (w *simStream) count(f func(*simTally)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w.tally)
}

// send posts one batch and tallies the answer.
func (w *simStream) send(ctx context.Context, batch []map[string]any) {
	if len(batch) == 0 {
		return
	}
	body, err := json.Marshal(batch)
	if err != nil {
		w.count(func(t *simTally) { t.Failures++ })
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		w.count(func(t *simTally) { t.Failures++ })
		return
	}
	req.Header.Set("Content-Type", "application/cloudevents-batch+json")
	req.Header.Set("Authorization", "Bearer "+w.src.token)
	res, err := w.client.Do(req)
	if err != nil {
		w.count(func(t *simTally) { t.Failures++; t.FirstRefusal = cmp.Or(t.FirstRefusal, err.Error()) })
		return
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	var a struct {
		Stored        int         `json:"stored"`
		Duplicates    int         `json:"duplicates"`
		AckedSequence uint64      `json:"acked_sequence"`
		Gaps          [][2]uint64 `json:"gaps"`
		Refused       []struct {
			Reason string `json:"reason"`
		} `json:"refused"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || res.StatusCode != http.StatusOK {
		w.count(func(t *simTally) {
			t.Failures++
			t.FirstRefusal = cmp.Or(t.FirstRefusal, fmt.Sprintf("HTTP %d: %s", res.StatusCode, cmp.Or(a.Error, strings.TrimSpace(string(raw)))))
		})
		return
	}
	w.count(func(t *simTally) {
		t.Sent += len(batch)
		t.Stored += a.Stored
		t.Duplicates += a.Duplicates
		t.Refused += len(a.Refused)
		if len(a.Refused) > 0 {
			t.FirstRefusal = cmp.Or(t.FirstRefusal, a.Refused[0].Reason)
		}
		t.AckedSequence = max(t.AckedSequence, a.AckedSequence)
		t.Gaps = slices.Clone(a.Gaps)
		if t.Gaps == nil {
			t.Gaps = [][2]uint64{}
		}
	})
}
