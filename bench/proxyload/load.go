package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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

// appendList appends a tools/list request body with id.
func appendList(b []byte, id int64) []byte {
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, id, 10)
	return append(b, `,"method":"tools/list"}`...)
}

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

// maxSamplesPerWorker bounds one worker's requests in one round (and so the
// memory its latencies take).
const maxSamplesPerWorker = 1 << 20

// roundResult is one path's measurement in one round, as the load
// generator reports it to the program.
type roundResult struct {
	Requests  int             `json:"requests"`
	Failures  int             `json:"failures"`
	FirstErr  string          `json:"first_err,omitempty"`
	Elapsed   time.Duration   `json:"elapsed"`
	Latencies []time.Duration `json:"latencies"` // every request's, all workers, unsorted
	Capped    bool            `json:"capped"`    // some worker hit maxSamplesPerWorker
	LoadCPU   time.Duration   `json:"load_cpu"`  // the load generator's CPU over the round
	Dials     int64           `json:"dials"`     // the target's new connections so far
}

// load runs concurrency keep-alive clients against t for d; it runs in
// the load generator's process. Each worker records latencies in its own
// pre-sized slice (no locks, no growth on the hot path when perWorker is
// a fair estimate); they are merged after.
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
	cpu0 := benchenv.SelfCPU()
	start := time.Now()
	end := start.Add(d)
	for i := range workers {
		wg.Go(func() {
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
	}
	wg.Wait()
	r := roundResult{Elapsed: time.Since(start), LoadCPU: benchenv.SelfCPU() - cpu0, Dials: t.dials.Load()}
	n := 0
	for i := range workers {
		n += len(workers[i].lat)
	}
	r.Latencies = make([]time.Duration, 0, n)
	for i := range workers {
		w := &workers[i]
		r.Latencies = append(r.Latencies, w.lat...)
		r.Failures += w.failures
		r.Capped = r.Capped || w.capped
		if r.FirstErr == "" && w.firstErr != nil {
			r.FirstErr = w.firstErr.Error()
		}
	}
	r.Requests = len(r.Latencies)
	return r
}
