package sqlite

import (
	"context"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/providersql"
)

// The writes of credential providers, written once in providersql, on
// the writer (or the transaction); their reads are sqlread's.

// InsertProvider stores p (ErrAlreadyExists for a taken name).
func (t *txn) InsertProvider(ctx context.Context, p store.Provider) error {
	return providersql.Insert(ctx, engine{t.wr}, p)
}

// RotateProvider replaces the provider's secret if its revision is still
// previous (ErrConflict, ErrNotFound).
func (t *txn) RotateProvider(ctx context.Context, p store.Provider, previous int64) error {
	return providersql.Rotate(ctx, engine{t.wr}, p, previous)
}

// DeleteProvider deletes the provider row (ErrNotFound).
func (t *txn) DeleteProvider(ctx context.Context, name string) error {
	return providersql.Delete(ctx, engine{t.wr}, name)
}

// AttachProvider attaches provider to sandbox; false when it was.
func (t *txn) AttachProvider(ctx context.Context, sandbox, provider string, at time.Time, by string) (bool, error) {
	return providersql.Attach(ctx, engine{t.wr}, sandbox, provider, at, by)
}

// DetachProvider detaches it (ErrNotFound when it is not attached).
func (t *txn) DetachProvider(ctx context.Context, sandbox, provider string) error {
	return providersql.Detach(ctx, engine{t.wr}, sandbox, provider)
}

// BumpCredentialsGeneration moves the sandbox's generation up by one.
func (t *txn) BumpCredentialsGeneration(ctx context.Context, sandbox string) (int64, error) {
	return providersql.Bump(ctx, engine{t.wr}, sandbox)
}

// LockProvider is GetProvider on the writer: the transaction holds the
// database (BEGIN IMMEDIATE), so no row lock is needed.
func (t *txn) LockProvider(ctx context.Context, name string) (store.Provider, error) {
	return providersql.Lock(ctx, engine{t.wr}, name, "")
}
