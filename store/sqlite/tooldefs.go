package sqlite

import (
	"context"
	"fmt"
	"maps"
	"slices"

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
	for i, def := range defs {
		if err := checkTimes(fmt.Sprintf("tool definition %d (sandbox %q)", i, def.Sandbox), def.FirstSeen, def.LastSeen); err != nil {
			return 0, err
		}
	}
	if len(defs) == 0 {
		return 0, nil
	}
	n := 0
	err := d.inTx(ctx, func(t *txn) error {
		n = 0
		exists := map[string]bool{}
		for i, def := range defs {
			known, checked := exists[def.Sandbox]
			if !checked {
				var count int
				if err := t.wr.QueryRowContext(ctx, tooldefsql.Exists(sqlwhere.Numbered), def.Sandbox).Scan(&count); err != nil {
					return mapErr(err)
				}
				known, exists[def.Sandbox] = count > 0, count > 0
			}
			if !known {
				continue
			}
			_, err := t.wr.ExecContext(ctx, tooldefsql.Upsert(sqlwhere.Numbered),
				def.Sandbox, def.Host, def.Port, def.Path, def.Tool, def.Fingerprint, string(def.Definition),
				nanos(def.FirstSeen), nanos(def.LastSeen), def.ProxyID)
			if err != nil {
				return fmt.Errorf("definition %d: %w", i, mapErr(err))
			}
			n++
		}
		for _, sb := range slices.Sorted(maps.Keys(exists)) {
			if !exists[sb] {
				continue
			}
			if _, err := t.wr.ExecContext(ctx, tooldefsql.Trim(sqlwhere.Numbered), sb, store.MaxToolDefinitionsPerSandbox); err != nil {
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
	q, args := tooldefsql.Select(f, sqlwhere.Numbered)
	out, err := collect(ctx, d.r, func(r scanner) (tooldefsql.Row, error) {
		var t tooldefsql.Row
		var def string
		var first, last int64
		err := r.Scan(&t.ID, &t.Sandbox, &t.Host, &t.Port, &t.Path, &t.Tool, &t.Fingerprint, &def, &first, &last, &t.ProxyID)
		t.FirstSeen, t.LastSeen = fromNanos(first), fromNanos(last)
		if def != "" {
			t.Definition = []byte(def)
		}
		return t, err
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list tool definitions: %w", err)
	}
	return tooldefsql.Sort(out), nil
}
