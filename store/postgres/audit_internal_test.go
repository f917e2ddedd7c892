package postgres

import (
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

func openURL(t *testing.T, url string) *Driver {
	t.Helper()
	s, err := Open(t.Context(), url, Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestAuditChain(t *testing.T) {
	storetest.RunAudit(t, storetest.AuditHarness{
		Open: func(t *testing.T) storetest.AuditDB {
			url := pgtest.Database(t)
			s := openURL(t, url)
			return storetest.AuditDB{
				Store:   store.New(s),
				Replica: func() *store.Store { return store.New(openURL(t, url)) },
				Edit: func(seq int64, column string, value any) {
					t.Helper()
					param := "$1"
					if column == "detail" {
						param = "$1::text::jsonb"
					}
					withoutTriggers(t, s, `UPDATE audit_log SET `+column+` = `+param+` WHERE seq = $2`, value, seq)
				},
				Delete: func(seq int64) {
					t.Helper()
					withoutTriggers(t, s, `DELETE FROM audit_log WHERE seq = $1`, seq)
				},
			}
		},
		Legacy: func(t *testing.T, entries []store.AuditEntry) *store.Store {
			url := pgtest.Database(t)
			db, err := sql.Open("pgx", url)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := migrations.UpTo(t.Context(), db, migrations.Postgres, 3); err != nil {
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
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::jsonb)`,
					e.Time, e.Actor, e.Action, e.Sandbox, e.Target, e.BeforeHash, e.AfterHash, string(detail)); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			return store.New(openURL(t, url))
		},
	})
}

// withoutTriggers runs query with audit_log's triggers disabled, in one
// transaction: what the table's owner can do.
func withoutTriggers(t *testing.T, s *Driver, query string, args ...any) {
	t.Helper()
	ctx := t.Context()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, step := range []struct {
		q    string
		args []any
	}{{`ALTER TABLE audit_log DISABLE TRIGGER USER`, nil}, {query, args}, {`ALTER TABLE audit_log ENABLE TRIGGER USER`, nil}} {
		if _, err := tx.Exec(ctx, step.q, step.args...); err != nil {
			t.Fatalf("%s: %v", step.q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}
