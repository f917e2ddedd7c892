package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/pressly/goose/v3"
)

// NewerSchemaError is a database whose schema a newer binary migrated:
// its version is past the newest migration this binary knows. Nothing
// is written to such a database: this binary's queries may not match
// its tables, and running it would hide the mismatch.
type NewerSchemaError struct {
	Current int64 // the database's schema version
	Latest  int64 // the newest migration this binary knows
}

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("the store's schema is at version %d, newer than the newest migration this portcullis knows (%d): "+
		"a newer portcullis migrated it. Run that newer portcullis (or a later one), "+
		"or go back by restoring the backup taken before migrating (portcullis restore --from FILE; docs/upgrading.md)",
		e.Current, e.Latest)
}

// Name is the migration's name without its number and extension
// ("token_expiry" for 00016_token_expiry.sql).
func (s Status) Name() string {
	name := strings.TrimSuffix(path.Base(s.File), ".sql")
	if _, rest, ok := strings.Cut(name, "_"); ok {
		return rest
	}
	return name
}

// Pending returns the migrations Apply would apply to db, oldest first,
// and only reads: it writes nothing, not even goose's version table. A
// nil db, or one no portcullis migrated yet, has every migration
// pending. A schema newer than this binary knows is a *NewerSchemaError.
func Pending(ctx context.Context, db *sql.DB, engine string) ([]Status, error) {
	all, err := Known(engine)
	if err != nil {
		return nil, err
	}
	applied := map[int64]bool{}
	if db != nil {
		if applied, err = appliedVersions(ctx, db, engine); err != nil {
			return nil, fmt.Errorf("migration version %s: %w", engine, err)
		}
	}
	latest := all[len(all)-1].Version
	for v := range applied {
		if v > latest {
			return nil, &NewerSchemaError{Current: maxKey(applied), Latest: latest}
		}
	}
	var pending []Status
	for _, s := range all {
		if !applied[s.Version] {
			pending = append(pending, s)
		}
	}
	return pending, nil
}

// Known returns engine's migrations, oldest first, as this binary embeds
// them (none applied).
func Known(engine string) ([]Status, error) {
	if engine != Postgres && engine != SQLite {
		return nil, fmt.Errorf("migrations: unknown engine %q (want %q or %q)", engine, Postgres, SQLite)
	}
	names, err := fs.Glob(files, engine+"/*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	out := make([]Status, 0, len(names))
	for _, name := range names { // fs.Glob sorts, and the numbers have leading zeros
		v, err := goose.NumericComponent(name)
		if err != nil {
			return nil, fmt.Errorf("migrations: %s: %w", name, err)
		}
		out = append(out, Status{Version: v, File: path.Base(name)})
	}
	return out, nil
}

// appliedVersions reads goose's version table: the versions applied
// (goose deletes a rolled-back version's row), none when the table does
// not exist yet.
func appliedVersions(ctx context.Context, db *sql.DB, engine string) (map[int64]bool, error) {
	exists := `SELECT to_regclass('` + versionTable + `') IS NOT NULL`
	if engine == SQLite {
		exists = `SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = '` + versionTable + `'`
	}
	var ok bool
	if err := db.QueryRowContext(ctx, exists).Scan(&ok); err != nil || !ok {
		return map[int64]bool{}, err
	}
	rows, err := db.QueryContext(ctx, `SELECT version_id FROM `+versionTable+` WHERE is_applied AND version_id > 0`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[int64]bool{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	return applied, rows.Err()
}

func maxKey(m map[int64]bool) int64 {
	var top int64
	for k := range m {
		top = max(top, k)
	}
	return top
}
