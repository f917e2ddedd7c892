package gateway

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store/backup"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// Backup writes a backup of the store c names to the file to (made
// whole, then renamed into place), consistent while gateways keep writing
// it: the state of one moment (store/backup). The store must exist; it is
// neither created nor migrated. It returns what the backup records.
func Backup(ctx context.Context, c StoreConfig, to string) (backup.Meta, error) {
	dir, err := os.MkdirTemp(filepath.Dir(to), ".portcullis-backup-")
	if err != nil {
		return backup.Meta{}, fmt.Errorf("backup: %w", err)
	}
	defer os.RemoveAll(dir)
	var meta backup.Meta
	var files []backup.File
	switch {
	case IsPostgresURL(c.DatabaseURL):
		meta, files, err = postgres.Backup(ctx, c.DatabaseURL, dir)
	case c.DatabaseURL != "":
		return meta, errNotPostgresURL
	case !c.Exists():
		return meta, &SettingError{fmt.Errorf("no gateway store at %s: give --data-dir or --database-url of the gateway's store", c.SQLitePath())}
	default:
		meta, files, err = sqlite.Backup(ctx, c.SQLitePath(), dir)
	}
	if err != nil {
		return meta, fmt.Errorf("backup: %w", err)
	}
	part := filepath.Join(dir, "backup.tar")
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return meta, fmt.Errorf("backup: %w", err)
	}
	err = backup.Write(f, meta, files)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(part, to)
	}
	if err != nil {
		return meta, fmt.Errorf("backup to %s: %w", to, err)
	}
	return meta, nil
}

// Restore restores the backup in the file from into the store c names,
// which must be empty (a store there is refused, with nothing written: an
// error wrapping backup.ErrRefused, as are a file that is not a backup,
// one of the other engine and one newer than this binary). It
// opens the restored store, applying the migrations the backup predates,
// and audits the restore (backup.ActionRestore, chained after the
// restored entries). It returns what the backup records.
func Restore(ctx context.Context, c StoreConfig, from string) (backup.Meta, error) {
	engine := migrations.SQLite
	if IsPostgresURL(c.DatabaseURL) {
		engine = migrations.Postgres
	} else if c.DatabaseURL != "" {
		return backup.Meta{}, errNotPostgresURL
	}
	f, err := os.Open(from)
	if err != nil {
		return backup.Meta{}, &SettingError{fmt.Errorf("--from: %w", err)}
	}
	defer f.Close()
	r, err := backup.Open(f, engine)
	if err == nil && engine == migrations.Postgres {
		err = postgres.Restore(ctx, c.DatabaseURL, r)
	} else if err == nil {
		err = sqlite.Restore(ctx, c.SQLitePath(), r)
	}
	if err != nil {
		return backup.Meta{}, err
	}
	st, _, err := OpenStore(ctx, c)
	if err != nil {
		return r.Meta, fmt.Errorf("open the restored store: %w", err)
	}
	err = backup.Record(ctx, st, r.Meta)
	return r.Meta, errors.Join(err, st.Close())
}

// BackupFile is Backup, answering what it wrote for a person to read
// (`portcullis backup`).
func BackupFile(ctx context.Context, c StoreConfig, to string) (string, error) {
	meta, err := Backup(ctx, c, to)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("backup of %d sandbox(es) written to %s (%s, schema version %d)\n", len(meta.Heads), to, meta.Engine, meta.SchemaVersion), nil
}

// RestoreFile is Restore, answering Restored (`portcullis restore`).
func RestoreFile(ctx context.Context, c StoreConfig, from string) (string, error) {
	meta, err := Restore(ctx, c, from)
	if err != nil {
		return "", err
	}
	return Restored(meta), nil
}

// Restored tells the operator what was restored and how to continue:
// proxies that hold a sandbox's head version follow the restored gateway;
// those that applied a later version refuse its versions as a fork and
// keep enforcing their own until they are reset (docs/operations.md).
func Restored(meta backup.Meta) string {
	var b strings.Builder
	fmt.Fprintf(&b, "restored the %s backup taken at %s (schema version %d), %d sandbox(es):\n",
		meta.Engine, meta.TakenAt.UTC().Format("2006-01-02T15:04:05Z"), meta.SchemaVersion, len(meta.Heads))
	for _, h := range meta.Heads {
		fmt.Fprintf(&b, "  %s at version %d (%s)\n", h.Sandbox, h.Version, h.Hash)
	}
	b.WriteString(`Next: start the gateway on this store. A proxy holding one of these versions
takes the gateway's next one. A proxy that applied a later version (made
after the backup) refuses this gateway's versions as a policy fork and keeps
enforcing its own: portcullis proxies list shows "policy fork" as its last
NACK. To go on from the restored history, stop each such proxy, remove
policy.signed from its data dir (keep gateway.key) and start it again; then
commit again what changed after the backup (portcullis policy set). See
docs/operations.md, "Backup and restore".
`)
	return b.String()
}
