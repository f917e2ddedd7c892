package postgres

import (
	"context"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/providersql"
)

// The writes of credential providers, written once in providersql, on
// the pool (or the transaction); their reads are sqlread's.

// InsertProvider stores p (ErrAlreadyExists for a taken name).
func (c *conn) InsertProvider(ctx context.Context, p store.Provider) error {
	return providersql.Insert(ctx, engine{c.db}, p)
}

// RotateProvider replaces the provider's secret if its revision is still
// previous (ErrConflict, ErrNotFound).
func (c *conn) RotateProvider(ctx context.Context, p store.Provider, previous int64) error {
	return providersql.Rotate(ctx, engine{c.db}, p, previous)
}

// DeleteProvider deletes the provider row (ErrNotFound).
func (c *conn) DeleteProvider(ctx context.Context, name string) error {
	return providersql.Delete(ctx, engine{c.db}, name)
}

// AttachProvider attaches provider to sandbox; false when it was.
func (c *conn) AttachProvider(ctx context.Context, sandbox, provider string, at time.Time, by string) (bool, error) {
	return providersql.Attach(ctx, engine{c.db}, sandbox, provider, at, by)
}

// DetachProvider detaches it (ErrNotFound when it is not attached).
func (c *conn) DetachProvider(ctx context.Context, sandbox, provider string) error {
	return providersql.Detach(ctx, engine{c.db}, sandbox, provider)
}

// BumpCredentialsGeneration moves the sandbox's generation up by one.
func (c *conn) BumpCredentialsGeneration(ctx context.Context, sandbox string) (int64, error) {
	return providersql.Bump(ctx, engine{c.db}, sandbox)
}

// LockProvider is GetProvider holding the row (FOR SHARE) until the
// transaction ends.
func (c *conn) LockProvider(ctx context.Context, name string) (store.Provider, error) {
	lock := ""
	if c.tx != nil {
		lock = ` FOR SHARE`
	}
	return providersql.Lock(ctx, engine{c.db}, name, lock)
}
