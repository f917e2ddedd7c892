package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlexec"
	"github.com/portcullis-dev/portcullis/store/internal/tooldefsql"
)

// RecordToolDefinitions checks the definitions, upserts them in one
// transaction, then trims each sandbox written to (tooldefsql.Record).
func (d *Driver) RecordToolDefinitions(ctx context.Context, defs []store.ToolDefinition) (int, error) {
	return tooldefsql.Record(ctx, defs, nil, func(fn func(sqlexec.Engine) error) error {
		return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return fn(engine{tx}) })
	})
}
