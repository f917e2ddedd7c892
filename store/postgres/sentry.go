package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sentrysql"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// AppendSentryEvents stores the batch in one transaction (sentrysql.Append).
func (d *Driver) AppendSentryEvents(ctx context.Context, events []store.SentryEvent) (store.SentryBatchResult, error) {
	return sentrysql.Append(ctx, events, d.Now(), " FOR UPDATE", func(fn func(sentrysql.Intake) error) error {
		return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return fn(sentryIntake{sentryEngine{tx}, tx}) })
	})
}

// Store COPYs the batch into a staging table (temporary, so never logged;
// emptied at commit; created once per connection) and moves the new events
// on with sentry_move_staged (migration 00007).
func (e sentryIntake) Store(ctx context.Context, batch []store.SentryEvent, stored func(string, uint64)) error {
	err := e.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS sentry_staging
		(LIKE sentry_events INCLUDING DEFAULTS) ON COMMIT DELETE ROWS`)
	if err == nil {
		_, err = e.tx.CopyFrom(ctx, pgx.Identifier{"sentry_staging"}, sentrysql.Columns,
			pgx.CopyFromSlice(len(batch), func(i int) ([]any, error) { return sentrysql.Row(&batch[i], e.Time), nil }))
	}
	if err != nil {
		return mapErr(err)
	}
	return e.Rows(ctx, `SELECT * FROM sentry_move_staged()`, nil, func(scan func(...any) error) error {
		var src string
		var seq uint64
		err := scan(&src, &seq)
		stored(src, seq)
		return err
	})
}

// EnsureSentryPartitions creates the daily partitions of sentry_events for
// the days UTC first's day .. days later that do not exist yet: the
// gateway makes them ahead, so intake (which makes a missing day's itself)
// seldom runs DDL.
func (d *Driver) EnsureSentryPartitions(ctx context.Context, first time.Time, days int) error {
	_, err := d.pool.Exec(ctx, `SELECT sentry_ensure_partitions($1::date, $2)`, first.UTC().Truncate(24*time.Hour), days)
	return wrapf(err, "ensure sentry partitions")
}

// ListSentryEvents returns the events f matches, oldest first.
func (d *Driver) ListSentryEvents(ctx context.Context, f store.SentryEventFilter) ([]store.SentryEvent, error) {
	return sentrysql.List(ctx, sentryEngine{d.pool}, f)
}

// SentryGaps returns the ordering state of one source ("" for all).
func (d *Driver) SentryGaps(ctx context.Context, source string) ([]store.SentrySource, error) {
	return sentrysql.Sources(ctx, sentryEngine{d.pool}, source)
}

// PruneSentryEvents drops the daily partitions before the cutoff's day
// and their events' keys (sentry_drop_partitions, migration 00007).
func (d *Driver) PruneSentryEvents(ctx context.Context, before time.Time) (n int64, err error) {
	err = d.pool.QueryRow(ctx, `SELECT sentry_drop_partitions($1)`, store.SentryPruneCutoff(before)).Scan(&n)
	return n, wrapf(err, "prune sentry events")
}

// sentryEngine runs sentrysql's statements on the pool or a transaction;
// sentryIntake is one in an append's transaction.
type sentryEngine struct{ db dbtx }
type sentryIntake struct {
	sentryEngine
	tx pgx.Tx
}

func (sentryEngine) Param(n int) string   { return sqlwhere.Dollar(n) }
func (sentryEngine) Time(t time.Time) any { return t }

func (e sentryEngine) Exec(ctx context.Context, q string, args ...any) error {
	_, err := e.db.Exec(ctx, q, args...)
	return mapErr(err)
}

func (e sentryEngine) Rows(ctx context.Context, q string, args []any, each func(func(...any) error) error) error {
	rows, err := e.db.Query(ctx, q, args...)
	_, err = collect(rows, err, func(r pgx.Row) (struct{}, error) { return struct{}{}, each(r.Scan) })
	return err
}
