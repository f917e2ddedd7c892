package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store/backup"
)

// backupEntry is the database file's name in a backup.
const backupEntry = "sqlite/portcullis.db"

// Backup copies the database at path into dir with VACUUM INTO, which
// reads it in one transaction: the copy is the state of one moment, with
// what the WAL holds, while a gateway keeps writing (copying the file
// itself would lose the WAL's commits). It returns what the backup records
// and the file to put in it. The database must exist; it is not migrated.
func Backup(ctx context.Context, path, dir string) (backup.Meta, []backup.File, error) {
	var meta backup.Meta
	if _, err := os.Stat(path); err != nil {
		return meta, nil, fmt.Errorf("sqlite: %w", err)
	}
	db, err := openFile(path, "rw")
	if err != nil {
		return meta, nil, err
	}
	defer db.Close()
	copyPath := filepath.Join(dir, "portcullis.db")
	meta.TakenAt = time.Now().UTC()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", copyPath); err != nil {
		return meta, nil, fmt.Errorf("sqlite: vacuum into %s: %w", copyPath, err)
	}
	cp, err := openFile(copyPath, "ro")
	if err != nil {
		return meta, nil, err
	}
	defer cp.Close()
	meta.Engine = migrations.SQLite
	if err := cp.QueryRowContext(ctx, backup.SchemaVersionQuery).Scan(&meta.SchemaVersion); err != nil {
		return meta, nil, fmt.Errorf("sqlite: schema version: %w", err)
	}
	rows, err := cp.QueryContext(ctx, backup.HeadsQuery)
	if err != nil {
		return meta, nil, fmt.Errorf("sqlite: %w", err)
	}
	defer rows.Close()
	if meta.Heads, err = backup.ScanHeads(rows); err != nil {
		return meta, nil, fmt.Errorf("sqlite: %w", err)
	}
	return meta, []backup.File{{Name: backupEntry, Path: copyPath}}, nil
}

// Restore writes the database of the SQLite backup r into path, which must
// not exist yet (a store there is refused, and nothing written). The file
// is checked (quick_check) before it is moved into place; migrations the
// backup predates are applied by the next Open.
func Restore(ctx context.Context, path string, r *backup.Reader) (err error) {
	// A -wal or -journal left by an earlier store would be replayed onto
	// the restored file by the next Open: refused like the store itself.
	for _, f := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		if _, err := os.Lstat(f); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s exists: restore needs an empty data dir (nothing was written)", backup.ErrRefused, f)
		}
	}
	name, body, err := r.Next()
	if err != nil || name != backupEntry {
		return fmt.Errorf("the backup holds no %s (found %q): a damaged backup", backupEntry, name)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("sqlite: create directory: %w", err)
	}
	tmp := path + ".restoring"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	_, err = io.Copy(f, body)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sqlite: write %s: %w", tmp, err)
	}
	if err := quickCheck(ctx, tmp); err != nil {
		return err
	}
	// A link, not a rename: it fails if a store appeared at path since the
	// check above (a gateway started on the data dir), where a rename
	// would replace it.
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("%w: sqlite: %w (nothing was written)", backup.ErrRefused, err)
	}
	return os.Remove(tmp)
}

// quickCheck runs PRAGMA quick_check on the database file at path.
func quickCheck(ctx context.Context, path string) error {
	db, err := openFile(path, "ro")
	if err != nil {
		return err
	}
	defer db.Close()
	var res string
	if err := db.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&res); err != nil || res != "ok" {
		return fmt.Errorf("the backup's database is damaged (quick_check: %q, %v)", res, err)
	}
	return nil
}

// openFile opens the existing database file at path in mode (ro, rw),
// with no migrations: for copying, never for serving.
func openFile(path, mode string) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: abs}).EscapedPath()+"?mode="+mode+"&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}
