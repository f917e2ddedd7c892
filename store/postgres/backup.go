package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store/backup"
)

// The catalogue queries a backup reads, over the current schema's tables
// but goose's version table (the restore's migrations write it).
const (
	// tablesQuery: every table holding rows (partitions, not their
	// parents), with its parent and bound if it is a partition.
	tablesQuery = `SELECT c.relname, COALESCE(p.relname, ''), COALESCE(pg_get_expr(c.relpartbound, c.oid), '')
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
LEFT JOIN pg_class p ON p.oid = i.inhparent
WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname <> 'portcullis_schema_version'
ORDER BY c.relname`
	// referencesQuery: which table references which (foreign keys).
	referencesQuery = `SELECT c.relname, r.relname
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_class r ON r.oid = k.confrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE k.contype = 'f' AND n.nspname = current_schema()`
	// identitiesQuery: the columns whose values come from a sequence.
	identitiesQuery = `SELECT table_name, column_name FROM information_schema.columns
WHERE table_schema = current_schema() AND (is_identity = 'YES' OR column_default LIKE 'nextval(%')
ORDER BY table_name, column_name`
)

// Backup dumps the database at url into dir: every table as COPY text, in
// one read-only REPEATABLE READ transaction, so the backup is the state of
// one moment while gateways keep writing. It returns what the backup
// records (tables in restore order) and the files to put in it.
func Backup(ctx context.Context, url, dir string) (backup.Meta, []backup.File, error) {
	meta := backup.Meta{Engine: migrations.Postgres}
	conn, err := connect(ctx, url)
	if err != nil {
		return meta, nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return meta, nil, fmt.Errorf("postgres: begin snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	meta.TakenAt = time.Now().UTC()
	if err := tx.QueryRow(ctx, backup.SchemaVersionQuery).Scan(&meta.SchemaVersion); err != nil {
		return meta, nil, fmt.Errorf("postgres: schema version: %w", err)
	}
	rows, err := tx.Query(ctx, backup.HeadsQuery)
	if err != nil {
		return meta, nil, fmt.Errorf("postgres: %w", err)
	}
	if meta.Heads, err = backup.ScanHeads(rows); err != nil {
		return meta, nil, fmt.Errorf("postgres: %w", err)
	}
	if meta.Tables, err = restoreOrder(ctx, tx); err != nil {
		return meta, nil, err
	}
	if meta.Identities, err = collectRows(ctx, tx, identitiesQuery, func(r pgx.Rows) (c backup.Column, err error) {
		return c, r.Scan(&c.Table, &c.Column)
	}); err != nil {
		return meta, nil, err
	}
	files := make([]backup.File, len(meta.Tables))
	for i, t := range meta.Tables {
		files[i] = backup.File{Name: entryOf(t.Name), Path: filepath.Join(dir, strconv.Itoa(i)+".copy")}
		if err := copyTo(ctx, tx, t.Name, files[i].Path); err != nil {
			return meta, nil, err
		}
	}
	return meta, files, nil
}

// connect opens one connection to url, for a backup's snapshot.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL, password included.
		return nil, errors.New("postgres: invalid database URL")
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	return conn, nil
}

// entryOf is table's entry in a backup.
func entryOf(table string) string { return "postgres/" + table + ".copy" }

func copyTo(ctx context.Context, tx pgx.Tx, table, path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	_, err = tx.Conn().PgConn().CopyTo(ctx, f, "COPY "+pgx.Identifier{table}.Sanitize()+" TO STDOUT")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("postgres: copy %s: %w", table, err)
	}
	return nil
}

// restoreOrder lists the tables to back up, each after the tables it
// references (a partition goes with its parent), else by name.
func restoreOrder(ctx context.Context, tx pgx.Tx) ([]backup.Table, error) {
	tables, err := collectRows(ctx, tx, tablesQuery, func(r pgx.Rows) (t backup.Table, err error) {
		return t, r.Scan(&t.Name, &t.Parent, &t.Bound)
	})
	if err != nil {
		return nil, err
	}
	refs, err := collectRows(ctx, tx, referencesQuery, func(r pgx.Rows) (ref [2]string, err error) {
		return ref, r.Scan(&ref[0], &ref[1])
	})
	if err != nil {
		return nil, err
	}
	group := func(t backup.Table) string { return cmp.Or(t.Parent, t.Name) }
	needs := map[string][]string{}
	for _, ref := range refs {
		if ref[0] != ref[1] {
			needs[ref[0]] = append(needs[ref[0]], ref[1])
		}
	}
	rank := map[string]int{}
	var visit func(g string, depth int) int
	visit = func(g string, depth int) int {
		if r, ok := rank[g]; ok || depth > len(tables) {
			return r // a cycle of references is left in name order
		}
		r := 0
		for _, n := range needs[g] {
			r = max(r, visit(n, depth+1)+1)
		}
		rank[g] = r
		return r
	}
	slices.SortStableFunc(tables, func(a, b backup.Table) int { return visit(group(a), 0) - visit(group(b), 0) })
	return tables, nil
}

func collectRows[T any](ctx context.Context, tx pgx.Tx, query string, scan func(pgx.Rows) (T, error)) ([]T, error) {
	rows, err := tx.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r.(pgx.Rows)) })
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return out, nil
}

// Restore loads the Postgres backup r into the database at url, which must
// be empty: a database no gateway has used, or one only migrated (every
// table empty, its schema no newer than the backup's); otherwise it is
// refused and nothing written. It migrates the database to the backup's
// schema version, loads every table in one transaction, and moves each
// identity's sequence past the restored ids; migrations the backup
// predates are applied by the next Open.
func Restore(ctx context.Context, url string, r *backup.Reader) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return errors.New("postgres: invalid database URL")
	}
	defer pool.Close()
	if err := checkEmpty(ctx, pool, r.Meta.SchemaVersion); err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	err = migrations.UpTo(ctx, db, migrations.Postgres, r.Meta.SchemaVersion)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return load(ctx, tx, r) })
}

// checkEmpty refuses a database with rows in any table, or a schema newer
// than version.
func checkEmpty(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var current int64
	var versioned bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass('portcullis_schema_version') IS NOT NULL").Scan(&versioned); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	if versioned {
		if err := tx.QueryRow(ctx, backup.SchemaVersionQuery).Scan(&current); err != nil {
			return fmt.Errorf("postgres: schema version: %w", err)
		}
	}
	if current > version {
		return fmt.Errorf("%w: the database is migrated to schema version %d, past the backup's %d: restore needs a new, empty database (createdb), nothing was written", backup.ErrRefused, current, version)
	}
	tables, err := collectRows(ctx, tx, tablesQuery, func(r pgx.Rows) (t backup.Table, err error) {
		return t, r.Scan(&t.Name, &t.Parent, &t.Bound)
	})
	if err != nil {
		return err
	}
	for _, t := range tables {
		var rows bool
		q := "SELECT EXISTS (SELECT 1 FROM " + pgx.Identifier{t.Name}.Sanitize() + ")"
		if t.Name == "audit_head" {
			q = "SELECT EXISTS (SELECT 1 FROM audit_head WHERE seq <> 0)" // migrations seed the empty chain's head
		}
		if err := tx.QueryRow(ctx, q).Scan(&rows); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		if rows {
			return fmt.Errorf("%w: the database is not empty (table %s has rows): restore needs a new, empty database (createdb), nothing was written", backup.ErrRefused, t.Name)
		}
	}
	return nil
}

// partitionBound is the one shape of partition bound the schema makes
// (daily ranges of timestamps): a backup's bound is SQL pasted into DDL,
// so anything else is refused, never run.
var partitionBound = regexp.MustCompile(`^FOR VALUES FROM \('[0-9 :.+-]+'\) TO \('[0-9 :.+-]+'\)$`)

// checkTables refuses a backup naming a table the migrated database does
// not have, or a partition that is not of one of its partitioned tables
// with a daily range: the file is the restore's input, and only the
// schema's own tables are written.
func checkTables(ctx context.Context, tx pgx.Tx, tables []backup.Table) error {
	have, err := collectRows(ctx, tx, tablesQuery, func(r pgx.Rows) (t backup.Table, err error) {
		return t, r.Scan(&t.Name, &t.Parent, &t.Bound)
	})
	if err != nil {
		return err
	}
	partitioned, err := collectRows(ctx, tx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'p'`, func(r pgx.Rows) (name string, err error) { return name, r.Scan(&name) })
	if err != nil {
		return err
	}
	for _, t := range tables {
		ok := false
		if t.Parent == "" {
			ok = slices.ContainsFunc(have, func(h backup.Table) bool { return h.Name == t.Name && h.Parent == "" })
		} else {
			ok = slices.Contains(partitioned, t.Parent) && partitionBound.MatchString(t.Bound)
		}
		if !ok {
			return fmt.Errorf("%w: the backup names table %q (partition of %q, %q), which this schema does not make: a damaged or foreign backup, nothing was written", backup.ErrRefused, t.Name, t.Parent, t.Bound)
		}
	}
	return nil
}

// load makes the backup's partitions, copies each table's rows in and
// sets the identities' sequences, in tx, after checkTables.
func load(ctx context.Context, tx pgx.Tx, r *backup.Reader) error {
	if err := checkTables(ctx, tx, r.Meta.Tables); err != nil {
		return err
	}
	// The empty chain's head the migrations seeded gives way to the backup's.
	if _, err := tx.Exec(ctx, "DELETE FROM audit_head WHERE seq = 0"); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	for _, t := range r.Meta.Tables {
		if t.Parent == "" {
			continue
		}
		ddl := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s PARTITION OF %s %s", pgx.Identifier{t.Name}.Sanitize(), pgx.Identifier{t.Parent}.Sanitize(), t.Bound)
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("postgres: make partition %s: %w", t.Name, err)
		}
	}
	for _, t := range r.Meta.Tables {
		name, body, err := r.Next()
		if err != nil || name != entryOf(t.Name) {
			return fmt.Errorf("the backup holds %q where %s was expected (%v): a damaged backup", name, entryOf(t.Name), err)
		}
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, body, "COPY "+pgx.Identifier{t.Name}.Sanitize()+" FROM STDIN"); err != nil {
			return fmt.Errorf("postgres: restore %s: %w", t.Name, err)
		}
	}
	for _, c := range r.Meta.Identities {
		table, col := pgx.Identifier{c.Table}.Sanitize(), pgx.Identifier{c.Column}.Sanitize()
		q := fmt.Sprintf("SELECT setval(pg_get_serial_sequence($1, $2), COALESCE((SELECT MAX(%s) FROM %s), 0) + 1, false)", col, table)
		if _, err := tx.Exec(ctx, q, table, c.Column); err != nil {
			return fmt.Errorf("postgres: sequence of %s.%s: %w", c.Table, c.Column, err)
		}
	}
	return nil
}
