package postgres

import (
	"context"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/providersql"
)

// The writes of credential providers are providersql.Writes, embedded in
// conn on its pool or transaction; their reads are sqlread's.

// LockProvider is GetProvider holding the row (FOR SHARE) until the
// transaction ends.
func (c *conn) LockProvider(ctx context.Context, name string) (store.Provider, error) {
	lock := ""
	if c.tx != nil {
		lock = ` FOR SHARE`
	}
	return providersql.Lock(ctx, engine{c.db}, name, lock)
}
