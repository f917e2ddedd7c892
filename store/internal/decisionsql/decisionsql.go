// Package decisionsql holds what the decision-record statements share
// between SQLite and PostgreSQL: the columns, the query that lists
// records, and the parts of the pruning statements that read the same in
// both dialects. It lives here, not in each engine, so what a filter
// matches, the order records come back in and which records outlive
// pruning cannot drift between them; each engine binds, scans, batches
// and holds its transactions itself.
package decisionsql

import (
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/store"
)

// Columns are the decisions table's columns after id and received_at, in
// the order the engines write and scan them.
var Columns = []string{
	"at", "sandbox", "proxy_id", "decision", "binary_name", "host", "port", "addr",
	"http_method", "path", "mcp_method", "tool", "entry", "rule", "reason",
	"policy_version", "denial_id", "version_probe",
}

// Select returns the query that reads the records f matches (id,
// received_at, then Columns), its arguments, and whether it reads them
// newest first: with AfterID 0 a limit keeps the newest records, so the
// query reads those and the caller reverses them to hand back oldest
// first. A negative AfterID reads from the first record. param(n) writes
// the engine's placeholder for the nth argument.
func Select(f store.DecisionFilter, param func(n int) string) (q string, args []any, newest bool) {
	var where []string
	for _, c := range []struct {
		cond string // of the next parameter
		v    any
		set  bool
	}{
		{"sandbox = ", f.Sandbox, f.Sandbox != ""}, {"decision = ", f.Decision, f.Decision != ""},
		{"denial_id = ", f.DenialID, f.DenialID != ""}, {"id > ", f.AfterID, f.AfterID > 0},
	} {
		if c.set {
			args = append(args, c.v)
			where = append(where, c.cond+param(len(args)))
		}
	}
	q = `SELECT id, received_at, ` + strings.Join(Columns, ", ") + ` FROM decisions`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id`
	newest = f.AfterID == 0 && f.Limit > 0
	if newest {
		q += ` DESC`
	}
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += ` LIMIT ` + param(len(args))
	}
	return q, args, newest
}

// Dollar writes PostgreSQL's placeholder for the nth argument ($1, $2…).
func Dollar(n int) string { return "$" + strconv.Itoa(n) }

// Question writes SQLite's placeholder, the same for every argument.
func Question(int) string { return "?" }

// NotNamed is true of a decisions row d that no proposal of its sandbox
// names by its denial id: pruning keeps the records that are named, since
// the proposal still points at the denial it came from.
const NotNamed = `NOT EXISTS (SELECT 1 FROM proposals p
	WHERE d.denial_id <> '' AND p.sandbox = d.sandbox AND p.denial_id = d.denial_id)`

// Sandboxes lists the sandboxes that have decision records (deleted ones
// too: records outlive their sandbox), one index probe each rather than a
// scan of every record.
const Sandboxes = `WITH RECURSIVE s(name) AS (
		SELECT min(sandbox) FROM decisions
		UNION ALL
		SELECT (SELECT min(sandbox) FROM decisions WHERE sandbox > s.name) FROM s WHERE s.name IS NOT NULL)
	SELECT name FROM s WHERE name IS NOT NULL`
