// Package sentrysql is what the two store engines share about Sentry
// events: their columns, the query that lists them, and the ordering rule
// (how an append advances a source's acked sequence and which gaps
// remain), written once so SQLite and PostgreSQL cannot drift. Each engine
// writes its own statements for storing, binds, scans and holds its
// transactions.
package sentrysql

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/store"
)

// Columns are the sentry_events table's columns, in the order the engines
// write and scan them.
var Columns = []string{
	"source", "id", "sequence", "type", "subject", "event_time", "received_at",
	"severity", "processing", "policy_hash", "denial_id", "trace_id", "flags", "document",
}

// Dollar writes PostgreSQL's placeholder for the nth argument ($1, $2…).
func Dollar(n int) string { return "$" + strconv.Itoa(n) }

// Numbered writes SQLite's numbered placeholder (?1, ?2…), which, unlike
// "?", may appear twice for one argument.
func Numbered(n int) string { return "?" + strconv.Itoa(n) }

// Select returns the query that reads the events f matches (Columns), its
// arguments, and whether it reads them newest first: a limit keeps the
// newest events, so the query reads those and the caller reverses them to
// hand back oldest first. at binds a time the way the engine stores it.
func Select(f store.SentryEventFilter, param func(n int) string, at func(any) any) (q string, args []any, newest bool) {
	var where []string
	for _, c := range []struct {
		cond string // of the next parameter
		v    any
		set  bool
	}{
		{"subject = ", f.Sandbox, f.Sandbox != ""}, {"source = ", f.Source, f.Source != ""},
		{"type = ", f.Type, f.Type != ""},
		{"event_time >= ", at(f.Since), !f.Since.IsZero()}, {"event_time < ", at(f.Until), !f.Until.IsZero()},
	} {
		if c.set {
			args = append(args, c.v)
			where = append(where, c.cond+param(len(args)))
		}
	}
	q = `SELECT ` + strings.Join(Columns, ", ") + ` FROM sentry_events`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	order := ` ORDER BY event_time, source, sequence, id`
	newest = f.Limit > 0
	if newest {
		order = ` ORDER BY event_time DESC, source DESC, sequence DESC, id DESC`
		args = append(args, f.Limit)
		order += ` LIMIT ` + param(len(args))
	}
	return q + order, args, newest
}

// Engine runs Advance's and Gaps' statements on one engine, inside the
// append's transaction (Advance) or on its own (Gaps). Errors come back
// mapped to the store's sentinels.
type Engine interface {
	// Param writes the engine's placeholder for the nth argument.
	Param(n int) string
	// Ranges returns the two integer columns of q's rows.
	Ranges(ctx context.Context, q string, args ...any) ([][2]uint64, error)
	// Exec runs one statement.
	Exec(ctx context.Context, q string, args ...any) error
}

// gapsQuery lists the holes of a source's stream above its acked sequence
// (P1) up to its highest (P3): each stored sequence s above the acked one,
// and the acked one itself, is followed by a hole when the next stored
// sequence (or P3 + 1 after the last) is more than s + 1.
func gapsQuery(p func(int) string) string {
	return `SELECT lo, hi FROM (
		SELECT sequence + 1 AS lo,
			lead(sequence, 1, CAST(` + p(3) + ` AS BIGINT) + 1) OVER (ORDER BY sequence) - 1 AS hi
		FROM (SELECT CAST(` + p(1) + ` AS BIGINT) AS sequence
			UNION SELECT sequence FROM sentry_events WHERE source = ` + p(2) + ` AND sequence > ` + p(1) + `) s
	) g WHERE lo <= hi ORDER BY lo`
}

// Gaps fills in st.Gaps from the stored events.
func Gaps(ctx context.Context, e Engine, st *store.SentrySource) error {
	gaps, err := e.Ranges(ctx, gapsQuery(e.Param), int64(st.AckedSequence), st.Source, int64(st.MaxSequence))
	if err != nil {
		return fmt.Errorf("gaps of sentry source %q: %w", st.Source, err)
	}
	st.Gaps = gaps
	return nil
}

// Advance is the ordering rule, run in an append's transaction after its
// events are stored, on the states of the batch's sources as they were
// before it (locked by the append) and the highest sequence it stored of
// each: a source's highest sequence moves up to what was stored, its
// acked sequence up to just before its first remaining gap (or to the
// highest when none remains), and both are written back. It returns the
// states with their gaps.
func Advance(ctx context.Context, e Engine, states []store.SentrySource, stored map[string]uint64) ([]store.SentrySource, error) {
	out := slices.Clone(states)
	for i := range out {
		st := &out[i]
		was := *st
		st.MaxSequence = max(st.MaxSequence, stored[st.Source])
		if err := Gaps(ctx, e, st); err != nil {
			return nil, err
		}
		st.AckedSequence = st.MaxSequence
		if len(st.Gaps) > 0 {
			st.AckedSequence = st.Gaps[0][0] - 1
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

// SourcesQuery reads the ordering state of one source (P1), or of all
// when P1 is "", ordered by source: acked and highest sequences.
func SourcesQuery(p func(int) string) string {
	return `SELECT source, acked_sequence, max_sequence FROM sentry_sources
		WHERE ` + p(1) + ` = '' OR source = ` + p(1) + ` ORDER BY source`
}

// Sources is SentryGaps for both engines: the states read by SourcesQuery
// (scanned by the engine) with their gaps.
func Sources(ctx context.Context, e Engine, states []store.SentrySource) ([]store.SentrySource, error) {
	for i := range states {
		if err := Gaps(ctx, e, &states[i]); err != nil {
			return nil, err
		}
	}
	return states, nil
}
