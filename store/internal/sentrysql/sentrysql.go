// Package sentrysql is what the two store engines share about Sentry
// events: their columns and how a row is written and read, the query that
// lists them, and the ordering rule (how an append advances a source's
// acked sequence and which gaps remain), written once so SQLite and
// PostgreSQL cannot drift; and the remediation primitives (sources' keys,
// the replay lookup, actions). Each engine stores a batch its own way (the
// new keys' events COPYed, or prepared inserts), prunes, and holds its
// transactions.
package sentrysql

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// Columns are the sentry_events table's columns, in the order the engines
// write (Row) and scan them.
var Columns = []string{
	"source", "id", "sequence", "type", "subject", "event_time", "received_at",
	"severity", "processing", "policy_hash", "denial_id", "trace_id", "flags", "document",
}

// Engine runs this package's statements on one engine, in a transaction
// or on its own. Errors come back mapped to the store's sentinels.
type Engine interface {
	// Param writes the engine's placeholder for the nth argument.
	Param(n int) string
	// Time binds a time the way the engine stores it.
	Time(t time.Time) any
	// Exec runs one statement.
	Exec(ctx context.Context, q string, args ...any) error
	// Rows runs q and calls each with the scan of every row, in order.
	Rows(ctx context.Context, q string, args []any, each func(scan func(dest ...any) error) error) error
}

// Intake is an Engine inside an append's transaction that can store a
// checked batch.
type Intake interface {
	Engine
	// Store stores the batch's events whose (source, id) is new and calls
	// stored with the sequence of each it stored. ahead says that every
	// event's sequence is above its source's highest stored one (the
	// stream moving on, the common case): their keys are most likely
	// new, which an engine may try first.
	Store(ctx context.Context, batch []store.SentryEvent, ahead bool, stored func(source string, seq uint64)) error
}

// Row is e's values in Columns' order, as e's engine binds them (flags as
// a JSON array).
func Row(e *store.SentryEvent, time func(time.Time) any) []any {
	return []any{e.Source, e.ID, int64(e.Sequence), e.Type, e.Subject, time(e.Time), time(e.ReceivedAt),
		e.Severity, e.Processing, e.PolicyHash, e.DenialID, e.TraceID, FlagsJSON(e.Flags), e.Document}
}

// FlagsJSON is the flags column's value: a JSON array of strings.
func FlagsJSON(flags []string) string {
	if len(flags) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(flags) // strings always encode
	return string(b)
}

// timeDest scans a time stored either way: a timestamp (Postgres) or UTC
// nanoseconds (SQLite).
type timeDest struct{ t *time.Time }

func (d timeDest) Scan(src any) error {
	switch v := src.(type) {
	case time.Time:
		*d.t = v.UTC()
	case int64:
		*d.t = time.Unix(0, v).UTC()
	default:
		return fmt.Errorf("sentry event time: unexpected %T", src)
	}
	return nil
}

// scanEvent reads one row of Columns.
func scanEvent(scan func(...any) error) (store.SentryEvent, error) {
	var ev store.SentryEvent
	var flags string
	err := scan(&ev.Source, &ev.ID, &ev.Sequence, &ev.Type, &ev.Subject, timeDest{&ev.Time},
		timeDest{&ev.ReceivedAt}, &ev.Severity, &ev.Processing, &ev.PolicyHash, &ev.DenialID,
		&ev.TraceID, &flags, &ev.Document)
	if err == nil {
		err = json.Unmarshal([]byte(flags), &ev.Flags)
	}
	return ev, err
}

// List is ListSentryEvents for both engines: the events f matches, oldest
// first (by time, then source, sequence and id). A limit keeps the newest
// events: the query reads those newest first and List reverses them.
func List(ctx context.Context, e Engine, f store.SentryEventFilter) ([]store.SentryEvent, error) {
	where, args := sqlwhere.Where([]sqlwhere.Cond{
		{Expr: "subject = ", V: f.Sandbox, Set: f.Sandbox != ""}, {Expr: "source = ", V: f.Source, Set: f.Source != ""},
		{Expr: "type = ", V: f.Type, Set: f.Type != ""}, {Expr: "event_time >= ", V: e.Time(f.Since), Set: !f.Since.IsZero()},
		{Expr: "event_time < ", V: e.Time(f.Until), Set: !f.Until.IsZero()},
	}, e.Param)
	q := `SELECT ` + strings.Join(Columns, ", ") + ` FROM sentry_events` + where
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += ` ORDER BY event_time DESC, source DESC, sequence DESC, id DESC LIMIT ` + e.Param(len(args))
	} else {
		q += ` ORDER BY event_time, source, sequence, id`
	}
	var out []store.SentryEvent
	err := e.Rows(ctx, q, args, func(scan func(...any) error) error {
		ev, err := scanEvent(scan)
		out = append(out, ev)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list sentry events: %w", err)
	}
	if f.Limit > 0 {
		slices.Reverse(out)
	}
	return out, nil
}

// Append is AppendSentryEvents for both engines: it checks the batch
// (store.SentryBatch), then in one transaction (inTx) adds the batch's sources, reads their
// states with lock appended to the query (Postgres: FOR UPDATE; the
// sources are locked in name order, so appends cannot deadlock), stores
// the events and advances the sources.
func Append(ctx context.Context, events []store.SentryEvent, now time.Time,
	lock string, inTx func(func(Intake) error) error) (store.SentryBatchResult, error) {
	batch, dups, err := store.SentryBatch(events, now)
	if err != nil || len(batch) == 0 {
		return store.SentryBatchResult{Duplicates: dups}, err
	}
	var res store.SentryBatchResult
	err = inTx(func(e Intake) error {
		res = store.SentryBatchResult{}
		var states []store.SentrySource
		for _, src := range store.SentrySources(batch) {
			err := e.Exec(ctx, `INSERT INTO sentry_sources (source) VALUES (`+e.Param(1)+`)
				ON CONFLICT (source) DO NOTHING`, src)
			if err == nil {
				states, err = sources(ctx, e, states, src, lock)
			}
			if err != nil {
				return err
			}
		}
		stored := map[string][]uint64{}
		err := e.Store(ctx, batch, ahead(batch, states), func(src string, seq uint64) {
			res.Stored++
			if seq > 0 {
				stored[src] = append(stored[src], seq)
			}
		})
		if err != nil {
			return err
		}
		res.Sources, err = advance(ctx, e, states, stored)
		return err
	})
	if err != nil {
		return store.SentryBatchResult{}, fmt.Errorf("append %d sentry events: %w", len(events), err)
	}
	res.Duplicates = dups + len(batch) - res.Stored
	return res, nil
}

// ahead reports whether every event of batch has a sequence above its
// source's highest stored one (states holds every source of the batch).
func ahead(batch []store.SentryEvent, states []store.SentrySource) bool {
	highest := make(map[string]uint64, len(states))
	for _, st := range states {
		highest[st.Source] = st.MaxSequence
	}
	for _, e := range batch {
		if e.Sequence <= highest[e.Source] {
			return false
		}
	}
	return true
}

// follows reports whether seqs, in any order, are exactly after+1 …
// after+len(seqs) (true for none). seqs is sorted in place.
func follows(seqs []uint64, after uint64) bool {
	slices.Sort(seqs)
	for i, s := range seqs {
		if s != after+uint64(i)+1 {
			return false
		}
	}
	return true
}

// Sources is SentryGaps for both engines: the state of source, or of
// every source when it is "", ordered by name, with the gaps.
func Sources(ctx context.Context, e Engine, source string) ([]store.SentrySource, error) {
	states, err := sources(ctx, e, nil, source, "")
	for i := range states {
		if err == nil {
			err = gaps(ctx, e, &states[i])
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sentry sources: %w", err)
	}
	return states, nil
}

// sources appends to states the stored state (without gaps) of source, or
// of every source when it is "", ordered by name; the query ends in lock.
func sources(ctx context.Context, e Engine, states []store.SentrySource, source, lock string) ([]store.SentrySource, error) {
	p := e.Param
	err := e.Rows(ctx, `SELECT source, acked_sequence, max_sequence FROM sentry_sources
		WHERE `+p(1)+` = '' OR source = `+p(1)+` ORDER BY source`+lock, []any{source},
		func(scan func(...any) error) error {
			var st store.SentrySource
			states = append(states, st)
			last := &states[len(states)-1]
			return scan(&last.Source, &last.AckedSequence, &last.MaxSequence)
		})
	return states, err
}

// gaps fills in st.Gaps from the stored events: the holes above its acked
// sequence (P1) up to its highest (P3). Each stored sequence s above the
// acked one, and the acked one itself, is followed by a hole when the
// next stored sequence (or P3 + 1 after the last) is more than s + 1.
func gaps(ctx context.Context, e Engine, st *store.SentrySource) error {
	p := e.Param
	q := `SELECT lo, hi FROM (
		SELECT sequence + 1 AS lo,
			lead(sequence, 1, CAST(` + p(3) + ` AS BIGINT) + 1) OVER (ORDER BY sequence) - 1 AS hi
		FROM (SELECT CAST(` + p(1) + ` AS BIGINT) AS sequence
			UNION SELECT sequence FROM sentry_events WHERE source = ` + p(2) + ` AND sequence > ` + p(1) + `) s
	) g WHERE lo <= hi ORDER BY lo`
	st.Gaps = nil
	err := e.Rows(ctx, q, []any{int64(st.AckedSequence), st.Source, int64(st.MaxSequence)},
		func(scan func(...any) error) error {
			var g [2]uint64
			st.Gaps = append(st.Gaps, g)
			return scan(&st.Gaps[len(st.Gaps)-1][0], &st.Gaps[len(st.Gaps)-1][1])
		})
	if err != nil {
		return fmt.Errorf("gaps of sentry source %q: %w", st.Source, err)
	}
	return nil
}

// advance is the ordering rule, run in an append's transaction after its
// events are stored, on the states of the batch's sources as they were
// before it (locked) and the sequences it stored of each: a source's
// highest sequence moves up to what was stored, its acked sequence up to
// just before its first remaining gap (or to the highest when none
// remains), and both are written back. It returns the states with their
// gaps.
func advance(ctx context.Context, e Engine, states []store.SentrySource, stored map[string][]uint64) ([]store.SentrySource, error) {
	out := slices.Clone(states)
	for i := range out {
		st := &out[i]
		was := *st
		seqs := stored[st.Source]
		if n := uint64(len(seqs)); was.AckedSequence == was.MaxSequence && follows(seqs, was.AckedSequence) {
			// The common case, decided without reading the events: no gap
			// before, and the batch continues the stream without one.
			st.AckedSequence, st.MaxSequence, st.Gaps = was.AckedSequence+n, was.AckedSequence+n, nil
		} else {
			if len(seqs) > 0 {
				st.MaxSequence = max(st.MaxSequence, slices.Max(seqs))
			}
			if err := gaps(ctx, e, st); err != nil {
				return nil, err
			}
			st.AckedSequence = st.MaxSequence
			if len(st.Gaps) > 0 {
				st.AckedSequence = st.Gaps[0][0] - 1
			}
		}
		if st.AckedSequence == was.AckedSequence && st.MaxSequence == was.MaxSequence {
			continue
		}
		p := e.Param
		err := e.Exec(ctx, `UPDATE sentry_sources SET acked_sequence = `+p(1)+`, max_sequence = `+p(2)+
			` WHERE source = `+p(3), int64(st.AckedSequence), int64(st.MaxSequence), st.Source)
		if err != nil {
			return nil, fmt.Errorf("advance sentry source %q: %w", st.Source, err)
		}
	}
	return out, nil
}
