// Package callsql is what the two store engines share about held calls
// (migration 00018): their columns, the reads (one call, by its proxy's
// key, a list newest first, the count still held, a call's approvals) and
// the writes (insert, the compare-and-set decision, the bulk endings:
// an earlier proxy instance's calls failed, calls past their deadline
// expired, arguments cleared after the retention), on a sqlexec.Engine:
// the transaction's, or outside one the read pool for reads and the
// writer for writes.
package callsql

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlexec"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// columns are held_calls' columns after id, in the order Insert binds
// them and scan reads them.
var columns = []string{
	"sandbox", "proxy_id", "instance", "call_key", "binary_path", "host", "port", "method", "path",
	"mcp_method", "tool", "arguments_json", "arguments_digest", "policy_version", "entry", "rule", "trace_id",
	"status", "requested_at", "deadline", "decided_at", "decided_by", "reason", "proposal_id",
}

var selectColumns = "id, " + strings.Join(columns, ", ")

// nullTime scans a time that may be NULL (the zero time).
type nullTime struct{ t *time.Time }

func (d nullTime) Scan(src any) error {
	if src == nil {
		*d.t = time.Time{}
		return nil
	}
	return sqlexec.TimeDest(d.t).Scan(src)
}

// bindTime binds t as the engine stores times, the zero time as NULL.
func bindTime(e sqlexec.Engine, t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return e.Time(t)
}

func scan(c *store.HeldCall) func(func(...any) error) error {
	return func(scan func(...any) error) error {
		return scan(&c.ID, &c.Sandbox, &c.ProxyID, &c.Instance, &c.Key, &c.Binary, &c.Host, &c.Port, &c.Method, &c.Path,
			&c.MCPMethod, &c.Tool, &c.ArgumentsJSON, &c.ArgumentsDigest, &c.PolicyVersion, &c.Entry, &c.Rule, &c.TraceID,
			&c.Status, sqlexec.TimeDest(&c.RequestedAt), sqlexec.TimeDest(&c.Deadline), nullTime{&c.DecidedAt},
			&c.DecidedBy, &c.Reason, &c.ProposalID)
	}
}

// rows runs q and returns every call it selects.
func rows(ctx context.Context, e sqlexec.Engine, q string, args []any) ([]store.HeldCall, error) {
	var out []store.HeldCall
	err := e.Rows(ctx, q, args, func(s func(...any) error) error {
		var c store.HeldCall
		err := scan(&c)(s)
		out = append(out, c)
		return err
	})
	return out, err
}

// one runs q, which selects at most one call: ErrNotFound when none.
func one(ctx context.Context, e sqlexec.Engine, q string, args []any) (store.HeldCall, error) {
	list, err := rows(ctx, e, q, args)
	if err != nil {
		return store.HeldCall{}, err
	}
	if len(list) == 0 {
		return store.HeldCall{}, store.ErrNotFound
	}
	return list[0], nil
}

// Insert stores c (ID ignored) and returns it with its ID:
// ErrAlreadyExists when its key is taken.
func Insert(ctx context.Context, e sqlexec.Engine, c store.HeldCall) (store.HeldCall, error) {
	ps := make([]string, len(columns))
	for i := range ps {
		ps[i] = e.Param(i + 1)
	}
	out, err := one(ctx, e, `INSERT INTO held_calls (`+strings.Join(columns, ", ")+`) VALUES (`+strings.Join(ps, ", ")+`)
		ON CONFLICT (sandbox, proxy_id, instance, call_key) DO NOTHING RETURNING `+selectColumns,
		[]any{c.Sandbox, c.ProxyID, c.Instance, c.Key, c.Binary, c.Host, c.Port, c.Method, c.Path,
			c.MCPMethod, c.Tool, c.ArgumentsJSON, c.ArgumentsDigest, c.PolicyVersion, c.Entry, c.Rule, c.TraceID,
			c.Status, e.Time(c.RequestedAt), e.Time(c.Deadline), bindTime(e, c.DecidedAt), c.DecidedBy, c.Reason, c.ProposalID})
	if err == store.ErrNotFound { // no row back: the key was taken
		err = fmt.Errorf("%w: call %q of proxy %s (instance %s) is filed", store.ErrAlreadyExists, c.Key, c.ProxyID, c.Instance)
	}
	if err != nil {
		return store.HeldCall{}, fmt.Errorf("insert held call of sandbox %q: %w", c.Sandbox, err)
	}
	return out, nil
}

// Get returns one call by ID (ErrNotFound).
func Get(ctx context.Context, e sqlexec.Engine, id int64) (store.HeldCall, error) {
	c, err := one(ctx, e, `SELECT `+selectColumns+` FROM held_calls WHERE id = `+e.Param(1), []any{id})
	if err != nil {
		return c, fmt.Errorf("get held call %d: %w", id, err)
	}
	return c, nil
}

// ByKey returns the call its proxy names (ErrNotFound).
func ByKey(ctx context.Context, e sqlexec.Engine, sandbox, proxyID, instance, key string) (store.HeldCall, error) {
	p := e.Param
	c, err := one(ctx, e, `SELECT `+selectColumns+` FROM held_calls WHERE sandbox = `+p(1)+` AND proxy_id = `+p(2)+
		` AND instance = `+p(3)+` AND call_key = `+p(4), []any{sandbox, proxyID, instance, key})
	if err != nil {
		return c, fmt.Errorf("held call %q of proxy %s: %w", key, proxyID, err)
	}
	return c, nil
}

// List returns the calls f matches, newest first; a limit keeps the
// newest.
func List(ctx context.Context, e sqlexec.Engine, f store.HeldCallFilter) ([]store.HeldCall, error) {
	where, args := sqlwhere.Where([]sqlwhere.Cond{
		{Expr: "sandbox = ", V: f.Sandbox, Set: f.Sandbox != ""},
		{Expr: "status = ", V: f.Status, Set: f.Status != ""},
	}, e.Param)
	q := `SELECT ` + selectColumns + ` FROM held_calls` + where + ` ORDER BY requested_at DESC, id DESC`
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += ` LIMIT ` + e.Param(len(args))
	}
	out, err := rows(ctx, e, q, args)
	if err != nil {
		return nil, fmt.Errorf("list held calls: %w", err)
	}
	return out, nil
}

// Decided returns those of the calls ids names that are no longer held
// (in no order), a few hundred ids a statement.
func Decided(ctx context.Context, e sqlexec.Engine, ids []int64) ([]store.HeldCall, error) {
	var out []store.HeldCall
	for chunk := range slices.Chunk(ids, 500) {
		any := make([]any, len(chunk))
		for i, id := range chunk {
			any[i] = id
		}
		where, args := sqlwhere.Where([]sqlwhere.Cond{{Expr: "id IN ", Any: any}}, e.Param)
		list, err := rows(ctx, e, `SELECT `+selectColumns+` FROM held_calls`+where+` AND status <> '`+store.CallHeld+`'`, args)
		if err != nil {
			return nil, fmt.Errorf("decided held calls: %w", err)
		}
		out = append(out, list...)
	}
	return out, nil
}

// CountHeld returns how many calls of sandbox ("": all) are held.
func CountHeld(ctx context.Context, e sqlexec.Engine, sandbox string) (int, error) {
	where, args := sqlwhere.Where([]sqlwhere.Cond{
		{Expr: "status = ", V: store.CallHeld, Set: true},
		{Expr: "sandbox = ", V: sandbox, Set: sandbox != ""},
	}, e.Param)
	var n int64
	err := e.Rows(ctx, `SELECT count(*) FROM held_calls`+where, args, func(s func(...any) error) error { return s(&n) })
	if err != nil {
		return 0, fmt.Errorf("count held calls: %w", err)
	}
	return int(n), nil
}

// Decide moves the held call c.ID to c's decision if it is still held:
// ErrConflict when it is not, ErrNotFound when there is no such call.
func Decide(ctx context.Context, e sqlexec.Engine, c store.HeldCall) (store.HeldCall, error) {
	p := e.Param
	out, err := one(ctx, e, `UPDATE held_calls SET status = `+p(2)+`, decided_at = `+p(3)+`, decided_by = `+p(4)+
		`, reason = `+p(5)+`, proposal_id = `+p(6)+` WHERE id = `+p(1)+` AND status = '`+store.CallHeld+`' RETURNING `+selectColumns,
		[]any{c.ID, c.Status, bindTime(e, c.DecidedAt), c.DecidedBy, c.Reason, c.ProposalID})
	if err == store.ErrNotFound {
		if cur, gerr := Get(ctx, e, c.ID); gerr != nil {
			err = gerr
		} else {
			err = fmt.Errorf("%w: held call %d is %s", store.ErrConflict, c.ID, cur.Status)
		}
	}
	if err != nil {
		return store.HeldCall{}, fmt.Errorf("decide held call %d: %w", c.ID, err)
	}
	return out, nil
}

// SetProposal records the proposal an approval filed (ErrNotFound).
func SetProposal(ctx context.Context, e sqlexec.Engine, id, proposal int64) error {
	_, err := one(ctx, e, `UPDATE held_calls SET proposal_id = `+e.Param(2)+` WHERE id = `+e.Param(1)+` RETURNING `+selectColumns,
		[]any{id, proposal})
	if err != nil {
		return fmt.Errorf("set the proposal of held call %d: %w", id, err)
	}
	return nil
}

// end moves every held call cond (with args from its third placeholder
// on) selects to status, decided by the gateway at at with reason.
func end(ctx context.Context, e sqlexec.Engine, status, reason string, at time.Time, cond string, args ...any) ([]store.HeldCall, error) {
	return rows(ctx, e, `UPDATE held_calls SET status = `+e.Param(1)+`, decided_at = `+e.Param(2)+`, decided_by = 'gateway', reason = `+e.Param(3)+
		` WHERE status = '`+store.CallHeld+`' AND `+cond+` RETURNING `+selectColumns,
		append([]any{status, e.Time(at), reason}, args...))
}

// FailInstance ends as failed the held calls of the proxy that another
// instance of it filed.
func FailInstance(ctx context.Context, e sqlexec.Engine, sandbox, proxyID, instance, reason string, at time.Time) ([]store.HeldCall, error) {
	p := e.Param
	out, err := end(ctx, e, store.CallFailed, reason, at, `sandbox = `+p(4)+` AND proxy_id = `+p(5)+` AND instance <> `+p(6), sandbox, proxyID, instance)
	if err != nil {
		return nil, fmt.Errorf("fail the earlier held calls of proxy %s: %w", proxyID, err)
	}
	return out, nil
}

// Expire ends as expired the held calls whose deadline is at or before
// now.
func Expire(ctx context.Context, e sqlexec.Engine, now time.Time, reason string) ([]store.HeldCall, error) {
	out, err := end(ctx, e, store.CallExpired, reason, now, `deadline <= `+e.Param(4), e.Time(now))
	if err != nil {
		return nil, fmt.Errorf("expire held calls: %w", err)
	}
	return out, nil
}

// ClearArguments empties the arguments of the calls decided before
// before and returns how many.
func ClearArguments(ctx context.Context, e sqlexec.Engine, before time.Time) (int64, error) {
	var n int64
	err := e.Rows(ctx, `UPDATE held_calls SET arguments_json = '' WHERE arguments_json <> '' AND decided_at < `+e.Param(1)+
		` RETURNING id`, []any{e.Time(before)}, func(s func(...any) error) error { n++; var id int64; return s(&id) })
	if err != nil {
		return 0, fmt.Errorf("clear the arguments of held calls: %w", err)
	}
	return n, nil
}

// InsertApproval stores a for call id (ErrAlreadyExists, the
// transaction usable, when a.Approver approved it before).
func InsertApproval(ctx context.Context, e sqlexec.Engine, id int64, a store.CallApproval) error {
	p := e.Param
	var n int
	err := e.Rows(ctx, `INSERT INTO held_call_approvals (call_id, approver, reason, created_at) VALUES (`+p(1)+`, `+p(2)+`, `+p(3)+`, `+p(4)+`)
		ON CONFLICT (call_id, approver) DO NOTHING RETURNING call_id`,
		[]any{id, a.Approver, a.Reason, e.Time(a.CreatedAt)}, func(s func(...any) error) error { n++; var x int64; return s(&x) })
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: %s approved it before", store.ErrAlreadyExists, a.Approver)
	}
	if err != nil {
		return fmt.Errorf("approve held call %d: %w", id, err)
	}
	return nil
}

// Approvals returns call id's approvals, oldest first.
func Approvals(ctx context.Context, e sqlexec.Engine, id int64) ([]store.CallApproval, error) {
	var out []store.CallApproval
	err := e.Rows(ctx, `SELECT approver, reason, created_at FROM held_call_approvals WHERE call_id = `+e.Param(1)+` ORDER BY created_at, approver`,
		[]any{id}, func(s func(...any) error) error {
			var a store.CallApproval
			err := s(&a.Approver, &a.Reason, sqlexec.TimeDest(&a.CreatedAt))
			out = append(out, a)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("approvals of held call %d: %w", id, err)
	}
	return out, nil
}
