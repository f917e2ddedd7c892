package sqlite

import (
	"context"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/providersql"
)

// The writes of credential providers are providersql.Writes, embedded in
// txn on the writer (or the transaction); their reads are sqlread's.

// LockProvider is GetProvider on the writer: the transaction holds the
// database (BEGIN IMMEDIATE), so no row lock is needed.
func (t *txn) LockProvider(ctx context.Context, name string) (store.Provider, error) {
	return providersql.Lock(ctx, engine{t.wr}, name, "")
}
