package main

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/migrations"
)

// migrationLines is how migrate lists migrations: one line each,
// "  00016 token_expiry".
func migrationLines(ms []migrations.Status) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "  %05d %s\n", m.Version, m.Name())
	}
	return b.String()
}

// migrate says which migrations it applied, and that there was nothing to
// apply when the schema was current.
func TestMigrateSaysWhatRan(t *testing.T) {
	dir := t.TempDir()
	known, err := migrations.Known(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join("..", "..", "migrations", "sqlite"))
	if err != nil || len(entries) != len(known) {
		t.Fatalf("%d files in migrations/sqlite (%v), %d known", len(entries), err, len(known))
	}
	stdout, stderr, code := runCLI(t, "migrate", "--data-dir", dir)
	ok(t, code, stderr)
	want := fmt.Sprintf("applied %d migration(s): sqlite %s (single replica)\n", len(known), filepath.Join(dir, "portcullis.db"))
	if stdout != want+migrationLines(known) || !strings.Contains(stdout, "  00001 initial\n") {
		t.Fatalf("first migrate:\n%s\nwant every one of the %d migrations named:\n%s", stdout, len(known), want+migrationLines(known))
	}
	stdout, stderr, code = runCLI(t, "migrate", "--data-dir", dir)
	ok(t, code, stderr)
	if !strings.HasPrefix(stdout, "the schema is current; nothing to apply: ") {
		t.Fatalf("second migrate: %q; want nothing applied", stdout)
	}
	if stderr != "" {
		t.Errorf("migrate logged beside its output: %q", stderr)
	}
}

// The commands that open the store, run once and say what they did log
// nothing at info beside their output, and text when asked to.
func TestOfflineCommandsLogQuietly(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"migrate"}, {"signing-key", "rotate"}, {"signing-key", "list"}} {
		stdout, stderr, code := runCLI(t, append(args, "--data-dir", dir)...)
		ok(t, code, stderr)
		if stdout == "" || stderr != "" {
			t.Errorf("%s: stdout %q, stderr %q; want its output alone", strings.Join(args, " "), stdout, stderr)
		}
	}
	_, stderr, code := runCLIWith(t, cliInput{env: map[string]string{"PORTCULLIS_LOG_LEVEL": "info"}}, "signing-key", "rotate", "--data-dir", dir)
	ok(t, code, stderr)
	if !strings.Contains(stderr, `level=INFO msg="store open"`) || strings.Contains(stderr, `{"time"`) {
		t.Errorf("at info: stderr %q; want text lines", stderr)
	}
}

// migrate --dry-run lists what migrate would apply, by version and name,
// and changes nothing: a store that does not exist is not created, and a
// store part-way is left at its version.
func TestMigrateDryRun(t *testing.T) {
	known, err := migrations.Known(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stdout, stderr, code := runCLI(t, "migrate", "--dry-run", "--data-dir", dir)
	ok(t, code, stderr)
	path := filepath.Join(dir, "portcullis.db")
	if want := fmt.Sprintf("would apply %d migration(s): sqlite %s (single replica)\n%s", len(known), path, migrationLines(known)); stdout != want {
		t.Fatalf("dry run on no store:\n%s\nwant:\n%s", stdout, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a dry run created %v", entries)
	}

	// A store two migrations behind, as an older binary left it.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	behind := known[len(known)-3].Version
	if err := migrations.UpTo(t.Context(), db, migrations.SQLite, behind); err != nil {
		t.Fatal(err)
	}
	for range 2 { // twice: the first changed nothing
		stdout, stderr, code = runCLI(t, "migrate", "--dry-run", "--data-dir", dir)
		ok(t, code, stderr)
		if want := fmt.Sprintf("would apply 2 migration(s): sqlite %s (single replica)\n%s", path, migrationLines(known[len(known)-2:])); stdout != want {
			t.Fatalf("dry run two behind:\n%s\nwant:\n%s", stdout, want)
		}
		if cur, _, err := migrations.Version(t.Context(), db, migrations.SQLite); err != nil || cur != behind {
			t.Fatalf("version after a dry run: %d, %v; want %d unchanged", cur, err, behind)
		}
	}
	stdout, stderr, code = runCLI(t, "migrate", "--data-dir", dir)
	ok(t, code, stderr)
	if !strings.HasPrefix(stdout, "applied 2 migration(s): ") || !strings.HasSuffix(stdout, migrationLines(known[len(known)-2:])) {
		t.Fatalf("migrate after the dry run: %q", stdout)
	}
}

// A gateway refuses a store a newer binary migrated: it exits non-zero
// naming both versions and what to do, and writes nothing (the admin
// token a first start makes is not made); migrate and its dry run refuse
// it alike. Both engines, the real binary.
func TestGatewayRefusesNewerSchema(t *testing.T) {
	for _, engine := range []string{migrations.SQLite, migrations.Postgres} {
		t.Run(engine, func(t *testing.T) {
			store := []string{"--data-dir", t.TempDir()}
			driver, dsn := "sqlite", "file:"+filepath.Join(store[1], "portcullis.db")
			if engine == migrations.Postgres {
				dsn = pgtest.Database(t)
				driver, store = "pgx", []string{"--database-url", dsn}
			}
			_, stderr, code := runCLI(t, append([]string{"migrate"}, store...)...)
			ok(t, code, stderr)
			known, err := migrations.Known(engine)
			if err != nil {
				t.Fatal(err)
			}
			latest := known[len(known)-1].Version
			newer := latest + 1
			db, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			// What a newer binary's migration leaves in goose's table.
			if _, err := db.ExecContext(t.Context(), fmt.Sprintf(`INSERT INTO portcullis_schema_version (version_id, is_applied) VALUES (%d, true)`, newer)); err != nil {
				t.Fatal(err)
			}
			count := func(table string) (n int) {
				t.Helper()
				if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			versions := count("portcullis_schema_version")

			out, code := runBinary(t, []string{"PORTCULLIS_DATABASE_URL="}, append([]string{"gateway", "--listen", "127.0.0.1:0"}, store...)...)
			wantSaid := []string{fmt.Sprintf("version %d", newer), fmt.Sprintf("(%d)", latest), "Run that newer portcullis", "portcullis restore --from FILE"}
			for _, w := range wantSaid {
				if code == 0 || !strings.Contains(out, w) {
					t.Fatalf("gateway on a newer schema: exit %d, output lacks %q:\n%s", code, w, out)
				}
			}
			for _, args := range [][]string{{"migrate"}, {"migrate", "--dry-run"}} {
				stdout, stderr, code := runCLI(t, append(args, store...)...)
				if code == 0 || stdout != "" || !strings.Contains(stderr, wantSaid[0]) || !strings.Contains(stderr, wantSaid[1]) {
					t.Fatalf("%v on a newer schema: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
				}
			}
			if n, v := count("tokens"), count("portcullis_schema_version"); n != 0 || v != versions {
				t.Fatalf("refused starts wrote: %d tokens (want 0), %d version rows (want %d)", n, v, versions)
			}
		})
	}
}

// On Postgres too, the dry run lists every migration of a new database
// and creates nothing there, not even goose's version table.
func TestMigrateDryRunPostgres(t *testing.T) {
	dsn := pgtest.Database(t)
	known, err := migrations.Known(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runCLI(t, "migrate", "--dry-run", "--database-url", dsn)
	ok(t, code, stderr)
	if want := fmt.Sprintf("would apply %d migration(s): postgres\n%s", len(known), migrationLines(known)); stdout != want {
		t.Fatalf("dry run on a new database:\n%s\nwant:\n%s", stdout, want)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("a dry run left %d tables (%v)", tables, err)
	}
}
