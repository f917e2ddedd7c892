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
	"slices"
	"strings"
	"sync"
	"time"
)

// source is one simulated watchdog: its source name and its sentry token.
type source struct{ name, token string }

// config is what the run was asked for.
type config struct {
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

// tally is one source's count.
type tally struct {
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

// simulate runs every source's stream for cfg.duration, then sends what it
// held back, and returns the tallies in source order.
func simulate(ctx context.Context, progress io.Writer, url string, srcs []source, cfg config) []*tally {
	start := time.Now()
	tallies := make([]*tally, len(srcs))
	var mu sync.Mutex // guards tallies while streams run
	var wg sync.WaitGroup
	for i, s := range srcs {
		tallies[i] = &tally{Source: s.name, Gaps: [][2]uint64{}}
		w := &stream{src: s, url: url, client: &http.Client{Timeout: 30 * time.Second}, cfg: cfg, first: i == 0,
			rng: rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(i))), total: tallies[i], mu: &mu,
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
			fmt.Fprintf(progress, "%s: sent %d (stored %d, duplicates %d, refused %d), open gaps %d\n",
				time.Since(start).Round(time.Second), sent, stored, dups, refused, gaps)
		}
	}
}

// stream is one source's sender.
type stream struct {
	src    source
	url    string
	client *http.Client
	cfg    config
	first  bool // sends the quarantine
	rng    *rand.Rand
	rate   int
	total  *tally
	mu     *sync.Mutex

	seq  uint64
	late []lateEvent
	prev []map[string]any // the last batch, some of which is sent again
}

type lateEvent struct {
	due time.Time
	ev  map[string]any
}

func (w *stream) run(ctx context.Context, start time.Time) {
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
				w.count(func(t *tally) { t.Quarantines++ })
			}
			batch = append(batch, w.dueLate(now, false)...)
			w.rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			w.send(ctx, batch)
		}
	}
}

// batch makes n new events, some held back, plus some of the last batch
// again.
func (w *stream) batch(now time.Time, n int) []map[string]any {
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

func (w *stream) dueLate(now time.Time, all bool) []map[string]any {
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

func (w *stream) flushLate(ctx context.Context, now time.Time, all bool) {
	if batch := w.dueLate(now, all); len(batch) > 0 {
		w.send(ctx, batch)
	}
}

var tools = []string{"lookup_order", "list_orders", "refund_order", "update_address"}

func (w *stream) envelope(now time.Time, class string) map[string]any {
	w.seq++
	return map[string]any{
		"specversion": "1.0", "id": fmt.Sprintf("sim-%d-%d", now.UnixNano(), w.seq), "source": w.src.name,
		"sequence": w.seq, "type": "portcullis.sentry.v1." + class, "time": now.UTC().Format(time.RFC3339Nano),
		"subject": w.cfg.sandboxes[w.rng.IntN(len(w.cfg.sandboxes))],
	}
}

// event is one bulk event: mostly tool calls, then policy decisions,
// identity checks and heartbeats.
func (w *stream) event(now time.Time) map[string]any {
	switch p := w.rng.IntN(100); {
	case p < 70:
		ev := w.envelope(now, "tool_access")
		ev["data"] = map[string]any{"severity": "info", "tool_call": map[string]any{
			"server": "orders", "tool": tools[w.rng.IntN(len(tools))],
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

func (w *stream) quarantineEvent(now time.Time) map[string]any {
	ev := w.envelope(now, "quarantine")
	ev["subject"] = w.cfg.quarantine
	ev["data"] = map[string]any{"severity": "critical", "processing": "remediate",
		"finding": map[string]any{"title": "simulated: agent exfiltrating data", "confidence": 0.99}}
	return ev
}

func (w *stream) count(f func(*tally)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w.total)
}

// send posts one batch and tallies the answer.
func (w *stream) send(ctx context.Context, batch []map[string]any) {
	if len(batch) == 0 {
		return
	}
	body, err := json.Marshal(batch)
	if err != nil {
		w.count(func(t *tally) { t.Failures++ })
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		w.count(func(t *tally) { t.Failures++ })
		return
	}
	req.Header.Set("Content-Type", "application/cloudevents-batch+json")
	req.Header.Set("Authorization", "Bearer "+w.src.token)
	res, err := w.client.Do(req)
	if err != nil {
		w.count(func(t *tally) { t.Failures++; t.FirstRefusal = cmp.Or(t.FirstRefusal, err.Error()) })
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
		w.count(func(t *tally) {
			t.Failures++
			t.FirstRefusal = cmp.Or(t.FirstRefusal, fmt.Sprintf("HTTP %d: %s", res.StatusCode, cmp.Or(a.Error, strings.TrimSpace(string(raw)))))
		})
		return
	}
	w.count(func(t *tally) {
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
