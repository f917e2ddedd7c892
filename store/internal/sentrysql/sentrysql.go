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
	"github.com/portcullis-dev/portcullis/store/internal/sqlexec"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// Columns are the sentry_events table's columns, in the order the engines
// write (Row) and scan them.
var Columns = []string{
	"source", "id", "sequence", "type", "subject", "event_time", "received_at",
	"severity", "processing", "policy_hash", "denial_id", "trace_id", "flags", "document",
}

// Intake is a sqlexec.Engine inside an append's transaction that can store a
// checked batch.
type Intake interface {
	sqlexec.Engine
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

// scanEvent reads one row of Columns.
func scanEvent(scan func(...any) error) (store.SentryEvent, error) {
	var ev store.SentryEvent
	var flags string
	err := scan(&ev.Source, &ev.ID, &ev.Sequence, &ev.Type, &ev.Subject, sqlexec.TimeDest(&ev.Time),
		sqlexec.TimeDest(&ev.ReceivedAt), &ev.Severity, &ev.Processing, &ev.PolicyHash, &ev.DenialID,
		&ev.TraceID, &flags, &ev.Document)
	if err == nil {
		err = json.Unmarshal([]byte(flags), &ev.Flags)
	}
	return ev, err
}

// List is ListSentryEvents for both engines: the events f matches, oldest
// first (by time, then source, sequence and id). A limit keeps the newest
// events: the query reads those newest first and List reverses them.
func List(ctx context.Context, e sqlexec.Engine, f store.SentryEventFilter) ([]store.SentryEvent, error) {
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
		var states []state
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

// state is a source's stored state: its sequences and how many gaps it
// has (gap_count), without the gaps themselves.
type state struct {
	store.SentrySource
	gaps uint64
}

// ahead reports whether every event of batch has a sequence above its
// source's highest stored one (states holds every source of the batch).
func ahead(batch []store.SentryEvent, states []state) bool {
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
// every source when it is "", ordered by name, with its first
// store.MaxSentryGaps gaps and the count of the rest.
func Sources(ctx context.Context, e sqlexec.Engine, source string) ([]store.SentrySource, error) {
	states, err := sources(ctx, e, nil, source, "")
	out := make([]store.SentrySource, len(states))
	for i, st := range states {
		out[i] = st.SentrySource
		if err == nil && st.gaps > 0 {
			err = firstGaps(ctx, e, &out[i], st.gaps)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sentry sources: %w", err)
	}
	return out, nil
}

// sources appends to states the stored state of source, or of every
// source when it is "", ordered by name; the query ends in lock.
func sources(ctx context.Context, e sqlexec.Engine, states []state, source, lock string) ([]state, error) {
	p := e.Param
	err := e.Rows(ctx, `SELECT source, acked_sequence, max_sequence, gap_count FROM sentry_sources
		WHERE `+p(1)+` = '' OR source = `+p(1)+` ORDER BY source`+lock, []any{source},
		func(scan func(...any) error) error {
			states = append(states, state{})
			last := &states[len(states)-1]
			return scan(&last.Source, &last.AckedSequence, &last.MaxSequence, &last.gaps)
		})
	return states, err
}

// firstGaps fills in st.Gaps with the source's first store.MaxSentryGaps
// gaps (of count) and st.MoreGaps with how many follow them.
func firstGaps(ctx context.Context, e sqlexec.Engine, st *store.SentrySource, count uint64) error {
	p := e.Param
	st.Gaps = nil
	err := e.Rows(ctx, `SELECT lo, hi FROM sentry_gaps WHERE source = `+p(1)+` ORDER BY lo LIMIT `+p(2),
		[]any{st.Source, store.MaxSentryGaps}, func(scan func(...any) error) error {
			st.Gaps = append(st.Gaps, [2]uint64{})
			return scan(&st.Gaps[len(st.Gaps)-1][0], &st.Gaps[len(st.Gaps)-1][1])
		})
	if err != nil {
		return fmt.Errorf("gaps of sentry source %q: %w", st.Source, err)
	}
	st.MoreGaps = count - min(count, uint64(len(st.Gaps)))
	return nil
}

// gapsAt reads at most limit gaps of source from the one holding seq (or
// the first after it) on, and none starting above upto.
func gapsAt(ctx context.Context, e sqlexec.Engine, source string, seq, upto uint64, limit int) ([][2]uint64, error) {
	p := e.Param
	var out [][2]uint64
	err := e.Rows(ctx, `SELECT lo, hi FROM sentry_gaps WHERE source = `+p(1)+`
		AND lo >= COALESCE((SELECT max(lo) FROM sentry_gaps WHERE source = `+p(1)+` AND lo <= `+p(2)+`), `+p(2)+`)
		AND lo <= `+p(3)+` ORDER BY lo LIMIT `+p(4),
		[]any{source, int64(seq), int64(upto), limit}, func(scan func(...any) error) error {
			out = append(out, [2]uint64{})
			return scan(&out[len(out)-1][0], &out[len(out)-1][1])
		})
	return out, err
}

// gapsRead bounds the gaps fill reads at once.
const gapsRead = 64

// fill closes, in the stored gaps of source, the sequences seqs (sorted,
// distinct, each at most the source's highest before the append): a gap
// holding some of them is replaced by what remains of it. It returns how
// the source's gap count changed. It reads only the gaps that hold one of
// seqs or lie between them, at most gapsRead at a time: its cost is the
// batch's, never the source's history.
func fill(ctx context.Context, e sqlexec.Engine, source string, seqs []uint64) (delta int64, err error) {
	p := e.Param
	for len(seqs) > 0 {
		gaps, err := gapsAt(ctx, e, source, seqs[0], seqs[len(seqs)-1], gapsRead)
		if err != nil {
			return 0, err
		}
		if len(gaps) == 0 {
			return delta, nil // no gap holds any of them
		}
		var pieces [][2]uint64
		for _, g := range gaps {
			// The sequences before this gap are in none.
			for len(seqs) > 0 && seqs[0] < g[0] {
				seqs = seqs[1:]
			}
			lo, touched := g[0], false
			for len(seqs) > 0 && seqs[0] <= g[1] {
				touched = true
				if seqs[0] > lo {
					pieces = append(pieces, [2]uint64{lo, seqs[0] - 1})
				}
				lo = seqs[0] + 1
				seqs = seqs[1:]
			}
			if !touched {
				continue
			}
			if lo <= g[1] {
				pieces = append(pieces, [2]uint64{lo, g[1]})
			}
			if err := e.Exec(ctx, `DELETE FROM sentry_gaps WHERE source = `+p(1)+` AND lo = `+p(2), source, int64(g[0])); err != nil {
				return 0, err
			}
			delta--
		}
		if err := insertGaps(ctx, e, source, pieces); err != nil {
			return 0, err
		}
		delta += int64(len(pieces))
		if len(gaps) < gapsRead {
			// Every gap up to the last of seqs was read: the rest are in none.
			return delta, nil
		}
		last := gaps[len(gaps)-1][1]
		for len(seqs) > 0 && seqs[0] <= last {
			seqs = seqs[1:]
		}
	}
	return delta, nil
}

// insertGaps stores gaps of source, a few hundred rows per statement.
func insertGaps(ctx context.Context, e sqlexec.Engine, source string, gaps [][2]uint64) error {
	const rows = 300
	for len(gaps) > 0 {
		chunk := gaps[:min(rows, len(gaps))]
		gaps = gaps[len(chunk):]
		var q strings.Builder
		q.WriteString(`INSERT INTO sentry_gaps (source, lo, hi) VALUES `)
		args := make([]any, 0, 1+2*len(chunk))
		args = append(args, source)
		for i, g := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			args = append(args, int64(g[0]), int64(g[1]))
			q.WriteString(`(` + e.Param(1) + `, ` + e.Param(len(args)-1) + `, ` + e.Param(len(args)) + `)`)
		}
		if err := e.Exec(ctx, q.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// advance is the ordering rule, run in an append's transaction after its
// events are stored, on the states of the batch's sources as they were
// before it (locked) and the sequences it stored of each. The gaps are
// kept (sentry_gaps) and changed only where the batch's sequences fall: a
// sequence at or below the source's highest fills the gap holding it, if
// any; the sequences above it move the highest up, and leave a gap where
// they skip some. The acked sequence is just before the first gap (the
// highest when none remains). Both, and the gap count, are written back.
// It returns the states with their first gaps.
func advance(ctx context.Context, e sqlexec.Engine, states []state, stored map[string][]uint64) ([]store.SentrySource, error) {
	out := make([]store.SentrySource, len(states))
	for i, was := range states {
		st := &out[i]
		*st = was.SentrySource
		count := was.gaps
		seqs := stored[st.Source]
		if n := uint64(len(seqs)); count == 0 && follows(seqs, was.AckedSequence) {
			// The common case, decided without reading anything: no gap
			// before, and the batch continues the stream without one.
			st.AckedSequence, st.MaxSequence, st.Gaps = was.AckedSequence+n, was.AckedSequence+n, nil
		} else {
			slices.Sort(seqs)
			seqs = slices.Compact(seqs)
			split, _ := slices.BinarySearch(seqs, was.MaxSequence+1)
			below, above := seqs[:split], seqs[split:]
			var added [][2]uint64
			prev := was.MaxSequence
			for _, s := range above {
				if s > prev+1 {
					added = append(added, [2]uint64{prev + 1, s - 1})
				}
				prev = s
			}
			st.MaxSequence = prev
			if count > 0 && len(below) > 0 {
				d, err := fill(ctx, e, st.Source, below)
				if err != nil {
					return nil, fmt.Errorf("fill the gaps of sentry source %q: %w", st.Source, err)
				}
				count = uint64(int64(count) + d)
			}
			if err := insertGaps(ctx, e, st.Source, added); err != nil {
				return nil, fmt.Errorf("add gaps of sentry source %q: %w", st.Source, err)
			}
			count += uint64(len(added))
			st.Gaps, st.MoreGaps = nil, 0
			if count > 0 {
				if err := firstGaps(ctx, e, st, count); err != nil {
					return nil, err
				}
			}
			st.AckedSequence = st.MaxSequence
			if len(st.Gaps) > 0 {
				st.AckedSequence = st.Gaps[0][0] - 1
			}
		}
		if st.AckedSequence == was.AckedSequence && st.MaxSequence == was.MaxSequence && count == was.gaps {
			continue
		}
		p := e.Param
		err := e.Exec(ctx, `UPDATE sentry_sources SET acked_sequence = `+p(1)+`, max_sequence = `+p(2)+
			`, gap_count = `+p(3)+` WHERE source = `+p(4), int64(st.AckedSequence), int64(st.MaxSequence), int64(count), st.Source)
		if err != nil {
			return nil, fmt.Errorf("advance sentry source %q: %w", st.Source, err)
		}
	}
	return out, nil
}
