package sqlite

import (
	"context"
	"fmt"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlexec"
	"github.com/portcullis-dev/portcullis/store/internal/tooldefsql"
)

// RecordToolDefinitions checks the definitions (their times too: SQLite
// stores nanoseconds), upserts them in one write transaction, then trims
// each sandbox written to (tooldefsql.Record).
func (d *Driver) RecordToolDefinitions(ctx context.Context, defs []store.ToolDefinition) (int, error) {
	return tooldefsql.Record(ctx, defs, func(i int, def store.ToolDefinition) error {
		return checkTimes(fmt.Sprintf("tool definition %d (sandbox %q)", i, def.Sandbox), def.FirstSeen, def.LastSeen)
	}, func(fn func(sqlexec.Engine) error) error {
		return d.inTx(ctx, func(t *txn) error { return fn(engine{t.wr}) })
	})
}
