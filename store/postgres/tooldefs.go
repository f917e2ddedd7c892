package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
	"github.com/portcullis-dev/portcullis/store/internal/tooldefsql"
)

// RecordToolDefinitions upserts the definitions in one transaction
// (tooldefsql), then trims each sandbox written to.
func (d *Driver) RecordToolDefinitions(ctx context.Context, defs []store.ToolDefinition) (int, error) {
	if err := store.CheckToolDefinitions(defs); err != nil {
		return 0, err
	}
	if len(defs) == 0 {
		return 0, nil
	}
	n := 0
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		n = 0
		exists := map[string]bool{}
		for i, def := range defs {
			known, checked := exists[def.Sandbox]
			if !checked {
				var count int
				if err := tx.QueryRow(ctx, tooldefsql.Exists(sqlwhere.Dollar), def.Sandbox).Scan(&count); err != nil {
					return mapErr(err)
				}
				known, exists[def.Sandbox] = count > 0, count > 0
			}
			if !known {
				continue
			}
			_, err := tx.Exec(ctx, tooldefsql.Upsert(sqlwhere.Dollar),
				def.Sandbox, def.Host, int32(def.Port), def.Path, def.Tool, def.Fingerprint, string(def.Definition),
				def.FirstSeen, def.LastSeen, def.ProxyID)
			if err != nil {
				return fmt.Errorf("definition %d: %w", i, mapErr(err))
			}
			n++
		}
		for _, sb := range slices.Sorted(maps.Keys(exists)) {
			if !exists[sb] {
				continue
			}
			if _, err := tx.Exec(ctx, tooldefsql.Trim(sqlwhere.Dollar), sb, store.MaxToolDefinitionsPerSandbox); err != nil {
				return mapErr(err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("record %d tool definitions: %w", len(defs), err)
	}
	return n, nil
}

// ListToolDefinitions returns the definitions f matches, in
// tooldefsql.Sort's order.
func (d *Driver) ListToolDefinitions(ctx context.Context, f store.ToolDefinitionFilter) ([]store.ToolDefinition, error) {
	q, args := tooldefsql.Select(f, sqlwhere.Dollar)
	rows, err := d.pool.Query(ctx, q, args...)
	out, err := collect(rows, err, func(r pgx.Row) (tooldefsql.Row, error) {
		var t tooldefsql.Row
		var port int32
		var def string
		var first, last time.Time
		err := r.Scan(&t.ID, &t.Sandbox, &t.Host, &port, &t.Path, &t.Tool, &t.Fingerprint, &def, &first, &last, &t.ProxyID)
		t.Port, t.FirstSeen, t.LastSeen = int(port), first.UTC(), last.UTC()
		if def != "" {
			t.Definition = []byte(def)
		}
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tool definitions: %w", err)
	}
	return tooldefsql.Sort(out), nil
}
