// Package migrations owns the database schema: numbered SQL migrations, one
// directory per engine (postgres/, sqlite/), embedded into the binary and
// applied with goose at start-up and by `portcullis migrate`.
//
// The engines never share a SQL file: their types, identity columns and
// time functions differ, and SQLite silently accepts Postgres types it does
// not implement.
package migrations

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// Engines with a migration directory.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

// versionTable records which migrations are applied.
const versionTable = "portcullis_schema_version"

// LockID is the Postgres advisory lock Up holds while it migrates (FNV-1a
// of "portcullis/migrations", shifted into int64). Advisory locks are per
// database, so it only has to differ from other tools' locks in the same
// database; goose's default id is shared by every program that uses goose.
const LockID int64 = 1428478290895925847

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Up applies every pending migration of engine ("postgres" or "sqlite") to db.
// On Postgres it holds an advisory lock while it runs, so gateway replicas
// starting together migrate once.
func Up(ctx context.Context, db *sql.DB, engine string) error {
	_, err := Apply(ctx, db, engine)
	return err
}

// Apply is Up, returning the versions it applied, oldest first (none when
// the schema was current). A schema newer than this binary knows is a
// *NewerSchemaError, and nothing is written to it.
func Apply(ctx context.Context, db *sql.DB, engine string) ([]int64, error) {
	if _, err := Pending(ctx, db, engine); err != nil {
		return nil, err
	}
	var applied []int64
	err := run(db, engine, "migrate "+engine+" up", func(p *goose.Provider) error {
		results, err := p.Up(ctx)
		if err != nil {
			return err
		}
		applied = make([]int64, 0, len(results))
		for _, r := range results {
			applied = append(applied, r.Source.Version)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Checked again: a newer replica may have migrated between the check
	// and goose's lock (then Up found nothing to apply).
	if _, err := Pending(ctx, db, engine); err != nil {
		return nil, err
	}
	return applied, nil
}

// UpTo applies the pending migrations of engine up to and including
// version, leaving later ones pending (tests of an upgrade start there).
func UpTo(ctx context.Context, db *sql.DB, engine string, version int64) error {
	return run(db, engine, fmt.Sprintf("migrate %s up to %d", engine, version), func(p *goose.Provider) error {
		_, err := p.UpTo(ctx, version)
		return err
	})
}

// Down rolls back every applied migration of engine, leaving an empty schema
// (apart from goose's version table). It destroys all data.
func Down(ctx context.Context, db *sql.DB, engine string) error {
	return run(db, engine, "migrate "+engine+" down", func(p *goose.Provider) error {
		_, err := p.DownTo(ctx, 0)
		return err
	})
}

// Version returns the schema version applied to db and the latest version
// this binary knows. current < latest means migrations are pending;
// current > latest means a newer binary migrated the database.
func Version(ctx context.Context, db *sql.DB, engine string) (current, latest int64, err error) {
	err = run(db, engine, "migration version "+engine, func(p *goose.Provider) (err error) {
		current, latest, err = p.GetVersions(ctx)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return current, latest, nil
}

// Status is one migration and whether it is applied.
type Status struct {
	Version int64
	File    string
	Applied bool
}

// List returns every migration of engine, oldest first, with its state in db.
func List(ctx context.Context, db *sql.DB, engine string) ([]Status, error) {
	var out []Status
	err := run(db, engine, "migration status "+engine, func(p *goose.Provider) error {
		st, err := p.Status(ctx)
		if err != nil {
			return err
		}
		out = make([]Status, 0, len(st))
		for _, s := range st {
			out = append(out, Status{
				Version: s.Source.Version,
				File:    s.Source.Path,
				Applied: s.State == goose.StateApplied,
			})
		}
		return nil
	})
	return out, err
}

// run runs op on engine's migrations over db; what names op in its
// error ("migrate postgres up: …").
func run(db *sql.DB, engine, what string, op func(p *goose.Provider) error) error {
	p, err := provider(db, engine)
	if err != nil {
		return err
	}
	if err := op(p); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func provider(db *sql.DB, engine string) (*goose.Provider, error) {
	if db == nil {
		return nil, errors.New("migrations: nil *sql.DB")
	}
	opts := []goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithTableName(versionTable),
	}
	var dialect goose.Dialect
	switch engine {
	case Postgres:
		dialect = goose.DialectPostgres
		// Replicas that lose the race poll every second (goose's default
		// is every 5 s) and give up after 5 minutes.
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID), lock.WithLockTimeout(1, 300))
		if err != nil {
			return nil, fmt.Errorf("migrations: session locker: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	case SQLite:
		// One process owns an SQLite file; its write transactions already
		// serialize, so no extra lock is needed.
		dialect = goose.DialectSQLite3
	default:
		return nil, fmt.Errorf("migrations: unknown engine %q (want %q or %q)", engine, Postgres, SQLite)
	}
	sub, err := fs.Sub(files, engine)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	p, err := goose.NewProvider(dialect, db, sub, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrations %s: %w", engine, err)
	}
	return p, nil
}

// Latest returns the newest migration version of engine this binary holds.
func Latest(engine string) (int64, error) {
	known, err := Known(engine)
	if err != nil || len(known) == 0 {
		return 0, cmp.Or(err, fmt.Errorf("migrations: no migrations for %q", engine))
	}
	return known[len(known)-1].Version, nil
}
