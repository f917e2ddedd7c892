package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sentrysql"
)

// The remediation primitives (sources' keys, the replay lookup, actions),
// written once in sentrysql: reads on the read pool (or the transaction),
// writes on the writer (or the transaction).

// PutSentryKey stores k as its source's key, replacing the one it had.
func (t *txn) PutSentryKey(ctx context.Context, k store.SentryKey) error {
	if err := checkTimes(fmt.Sprintf("sentry key of %q", k.Source), k.CreatedAt); err != nil {
		return err
	}
	return sentrysql.PutKey(ctx, engine{t.wr}, k)
}

// DeleteSentryKey removes the source's key and returns it (ErrNotFound).
func (t *txn) DeleteSentryKey(ctx context.Context, source string) (store.SentryKey, error) {
	return sentrysql.DeleteKey(ctx, engine{t.wr}, source)
}

// GetSentryKey returns the source's key (ErrNotFound).
func (t *txn) GetSentryKey(ctx context.Context, source string) (store.SentryKey, error) {
	return sentrysql.GetKey(ctx, engine{t.rd}, source)
}

// ListSentryKeys returns every key ordered by source.
func (t *txn) ListSentryKeys(ctx context.Context) ([]store.SentryKey, error) {
	return sentrysql.ListKeys(ctx, engine{t.rd})
}

// SentryEventAt returns the first received event of source with that
// sequence (ErrNotFound).
func (t *txn) SentryEventAt(ctx context.Context, source string, sequence uint64) (store.SentryEvent, error) {
	return sentrysql.EventAt(ctx, engine{t.rd}, source, sequence)
}

// SetSentryEventFlags replaces one event's flags.
func (t *txn) SetSentryEventFlags(ctx context.Context, ev store.SentryEvent, flags []string) error {
	return sentrysql.SetFlags(ctx, engine{t.wr}, ev, flags)
}

// InsertSentryAction stores a and returns it with its ID
// (ErrAlreadyExists if its event has one).
func (t *txn) InsertSentryAction(ctx context.Context, a store.SentryAction) (store.SentryAction, error) {
	if err := checkAction(a); err != nil {
		return store.SentryAction{}, err
	}
	return sentrysql.InsertAction(ctx, engine{t.wr}, a)
}

// GetSentryAction returns one action (ErrNotFound).
func (t *txn) GetSentryAction(ctx context.Context, id int64) (store.SentryAction, error) {
	return sentrysql.GetAction(ctx, engine{t.rd}, id)
}

// UpdateSentryAction writes a's mutable fields to the row a.ID
// (ErrNotFound).
func (t *txn) UpdateSentryAction(ctx context.Context, a store.SentryAction) error {
	if err := checkAction(a); err != nil {
		return err
	}
	return sentrysql.UpdateAction(ctx, engine{t.wr}, a)
}

// ListSentryActions returns the actions f matches, newest first.
func (t *txn) ListSentryActions(ctx context.Context, f store.SentryActionFilter) ([]store.SentryAction, error) {
	if err := checkTimes("sentry action filter", f.Since); err != nil {
		return nil, err
	}
	return sentrysql.ListActions(ctx, engine{t.rd}, f)
}

// CountSentryActions returns how many actions of source ("": all) with
// one of statuses were created at or after since.
func (t *txn) CountSentryActions(ctx context.Context, source string, statuses []string, since time.Time) (int, error) {
	if err := checkTimes("sentry action count", since); err != nil {
		return 0, err
	}
	return sentrysql.CountActions(ctx, engine{t.rd}, source, statuses, since)
}

// checkAction refuses an action with a time int64 nanoseconds cannot hold.
func checkAction(a store.SentryAction) error {
	return checkTimes(fmt.Sprintf("sentry action of event %s/%s", a.Source, a.EventID),
		a.ReceivedAt, a.CreatedAt, orZero(a.AckedAt), orZero(a.DecidedAt))
}
