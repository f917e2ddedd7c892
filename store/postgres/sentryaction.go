package postgres

import (
	"context"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sentrysql"
)

// The remediation primitives (sources' keys, the replay lookup, actions),
// written once in sentrysql, run on the pool or in the transaction.

func (c *conn) sentry() engine { return engine{c.db} }

// PutSentryKey stores k as its source's key, replacing the one it had.
func (c *conn) PutSentryKey(ctx context.Context, k store.SentryKey) error {
	return sentrysql.PutKey(ctx, c.sentry(), k)
}

// DeleteSentryKey removes the source's key and returns it (ErrNotFound).
func (c *conn) DeleteSentryKey(ctx context.Context, source string) (store.SentryKey, error) {
	return sentrysql.DeleteKey(ctx, c.sentry(), source)
}

// GetSentryKey returns the source's key (ErrNotFound).
func (c *conn) GetSentryKey(ctx context.Context, source string) (store.SentryKey, error) {
	return sentrysql.GetKey(ctx, c.sentry(), source)
}

// ListSentryKeys returns every key ordered by source.
func (c *conn) ListSentryKeys(ctx context.Context) ([]store.SentryKey, error) {
	return sentrysql.ListKeys(ctx, c.sentry())
}

// SentryEventAt returns the first received event of source with that
// sequence (ErrNotFound).
func (c *conn) SentryEventAt(ctx context.Context, source string, sequence uint64) (store.SentryEvent, error) {
	return sentrysql.EventAt(ctx, c.sentry(), source, sequence)
}

// SetSentryEventFlags replaces one event's flags.
func (c *conn) SetSentryEventFlags(ctx context.Context, ev store.SentryEvent, flags []string) error {
	return sentrysql.SetFlags(ctx, c.sentry(), ev, flags)
}

// InsertSentryAction stores a and returns it with its ID
// (ErrAlreadyExists, the transaction usable, if its event has one).
func (c *conn) InsertSentryAction(ctx context.Context, a store.SentryAction) (store.SentryAction, error) {
	return sentrysql.InsertAction(ctx, c.sentry(), a)
}

// GetSentryAction returns one action (ErrNotFound).
func (c *conn) GetSentryAction(ctx context.Context, id int64) (store.SentryAction, error) {
	return sentrysql.GetAction(ctx, c.sentry(), id)
}

// UpdateSentryAction writes a's mutable fields to the row a.ID
// (ErrNotFound).
func (c *conn) UpdateSentryAction(ctx context.Context, a store.SentryAction) error {
	return sentrysql.UpdateAction(ctx, c.sentry(), a)
}

// ListSentryActions returns the actions f matches, newest first.
func (c *conn) ListSentryActions(ctx context.Context, f store.SentryActionFilter) ([]store.SentryAction, error) {
	return sentrysql.ListActions(ctx, c.sentry(), f)
}

// CountSentryActions returns how many actions of source ("": all) with
// one of statuses were created at or after since.
func (c *conn) CountSentryActions(ctx context.Context, source string, statuses []string, since time.Time) (int, error) {
	return sentrysql.CountActions(ctx, c.sentry(), source, statuses, since)
}
