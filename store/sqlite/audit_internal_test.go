package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

func TestAuditChain(t *testing.T) {
	storetest.RunAudit(t, storetest.AuditHarness{
		Open: func(t *testing.T) storetest.AuditDB {
			s, _ := openInternal(t, Config{})
			return storetest.AuditDB{
				Store: store.New(s),
				Edit: func(seq int64, column string, value any) {
					t.Helper()
					aroundTrigger(t, s.w, "audit_log_no_update", `UPDATE audit_log SET `+column+` = ? WHERE seq = ?`, value, seq)
				},
				Delete: func(seq int64) {
					t.Helper()
					aroundTrigger(t, s.w, "audit_log_no_delete", `DELETE FROM audit_log WHERE seq = ?`, seq)
				},
			}
		},
		Legacy: func(t *testing.T, entries []store.AuditEntry) *store.Store {
			path := filepath.Join(t.TempDir(), "old.db")
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := migrations.UpTo(t.Context(), db, migrations.SQLite, 3); err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				detail, err := strmap.Encode(e.Detail)
				if err != nil {
					t.Fatal(err)
				}
				// The columns and statement of migration 3's binary.
				if _, err := db.ExecContext(t.Context(), `
					INSERT INTO audit_log (at, actor, action, sandbox, target, before_hash, after_hash, detail)
					VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
					e.Time.UnixNano(), e.Actor, e.Action, e.Sandbox, e.Target, e.BeforeHash, e.AfterHash, string(detail)); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			s, err := Open(t.Context(), path, Config{})
			if err != nil {
				t.Fatalf("Open on a database at migration 3: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return store.New(s)
		},
	})
}

// aroundTrigger runs query with the trigger dropped, then puts the trigger
// back as it was: what someone with write access to the file can do.
func aroundTrigger(t *testing.T, w *sql.DB, trigger, query string, args ...any) {
	t.Helper()
	ctx := t.Context()
	var def string
	if err := w.QueryRowContext(ctx, `SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND name = ?`, trigger).Scan(&def); err != nil {
		t.Fatalf("trigger %s: %v", trigger, err)
	}
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, step := range []struct {
		q    string
		args []any
	}{{`DROP TRIGGER ` + trigger, nil}, {query, args}, {def, nil}} {
		if _, err := tx.ExecContext(ctx, step.q, step.args...); err != nil {
			t.Fatalf("%s: %v", step.q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
