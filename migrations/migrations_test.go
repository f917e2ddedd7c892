package migrations_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "modernc.org/sqlite"             // driver "sqlite"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/migrations"
)

var tables = []string{"audit_log", "policy_versions", "sandboxes", "tokens"}

type engine struct {
	name   string
	open   func(t *testing.T) *sql.DB
	tables string // query listing user tables, sorted
}

var engines = []engine{
	{
		name: migrations.Postgres,
		open: func(t *testing.T) *sql.DB { return openDB(t, "pgx", pgtest.Database(t)) },
		tables: `SELECT table_name FROM information_schema.tables
			WHERE table_schema = 'public' AND table_name <> 'portcullis_schema_version' ORDER BY 1`,
	},
	{
		name: migrations.SQLite,
		open: func(t *testing.T) *sql.DB {
			return openDB(t, "sqlite", "file:"+filepath.Join(t.TempDir(), "m.db")+"?_pragma=foreign_keys(1)")
		},
		tables: `SELECT name FROM sqlite_schema WHERE type = 'table'
			AND name NOT LIKE 'sqlite_%' AND name <> 'portcullis_schema_version' ORDER BY 1`,
	},
}

func openDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func listTables(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestUpDownUp(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := e.open(t)

			cur, latest, err := migrations.Version(ctx, db, e.name)
			if err != nil || cur != 0 || latest < 1 {
				t.Fatalf("Version on an empty database = %d, %d, %v", cur, latest, err)
			}
			up := func(step string) {
				t.Helper()
				if err := migrations.Up(ctx, db, e.name); err != nil {
					t.Fatalf("%s: Up: %v", step, err)
				}
				if got := listTables(t, db, e.tables); !slices.Equal(got, tables) {
					t.Fatalf("%s: tables after Up = %v, want %v", step, got, tables)
				}
				if cur, latest, err := migrations.Version(ctx, db, e.name); err != nil || cur != latest {
					t.Fatalf("%s: Version after Up = %d, %d, %v", step, cur, latest, err)
				}
			}
			up("first")
			up("again (no-op)")

			st, err := migrations.List(ctx, db, e.name)
			if err != nil || len(st) == 0 || !st[0].Applied || st[0].Version != 1 {
				t.Fatalf("List = %+v, %v", st, err)
			}

			if err := migrations.Down(ctx, db, e.name); err != nil {
				t.Fatalf("Down: %v", err)
			}
			if got := listTables(t, db, e.tables); len(got) != 0 {
				t.Fatalf("tables after Down = %v, want none", got)
			}
			if cur, _, err := migrations.Version(ctx, db, e.name); err != nil || cur != 0 {
				t.Fatalf("Version after Down = %d, %v", cur, err)
			}
			up("after down")
		})
	}
}

// TestAppendOnly checks the database itself refuses to rewrite history,
// whoever connects.
func TestAppendOnly(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := e.open(t)
			if err := migrations.Up(ctx, db, e.name); err != nil {
				t.Fatal(err)
			}
			exec := func(q string) error {
				_, err := db.ExecContext(ctx, q)
				return err
			}
			ts := "now()"
			if e.name == migrations.SQLite {
				ts = "0"
			}
			must(t, exec(`INSERT INTO audit_log (at, actor, action) VALUES (`+ts+`, 'a', 'x')`))
			must(t, exec(`INSERT INTO sandboxes (name, created_at, created_by) VALUES ('s', `+ts+`, 'a')`))
			must(t, exec(`INSERT INTO policy_versions (sandbox, version, hash, document, author, source, created_at)
				VALUES ('s', 1, 'h', '{}', 'a', 'set', `+ts+`)`))
			for _, q := range []string{
				`UPDATE audit_log SET actor = 'b'`,
				`DELETE FROM audit_log`,
				`UPDATE policy_versions SET document = '{"x":1}'`,
			} {
				if err := exec(q); err == nil {
					t.Errorf("%s succeeded, want refused", q)
				}
			}
			if e.name == migrations.Postgres {
				if err := exec(`TRUNCATE audit_log`); err == nil {
					t.Error("TRUNCATE audit_log succeeded, want refused")
				}
			}
			// Deleting the sandbox still cascades to its versions.
			must(t, exec(`DELETE FROM sandboxes WHERE name = 's'`))
			var n int
			must(t, db.QueryRowContext(ctx, `SELECT count(*) FROM policy_versions`).Scan(&n))
			if n != 0 {
				t.Errorf("versions after sandbox delete = %d, want 0", n)
			}
			// Constraints each engine must enforce.
			for _, q := range []string{
				`INSERT INTO tokens (name, role, hash, created_by, created_at) VALUES ('t', 'root', 'h', 'a', ` + ts + `)`,
				`INSERT INTO tokens (name, role, hash, created_by, created_at) VALUES ('t', 'sandbox', 'h', 'a', ` + ts + `)`,
				`INSERT INTO tokens (name, role, sandbox, hash, created_by, created_at) VALUES ('t', 'admin', 's', 'h', 'a', ` + ts + `)`,
				`INSERT INTO policy_versions (sandbox, version, hash, document, author, source, created_at)
					VALUES ('missing', 1, 'h', '{}', 'a', 'set', ` + ts + `)`,
			} {
				if err := exec(q); err == nil {
					t.Errorf("%s succeeded, want a constraint error", q)
				}
			}
		})
	}
}

func TestUnknownEngine(t *testing.T) {
	db := openDB(t, "sqlite", "file:"+filepath.Join(t.TempDir(), "x.db"))
	if err := migrations.Up(context.Background(), db, "mysql"); err == nil {
		t.Fatal("Up with an unknown engine succeeded")
	}
	if err := migrations.Up(context.Background(), nil, migrations.SQLite); err == nil {
		t.Fatal("Up with a nil db succeeded")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
