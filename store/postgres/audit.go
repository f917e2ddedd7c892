package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
)

// The audit log's hash chain (store.AuditHash), in one order across every
// replica sharing the database. The order is kept by the audit_head row
// (migration 4): a transaction appends its entries as its last step,
// holding that row's lock (SELECT … FOR UPDATE) until it commits, so
// appends from any replica queue there and each sees the head the one
// before it committed. Taking the lock last, rather than at the first
// audit call, keeps it short and means its holder waits for no other row:
// no deadlock can go through it.

// txn is the transaction inTx gives its function: a pgx.Tx that also
// collects the audit entries to append before the commit.
type txn struct {
	pgx.Tx
	audit []store.AuditEntry
}

// audit records e to be appended to the audit log when tx, which must come
// from inTx, commits.
func audit(_ context.Context, tx pgx.Tx, e store.AuditEntry) error {
	t, ok := tx.(*txn)
	if !ok {
		// A wiring bug: every write goes through inTx.
		return fmt.Errorf("audit %s: transaction not from inTx", e.Action)
	}
	t.audit = append(t.audit, e)
	return nil
}

// appendAudit locks the chain head and appends entries after it, in order.
func appendAudit(ctx context.Context, tx pgx.Tx, entries []store.AuditEntry) error {
	if len(entries) == 0 {
		return nil
	}
	var (
		seq  int64
		prev string
		at   time.Time
	)
	// now() is the transaction's start, as every other time it wrote.
	if err := tx.QueryRow(ctx, `SELECT seq, hash, now() FROM audit_head WHERE id = 1 FOR UPDATE`).Scan(&seq, &prev, &at); err != nil {
		return fmt.Errorf("lock audit chain head: %w", mapErr(err))
	}
	for _, e := range entries {
		detail, err := strmap.Encode(e.Detail)
		if err != nil {
			return fmt.Errorf("audit %s: %w", e.Action, err)
		}
		// Hash what a read gives back, not what the caller passed.
		if e.Detail, err = strmap.Decode(detail); err != nil {
			return fmt.Errorf("audit %s: %w", e.Action, err)
		}
		seq++
		e.Seq, e.PrevHash, e.Time = seq, prev, at.UTC()
		e.Hash = store.AuditHash(e)
		_, err = tx.Exec(ctx, `
			INSERT INTO audit_log (at, actor, action, sandbox, target, before_hash, after_hash, detail, seq, prev_hash, hash)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			e.Time, e.Actor, e.Action, e.Sandbox, e.Target, e.BeforeHash, e.AfterHash, detail, e.Seq, e.PrevHash, e.Hash)
		if err != nil {
			return fmt.Errorf("audit %s: %w", e.Action, mapErr(err))
		}
		prev = e.Hash
	}
	if _, err := tx.Exec(ctx, `UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1`, seq, prev); err != nil {
		return fmt.Errorf("move audit chain head: %w", mapErr(err))
	}
	return nil
}

// chainUnchained gives the entries written before the chain existed (seq
// NULL: migration 4, or a replica still running an older binary) their
// place after the head, in id order, in one transaction under the head's
// lock, and returns how many there were.
func chainUnchained(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("chain audit log: %w", mapErr(err))
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var (
		seq  int64
		prev string
	)
	if err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1 FOR UPDATE`).Scan(&seq, &prev); err != nil {
		return 0, fmt.Errorf("chain audit log: lock head: %w", mapErr(err))
	}
	rows, err := tx.Query(ctx, `SELECT `+auditColumns+` FROM audit_log WHERE seq IS NULL ORDER BY id`)
	if err != nil {
		return 0, fmt.Errorf("chain audit log: %w", mapErr(err))
	}
	old, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AuditEntry, error) { return scanAudit(r) })
	if err != nil {
		return 0, fmt.Errorf("chain audit log: %w", mapErr(err))
	}
	if len(old) == 0 {
		return 0, nil
	}
	for _, e := range old {
		seq++
		e.Seq, e.PrevHash = seq, prev
		e.Hash = store.AuditHash(e)
		// The append-only trigger allows exactly this update.
		if _, err := tx.Exec(ctx, `UPDATE audit_log SET seq = $1, prev_hash = $2, hash = $3 WHERE id = $4`,
			e.Seq, e.PrevHash, e.Hash, e.ID); err != nil {
			return 0, fmt.Errorf("chain audit entry %d: %w", e.ID, mapErr(err))
		}
		prev = e.Hash
	}
	if _, err := tx.Exec(ctx, `UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1`, seq, prev); err != nil {
		return 0, fmt.Errorf("chain audit log: move head: %w", mapErr(err))
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("chain audit log: %w", mapErr(err))
	}
	return len(old), nil
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

// ListAudit returns audit entries, newest first.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error) {
	var limit *int
	if f.Limit > 0 {
		limit = &f.Limit
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+auditColumns+`
		FROM audit_log
		WHERE $1 = '' OR sandbox = $1
		ORDER BY id DESC
		LIMIT $2`, f.Sandbox, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", mapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AuditEntry, error) { return scanAudit(r) })
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", mapErr(err))
	}
	return out, nil
}

// AuditChain returns up to limit entries after afterSeq, oldest first.
func (s *Store) AuditChain(ctx context.Context, afterSeq int64, limit int) ([]store.AuditEntry, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+auditColumns+`
		FROM audit_log
		WHERE seq > $1
		ORDER BY seq
		LIMIT $2`, afterSeq, lim)
	if err != nil {
		return nil, fmt.Errorf("audit chain after %d: %w", afterSeq, mapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AuditEntry, error) { return scanAudit(r) })
	if err != nil {
		return nil, fmt.Errorf("audit chain after %d: %w", afterSeq, mapErr(err))
	}
	return out, nil
}

// AuditHead returns the newest entry's seq and hash.
func (s *Store) AuditHead(ctx context.Context) (int64, string, error) {
	var seq int64
	var hash string
	if err := s.pool.QueryRow(ctx, `SELECT seq, hash FROM audit_head WHERE id = 1`).Scan(&seq, &hash); err != nil {
		return 0, "", fmt.Errorf("audit head: %w", mapErr(err))
	}
	return seq, hash, nil
}
