package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sentrysql"
)

// AppendSentryEvents stores the batch in one write transaction
// (sentrysql.Append); the single writer orders concurrent appends.
func (d *Driver) AppendSentryEvents(ctx context.Context, events []store.SentryEvent) (store.SentryBatchResult, error) {
	return sentrysql.Append(ctx, events, time.Now(), "", func(fn func(sentrysql.Intake) error) error {
		return d.inTx(ctx, func(t *txn) error { return fn(engine{t.wr}) })
	})
}

// Store runs one prepared INSERT … ON CONFLICT DO NOTHING RETURNING per
// event: no row back means the key was stored already.
func (e engine) Store(ctx context.Context, batch []store.SentryEvent, _ bool, stored func(string, uint64)) error {
	if err := store.SentryDocumentsValid(batch); err != nil {
		return err // the column is a BLOB: nothing else would check
	}
	stmt, err := e.db.PrepareContext(ctx, `INSERT INTO sentry_events (`+strings.Join(sentrysql.Columns, ", ")+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (source, id) DO NOTHING RETURNING sequence`)
	if err != nil {
		return mapErr(err)
	}
	defer stmt.Close()
	for i := range batch {
		var seq uint64
		err := stmt.QueryRowContext(ctx, sentrysql.Row(&batch[i], e.Time)...).Scan(&seq)
		if err == nil {
			stored(batch[i].Source, seq)
		} else if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("event %s/%s: %w", batch[i].Source, batch[i].ID, mapErr(err))
		}
	}
	return nil
}

// PruneSentryEvents deletes the events received before the cutoff,
// store.PruneBatch per short write transaction.
func (d *Driver) PruneSentryEvents(ctx context.Context, before time.Time) (int64, error) {
	var total int64
	for {
		n, err := pruner{d}.Delete(ctx, `DELETE FROM sentry_events WHERE rowid IN (
			SELECT rowid FROM sentry_events WHERE received_at < ? LIMIT ?)`,
			nanos(store.SentryPruneCutoff(before)), store.PruneBatch)
		if total += n; err != nil || n < store.PruneBatch {
			return total, err
		}
	}
}
