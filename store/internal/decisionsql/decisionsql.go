// Package decisionsql is what the two store engines share about decision
// records: their columns, the query that lists them, and the pruning
// (PruneDecisions' statements and their order). It lives here, not in
// each engine, so what a filter matches, the order records come back in
// and which records outlive pruning cannot drift between SQLite and
// PostgreSQL; each engine writes its placeholders, binds, scans and holds
// its transactions itself.
package decisionsql

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// Columns are the decisions table's columns after id and received_at, in
// the order the engines write and scan them.
var Columns = []string{
	"at", "sandbox", "proxy_id", "decision", "binary_name", "host", "port", "addr",
	"http_method", "path", "mcp_method", "tool", "entry", "rule", "reason",
	"policy_version", "denial_id", "version_probe", "arguments_digest", "reason_code", "tool_definition",
	"summary_count", "summary_last_at", "summary_first_denial_id", "summary_last_denial_id", "cuts",
}

// Values appends to dst d's values for Columns, in their order; tm writes
// a time as the engine stores it (the zero time as NULL). A record that
// is no summary has summary_count 0 and no summary's fields.
func Values(dst []any, d *store.Decision, tm func(time.Time) any) []any {
	var sum decision.Summary
	if d.Summary != nil {
		sum = *d.Summary
	}
	return append(dst,
		tm(d.Time), d.Sandbox, d.ProxyID, d.Decision, d.Binary, d.Host, int32(d.Port), d.Addr,
		d.HTTPMethod, d.Path, d.MCPMethod, d.Tool, d.Entry, d.Rule, d.Reason,
		d.PolicyVersion, d.DenialID, d.VersionProbe, d.ArgumentsDigest, d.ReasonCode, d.ToolDefinition,
		sum.Count, tm(sum.Last), sum.FirstDenialID, sum.LastDenialID, encodeCuts(d.Cuts),
	)
}

// Row is one row of Columns being read back into a record.
type Row struct {
	d            store.Decision
	port         int32
	summaryCount int64
	first, last  string
	cuts         string
}

// Dest appends to dst the scan destinations of Columns, in their order:
// the record's fields, but for the two times, which the engine scans into
// at and summaryLast (its own holders) and hands to Decision.
func (r *Row) Dest(dst []any, at, summaryLast any) []any {
	d := &r.d
	return append(dst,
		at, &d.Sandbox, &d.ProxyID, &d.Decision, &d.Binary, &d.Host, &r.port, &d.Addr,
		&d.HTTPMethod, &d.Path, &d.MCPMethod, &d.Tool, &d.Entry, &d.Rule, &d.Reason,
		&d.PolicyVersion, &d.DenialID, &d.VersionProbe, &d.ArgumentsDigest, &d.ReasonCode, &d.ToolDefinition,
		&r.summaryCount, summaryLast, &r.first, &r.last, &r.cuts,
	)
}

// Decision returns the record the row holds, with its id and receipt
// time and its two times (the zero time for NULL) as the engine read
// them.
func (r *Row) Decision(id int64, received, at, summaryLast time.Time) (store.Decision, error) {
	d := r.d
	d.ID, d.ReceivedAt, d.Time, d.Port = id, received, at, int(r.port)
	if r.summaryCount > 0 {
		d.Summary = &decision.Summary{Count: r.summaryCount, Last: summaryLast, FirstDenialID: r.first, LastDenialID: r.last}
	}
	var err error
	d.Cuts, err = decodeCuts(r.cuts)
	return d, err
}

// encodeCuts is how the cuts column holds a record's cuts: "" for none,
// else their JSON array.
func encodeCuts(cuts []decision.Cut) string {
	if len(cuts) == 0 {
		return ""
	}
	b, err := json.Marshal(cuts)
	if err != nil {
		panic(err) // strings and ints always encode
	}
	return string(b)
}

// decodeCuts reads the cuts column back.
func decodeCuts(s string) ([]decision.Cut, error) {
	if s == "" {
		return nil, nil
	}
	var cuts []decision.Cut
	if err := json.Unmarshal([]byte(s), &cuts); err != nil {
		return nil, fmt.Errorf("decision record cuts: %w", err)
	}
	return cuts, nil
}

// Select returns the query that reads the records f matches (id,
// received_at, then Columns), its arguments, and whether it reads them
// newest first: with AfterID 0 a limit keeps the newest records, so the
// query reads those and the caller reverses them to hand back oldest
// first. A negative AfterID reads from the first record. param(n) writes
// the engine's placeholder for the nth argument.
func Select(f store.DecisionFilter, param func(n int) string) (q string, args []any, newest bool) {
	where, args := sqlwhere.Where([]sqlwhere.Cond{
		{Expr: "sandbox = ", V: f.Sandbox, Set: f.Sandbox != ""}, {Expr: "decision = ", V: f.Decision, Set: f.Decision != ""},
		{Expr: "denial_id = ", V: f.DenialID, Set: f.DenialID != ""}, {Expr: "tool = ", V: f.Tool, Set: f.Tool != ""},
		{Expr: "id > ", V: f.AfterID, Set: f.AfterID > 0},
	}, param)
	q = `SELECT id, received_at, ` + strings.Join(Columns, ", ") + ` FROM decisions` + where
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

// Pruner runs Prune's statements on one engine. Every method returns
// errors already mapped to the store's sentinels.
type Pruner interface {
	// Param writes the engine's placeholder for the nth argument.
	Param(n int) string
	// Received binds a received_at bound the way the engine stores times.
	Received(t time.Time) any
	// Delete runs one DELETE in its own short transaction and returns how
	// many rows it deleted.
	Delete(ctx context.Context, q string, args ...any) (int64, error)
	// Names returns the one text column of q's rows.
	Names(ctx context.Context, q string) ([]string, error)
	// ID returns the one integer column of q's first row; found is false
	// when q has no rows.
	ID(ctx context.Context, q string, args ...any) (id int64, found bool, err error)
}

// Prune is PruneDecisions for both engines: it deletes the records
// received before r.Before, then each sandbox's records past its newest
// r.KeepPerSandbox, store.PruneBatch per statement, and returns how many
// it deleted (also when it stops at an error). A record a proposal of its
// sandbox names (NotNamed) is kept.
func Prune(ctx context.Context, r store.DecisionRetention, p Pruner) (int64, error) {
	if err := r.Check(); err != nil {
		return 0, err
	}
	var total int64
	// deleteAll deletes what q selects, a batch a statement, until a
	// batch comes back short; q's last parameter is the batch size.
	deleteAll := func(q string, args ...any) error {
		for {
			n, err := p.Delete(ctx, q, append(args, store.PruneBatch)...)
			if err != nil {
				return err
			}
			total += n
			if n < store.PruneBatch {
				return nil
			}
		}
	}
	if !r.Before.IsZero() {
		err := deleteAll(`DELETE FROM decisions WHERE id IN (
			SELECT d.id FROM decisions d WHERE d.received_at < `+p.Param(1)+` AND `+NotNamed+` LIMIT `+p.Param(2)+`)`,
			p.Received(r.Before))
		if err != nil {
			return total, fmt.Errorf("prune decisions by age: %w", err)
		}
	}
	if r.KeepPerSandbox <= 0 {
		return total, nil
	}
	sandboxes, err := p.Names(ctx, Sandboxes)
	if err != nil {
		return total, fmt.Errorf("prune decisions: list sandboxes: %w", err)
	}
	for _, sb := range sandboxes {
		// The newest record past the bound: it and every older one go.
		cut, found, err := p.ID(ctx, `SELECT id FROM decisions WHERE sandbox = `+p.Param(1)+
			` ORDER BY id DESC LIMIT 1 OFFSET `+p.Param(2), sb, r.KeepPerSandbox)
		if err == nil && found {
			err = deleteAll(`DELETE FROM decisions WHERE id IN (
				SELECT d.id FROM decisions d WHERE d.sandbox = `+p.Param(1)+` AND d.id <= `+p.Param(2)+
				` AND `+NotNamed+` LIMIT `+p.Param(3)+`)`, sb, cut)
		}
		if err != nil {
			return total, fmt.Errorf("prune decisions of sandbox %q: %w", sb, err)
		}
	}
	return total, nil
}

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
