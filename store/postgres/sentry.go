package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sentrysql"
)

// AppendSentryEvents stores the batch in one transaction (sentrysql.Append).
// ctx may end the append until its commit, not during it: the commit runs
// on a context ctx cannot cancel, so an append that returns an error was
// rolled back, never committed unseen (a sender whose request was cut
// short sends the batch again, and a commit of unknown outcome would have
// its events counted as duplicates the second time).
func (d *Driver) AppendSentryEvents(ctx context.Context, events []store.SentryEvent) (store.SentryBatchResult, error) {
	return sentrysql.Append(ctx, events, d.Now(), " FOR UPDATE", func(fn func(sentrysql.Intake) error) error {
		tx, err := d.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after a commit, nothing
		if err := fn(sentryIntake{engine{tx}, tx}); err != nil {
			return err
		}
		return tx.Commit(context.WithoutCancel(ctx))
	})
}

// Store writes each new event once. It asks which of the batch's keys are
// new (sentry_new_keys, migration 00010, which also makes a missing day's
// partition), then COPYs those keys into sentry_event_keys and their
// events into sentry_events, where Postgres routes each to its day's
// partition. No other transaction can add one of these keys in between:
// a key's source is locked (Append's FOR UPDATE) by every append that
// names it. Were one added anyway, the keys' unique index would refuse
// the COPY and the batch would fail whole, to be sent again.
//
// A batch ahead of its sources' streams (every sequence above the highest
// stored) almost always has only new keys: Store COPYs it whole first,
// under a savepoint, without asking. If a key was known after all (a
// sender that reused an id under a new sequence) or the day has no
// partition yet, the unique index or the partitioning refuses the COPY,
// and Store rolls back to the savepoint and takes the way above.
func (e sentryIntake) Store(ctx context.Context, batch []store.SentryEvent, ahead bool, stored func(string, uint64)) error {
	if ahead {
		all := make([]int32, len(batch))
		for i := range all {
			all[i] = int32(i)
		}
		ok, err := e.tryCopy(ctx, batch, all)
		if err != nil {
			return err
		}
		if ok {
			for i := range batch {
				stored(batch[i].Source, batch[i].Sequence)
			}
			return nil
		}
	}
	sources, ids, received := make([]string, len(batch)), make([]string, len(batch)), make([]time.Time, len(batch))
	for i := range batch {
		sources[i], ids[i], received[i] = batch[i].Source, batch[i].ID, batch[i].ReceivedAt
	}
	rows, err := e.tx.Query(ctx, `SELECT sentry_new_keys($1, $2, $3)`, sources, ids, received)
	if err != nil {
		return mapErr(err)
	}
	fresh, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil || len(fresh) == 0 {
		return mapErr(err)
	}
	err = copyKeys(ctx, e.tx, batch, fresh)
	if err == nil {
		err = copyEvents(ctx, e.tx, batch, fresh)
	}
	if err != nil {
		return mapErr(err)
	}
	for _, i := range fresh {
		stored(batch[i].Source, batch[i].Sequence)
	}
	return nil
}

// tryCopy COPYs the keys and events of batch at rows under a savepoint,
// and reports false, the savepoint rolled back, when a key was already
// stored or an event's day has no partition.
func (e sentryIntake) tryCopy(ctx context.Context, batch []store.SentryEvent, rows []int32) (bool, error) {
	sp, err := e.tx.Begin(ctx) // a savepoint
	if err != nil {
		return false, mapErr(err)
	}
	err = copyKeys(ctx, sp, batch, rows)
	if err == nil {
		err = copyEvents(ctx, sp, batch, rows)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "23514") { // unique_violation; check_violation: no partition
		return false, mapErr(sp.Rollback(ctx))
	}
	if err != nil {
		_ = sp.Rollback(ctx)
		return false, mapErr(err)
	}
	return true, mapErr(sp.Commit(ctx))
}

// EnsureSentryPartitions creates the daily partitions of sentry_events for
// the days UTC first's day .. days later that do not exist yet: the
// gateway makes them ahead, so intake (which makes a missing day's itself)
// seldom runs DDL.
func (d *Driver) EnsureSentryPartitions(ctx context.Context, first time.Time, days int) error {
	_, err := d.pool.Exec(ctx, `SELECT sentry_ensure_partitions($1::date, $2)`, first.UTC().Truncate(24*time.Hour), days)
	return wrapf(err, "ensure sentry partitions")
}

// PruneSentryEvents drops the daily partitions before the cutoff's day
// and their events' keys (sentry_drop_partitions, migration 00007).
func (d *Driver) PruneSentryEvents(ctx context.Context, before time.Time) (n int64, err error) {
	err = d.pool.QueryRow(ctx, `SELECT sentry_drop_partitions($1)`, store.SentryPruneCutoff(before)).Scan(&n)
	return n, wrapf(err, "prune sentry events")
}

// sentryIntake is the engine of an append's transaction.
type sentryIntake struct {
	engine
	tx pgx.Tx
}
