package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// The watchdogs: each source has a sentry token (TokenService.CreateToken,
// role sentry, named after the source) and numbers its events 1, 2, 3, ….
// A batch is sentryBatch events POSTed to /v1/sentry/events as
// application/cloudevents-batch+json, the way a watchdog that batches
// would send them.

const (
	batchMedia = "application/cloudevents-batch+json"
	eventMedia = "application/cloudevents+json"
	eventsPath = "/v1/sentry/events"
)

// source is one watchdog: its name, token and next sequence.
type source struct {
	name, token string
	next        atomic.Uint64 // the last sequence taken
}

// createSource creates a sentry token for name.
func (g *gatewayProc) createSource(ctx context.Context, name string) (*source, error) {
	res, err := g.token.CreateToken(g.adminCtx(ctx), &portcullisv1.CreateTokenRequest{Name: name, Role: "sentry"})
	if err != nil {
		return nil, fmt.Errorf("create sentry token %s: %w", name, err)
	}
	return &source{name: name, token: res.GetToken()}, nil
}

// take reserves n sequences and returns the first.
func (s *source) take(n int) uint64 { return s.next.Add(uint64(n)) - uint64(n) + 1 }

// subject is a sandbox the bulk events are about, and the policy hash
// the watchdog saw in force there (data.policy.hash).
type subject struct {
	name, hash string
	inForce    *atomic.Pointer[string] // when set, the hash in force (else hash)
}

// madeUpHash is the policy hash of the -findings events: one no proxy
// applied, so each is a drift finding.
const madeUpHash = "5f1d9c0a5f1d9c0a5f1d9c0a5f1d9c0a5f1d9c0a5f1d9c0a5f1d9c0a5f1d9c0a"

// subjectsOf is what the bulk events say about the fleet's sandboxes:
// the hash each proxy ACKed last (a quarantine round's freezes change it),
// or with findings the made-up hash.
func subjectsOf(f *fleet, findings bool) []subject {
	out := make([]subject, len(f.names))
	for i, name := range f.names {
		out[i] = subject{name: name, hash: madeUpHash}
		if !findings {
			out[i].hash, out[i].inForce = f.hashes[i], f.inForce[i]
		}
	}
	return out
}

// policyHash is the hash the watchdog reports for the subject now.
func (s subject) policyHash() string {
	if s.inForce != nil {
		if h := s.inForce.Load(); h != nil {
			return *h
		}
	}
	return s.hash
}

// appendBulkEvent appends one realistic stored-only event: a tool call the
// watchdog saw, with the agent, process, node, policy (version 1, sub's
// hash) and correlation ids it knows (about 900 bytes). now is the event
// time, RFC 3339. It appends piece by piece (fmt.Appendf took a fifth of
// a core at full ingest, CPU the gateway and Postgres share here).
func appendBulkEvent(b []byte, src string, seq uint64, sub subject, now string) []byte {
	b = append(b, `{"specversion":"1.0","id":"`...)
	b = append(b, src...)
	b = append(b, '-')
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `","source":"`...)
	b = append(b, src...)
	b = append(b, `","sequence":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"type":"portcullis.sentry.v1.tool_access","subject":"`...)
	b = append(b, sub.name...)
	b = append(b, `","time":"`...)
	b = append(b, now...)
	b = append(b, `","datacontenttype":"application/json","data":{"severity":"info","processing":"store_only",`+
		`"agent":{"id":"spiffe://corp.example/agent/`...)
	b = append(b, sub.name...)
	b = append(b, `","name":"orders-agent","delegated_scope":["orders:read","orders:lookup"]},"process":{"pid":`...)
	b = strconv.AppendUint(b, 1000+seq%30000, 10)
	b = append(b, `,"executable":"/usr/bin/python3.12","executable_digest":"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"},`+
		`"node":{"id":"node-17","dpu":"bf4-0000:03:00.0"},"policy":{"version":1,"hash":"`...)
	b = append(b, sub.policyHash()...)
	b = append(b, `"},"correlation":{"session":"s-`...)
	b = strconv.AppendUint(b, seq/100, 10)
	b = append(b, `","jsonrpc_id":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"trace_id":"`...)
	b = appendHex16(b, seq|1<<62)
	b = appendHex16(b, seq)
	return append(b, `"},"tool_call":{"server":"orders","tool":"lookup_order","arguments_digest":"sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"}}}`...)
}

// appendHex16 appends v as 16 lower-case hex digits (%016x).
func appendHex16(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[v>>uint(shift)&0xf])
	}
	return b
}

// batchBody is n bulk events of src from sequence first, about subjects
// (round robin).
func batchBody(buf *bytes.Buffer, src string, first uint64, n int, subjects []subject) []byte {
	buf.Reset()
	b := buf.AvailableBuffer()
	b = append(b, '[')
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		seq := first + uint64(i)
		b = appendBulkEvent(b, src, seq, subjects[int(seq)%len(subjects)], now)
	}
	b = append(b, ']')
	buf.Write(b)
	return buf.Bytes()
}

// quarantineEvent is a quarantine (remediate) of sandbox.
func quarantineEvent(src string, seq uint64, sandbox string) []byte {
	return fmt.Appendf(nil, `{"specversion":"1.0","id":"q-%d","source":%q,"sequence":%d,`+
		`"type":"portcullis.sentry.v1.quarantine","subject":%q,"time":%q,`+
		`"data":{"severity":"critical","processing":"remediate","process":{"pid":4242,"executable":"/usr/bin/curl"},`+
		`"finding":{"title":"exfiltration to an unlisted host","confidence":0.97}}}`,
		seq, src, seq, sandbox, time.Now().UTC().Format(time.RFC3339Nano))
}

// answer is the HTTP intake's answer.
type answer struct {
	Stored        int         `json:"stored"`
	Duplicates    int         `json:"duplicates"`
	AckedSequence uint64      `json:"acked_sequence"`
	Gaps          [][2]uint64 `json:"gaps"`
	Refused       []struct {
		Index  int    `json:"index"`
		Reason string `json:"reason"`
	} `json:"refused"`
	Error string `json:"error"`
}

// post sends body to the intake and reads the answer; anything but 200
// with nothing refused is an error.
func (g *gatewayProc) post(ctx context.Context, token, media string, body []byte) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.addr+eventsPath, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", media)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := g.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{}, err
	}
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil || res.StatusCode != http.StatusOK {
		return a, fmt.Errorf("POST %s: %s: %.300s", eventsPath, res.Status, raw)
	}
	if len(a.Refused) > 0 {
		return a, fmt.Errorf("POST %s: %d events refused, first: %s", eventsPath, len(a.Refused), a.Refused[0].Reason)
	}
	return a, nil
}

// loadResult is what a stretch of bulk ingest did.
type loadResult struct {
	Batches, Stored, Duplicates int
	Elapsed                     time.Duration
	// Latency of each POST (send to answer read).
	Latencies []time.Duration
}

// load runs senders until ctx ends: sender j sends batches of batchSize
// events of source j mod len(sources), one after the other; with
// interval > 0 each sends a batch every interval (a paced load), else as
// fast as answers come back. With more senders than sources, a source
// has several batches in flight at once (sequences reserved per batch, so
// they may arrive out of order: gaps open and close).
func (g *gatewayProc) load(ctx context.Context, sources []*source, senders, batchSize int, interval time.Duration, subjects []subject) (loadResult, error) {
	var (
		mu    sync.Mutex
		res   loadResult
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for j := range senders {
		src := sources[j%len(sources)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf bytes.Buffer
			var tick *time.Ticker
			if interval > 0 {
				// Spread the senders over the interval.
				sleep(ctx, interval*time.Duration(j)/time.Duration(senders))
				tick = time.NewTicker(interval)
				defer tick.Stop()
			}
			for ctx.Err() == nil {
				body := batchBody(&buf, src.name, src.take(batchSize), batchSize, subjects)
				t0 := time.Now()
				a, err := g.post(context.WithoutCancel(ctx), src.token, batchMedia, body)
				took := time.Since(t0)
				mu.Lock()
				if err != nil {
					if first == nil {
						first = fmt.Errorf("source %s: %w", src.name, err)
					}
					mu.Unlock()
					return
				}
				res.Batches++
				res.Stored += a.Stored
				res.Duplicates += a.Duplicates
				res.Latencies = append(res.Latencies, took)
				mu.Unlock()
				if tick != nil {
					select {
					case <-ctx.Done():
					case <-tick.C:
					}
				}
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res, first
}

// sourceName is the i-th bulk source's name.
func sourceName(i int) string { return "sentry://bench-node-" + strconv.Itoa(i) }
