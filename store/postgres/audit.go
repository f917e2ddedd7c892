package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
)

// LockAuditHead returns the chain's head (the audit_head row, migration
// 4), holding its row lock until the transaction ends: appends from every
// replica queue there, and each sees the head the one before committed.
func (c *conn) LockAuditHead(ctx context.Context) (int64, string, error) {
	return c.auditHead(ctx, c.forUpdate())
}

// AuditHead returns the newest entry's seq and hash without holding them.
func (c *conn) AuditHead(ctx context.Context) (int64, string, error) {
	return c.auditHead(ctx, "")
}

func (c *conn) auditHead(ctx context.Context, lock string) (int64, string, error) {
	var seq int64
	var hash string
	if err := c.db.QueryRow(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`+lock).Scan(&seq, &hash); err != nil {
		return 0, "", fmt.Errorf("audit head: %w", mapErr(err))
	}
	return seq, hash, nil
}

// InsertAudit stores e as given and moves the head to it, in one
// statement.
func (c *conn) InsertAudit(ctx context.Context, e store.AuditEntry) error {
	detail, err := strmap.Encode(e.Detail)
	if err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	tag, err := c.db.Exec(ctx, `
		WITH e AS (
			INSERT INTO audit_log (at, actor, action, sandbox, target, before_hash, after_hash, detail, seq, prev_hash, hash)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
			RETURNING seq, hash)
		UPDATE audit_head h SET seq = e.seq, hash = e.hash FROM e WHERE h.id = 1`,
		e.Time, e.Actor, e.Action, e.Sandbox, e.Target, e.BeforeHash, e.AfterHash, detail, e.Seq, e.PrevHash, e.Hash)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("audit head not moved (%d rows)", tag.RowsAffected())
	}
	return wrapf(err, "audit %s", e.Action)
}

const auditColumns = `id, seq, at, actor, action, sandbox, target, before_hash, after_hash, detail, prev_hash, hash`

func scanAudit(r pgx.Row) (store.AuditEntry, error) {
	var e store.AuditEntry
	var seq *int64
	var detail []byte
	if err := r.Scan(&e.ID, &seq, &e.Time, &e.Actor, &e.Action, &e.Sandbox, &e.Target, &e.BeforeHash, &e.AfterHash,
		&detail, &e.PrevHash, &e.Hash); err != nil {
		return e, err
	}
	if seq != nil {
		e.Seq = *seq
	}
	e.Time = e.Time.UTC()
	var err error
	e.Detail, err = strmap.Decode(detail)
	return e, err
}

// ListAudit returns audit entries, newest first; with BeforeSeq, those
// older than it (an entry not yet chained has no seq and is newer than
// every chained one).
func (c *conn) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error) {
	rows, err := c.db.Query(ctx, `SELECT `+auditColumns+` FROM audit_log
		WHERE ($1 = '' OR sandbox = $1) AND ($3 = 0 OR seq < $3) ORDER BY id DESC LIMIT $2`, f.Sandbox, limitOf(f.Limit), f.BeforeSeq)
	out, err := collect(rows, err, scanAudit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return out, nil
}

// AuditChain returns up to limit entries after afterSeq, oldest first.
func (c *conn) AuditChain(ctx context.Context, afterSeq int64, limit int) ([]store.AuditEntry, error) {
	rows, err := c.db.Query(ctx, `SELECT `+auditColumns+` FROM audit_log
		WHERE seq > $1 ORDER BY seq LIMIT $2`, afterSeq, limitOf(limit))
	out, err := collect(rows, err, scanAudit)
	if err != nil {
		return nil, fmt.Errorf("audit chain after %d: %w", afterSeq, err)
	}
	return out, nil
}

// chainUnchained gives the entries written before the chain existed (seq
// NULL: migration 4, or a replica still running an older binary) their
// place after the head, in id order, in one transaction under the head's
// lock, and returns how many there were.
func (d *Driver) chainUnchained(ctx context.Context) (int, error) {
	var n int
	err := d.InTx(ctx, func(stx store.Tx) error {
		t := stx.(*txn)
		seq, prev, err := t.LockAuditHead(ctx)
		if err != nil {
			return err
		}
		rows, err := t.db.Query(ctx, `SELECT `+auditColumns+` FROM audit_log WHERE seq IS NULL ORDER BY id`)
		old, err := collect(rows, err, scanAudit)
		if err != nil || len(old) == 0 {
			return err
		}
		var b pgx.Batch
		for _, e := range old {
			seq++
			e.Seq, e.PrevHash = seq, prev
			e.Hash = store.AuditHash(e)
			// The append-only trigger allows exactly this update.
			b.Queue(`UPDATE audit_log SET seq = $1, prev_hash = $2, hash = $3 WHERE id = $4`, e.Seq, e.PrevHash, e.Hash, e.ID)
			prev = e.Hash
		}
		b.Queue(`UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1`, seq, prev)
		n = len(old)
		return mapErr(t.db.SendBatch(ctx, &b).Close())
	})
	if err != nil {
		return 0, fmt.Errorf("chain audit log: %w", err)
	}
	return n, nil
}
