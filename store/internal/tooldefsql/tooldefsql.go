// Package tooldefsql is what the two store engines share about the MCP
// tool definitions proxies report: the upsert that keeps each distinct
// definition once, the bound on each sandbox's definitions, the list
// query and the order it is handed back in. Each engine writes its
// placeholders, binds its times and holds its transaction itself.
package tooldefsql

import (
	"cmp"
	"slices"
	"strings"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// Columns are the tool_definitions table's columns after id, in the
// order the engines write and scan them.
var Columns = []string{
	"sandbox", "host", "port", "path", "tool", "fingerprint", "definition", "first_seen", "last_seen", "proxy_id",
}

// Exists is the query that finds a sandbox (argument: its name):
// definitions of a sandbox deleted meanwhile are not stored.
func Exists(param func(n int) string) string {
	return `SELECT count(*) FROM sandboxes WHERE name = ` + param(1)
}

// Upsert returns the statement that stores one definition (bound in
// Columns' order) and that, when the definition is stored already, keeps
// the earliest first_seen and the latest last_seen with that report's
// proxy (and definition, unless the report had none). param(n) writes
// the engine's placeholder.
func Upsert(param func(n int) string) string {
	ps := make([]string, len(Columns))
	for i := range ps {
		ps[i] = param(i + 1)
	}
	const old, new = "tool_definitions.", "excluded."
	newer := new + "last_seen >= " + old + "last_seen"
	return `INSERT INTO tool_definitions (` + strings.Join(Columns, ", ") + `)
		VALUES (` + strings.Join(ps, ", ") + `)
		ON CONFLICT (sandbox, host, port, path, tool, fingerprint) DO UPDATE SET
			first_seen = CASE WHEN ` + new + `first_seen < ` + old + `first_seen THEN ` + new + `first_seen ELSE ` + old + `first_seen END,
			last_seen = CASE WHEN ` + newer + ` THEN ` + new + `last_seen ELSE ` + old + `last_seen END,
			proxy_id = CASE WHEN ` + newer + ` THEN ` + new + `proxy_id ELSE ` + old + `proxy_id END,
			definition = CASE WHEN ` + new + `definition <> '' AND (` + old + `definition = '' OR ` + newer + `)
				THEN ` + new + `definition ELSE ` + old + `definition END`
}

// Trim returns the statement that deletes a sandbox's definitions past
// its store.MaxToolDefinitionsPerSandbox seen last (arguments: sandbox,
// bound).
func Trim(param func(n int) string) string {
	return `DELETE FROM tool_definitions WHERE sandbox = ` + param(1) + ` AND id NOT IN (
		SELECT id FROM tool_definitions WHERE sandbox = ` + param(1) + ` ORDER BY last_seen DESC, id DESC LIMIT ` + param(2) + `)`
}

// Select returns the query that reads the definitions f matches (id,
// then Columns) and its arguments; Sort orders what it read.
func Select(f store.ToolDefinitionFilter, param func(n int) string) (string, []any) {
	where, args := sqlwhere.Where([]sqlwhere.Cond{
		{Expr: "sandbox = ", V: f.Sandbox, Set: true},
		{Expr: "fingerprint = ", V: f.Fingerprint, Set: f.Fingerprint != ""},
	}, param)
	return `SELECT id, ` + strings.Join(Columns, ", ") + ` FROM tool_definitions` + where, args
}

// Row is one definition read with its id.
type Row struct {
	ID int64
	store.ToolDefinition
}

// Sort orders rows as ListToolDefinitions returns them — by host, port,
// path and tool (byte order, the same on every engine), each tool's
// newest first — and drops the ids.
func Sort(rows []Row) []store.ToolDefinition {
	slices.SortFunc(rows, func(a, b Row) int {
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
