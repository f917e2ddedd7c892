package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

// target is one path to the upstream: a URL and a keep-alive client.
type target struct {
	name      string
	url       string
	transport *http.Transport
	client    *http.Client
	// dials counts the client's new connections: with keep-alive working
	// it stays at the concurrency.
	dials atomic.Int64
	// extCPU is the CPU used so far by the processes serving this path
	// outside this one (nginx); nil when there are none.
	extCPU func() time.Duration
}

// newTarget builds a keep-alive client for url, through proxy when it is
// not nil (plain-HTTP absolute-form requests).
func newTarget(name, rawURL string, proxy *url.URL, concurrency int) *target {
	t := &target{name: name, url: rawURL}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	t.transport = &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			t.dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		MaxIdleConns:        concurrency,
		MaxIdleConnsPerHost: concurrency,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	if proxy != nil {
		t.transport.Proxy = http.ProxyURL(proxy)
	}
	t.client = &http.Client{Transport: t.transport, Timeout: 30 * time.Second}
	return t
}

func (t *target) close() { t.transport.CloseIdleConnections() }

func (t *target) externalCPU() time.Duration {
	if t.extCPU == nil {
		return 0
	}
	return t.extCPU()
}

// mcpHeader is what an MCP client sends with a tools/call (2025-11-25).
var mcpHeader = http.Header{
	"Content-Type":         {"application/json"},
	"Accept":               {"application/json, text/event-stream"},
	"Mcp-Protocol-Version": {"2025-11-25"},
}

// appendCall appends the tools/call request body with id.
func appendCall(b []byte, id int64, tool, args string) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	b = append(b, `,"method":"tools/call","params":{"name":"`...)
	b = append(b, tool...)
	b = append(b, `","arguments":`...)
	b = append(b, args...)
	return append(b, `}}`...)
}

const lookupArgs = `{"order_id":"A-1042"}`

// call sends one tools/call and reads the whole response into buf.
func (t *target) call(ctx context.Context, body []byte, buf *bytes.Buffer) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = mcpHeader.Clone()
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, 1<<20)); err != nil {
		return resp.StatusCode, err
	}
	return resp.StatusCode, nil
}

// verify checks, before anything is measured, that every path answers a
// lookup_order with 200 and the upstream's body, and that Portcullis
// denies refund_order and a lookup_order failing the argument schema with
// 403 without the upstream seeing either.
func verify(ctx context.Context, targets []*target, up *upstream) error {
	var buf bytes.Buffer
	for _, t := range targets {
		for id := int64(1); id <= 3; id++ {
			status, err := t.call(ctx, appendCall(nil, id, "lookup_order", lookupArgs), &buf)
			if err != nil {
				return fmt.Errorf("%s: lookup_order: %w", t.name, err)
			}
			if status != http.StatusOK {
				return fmt.Errorf("%s: lookup_order: status %d, want 200: %s", t.name, status, buf.Bytes())
			}
			if !up.valid(buf.Bytes()) || !bytes.Contains(buf.Bytes(), []byte(`"id":`+strconv.FormatInt(id, 10))) {
				return fmt.Errorf("%s: lookup_order: the body is not the upstream's answer to id %d: %s", t.name, id, buf.Bytes())
			}
		}
		if t.name != pathPortcullis {
			continue
		}
		for _, c := range []struct{ tool, args, why string }{
			{"refund_order", lookupArgs, "a deny rule"},
			{"lookup_order", `{"order_id":"x"}`, "the arguments schema"},
		} {
			before := up.hits.Load()
			status, err := t.call(ctx, appendCall(nil, 99, c.tool, c.args), &buf)
			if err != nil {
				return fmt.Errorf("%s: %s %s: %w", t.name, c.tool, c.args, err)
			}
			if status != http.StatusForbidden || !bytes.Contains(buf.Bytes(), []byte(`"error"`)) {
				return fmt.Errorf("%s: %s %s (denied by %s): status %d, want 403 with a JSON-RPC error: %s", t.name, c.tool, c.args, c.why, status, buf.Bytes())
			}
			if n := up.hits.Load() - before; n != 0 {
				return fmt.Errorf("%s: %s %s was denied, yet the upstream received %d request(s)", t.name, c.tool, c.args, n)
			}
		}
	}
	return nil
}

// maxSamplesPerWorker bounds one worker's requests in one round (and so the
// memory its latencies take).
const maxSamplesPerWorker = 1 << 20

// roundResult is one path's measurement in one round.
type roundResult struct {
	requests  int
	failures  int
	firstErr  error
	elapsed   time.Duration
	latencies []time.Duration // every request's, all workers, unsorted
	capped    bool            // some worker hit maxSamplesPerWorker
	selfCPU   time.Duration   // this process's CPU over the round
	extCPU    time.Duration   // nginx's CPU over the round (0 for the others)
}

// load runs concurrency keep-alive clients against t for d. Each worker
// records latencies in its own pre-sized slice (no locks, no growth on the
// hot path when perWorker is a fair estimate); they are merged after.
func load(ctx context.Context, t *target, concurrency int, d time.Duration, perWorker int, valid func([]byte) bool) roundResult {
	perWorker = min(max(perWorker, 1024), maxSamplesPerWorker)
	type worker struct {
		lat      []time.Duration
		failures int
		firstErr error
		capped   bool
	}
	workers := make([]worker, concurrency)
	for i := range workers {
		workers[i].lat = make([]time.Duration, 0, perWorker)
	}
	var wg sync.WaitGroup
	ext0 := t.externalCPU()
	cpu0 := benchenv.SelfCPU()
	start := time.Now()
	end := start.Add(d)
	for i := range workers {
		// The label tells the load clients apart in a CPU profile (their
		// transports' goroutines inherit it).
		wg.Go(func() {
			pprof.Do(ctx, pprof.Labels("component", "client"), func(ctx context.Context) {
				w := &workers[i]
				var (
					body []byte
					buf  bytes.Buffer
					id   = int64(i) << 32
				)
				for time.Now().Before(end) && ctx.Err() == nil {
					if len(w.lat) == maxSamplesPerWorker {
						w.capped = true
						return
					}
					id++
					body = appendCall(body[:0], id, "lookup_order", lookupArgs)
					t0 := time.Now()
					status, err := t.call(ctx, body, &buf)
					lat := time.Since(t0)
					if err == nil && (status != http.StatusOK || !valid(buf.Bytes())) {
						err = fmt.Errorf("status %d: %.200s", status, buf.Bytes())
					}
					if err != nil {
						w.failures++
						if w.firstErr == nil {
							w.firstErr = err
						}
						continue
					}
					w.lat = append(w.lat, lat)
				}
			})
		})
	}
	wg.Wait()
	r := roundResult{elapsed: time.Since(start), selfCPU: benchenv.SelfCPU() - cpu0, extCPU: t.externalCPU() - ext0}
	n := 0
	for i := range workers {
		n += len(workers[i].lat)
	}
	r.latencies = make([]time.Duration, 0, n)
	for i := range workers {
		w := &workers[i]
		r.latencies = append(r.latencies, w.lat...)
		r.failures += w.failures
		r.capped = r.capped || w.capped
		if r.firstErr == nil {
			r.firstErr = w.firstErr
		}
	}
	r.requests = len(r.latencies)
	return r
}

// measure warms every path up once, then runs the rounds: each round
// measures every path in turn for duration/rounds.
func measure(ctx context.Context, cfg config, targets []*target, valid func([]byte) bool, logw io.Writer) (*results, error) {
	res := &results{Concurrency: cfg.concurrency, Rounds: cfg.rounds, Duration: cfg.duration.String(), Warmup: cfg.warmup.String()}
	roundDur := cfg.duration / time.Duration(cfg.rounds)
	perWorker := make(map[string]int, len(targets))
	for _, t := range targets {
		perWorker[t.name] = 64 << 10
		if cfg.warmup > 0 {
			fmt.Fprintf(logw, "warm-up %s: %s\n", t.name, cfg.warmup)
			w := load(ctx, t, cfg.concurrency, cfg.warmup, 1024, valid)
			if w.failures > 0 {
				return nil, fmt.Errorf("%s: %d requests failed during the warm-up; first: %w", t.name, w.failures, w.firstErr)
			}
			// Room for twice the warm-up's rate.
			rate := float64(w.requests) / w.elapsed.Seconds()
			perWorker[t.name] = int(2 * rate * roundDur.Seconds() / float64(cfg.concurrency))
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	byPath := map[string]*pathResult{}
	for _, t := range targets {
		pr := &pathResult{Path: t.name}
		byPath[t.name] = pr
		res.Paths = append(res.Paths, pr)
	}
	all := map[string][]time.Duration{}
	for round := 1; round <= cfg.rounds; round++ {
		for _, t := range targets {
			r := load(ctx, t, cfg.concurrency, roundDur, perWorker[t.name], valid)
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			pr := byPath[t.name]
			pr.add(r, round)
			all[t.name] = append(all[t.name], r.latencies...)
			fmt.Fprintf(logw, "round %d %-10s %8.0f req/s  p50 %6.0f µs  p99 %6.0f µs\n", round, t.name,
				pr.RoundRPS[round-1], pr.RoundP50[round-1], pr.roundP99[round-1])
			if r.firstErr != nil && pr.FirstError == "" {
				pr.FirstError = r.firstErr.Error()
			}
		}
	}
	for _, t := range targets {
		byPath[t.name].finish(all[t.name], t.dials.Load())
	}
	res.ratios()
	return res, nil
}
