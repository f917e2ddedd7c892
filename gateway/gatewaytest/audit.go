package gatewaytest

import (
	"context"
	"database/sql"
	"fmt"
)

// EditAuditEntry sets column of the audit entry with seq to value in the
// gateway's database, around the append-only triggers, as someone with
// the database's owner rights could: for tests that the hash chain shows
// the edit.
func (g *Gateway) EditAuditEntry(seq int64, column, value string) {
	g.t.Helper()
	if err := g.editAudit(context.Background(), seq, column, value); err != nil {
		g.t.Fatalf("edit audit entry %d: %v", seq, err)
	}
}

func (g *Gateway) editAudit(ctx context.Context, seq int64, column, value string) error {
	db, err := g.openDB()
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var steps []string
	if g.engine == "sqlite" {
		// Drop the trigger and put it back as it was.
		var def string
		if err := tx.QueryRowContext(ctx, `SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND name = 'audit_log_no_update'`).Scan(&def); err != nil {
			return fmt.Errorf("read trigger: %w", err)
		}
		steps = []string{`DROP TRIGGER audit_log_no_update`, `UPDATE audit_log SET ` + column + ` = ? WHERE seq = ?`, def}
	} else {
		steps = []string{`ALTER TABLE audit_log DISABLE TRIGGER USER`, `UPDATE audit_log SET ` + column + ` = $1 WHERE seq = $2`, `ALTER TABLE audit_log ENABLE TRIGGER USER`}
	}
	for i, q := range steps {
		var args []any
		if i == 1 {
			args = []any{value, seq}
		}
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		if n, _ := res.RowsAffected(); i == 1 && n != 1 {
			return fmt.Errorf("no audit entry with seq %d", seq)
		}
	}
	return tx.Commit()
}

// openDB opens the gateway's database beside its store.
func (g *Gateway) openDB() (*sql.DB, error) {
	driver, dsn := "pgx", g.dsn
	if g.engine == "sqlite" {
		driver, dsn = "sqlite", "file:"+g.dsn
	}
	return sql.Open(driver, dsn)
}

// DecisionBytes returns the bytes the decisions table and its indexes
// occupy in the gateway's database (pages in use: SQLite's dbstat,
// Postgres's pg_total_relation_size).
func (g *Gateway) DecisionBytes() int64 {
	g.t.Helper()
	db, err := g.openDB()
	if err != nil {
		g.t.Fatalf("open database: %v", err)
	}
	defer db.Close()
	q := `SELECT pg_total_relation_size('decisions')`
	if g.engine == "sqlite" {
		q = `SELECT coalesce(sum(pgsize), 0) FROM dbstat
			WHERE name IN (SELECT name FROM sqlite_schema WHERE tbl_name = 'decisions')`
	}
	var n int64
	if err := db.QueryRowContext(context.Background(), q).Scan(&n); err != nil {
		g.t.Fatalf("size of the decisions table: %v", err)
	}
	return n
}
