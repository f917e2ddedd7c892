package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"github.com/portcullis-dev/portcullis/migrations"
)

// Pending returns the migrations Open would apply to the database file
// at path, oldest first, reading only: the file is opened read-only, and
// a missing one is a new database (every migration pending), not
// created. A schema newer than this binary knows is a
// *migrations.NewerSchemaError.
func Pending(ctx context.Context, path string) ([]migrations.Status, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
		return migrations.Pending(ctx, nil, migrations.SQLite)
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: abs}).EscapedPath()+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	defer db.Close()
	pending, err := migrations.Pending(ctx, db, migrations.SQLite)
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", abs, err)
	}
	return pending, nil
}
