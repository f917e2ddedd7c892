package sqlite

import (
	"context"
	"fmt"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlexec"
	"github.com/portcullis-dev/portcullis/store/internal/tooldefsql"
)

// RecordToolDefinitions upserts the definitions in one write transaction,
// then trims each sandbox written to (tooldefsql.Record).
func (d *Driver) RecordToolDefinitions(ctx context.Context, defs []store.ToolDefinition) (int, error) {
	if err := store.CheckToolDefinitions(defs); err != nil {
		return 0, err
	}
	for i, def := range defs {
		if err := checkTimes(fmt.Sprintf("tool definition %d (sandbox %q)", i, def.Sandbox), def.FirstSeen, def.LastSeen); err != nil {
			return 0, err
		}
	}
	return tooldefsql.Record(ctx, defs, func(fn func(sqlexec.Engine) error) error {
		return d.inTx(ctx, func(t *txn) error { return fn(engine{t.wr}) })
	})
}
