package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "modernc.org/sqlite"             // driver "sqlite"

	"go.uber.org/goleak"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/migrations"
)

var tables = []string{
	"approval_policies", "audit_head", "audit_log", "decisions", "held_call_approvals", "held_calls", "policy_versions", "proposal_approvals", "proposals",
	"providers", "proxies", "sandbox_cas", "sandbox_providers", "sandboxes", "sentry_actions", "sentry_events", "sentry_gaps", "sentry_keys", "sentry_sources", "signing_keys", "tokens",
	"tool_definitions",
}

// engineTables are tables only one engine has: Postgres keeps Sentry
// events' idempotency key apart from its partitioned events table.
var engineTables = map[string][]string{migrations.Postgres: {"sentry_event_keys"}}

type engine struct {
	name   string
	open   func(t *testing.T) *sql.DB
	tables string // query listing user tables, sorted
	// schema lists every object the migrations own (columns, constraints,
	// indexes, triggers, functions), one row each, sorted: equal output
	// means an equal schema.
	schema string
	// explain returns a query's plan as text, index use preferred.
	explain func(t *testing.T, db *sql.DB, query string) string
}

var engines = []engine{
	{
		name: migrations.Postgres,
		open: func(t *testing.T) *sql.DB { return openDB(t, "pgx", pgtest.Database(t)) },
		tables: `SELECT table_name FROM information_schema.tables
			WHERE table_schema = 'public' AND table_name <> 'portcullis_schema_version' ORDER BY 1`,
		schema: `SELECT x FROM (
			SELECT format('column %s.%s %s null=%s default=%s', table_name, column_name, data_type, is_nullable, column_default) AS x
			FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'portcullis_schema_version'
			UNION ALL
			SELECT format('constraint %s %s', conname, pg_get_constraintdef(oid)) FROM pg_constraint
			WHERE connamespace = 'public'::regnamespace AND conrelid <> 'portcullis_schema_version'::regclass
			UNION ALL
			SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename <> 'portcullis_schema_version'
			UNION ALL
			SELECT format('trigger %s %s', tgname, pg_get_triggerdef(oid)) FROM pg_trigger WHERE NOT tgisinternal
			UNION ALL
			SELECT 'function ' || proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace
		) s ORDER BY 1`,
		explain: func(t *testing.T, db *sql.DB, query string) string {
			// On empty tables a sequential scan is cheapest; forbid it so
			// the plan shows whether an index could serve the lookup.
			conn, err := db.Conn(t.Context())
			must(t, err)
			defer conn.Close()
			_, err = conn.ExecContext(t.Context(), `SET enable_seqscan = off`)
			must(t, err)
			return planText(t, conn, `EXPLAIN `+query)
		},
	},
	{
		name: migrations.SQLite,
		open: func(t *testing.T) *sql.DB {
			return openDB(t, "sqlite", "file:"+filepath.Join(t.TempDir(), "m.db")+"?_pragma=foreign_keys(1)")
		},
		tables: `SELECT name FROM sqlite_schema WHERE type = 'table'
			AND name NOT LIKE 'sqlite_%' AND name <> 'portcullis_schema_version' ORDER BY 1`,
		schema: `SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_schema
			WHERE tbl_name <> 'portcullis_schema_version' AND name NOT LIKE 'sqlite_sequence' ORDER BY 1`,
		explain: func(t *testing.T, db *sql.DB, query string) string {
			conn, err := db.Conn(t.Context())
			must(t, err)
			defer conn.Close()
			return planText(t, conn, `EXPLAIN QUERY PLAN `+query)
		},
	},
}

// TestMain fails the package if a test leaves a goroutine behind (a
// connection or pool not closed).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
				want := slices.Sorted(slices.Values(append(slices.Clone(tables), engineTables[e.name]...)))
				if got := listTables(t, db, e.tables); !slices.Equal(got, want) {
					t.Fatalf("%s: tables after Up = %v, want %v", step, got, want)
				}
				if cur, latest, err := migrations.Version(ctx, db, e.name); err != nil || cur != latest {
					t.Fatalf("%s: Version after Up = %d, %d, %v", step, cur, latest, err)
				}
			}
			up("first")
			schema := listTables(t, db, e.schema)
			up("again (no-op)")

			st, err := migrations.List(ctx, db, e.name)
			if err != nil || len(st) == 0 || !st[0].Applied || st[0].Version != 1 {
				t.Fatalf("List = %+v, %v", st, err)
			}

			if err := migrations.Down(ctx, db, e.name); err != nil {
				t.Fatalf("Down: %v", err)
			}
			if got := listTables(t, db, e.schema); len(got) != 0 {
				t.Fatalf("schema objects left after Down: %v", got)
			}
			if cur, _, err := migrations.Version(ctx, db, e.name); err != nil || cur != 0 {
				t.Fatalf("Version after Down = %d, %v", cur, err)
			}
			up("after down")
			if again := listTables(t, db, e.schema); !slices.Equal(again, schema) {
				t.Errorf("schema after down and up differs from the first:\n got %q\nwant %q", again, schema)
			}
		})
	}
}

// TestHotLookupsUseIndexes: the lookups the gateway makes on every request
// (token by hash, last-use by id) and on every policy read (versions of a
// sandbox, audit of a sandbox, the audit chain page by page) must be
// served by an index, not a scan.
func TestHotLookupsUseIndexes(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			db := e.open(t)
			must(t, migrations.Up(t.Context(), db, e.name))
			ts, keys := "now()", "sentry_event_keys"
			if e.name == migrations.SQLite {
				ts, keys = "0", "sentry_events"
			} else { // Postgres plans sentry_events per partition
				_, err := db.ExecContext(t.Context(), `SELECT sentry_ensure_partitions(current_date, 1)`)
				must(t, err)
			}
			for _, q := range []string{
				`SELECT id FROM tokens WHERE hash = 'h'`,
				`UPDATE tokens SET last_used_at = NULL WHERE id = 1`,
				`SELECT version FROM policy_versions WHERE sandbox = 's' ORDER BY version`,
				`SELECT document FROM policy_versions WHERE sandbox = 's' AND version = 3`,
				`SELECT id FROM audit_log WHERE sandbox = 's' ORDER BY id DESC LIMIT 10`,
				`SELECT hash FROM audit_log WHERE seq > 5 ORDER BY seq LIMIT 10`,
				`SELECT name FROM tokens WHERE sandbox = 's' AND revoked_at IS NULL`,
				`SELECT id FROM proposals WHERE sandbox = 's' AND idempotency_key = 'k'`,
				`SELECT id FROM proposals WHERE sandbox = 's' AND status = 'pending' AND dedupe_key = 'd'`,
				`SELECT id FROM proposals WHERE sandbox = 's' ORDER BY id DESC LIMIT 10`,
				`SELECT id FROM proposals WHERE status = 'pending' AND expires_at < CURRENT_TIMESTAMP`,
				`SELECT approver FROM proposal_approvals WHERE proposal_id = 1`,
				// The decision retention sweep: by age, each sandbox's
				// newest N, and the proposals naming a denial.
				`SELECT id FROM decisions WHERE received_at < ` + ts + ` LIMIT 10`,
				`SELECT min(sandbox) FROM decisions WHERE sandbox > 's'`,
				`SELECT id FROM decisions WHERE sandbox = 's' ORDER BY id DESC LIMIT 1 OFFSET 100`,
				`SELECT 1 FROM proposals WHERE sandbox = 's' AND denial_id = 'd'`,
				// Sentry intake: the idempotency key, a source's stream
				// above its acked sequence (gaps), a sandbox's newest
				// events.
				`SELECT 1 FROM ` + keys + ` WHERE source = 's' AND id = 'i'`,
				`SELECT sequence FROM sentry_events WHERE source = 's' AND sequence > 5 ORDER BY sequence`,
				// A source's kept gaps: its first ones, and the one
				// holding a sequence an append fills.
				`SELECT lo, hi FROM sentry_gaps WHERE source = 's' ORDER BY lo LIMIT 100`,
				`SELECT lo, hi FROM sentry_gaps WHERE source = 's' AND lo >= COALESCE((SELECT max(lo) FROM sentry_gaps WHERE source = 's' AND lo <= 7), 7) AND lo <= 9 ORDER BY lo LIMIT 64`,
				// The per-source quarantine budget.
				`SELECT count(*) FROM sentry_actions WHERE source = 's' AND status IN ('frozen') AND created_at >= ` + ts,
				`SELECT id FROM sentry_events WHERE subject = 's' ORDER BY event_time DESC LIMIT 10`,
				// Sentry remediation: the replay lookup, a source's key,
				// an event's action, a sandbox's newest actions, the
				// circuit breaker's count.
				`SELECT id FROM sentry_events WHERE source = 's' AND sequence = 5 ORDER BY received_at, id LIMIT 1`,
				`SELECT public_key FROM sentry_keys WHERE source = 's'`,
				`SELECT id FROM sentry_actions WHERE source = 's' AND event_id = 'e'`,
				`SELECT id FROM sentry_actions WHERE sandbox = 's' ORDER BY created_at DESC, id DESC LIMIT 10`,
				`SELECT count(*) FROM sentry_actions WHERE status IN ('frozen', 'held') AND created_at >= ` + ts,
			} {
				plan := e.explain(t, db, q)
				// Postgres: "Index Scan"/"Index Only Scan", never "Seq Scan".
				// SQLite: "SEARCH … USING …"; a bare "SCAN table" reads it all.
				scan := strings.Contains(plan, "Seq Scan") || fullScan.MatchString(plan)
				if scan || !(strings.Contains(plan, "Index") || strings.Contains(plan, "USING")) {
					t.Errorf("%s\nplan without an index:\n%s", q, plan)
				}
			}
		})
	}
}

var fullScan = regexp.MustCompile(`(?m)^SCAN \S+$`)

// planText runs an EXPLAIN and joins its rows; the last column holds the
// plan text on both engines.
func planText(t *testing.T, conn *sql.Conn, query string) string {
	t.Helper()
	rows, err := conn.QueryContext(t.Context(), query)
	must(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	must(t, err)
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		must(t, rows.Scan(ptrs...))
		fmt.Fprintf(&b, "%v\n", vals[len(vals)-1])
	}
	must(t, rows.Err())
	return b.String()
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
			// The one update let through: chaining an unchained row, once,
			// with nothing else changed.
			if err := exec(`UPDATE audit_log SET seq = 1, actor = 'b', hash = 'h'`); err == nil {
				t.Error("chaining a row while editing it succeeded, want refused")
			}
			must(t, exec(`UPDATE audit_log SET seq = 1, prev_hash = '', hash = 'h'`))
			for _, q := range []string{
				`UPDATE audit_log SET hash = 'forged'`,
				`UPDATE audit_log SET seq = 2`,
				`UPDATE audit_log SET seq = NULL`,
			} {
				if err := exec(q); err == nil {
					t.Errorf("%s on a chained row succeeded, want refused", q)
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
				`INSERT INTO tokens (name, role, sandbox, hash, created_by, created_at) VALUES ('t', 'sentry', 's', 'h', 'a', ` + ts + `)`,
				`INSERT INTO policy_versions (sandbox, version, hash, document, author, source, created_at)
					VALUES ('missing', 1, 'h', '{}', 'a', 'set', ` + ts + `)`,
			} {
				if err := exec(q); err == nil {
					t.Errorf("%s succeeded, want a constraint error", q)
				}
			}
			// A sentry token (00008) names its source, not a sandbox.
			must(t, exec(`INSERT INTO tokens (name, role, hash, created_by, created_at) VALUES ('urn:dpu:n1', 'sentry', 'h', 'a', `+ts+`)`))
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

// TestSentryRoleKeepsTokens: 00008 widens the tokens role CHECK (on SQLite by
// rebuilding the table); the tokens already there survive it unchanged,
// ids and partial index included, and the sandbox CHECK still holds.
func TestSentryRoleKeepsTokens(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := e.open(t)
			must(t, migrations.UpTo(ctx, db, e.name, 7))
			ts := "now()"
			if e.name == migrations.SQLite {
				ts = "0"
			}
			exec := func(q string) error {
				_, err := db.ExecContext(ctx, q)
				return err
			}
			if err := exec(`INSERT INTO tokens (name, role, hash, created_by, created_at) VALUES ('w', 'sentry', 'hw', 'a', ` + ts + `)`); err == nil {
				t.Fatal("a sentry token before 00008 succeeded, want a constraint error")
			}
			must(t, exec(`INSERT INTO tokens (name, role, hash, created_by, created_at) VALUES ('adm', 'admin', 'ha', 'a', `+ts+`)`))
			must(t, exec(`INSERT INTO tokens (name, role, sandbox, hash, created_by, created_at, revoked_at)
				VALUES ('sb', 'sandbox', 's', 'hs', 'a', `+ts+`, `+ts+`)`))
			read := func() []string {
				return listTables(t, db, `SELECT name || ' ' || role || ' ' || coalesce(sandbox, '-') || ' ' || hash || ' ' ||
					CAST(id AS TEXT) || ' ' || CAST(revoked_at IS NULL AS TEXT) FROM tokens ORDER BY id`)
			}
			before := read()
			must(t, migrations.Up(ctx, db, e.name))
			if after := read(); !slices.Equal(after, before) {
				t.Errorf("tokens after 00008 = %q, want %q", after, before)
			}
			must(t, exec(`INSERT INTO tokens (name, role, hash, created_by, created_at) VALUES ('w', 'sentry', 'hw', 'a', `+ts+`)`))
			if err := exec(`INSERT INTO tokens (name, role, hash, created_by, created_at) VALUES ('w2', 'sandbox', 'hw2', 'a', ` + ts + `)`); err == nil {
				t.Error("a sandbox token without a sandbox after 00008 succeeded, want a constraint error")
			}
			if err := exec(`INSERT INTO tokens (name, role, hash, created_by, created_at) VALUES ('adm', 'admin', 'hx', 'a', ` + ts + `)`); err == nil {
				t.Error("a duplicate token name after 00008 succeeded, want a constraint error")
			}
			if plan := e.explain(t, db, `SELECT name FROM tokens WHERE sandbox = 's' AND revoked_at IS NULL`); !strings.Contains(plan, "tokens_sandbox_live_idx") {
				t.Errorf("live tokens of a sandbox after 00008 are not read by tokens_sandbox_live_idx:\n%s", plan)
			}
		})
	}
}

// TestSentryGapsMigrated: 00015 computes the gaps of the events stored
// before it, and 00014 keeps tokens as they were, unlimited, and refuses
// sandboxes on a token that is not a sentry's.
func TestSentryGapsMigrated(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := e.open(t)
			must(t, migrations.UpTo(ctx, db, e.name, 12))
			ts := "now()"
			if e.name == migrations.SQLite {
				ts = "0"
			} else {
				_, err := db.ExecContext(ctx, `SELECT sentry_ensure_partitions(current_date, 1)`)
				must(t, err)
			}
			exec := func(q string) error {
				_, err := db.ExecContext(ctx, q)
				return err
			}
			must(t, exec(`INSERT INTO tokens (name, role, hash, created_by, created_at) VALUES ('w', 'sentry', 'hw', 'a', `+ts+`)`))
			// w: 1, 2, 4, 7, 8 stored (acked 2, gaps 3 and 5–6); v: no gap.
			for _, ev := range []string{"w 1", "w 2", "w 4", "w 7", "w 8", "v 1"} {
				f := strings.Fields(ev)
				must(t, exec(`INSERT INTO sentry_events (source, id, sequence, event_time, received_at, document)
					VALUES ('`+f[0]+`', '`+ev+`', `+f[1]+`, `+ts+`, `+ts+`, '{}')`))
			}
			must(t, exec(`INSERT INTO sentry_sources (source, acked_sequence, max_sequence) VALUES ('w', 2, 8), ('v', 1, 1)`))
			must(t, migrations.Up(ctx, db, e.name))
			if got := listTables(t, db, `SELECT source || ' ' || CAST(lo AS TEXT) || '-' || CAST(hi AS TEXT) FROM sentry_gaps ORDER BY source, lo`); !slices.Equal(got, []string{"w 3-3", "w 5-6"}) {
				t.Errorf("gaps after 00015 = %q, want w 3-3 and w 5-6", got)
			}
			if got := listTables(t, db, `SELECT source || ' ' || CAST(gap_count AS TEXT) FROM sentry_sources ORDER BY source`); !slices.Equal(got, []string{"v 0", "w 2"}) {
				t.Errorf("gap counts after 00015 = %q", got)
			}
			if got := listTables(t, db, `SELECT name || ' [' || sandboxes || ']' FROM tokens`); !slices.Equal(got, []string{"w []"}) {
				t.Errorf("tokens after 00014 = %q, want w unlimited", got)
			}
			if err := exec(`INSERT INTO tokens (name, role, hash, created_by, created_at, sandboxes) VALUES ('o', 'operator', 'ho', 'a', ` + ts + `, 'support')`); err == nil {
				t.Error("an operator token with sandboxes was stored, want a constraint error")
			}
			must(t, exec(`INSERT INTO tokens (name, role, hash, created_by, created_at, sandboxes) VALUES ('w2', 'sentry', 'hw2', 'a', `+ts+`, 'support,team-*')`))
		})
	}
}
