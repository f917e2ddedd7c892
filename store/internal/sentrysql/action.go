package sentrysql

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlexec"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// The remediation primitives of store.Tx, for both engines: a source's
// key, the replay lookup, and the actions (migration 00009). Each runs on
// the sqlexec.Engine it is given: the transaction's, or (outside one) the
// read pool for reads and the writer for writes.

// nullTime binds t as the engine stores times, nil (and the zero time) as
// NULL, read back as nil.
func nullTime(e sqlexec.Engine, t *time.Time) any {
	if t == nil || t.IsZero() {
		return nil
	}
	return e.Time(*t)
}

// one runs q, which selects at most one row, and scans it with scan:
// ErrNotFound when there is none.
func one(ctx context.Context, e sqlexec.Engine, q string, args []any, scan func(func(...any) error) error) error {
	ok, err := found(ctx, e, q, args, scan)
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	return err
}

// found runs q, which selects at most one row, scans it with scan and
// reports whether there was one.
func found(ctx context.Context, e sqlexec.Engine, q string, args []any, scan func(func(...any) error) error) (bool, error) {
	n := 0
	err := e.Rows(ctx, q, args, func(s func(...any) error) error {
		n++
		return scan(s)
	})
	return n > 0, err
}

const keyColumns = `source, public_key, created_at, created_by`

func scanKey(k *store.SentryKey) func(func(...any) error) error {
	return func(scan func(...any) error) error {
		return scan(&k.Source, &k.PublicKey, sqlexec.TimeDest(&k.CreatedAt), &k.CreatedBy)
	}
}

// PutKey stores k as its source's key, replacing the one it had.
func PutKey(ctx context.Context, e sqlexec.Engine, k store.SentryKey) error {
	p := e.Param
	err := e.Exec(ctx, `INSERT INTO sentry_keys (`+keyColumns+`) VALUES (`+p(1)+`, `+p(2)+`, `+p(3)+`, `+p(4)+`)
		ON CONFLICT (source) DO UPDATE SET public_key = excluded.public_key,
			created_at = excluded.created_at, created_by = excluded.created_by`,
		k.Source, notNil(k.PublicKey), e.Time(k.CreatedAt), k.CreatedBy)
	if err != nil {
		return fmt.Errorf("put sentry key of %q: %w", k.Source, err)
	}
	return nil
}

// DeleteKey removes the source's key and returns it (ErrNotFound).
func DeleteKey(ctx context.Context, e sqlexec.Engine, source string) (store.SentryKey, error) {
	var k store.SentryKey
	err := one(ctx, e, `DELETE FROM sentry_keys WHERE source = `+e.Param(1)+` RETURNING `+keyColumns,
		[]any{source}, scanKey(&k))
	if err != nil {
		return store.SentryKey{}, fmt.Errorf("delete sentry key of %q: %w", source, err)
	}
	return k, nil
}

// GetKey returns the source's key (ErrNotFound).
func GetKey(ctx context.Context, e sqlexec.Engine, source string) (store.SentryKey, error) {
	var k store.SentryKey
	err := one(ctx, e, `SELECT `+keyColumns+` FROM sentry_keys WHERE source = `+e.Param(1),
		[]any{source}, scanKey(&k))
	if err != nil {
		return store.SentryKey{}, fmt.Errorf("get sentry key of %q: %w", source, err)
	}
	return k, nil
}

// ListKeys returns every key ordered by source.
func ListKeys(ctx context.Context, e sqlexec.Engine) ([]store.SentryKey, error) {
	return list(ctx, e, `SELECT `+keyColumns+` FROM sentry_keys ORDER BY source`, nil, scanKey, "list sentry keys")
}

// list reads every row of q with the scanner scanOf makes for each.
func list[T any](ctx context.Context, e sqlexec.Engine, q string, args []any, scanOf func(*T) func(func(...any) error) error, what string) ([]T, error) {
	var out []T
	err := e.Rows(ctx, q, args, func(scan func(...any) error) error {
		var v T
		err := scanOf(&v)(scan)
		out = append(out, v)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// EventAt returns the event of source with that sequence, the first
// received of several (ErrNotFound). sentry_events_source_idx serves it.
func EventAt(ctx context.Context, e sqlexec.Engine, source string, sequence uint64) (store.SentryEvent, error) {
	var ev store.SentryEvent
	err := store.ErrNotFound // a sequence past int64 cannot be stored
	if sequence <= math.MaxInt64 {
		p := e.Param
		err = one(ctx, e, `SELECT `+strings.Join(Columns, ", ")+` FROM sentry_events
			WHERE source = `+p(1)+` AND sequence = `+p(2)+` ORDER BY received_at, id LIMIT 1`,
			[]any{source, int64(sequence)}, func(scan func(...any) error) (err error) {
				ev, err = scanEvent(scan)
				return err
			})
	}
	if err != nil {
		return store.SentryEvent{}, fmt.Errorf("sentry event %d of %q: %w", sequence, source, err)
	}
	return ev, nil
}

const actionColumns = `id, source, event_id, sandbox, type, status, reason, version,
	received_at, created_at, acked_at, decided_by, decided_at`

func scanAction(a *store.SentryAction) func(func(...any) error) error {
	return func(scan func(...any) error) error {
		return scan(&a.ID, &a.Source, &a.EventID, &a.Sandbox, &a.Type, &a.Status, &a.Reason, &a.Version,
			sqlexec.TimeDest(&a.ReceivedAt), sqlexec.TimeDest(&a.CreatedAt), sqlexec.NullTimeDest(&a.AckedAt), &a.DecidedBy,
			sqlexec.NullTimeDest(&a.DecidedAt))
	}
}

// InsertAction stores a (ID ignored) and returns it as stored, with its
// ID: ErrAlreadyExists (a transaction stays usable) if its (Source,
// EventID) has one.
func InsertAction(ctx context.Context, e sqlexec.Engine, a store.SentryAction) (store.SentryAction, error) {
	var out store.SentryAction
	ps := make([]string, 12)
	for i := range ps {
		ps[i] = e.Param(i + 1)
	}
	ok, err := found(ctx, e, `INSERT INTO sentry_actions (source, event_id, sandbox, type, status, reason, version,
			received_at, created_at, acked_at, decided_by, decided_at)
		VALUES (`+strings.Join(ps, ", ")+`)
		ON CONFLICT (source, event_id) DO NOTHING
		RETURNING `+actionColumns,
		[]any{a.Source, a.EventID, a.Sandbox, a.Type, a.Status, a.Reason, a.Version,
			e.Time(a.ReceivedAt), e.Time(a.CreatedAt), nullTime(e, a.AckedAt), a.DecidedBy, nullTime(e, a.DecidedAt)},
		scanAction(&out))
	if err == nil && !ok { // no row back: the key was taken
		err = fmt.Errorf("%w: an action of event %s/%s exists", store.ErrAlreadyExists, a.Source, a.EventID)
	}
	if err != nil {
		return store.SentryAction{}, fmt.Errorf("insert sentry action of event %s/%s: %w", a.Source, a.EventID, err)
	}
	return out, nil
}

// GetAction returns one action by ID (ErrNotFound).
func GetAction(ctx context.Context, e sqlexec.Engine, id int64) (store.SentryAction, error) {
	var a store.SentryAction
	err := one(ctx, e, `SELECT `+actionColumns+` FROM sentry_actions WHERE id = `+e.Param(1), []any{id}, scanAction(&a))
	if err != nil {
		return store.SentryAction{}, fmt.Errorf("get sentry action %d: %w", id, err)
	}
	return a, nil
}

// UpdateAction writes a's mutable fields to the row a.ID (ErrNotFound).
func UpdateAction(ctx context.Context, e sqlexec.Engine, a store.SentryAction) error {
	p := e.Param
	err := one(ctx, e, `UPDATE sentry_actions SET status = `+p(2)+`, reason = `+p(3)+`, version = `+p(4)+`,
			acked_at = `+p(5)+`, decided_by = `+p(6)+`, decided_at = `+p(7)+`
		WHERE id = `+p(1)+` RETURNING id`,
		[]any{a.ID, a.Status, a.Reason, a.Version, nullTime(e, a.AckedAt), a.DecidedBy, nullTime(e, a.DecidedAt)},
		func(scan func(...any) error) error {
			var id int64
			return scan(&id)
		})
	if err != nil {
		return fmt.Errorf("update sentry action %d: %w", a.ID, err)
	}
	return nil
}

// ListActions returns the actions f matches, newest first (by creation,
// then ID); a limit keeps the newest.
func ListActions(ctx context.Context, e sqlexec.Engine, f store.SentryActionFilter) ([]store.SentryAction, error) {
	where, args := sqlwhere.Where([]sqlwhere.Cond{
		{Expr: "sandbox = ", V: f.Sandbox, Set: f.Sandbox != ""},
		{Expr: "status IN ", Any: anyOf(f.Status)},
		{Expr: "created_at >= ", V: e.Time(f.Since), Set: !f.Since.IsZero()},
	}, e.Param)
	q := `SELECT ` + actionColumns + ` FROM sentry_actions` + where + ` ORDER BY created_at DESC, id DESC`
	if f.Limit > 0 {
		args = append(args, f.Limit)
		q += ` LIMIT ` + e.Param(len(args))
	}
	return list(ctx, e, q, args, scanAction, "list sentry actions")
}

// CountActions returns how many actions of source ("": of every source)
// with one of statuses were created at or after since (none when
// statuses is empty).
func CountActions(ctx context.Context, e sqlexec.Engine, source string, statuses []string, since time.Time) (int, error) {
	if len(statuses) == 0 {
		return 0, nil
	}
	where, args := sqlwhere.Where([]sqlwhere.Cond{
		{Expr: "source = ", V: source, Set: source != ""},
		{Expr: "status IN ", Any: anyOf(statuses)},
		{Expr: "created_at >= ", V: e.Time(since), Set: !since.IsZero()},
	}, e.Param)
	var n int64
	err := one(ctx, e, `SELECT count(*) FROM sentry_actions`+where, args, func(scan func(...any) error) error {
		return scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("count sentry actions: %w", err)
	}
	return int(n), nil
}

func anyOf(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// notNil returns b, or an empty slice for a NOT NULL column (a nil slice
// binds as NULL).
func notNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// SetFlags replaces the flags of one event; received_at narrows the
// search to its day's partition, and source and sequence to one entry of
// the source index (without the sequence, the update read every event of
// the source that day).
func SetFlags(ctx context.Context, e sqlexec.Engine, ev store.SentryEvent, flags []string) error {
	b, _ := json.Marshal(append([]string{}, flags...)) // strings always encode
	p := e.Param
	err := e.Exec(ctx, `UPDATE sentry_events SET flags = `+p(1)+` WHERE source = `+p(2)+` AND sequence = `+p(3)+
		` AND id = `+p(4)+` AND received_at = `+p(5),
		string(b), ev.Source, int64(ev.Sequence), ev.ID, e.Time(ev.ReceivedAt.UTC().Truncate(time.Microsecond)))
	if err != nil {
		return fmt.Errorf("set flags of sentry event %s/%s: %w", ev.Source, ev.ID, err)
	}
	return nil
}
