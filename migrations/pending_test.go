package migrations_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/migrations"
)

// Pending lists what Apply would apply and writes nothing, not even the
// version table; a schema a newer binary migrated is refused by both,
// naming both versions, with nothing written.
func TestPendingAndNewerSchema(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := e.open(t)
			known, err := migrations.Known(e.name)
			if err != nil || len(known) < 2 || known[0].Version != 1 || known[0].File != "00001_initial.sql" || known[0].Name() != "initial" {
				t.Fatalf("Known = %+v, %v", known, err)
			}
			latest := known[len(known)-1].Version

			pending, err := migrations.Pending(ctx, db, e.name)
			if err != nil || len(pending) != len(known) {
				t.Fatalf("Pending on an empty database = %d migrations, %v; want all %d", len(pending), err, len(known))
			}
			if got := listTables(t, db, strings.Replace(e.tables, "<> 'portcullis_schema_version'", "<> ''", 1)); len(got) != 0 {
				t.Fatalf("Pending wrote to an empty database: tables %v", got)
			}

			must(t, migrations.UpTo(ctx, db, e.name, 2))
			pending, err = migrations.Pending(ctx, db, e.name)
			if err != nil || len(pending) != len(known)-2 || pending[0] != known[2] {
				t.Fatalf("Pending after UpTo 2 = %+v, %v; want from %+v on", pending, err, known[2])
			}

			must(t, migrations.Up(ctx, db, e.name))
			if pending, err = migrations.Pending(ctx, db, e.name); err != nil || len(pending) != 0 {
				t.Fatalf("Pending after Up = %+v, %v; want none", pending, err)
			}

			// A newer binary's migration, as its goose would record it.
			newer := latest + 3
			_, err = db.ExecContext(ctx, `INSERT INTO portcullis_schema_version (version_id, is_applied) VALUES (`+itoa(newer)+`, true)`)
			must(t, err)
			before := listTables(t, db, `SELECT version_id || ' ' || is_applied FROM portcullis_schema_version ORDER BY id`)
			for name, call := range map[string]func() error{
				"Pending": func() error { _, err := migrations.Pending(ctx, db, e.name); return err },
				"Apply":   func() error { _, err := migrations.Apply(ctx, db, e.name); return err },
				"Up":      func() error { return migrations.Up(ctx, db, e.name) },
			} {
				err := call()
				nse, ok := errors.AsType[*migrations.NewerSchemaError](err)
				if !ok || nse.Current != newer || nse.Latest != latest {
					t.Fatalf("%s on a newer schema: %v; want a *NewerSchemaError naming %d and %d", name, err, newer, latest)
				}
				for _, want := range []string{itoa(newer), itoa(latest), "newer portcullis", "restore"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: %q does not say %q", name, err, want)
					}
				}
			}
			if after := listTables(t, db, `SELECT version_id || ' ' || is_applied FROM portcullis_schema_version ORDER BY id`); strings.Join(after, ",") != strings.Join(before, ",") {
				t.Fatalf("the version table changed on a refused schema:\n%v\n%v", before, after)
			}
		})
	}
}

func TestKnownUnknownEngine(t *testing.T) {
	if _, err := migrations.Known("mysql"); err == nil || !strings.Contains(err.Error(), `"mysql"`) {
		t.Fatalf("Known(mysql) = %v; want the engine named", err)
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
