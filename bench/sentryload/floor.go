package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The floor: a raw CopyFrom of the same rows, in the same run and the same
// database, into raw_sentry, a plain table with sentry_events' columns and
// indexes (LIKE … INCLUDING ALL) but no partitions, no key table, no
// ON CONFLICT and no per-source ordering: what one COPY stream per sender
// costs, the least any intake into that table can cost.

// floorColumns are sentry_events' columns, in its order.
var floorColumns = []string{"source", "id", "sequence", "type", "subject", "event_time", "received_at",
	"severity", "processing", "policy_hash", "denial_id", "trace_id", "flags", "document"}

// floorResult is the raw COPY's figure.
type floorResult struct {
	Rows          int     `json:"rows"`
	Streams       int     `json:"streams"`
	Seconds       float64 `json:"seconds"`
	EventsPerSec  float64 `json:"events_per_s"`
	PostgresCores float64 `json:"postgres_cores"` // CPU of the server's processes ÷ wall time
}

// copyFloor reads up to maxRows of the events the gateway stored (bulk
// sources, in sequence order, after the first skip), then COPYs them back
// into raw_sentry in batches of batchSize over streams connections at
// once, and times the COPYs alone. raw_sentry is emptied when skip is 0
// only: it grows round after round as sentry_events does, so that each
// round's floor writes into a table as large as the intake's was.
func copyFloor(ctx context.Context, dbURL string, sources []*source, skip, maxRows, batchSize, streams int) (floorResult, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return floorResult{}, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS raw_sentry (LIKE sentry_events INCLUDING ALL)`); err != nil {
		return floorResult{}, fmt.Errorf("create raw_sentry: %w", err)
	}
	if skip == 0 {
		if _, err := pool.Exec(ctx, `TRUNCATE raw_sentry`); err != nil {
			return floorResult{}, err
		}
	}
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.name
	}
	rows, err := pool.Query(ctx, `SELECT source, id, sequence, type, subject, event_time, received_at, severity, processing,
		policy_hash, denial_id, trace_id, flags::text, document::text
		FROM sentry_events WHERE source = ANY($1) ORDER BY sequence, source OFFSET $2 LIMIT $3`, names, skip, maxRows)
	if err != nil {
		return floorResult{}, fmt.Errorf("read stored events: %w", err)
	}
	var all [][]any
	for rows.Next() {
		var (
			src, id, typ, subject, sev, proc, hash, denial, trace, flags, doc string
			seq                                                               int64
			evTime, recv                                                      time.Time
		)
		if err := rows.Scan(&src, &id, &seq, &typ, &subject, &evTime, &recv, &sev, &proc, &hash, &denial, &trace, &flags, &doc); err != nil {
			rows.Close()
			return floorResult{}, err
		}
		all = append(all, []any{src, id, seq, typ, subject, evTime, recv, sev, proc, hash, denial, trace, json.RawMessage(flags), json.RawMessage(doc)})
	}
	if err := rows.Err(); err != nil {
		return floorResult{}, err
	}
	if len(all) == 0 {
		return floorResult{}, fmt.Errorf("no stored events to copy")
	}
	var chunks [][][]any
	for i := 0; i < len(all); i += batchSize {
		chunks = append(chunks, all[i:min(i+batchSize, len(all))])
	}
	conns := make([]*pgxpool.Conn, streams)
	for i := range conns {
		if conns[i], err = pool.Acquire(ctx); err != nil {
			return floorResult{}, err
		}
		defer conns[i].Release()
	}
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		first atomic.Pointer[error]
	)
	pg0 := postgresCPU()
	start := time.Now()
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(chunks) || first.Load() != nil {
					return
				}
				if _, err := c.CopyFrom(ctx, pgx.Identifier{"raw_sentry"}, floorColumns, pgx.CopyFromRows(chunks[i])); err != nil {
					err = fmt.Errorf("raw copy: %w", err)
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := first.Load(); e != nil {
		return floorResult{}, *e
	}
	return floorResult{
		Rows: len(all), Streams: streams, Seconds: elapsed.Seconds(),
		EventsPerSec:  float64(len(all)) / elapsed.Seconds(),
		PostgresCores: pg0.Since(postgresCPU()).Seconds() / elapsed.Seconds(),
	}, nil
}
