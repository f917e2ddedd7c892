package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sentrysql"
)

// stageSentry is the staging table a batch is COPYed into: COPY has no ON
// CONFLICT. It is temporary (per connection, never logged) and emptied at
// every commit; each connection creates it once.
const stageSentry = `CREATE TEMP TABLE IF NOT EXISTS sentry_staging
	(LIKE sentry_events INCLUDING DEFAULTS) ON COMMIT DELETE ROWS`

// moveSentry moves the staged events whose key is new into sentry_events:
// the keys it wins in sentry_event_keys (the unique index a partitioned
// table cannot have) select the events it inserts. It returns the
// inserted events' sources and sequences.
const moveSentry = `WITH k AS (
		INSERT INTO sentry_event_keys (source, id, received_at)
		SELECT source, id, received_at FROM sentry_staging ORDER BY source, id
		ON CONFLICT DO NOTHING RETURNING source, id)
	INSERT INTO sentry_events SELECT s.* FROM sentry_staging s JOIN k USING (source, id)
	RETURNING source, sequence`

// AppendSentryEvents stores the batch in one transaction: it locks the
// batch's sources' states (in name order), COPYs the events into the
// staging table, moves the new ones with INSERT … ON CONFLICT DO NOTHING,
// and advances the sources (sentrysql.Advance). It never NOTIFYs.
func (d *Driver) AppendSentryEvents(ctx context.Context, events []store.SentryEvent) (store.SentryBatchResult, error) {
	batch, dups, err := store.SentryBatch(events, d.Now())
	res := store.SentryBatchResult{Duplicates: dups}
	if err != nil || len(batch) == 0 {
		return res, err
	}
	for _, e := range batch {
		if _, ok := d.sentryDays.Load(e.ReceivedAt.Truncate(24 * time.Hour).Unix()); !ok {
			// Today's partition and tomorrow's: the next day's first
			// event then finds its partition made.
			if err := d.EnsureSentryPartitions(ctx, e.ReceivedAt, 2); err != nil {
				return res, err
			}
		}
	}
	sources := store.SentrySources(batch)
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO sentry_sources (source) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING`, sources)
		if err != nil {
			return mapErr(err)
		}
		rows, err := tx.Query(ctx, `SELECT source, acked_sequence, max_sequence FROM sentry_sources
			WHERE source = ANY($1) ORDER BY source FOR UPDATE`, sources)
		states, err := collect(rows, err, scanSentrySource)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, stageSentry); err != nil {
			return mapErr(err)
		}
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"sentry_staging"}, sentrysql.Columns,
			pgx.CopyFromSlice(len(batch), func(i int) ([]any, error) {
				e := &batch[i]
				return []any{e.Source, e.ID, int64(e.Sequence), e.Type, e.Subject, e.Time, e.ReceivedAt,
					e.Severity, e.Processing, e.PolicyHash, e.DenialID, e.TraceID,
					append([]string{}, e.Flags...), e.Document}, nil
			}))
		if err != nil {
			return mapErr(err)
		}
		stored := map[string]uint64{}
		rows, err = tx.Query(ctx, moveSentry)
		_, err = collect(rows, err, func(r pgx.Row) (src string, err error) {
			var seq int64
			err = r.Scan(&src, &seq)
			res.Stored++
			stored[src] = max(stored[src], uint64(seq))
			return src, err
		})
		if err != nil {
			return err
		}
		res.Sources, err = sentrysql.Advance(ctx, sentryEngine{tx}, states, stored)
		return err
	})
	if err != nil {
		return store.SentryBatchResult{}, fmt.Errorf("append %d sentry events: %w", len(events), err)
	}
	res.Duplicates += len(batch) - res.Stored
	return res, nil
}

// EnsureSentryPartitions creates the daily partitions of sentry_events for
// the days UTC first's day .. days later that do not exist yet. The
// gateway calls it ahead of time; AppendSentryEvents calls it for a day it
// has not seen (and the next), so an event never lacks its partition.
func (d *Driver) EnsureSentryPartitions(ctx context.Context, first time.Time, days int) error {
	first = first.UTC().Truncate(24 * time.Hour)
	if _, err := d.pool.Exec(ctx, `SELECT sentry_ensure_partitions($1::date, $2)`, first, days); err != nil {
		return fmt.Errorf("ensure sentry partitions: %w", mapErr(err))
	}
	for i := range days - 1 { // the last day's next day is not known
		d.sentryDays.Store(first.AddDate(0, 0, i).Unix(), true)
	}
	return nil
}

// ListSentryEvents returns the events f matches, oldest first.
func (d *Driver) ListSentryEvents(ctx context.Context, f store.SentryEventFilter) ([]store.SentryEvent, error) {
	q, args, newest := sentrysql.Select(f, sentrysql.Dollar, func(t any) any { return t })
	rows, err := d.pool.Query(ctx, q, args...)
	out, err := collect(rows, err, func(r pgx.Row) (store.SentryEvent, error) {
		var e store.SentryEvent
		var seq int64
		err := r.Scan(&e.Source, &e.ID, &seq, &e.Type, &e.Subject, &e.Time, &e.ReceivedAt, &e.Severity,
			&e.Processing, &e.PolicyHash, &e.DenialID, &e.TraceID, &e.Flags, &e.Document)
		e.Sequence, e.Time, e.ReceivedAt = uint64(seq), e.Time.UTC(), e.ReceivedAt.UTC()
		return e, err
	})
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
	rows, err := d.pool.Query(ctx, sentrysql.SourcesQuery(sentrysql.Dollar), source)
	states, err := collect(rows, err, scanSentrySource)
	if err != nil {
		return nil, fmt.Errorf("sentry sources: %w", err)
	}
	return sentrysql.Sources(ctx, sentryEngine{d.pool}, states)
}

// PruneSentryEvents drops the daily partitions before the cutoff's day
// (sentry_drop_partitions), then deletes their events' keys,
// store.PruneBatch per statement.
func (d *Driver) PruneSentryEvents(ctx context.Context, before time.Time) (int64, error) {
	cutoff := store.SentryPruneCutoff(before)
	var n int64
	if err := d.pool.QueryRow(ctx, `SELECT sentry_drop_partitions($1)`, cutoff).Scan(&n); err != nil {
		return 0, fmt.Errorf("prune sentry events: %w", mapErr(err))
	}
	d.sentryDays.Clear()
	for {
		tag, err := d.pool.Exec(ctx, `DELETE FROM sentry_event_keys WHERE ctid = ANY(ARRAY(
			SELECT ctid FROM sentry_event_keys WHERE received_at < $1 LIMIT $2))`, cutoff, store.PruneBatch)
		if err != nil {
			return n, fmt.Errorf("prune sentry event keys: %w", mapErr(err))
		}
		if tag.RowsAffected() < store.PruneBatch {
			return n, nil
		}
	}
}

func scanSentrySource(r pgx.Row) (st store.SentrySource, err error) {
	var acked, highest int64
	err = r.Scan(&st.Source, &acked, &highest)
	st.AckedSequence, st.MaxSequence = uint64(acked), uint64(highest)
	return st, err
}

// sentryEngine runs sentrysql's statements on the pool or a transaction.
type sentryEngine struct{ db dbtx }

func (sentryEngine) Param(n int) string { return sentrysql.Dollar(n) }

func (e sentryEngine) Ranges(ctx context.Context, q string, args ...any) ([][2]uint64, error) {
	rows, err := e.db.Query(ctx, q, args...)
	return collect(rows, err, func(r pgx.Row) (g [2]uint64, err error) {
		var lo, hi int64
		err = r.Scan(&lo, &hi)
		return [2]uint64{uint64(lo), uint64(hi)}, err
	})
}

func (e sentryEngine) Exec(ctx context.Context, q string, args ...any) error {
	_, err := e.db.Exec(ctx, q, args...)
	return mapErr(err)
}
