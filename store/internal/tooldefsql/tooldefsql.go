// Package tooldefsql is what the two store engines share about the MCP
// tool definitions proxies report: recording a batch (the upsert that
// keeps each distinct definition once, the bound on each sandbox's
// definitions) and listing them (the query and the order it is handed
// back in), on a sqlexec.Engine. Each engine holds its transaction
// itself.
package tooldefsql

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlexec"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// columns are the tool_definitions table's columns after id, in the
// order the engines write and scan them.
var columns = []string{
	"sandbox", "host", "port", "path", "tool", "fingerprint", "definition", "first_seen", "last_seen", "proxy_id",
}

// Record is RecordToolDefinitions for both engines. It checks defs
// (store.CheckToolDefinitions, then check on each, when the engine has
// more to refuse); then in one transaction (inTx) it stores each
// definition whose sandbox exists (definitions of a sandbox deleted
// meanwhile are not stored), trims each sandbox written to, and returns
// how many it stored.
func Record(ctx context.Context, defs []store.ToolDefinition, check func(i int, def store.ToolDefinition) error, inTx func(func(sqlexec.Engine) error) error) (int, error) {
	if err := store.CheckToolDefinitions(defs); err != nil {
		return 0, err
	}
	for i, def := range defs {
		if check != nil {
			if err := check(i, def); err != nil {
				return 0, err
			}
		}
	}
	if len(defs) == 0 {
		return 0, nil
	}
	n := 0
	err := inTx(func(e sqlexec.Engine) error {
		n = 0
		exists := map[string]bool{}
		for i, def := range defs {
			known, checked := exists[def.Sandbox]
			if !checked {
				var err error
				if known, err = sandboxExists(ctx, e, def.Sandbox); err != nil {
					return err
				}
				exists[def.Sandbox] = known
			}
			if !known {
				continue
			}
			err := e.Exec(ctx, upsert(e.Param),
				def.Sandbox, def.Host, def.Port, def.Path, def.Tool, def.Fingerprint, string(def.Definition),
				e.Time(def.FirstSeen), e.Time(def.LastSeen), def.ProxyID)
			if err != nil {
				return fmt.Errorf("definition %d: %w", i, err)
			}
			n++
		}
		for _, sb := range slices.Sorted(maps.Keys(exists)) {
			if !exists[sb] {
				continue
			}
			if err := e.Exec(ctx, trim(e.Param), sb, store.MaxToolDefinitionsPerSandbox); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("record %d tool definitions: %w", len(defs), err)
	}
	return n, nil
}

// sandboxExists reports whether the sandbox is stored.
func sandboxExists(ctx context.Context, e sqlexec.Engine, sandbox string) (bool, error) {
	var count int
	err := e.Rows(ctx, `SELECT count(*) FROM sandboxes WHERE name = `+e.Param(1), []any{sandbox},
		func(scan func(...any) error) error { return scan(&count) })
	return count > 0, err
}

// List is ListToolDefinitions for both engines: the definitions f
// matches, by host, port, path and tool, each tool's newest first
// (sortRows).
func List(ctx context.Context, e sqlexec.Engine, f store.ToolDefinitionFilter) ([]store.ToolDefinition, error) {
	q, args := selectQuery(f, e.Param)
	var rows []row
	err := e.Rows(ctx, q, args, func(scan func(...any) error) error {
		var t row
		var def string
		err := scan(&t.ID, &t.Sandbox, &t.Host, &t.Port, &t.Path, &t.Tool, &t.Fingerprint, &def,
			sqlexec.TimeDest(&t.FirstSeen), sqlexec.TimeDest(&t.LastSeen), &t.ProxyID)
		if def != "" {
			t.Definition = []byte(def)
		}
		rows = append(rows, t)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list tool definitions: %w", err)
	}
	return sortRows(rows), nil
}

// upsert returns the statement that stores one definition (bound in
// columns' order) and that, when the definition is stored already, keeps
// the earliest first_seen and the latest last_seen with that report's
// proxy (and definition, unless the report had none). param(n) writes
// the engine's placeholder.
func upsert(param func(n int) string) string {
	ps := make([]string, len(columns))
	for i := range ps {
		ps[i] = param(i + 1)
	}
	const old, new = "tool_definitions.", "excluded."
	newer := new + "last_seen >= " + old + "last_seen"
	return `INSERT INTO tool_definitions (` + strings.Join(columns, ", ") + `)
		VALUES (` + strings.Join(ps, ", ") + `)
		ON CONFLICT (sandbox, host, port, path, tool, fingerprint) DO UPDATE SET
			first_seen = CASE WHEN ` + new + `first_seen < ` + old + `first_seen THEN ` + new + `first_seen ELSE ` + old + `first_seen END,
			last_seen = CASE WHEN ` + newer + ` THEN ` + new + `last_seen ELSE ` + old + `last_seen END,
			proxy_id = CASE WHEN ` + newer + ` THEN ` + new + `proxy_id ELSE ` + old + `proxy_id END,
			definition = CASE WHEN ` + new + `definition <> '' AND (` + old + `definition = '' OR ` + newer + `)
				THEN ` + new + `definition ELSE ` + old + `definition END`
}

// trim returns the statement that deletes a sandbox's definitions past
// its store.MaxToolDefinitionsPerSandbox seen last (arguments: sandbox,
// bound).
func trim(param func(n int) string) string {
	return `DELETE FROM tool_definitions WHERE sandbox = ` + param(1) + ` AND id NOT IN (
		SELECT id FROM tool_definitions WHERE sandbox = ` + param(1) + ` ORDER BY last_seen DESC, id DESC LIMIT ` + param(2) + `)`
}

// selectQuery returns the query that reads the definitions f matches (id,
// then columns) and its arguments; sortRows orders what it read.
func selectQuery(f store.ToolDefinitionFilter, param func(n int) string) (string, []any) {
	where, args := sqlwhere.Where([]sqlwhere.Cond{
		{Expr: "sandbox = ", V: f.Sandbox, Set: true},
		{Expr: "fingerprint = ", V: f.Fingerprint, Set: f.Fingerprint != ""},
	}, param)
	return `SELECT id, ` + strings.Join(columns, ", ") + ` FROM tool_definitions` + where, args
}

// row is one definition read with its id.
type row struct {
	ID int64
	store.ToolDefinition
}

// sortRows orders rows as ListToolDefinitions returns them — by host, port,
// path and tool (byte order, the same on every engine), each tool's
// newest first — and drops the ids.
func sortRows(rows []row) []store.ToolDefinition {
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(
			strings.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port), strings.Compare(a.Path, b.Path),
			strings.Compare(a.Tool, b.Tool), b.LastSeen.Compare(a.LastSeen), cmp.Compare(b.ID, a.ID))
	})
	out := make([]store.ToolDefinition, len(rows))
	for i, r := range rows {
		out[i] = r.ToolDefinition
	}
	return out
}
