package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
)

// The audit log's hash chain (store.AuditHash, computed by store.Audit).
// The head needs no lock of its own: every write transaction runs on the
// single writer connection and begins IMMEDIATE, so reading the head,
// inserting after it and moving it cannot interleave with another append.

const headQuery = `SELECT seq, hash FROM audit_head WHERE id = 1`

// LockAuditHead returns the chain's head; the transaction already holds
// the database.
func (t *txn) LockAuditHead(ctx context.Context) (int64, string, error) {
	return t.head(ctx, t.wr)
}

// AuditHead returns the newest entry's seq and hash.
func (t *txn) AuditHead(ctx context.Context) (int64, string, error) {
	return t.head(ctx, t.rd)
}

func (t *txn) head(ctx context.Context, q querier) (int64, string, error) {
	var seq int64
	var hash string
	if err := q.QueryRowContext(ctx, headQuery).Scan(&seq, &hash); err != nil {
		return 0, "", fmt.Errorf("audit head: %w", mapErr(err))
	}
	return seq, hash, nil
}

// InsertAudit stores e as given and moves the head to it.
func (t *txn) InsertAudit(ctx context.Context, e store.AuditEntry) error {
	detail, err := strmap.Encode(e.Detail)
	if err != nil {
		return err
	}
	return t.atomic(ctx, func(t *txn) error {
		err := t.exec(ctx, "audit "+e.Action, `
			INSERT INTO audit_log (at, actor, action, sandbox, target, before_hash, after_hash, detail, seq, prev_hash, hash)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			nanos(e.Time), e.Actor, e.Action, e.Sandbox, e.Target, e.BeforeHash, e.AfterHash, string(detail), e.Seq, e.PrevHash, e.Hash)
		if err != nil {
			return err
		}
		return t.moveHead(ctx, e.Seq, e.Hash)
	})
}

func (t *txn) moveHead(ctx context.Context, seq int64, hash string) error {
	return t.exec(ctx, "move chain head", `UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1`, seq, hash)
}

// chainUnchained gives the entries written before the chain existed (seq
// NULL: migration 4) their place after the head, in id order, in one
// transaction, and returns how many there were. It runs at Open, before
// the read pool exists.
func (d *Driver) chainUnchained(ctx context.Context) (int, error) {
	var n int
	err := d.inTx(ctx, func(t *txn) error {
		old, err := collect(ctx, t.wr, scanAudit, `SELECT `+auditColumns+` FROM audit_log WHERE seq IS NULL ORDER BY id`)
		if err != nil || len(old) == 0 {
			return err
		}
		seq, prev, err := t.LockAuditHead(ctx)
		if err != nil {
			return err
		}
		for _, e := range old {
			seq++
			e.Seq, e.PrevHash = seq, prev
			e.Hash = store.AuditHash(e)
			// The append-only trigger allows exactly this update.
			if err := t.exec(ctx, fmt.Sprintf("chain audit entry %d", e.ID),
				`UPDATE audit_log SET seq = ?, prev_hash = ?, hash = ? WHERE id = ?`, e.Seq, e.PrevHash, e.Hash, e.ID); err != nil {
				return err
			}
			prev = e.Hash
		}
		n = len(old)
		return t.moveHead(ctx, seq, prev)
	})
	if err != nil {
		return 0, fmt.Errorf("chain audit log: %w", err)
	}
	return n, nil
}

const auditColumns = `id, seq, at, actor, action, sandbox, target, before_hash, after_hash, detail, prev_hash, hash`

func scanAudit(r scanner) (store.AuditEntry, error) {
	var e store.AuditEntry
	var seq sql.NullInt64
	var at int64
	var detail string
	if err := r.Scan(&e.ID, &seq, &at, &e.Actor, &e.Action, &e.Sandbox, &e.Target, &e.BeforeHash, &e.AfterHash,
		&detail, &e.PrevHash, &e.Hash); err != nil {
		return e, err
	}
	e.Seq = seq.Int64
	e.Time = fromNanos(at)
	var err error
	e.Detail, err = strmap.Decode([]byte(detail))
	return e, err
}

// ListAudit returns audit entries, newest first; with BeforeSeq, those
// older than it (an entry not yet chained has no seq and is newer than
// every chained one).
func (t *txn) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = -1 // no limit
	}
	out, err := collect(ctx, t.rd, scanAudit, `SELECT `+auditColumns+` FROM audit_log
		WHERE (?1 = '' OR sandbox = ?1) AND (?3 = 0 OR seq < ?3) ORDER BY id DESC LIMIT ?2`, f.Sandbox, limit, f.BeforeSeq)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return out, nil
}

// AuditChain returns up to limit entries after afterSeq, oldest first.
func (t *txn) AuditChain(ctx context.Context, afterSeq int64, limit int) ([]store.AuditEntry, error) {
	return t.audits(ctx, fmt.Sprintf("audit chain after %d", afterSeq), `WHERE seq > ?1 ORDER BY seq`, afterSeq, limit)
}

// audits reads the entries where (with ?1 = arg) selects, at most limit
// of them (0: no cap).
func (t *txn) audits(ctx context.Context, what, where string, arg any, limit int) ([]store.AuditEntry, error) {
	if limit <= 0 {
		limit = -1 // no limit
	}
	out, err := collect(ctx, t.rd, scanAudit, `SELECT `+auditColumns+` FROM audit_log `+where+` LIMIT ?2`, arg, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}
