package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sentrysql"
)

// insertSentry stores one event unless its key is stored (the primary key
// is (source, id)) and returns its sequence when it stored it.
var insertSentry = `INSERT INTO sentry_events (` + strings.Join(sentrysql.Columns, ", ") + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (source, id) DO NOTHING RETURNING sequence`

// AppendSentryEvents stores the batch in one write transaction, one
// prepared INSERT … ON CONFLICT DO NOTHING RETURNING per event, and
// advances the batch's sources (sentrysql.Advance). The single writer
// orders concurrent appends.
func (d *Driver) AppendSentryEvents(ctx context.Context, events []store.SentryEvent) (store.SentryBatchResult, error) {
	batch, dups, err := store.SentryBatch(events, time.Now())
	res := store.SentryBatchResult{Duplicates: dups}
	if err != nil || len(batch) == 0 {
		return res, err
	}
	err = d.inTx(ctx, func(t *txn) error {
		var states []store.SentrySource
		for _, src := range store.SentrySources(batch) {
			if err := t.exec(ctx, "add sentry source", `INSERT INTO sentry_sources (source) VALUES (?)
				ON CONFLICT (source) DO NOTHING`, src); err != nil {
				return err
			}
			st, err := collect(ctx, t.wr, scanSentrySource, sentrysql.SourcesQuery(sentrysql.Numbered), src)
			if err != nil {
				return err
			}
			states = append(states, st...)
		}
		stmt, err := t.wr.PrepareContext(ctx, insertSentry)
		if err != nil {
			return mapErr(err)
		}
		defer stmt.Close()
		stored := map[string]uint64{}
		for _, e := range batch {
			flags, _ := json.Marshal(append([]string{}, e.Flags...)) // strings always encode
			var seq int64
			err := stmt.QueryRowContext(ctx, e.Source, e.ID, int64(e.Sequence), e.Type, e.Subject,
				nanos(e.Time), nanos(e.ReceivedAt), e.Severity, e.Processing, e.PolicyHash, e.DenialID,
				e.TraceID, string(flags), e.Document).Scan(&seq)
			switch {
			case err == nil:
				res.Stored++
				stored[e.Source] = max(stored[e.Source], uint64(seq))
			case !errors.Is(err, sql.ErrNoRows): // no row: a duplicate
				return fmt.Errorf("event %s/%s: %w", e.Source, e.ID, mapErr(err))
			}
		}
		res.Sources, err = sentrysql.Advance(ctx, sentryEngine{t.wr}, states, stored)
		return err
	})
	if err != nil {
		return store.SentryBatchResult{}, fmt.Errorf("append %d sentry events: %w", len(events), err)
	}
	res.Duplicates += len(batch) - res.Stored
	return res, nil
}

// ListSentryEvents returns the events f matches, oldest first.
func (d *Driver) ListSentryEvents(ctx context.Context, f store.SentryEventFilter) ([]store.SentryEvent, error) {
	q, args, newest := sentrysql.Select(f, sentrysql.Numbered, func(t any) any { return nanos(t.(time.Time)) })
	out, err := collect(ctx, d.r, func(r scanner) (store.SentryEvent, error) {
		var e store.SentryEvent
		var seq, at, received int64
		var flags string
		err := r.Scan(&e.Source, &e.ID, &seq, &e.Type, &e.Subject, &at, &received, &e.Severity,
			&e.Processing, &e.PolicyHash, &e.DenialID, &e.TraceID, &flags, &e.Document)
		if err == nil {
			err = json.Unmarshal([]byte(flags), &e.Flags)
		}
		e.Sequence, e.Time, e.ReceivedAt = uint64(seq), fromNanos(at), fromNanos(received)
		return e, err
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sentry events: %w", err)
	}
	if newest {
		slices.Reverse(out)
	}
	return out, nil
}

// SentryGaps returns the ordering state of one source ("" for all).
func (d *Driver) SentryGaps(ctx context.Context, source string) ([]store.SentrySource, error) {
	states, err := collect(ctx, d.r, scanSentrySource, sentrysql.SourcesQuery(sentrysql.Numbered), source)
	if err != nil {
		return nil, fmt.Errorf("sentry sources: %w", err)
	}
	return sentrysql.Sources(ctx, sentryEngine{d.r}, states)
}

// PruneSentryEvents deletes the events received before the cutoff,
// store.PruneBatch per short write transaction.
func (d *Driver) PruneSentryEvents(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		n, err := pruner{d}.Delete(ctx, `DELETE FROM sentry_events WHERE rowid IN (
			SELECT rowid FROM sentry_events WHERE received_at < ? LIMIT ?)`,
			nanos(store.SentryPruneCutoff(before)), store.PruneBatch)
		total += n
		if err != nil {
			return total, fmt.Errorf("prune sentry events: %w", err)
		}
		if n < store.PruneBatch {
			return total, nil
		}
	}
}

func scanSentrySource(r scanner) (st store.SentrySource, err error) {
	return st, r.Scan(&st.Source, &st.AckedSequence, &st.MaxSequence)
}

// sentryEngine runs sentrysql's statements on the writer's transaction
// or the read pool.
type sentryEngine struct{ db querier }

func (sentryEngine) Param(n int) string { return sentrysql.Numbered(n) }

func (e sentryEngine) Ranges(ctx context.Context, q string, args ...any) ([][2]uint64, error) {
	return collect(ctx, e.db, func(r scanner) (g [2]uint64, err error) { return g, r.Scan(&g[0], &g[1]) }, q, args...)
}

func (e sentryEngine) Exec(ctx context.Context, q string, args ...any) error {
	_, err := e.db.ExecContext(ctx, q, args...)
	return mapErr(err)
}
