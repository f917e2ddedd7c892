// Package backup owns the backup file: what it records (Meta: the engine,
// the schema version, when it was taken, each sandbox's head version) and
// its framing, a tar archive whose first entry is that record and whose
// other entries are the engine's own copy of the data (store/sqlite: one
// database file made by VACUUM INTO; store/postgres: every table as COPY
// text, read in one snapshot). The drivers write and read the entries;
// this package checks a backup before anything is restored from it, and
// records the restore in the audit log (Record).
//
// A backup restores into the engine it was taken from: the engines' schemas
// differ in types (times are nanoseconds in SQLite, timestamptz in
// Postgres), partitions and identity columns, so a row of one is not a row
// of the other.
package backup

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
)

// Format is the version of the backup file this package writes and reads.
const Format = 1

// ErrRefused is wrapped by every refusal to restore (not a backup, of
// another engine, newer than this binary, a store not empty): nothing
// has been written when it is returned.
var ErrRefused = errors.New("restore refused")

// metaEntry is the name of the archive's first entry, the Meta as JSON.
const metaEntry = "portcullis-backup.json"

// Meta is what a backup records about itself.
type Meta struct {
	Format int `json:"format"`
	// Engine is migrations.SQLite or migrations.Postgres.
	Engine string `json:"engine"`
	// SchemaVersion is the store's migration version when the backup was
	// taken; a binary whose migrations end before it refuses to restore it.
	SchemaVersion int64     `json:"schema_version"`
	TakenAt       time.Time `json:"taken_at"`
	// Heads is each sandbox's current version in the backup.
	Heads []Head `json:"heads"`
	// Tables are the tables a Postgres backup holds, in the order they are
	// restored (a table after those it references); none for SQLite.
	Tables []Table `json:"tables,omitempty"`
	// Identities are the columns whose sequence a Postgres restore moves
	// past the restored ids.
	Identities []Column `json:"identities,omitempty"`
}

// Head is a sandbox's current version.
type Head struct {
	Sandbox string `json:"sandbox"`
	Version int64  `json:"version"`
	Hash    string `json:"hash"`
}

// Table is a table of a Postgres backup; a partition names its parent and
// its bound (FOR VALUES …), so the restore can make it first.
type Table struct {
	Name   string `json:"name"`
	Parent string `json:"parent,omitempty"`
	Bound  string `json:"bound,omitempty"`
}

// Column is a table's column.
type Column struct {
	Table  string `json:"table"`
	Column string `json:"column"`
}

// File is an entry to write: its name in the archive and the file holding
// its content.
type File struct {
	Name string
	Path string
}

// Write writes the backup of meta and files to w: meta first, then each
// file in order.
func Write(w io.Writer, meta Meta, files []File) error {
	meta.Format = Format
	head, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	tw := tar.NewWriter(w)
	hdr := &tar.Header{Name: metaEntry, Mode: 0o600, Size: int64(len(head)), ModTime: meta.TakenAt, Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if _, err := tw.Write(head); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	for _, f := range files {
		if err := addFile(tw, f, meta.TakenAt); err != nil {
			return fmt.Errorf("backup: %s: %w", f.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

func addFile(tw *tar.Writer, f File, at time.Time) error {
	in, err := os.Open(f.Path)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: 0o600, Size: fi.Size(), ModTime: at, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.Copy(tw, in)
	return err
}

// Reader reads a backup's entries after its Meta.
type Reader struct {
	Meta Meta
	tr   *tar.Reader
}

// Open reads r's Meta and checks that it can be restored into engine by
// this binary: a backup of this format, of that engine, whose schema
// version this binary's migrations reach. Its errors say which, and
// nothing has been written when it returns one.
func Open(r io.Reader, engine string) (*Reader, error) {
	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != metaEntry {
		return nil, fmt.Errorf("%w: not a portcullis backup (made by portcullis backup): it does not start with %s", ErrRefused, metaEntry)
	}
	var meta Meta
	if err := json.NewDecoder(io.LimitReader(tr, 64<<20)).Decode(&meta); err != nil {
		return nil, fmt.Errorf("%w: backup record %s: %w", ErrRefused, metaEntry, err)
	}
	if err := check(meta, engine); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return &Reader{Meta: meta, tr: tr}, nil
}

func check(meta Meta, engine string) error {
	if meta.Format != Format {
		return fmt.Errorf("backup format %d: this binary reads format %d", meta.Format, Format)
	}
	if meta.Engine != engine {
		return fmt.Errorf("the backup is of a %s store and restores only into %s (%s); it was given a %s store", meta.Engine, meta.Engine, flagOf(meta.Engine), engine)
	}
	latest, err := migrations.Latest(engine)
	if err != nil {
		return err
	}
	if meta.SchemaVersion > latest {
		return fmt.Errorf("the backup's schema version is %d, newer than this binary's migrations (up to %d): restore it with the portcullis release that took it, or a later one", meta.SchemaVersion, latest)
	}
	return nil
}

// flagOf names the flag that gives a store of engine.
func flagOf(engine string) string {
	if engine == migrations.Postgres {
		return "--database-url"
	}
	return "--data-dir"
}

// Next returns the next entry's name and content, io.EOF after the last.
func (r *Reader) Next() (string, io.Reader, error) {
	hdr, err := r.tr.Next()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			err = fmt.Errorf("read backup: %w", err)
		}
		return "", nil, err
	}
	return hdr.Name, r.tr, nil
}

// ActionRestore is the audit action of a restore, written by Record.
const ActionRestore = "store.restore"

// RestoreActor is who the audit log says restored a store.
const RestoreActor = "cli:restore"

// Record appends to st's audit log that it was restored from the backup
// meta describes: when it was taken and each sandbox's head then, chained
// after the restored entries (VerifyAudit passes across it).
func Record(ctx context.Context, st *store.Store, meta Meta) error {
	heads := make([]string, len(meta.Heads))
	for i, h := range meta.Heads {
		heads[i] = h.Sandbox + "@" + strconv.FormatInt(h.Version, 10) + ":" + h.Hash
	}
	_, err := store.Transact(ctx, st.Driver, func(tx store.Tx) (struct{}, error) {
		return struct{}{}, store.Audit(ctx, tx, store.AuditEntry{
			Actor: RestoreActor, Action: ActionRestore,
			Detail: map[string]string{
				"taken_at":       meta.TakenAt.UTC().Format(time.RFC3339Nano),
				"engine":         meta.Engine,
				"schema_version": strconv.FormatInt(meta.SchemaVersion, 10),
				"heads":          strings.Join(heads, ","),
			},
		})
	})
	if err != nil {
		return fmt.Errorf("record the restore: %w", err)
	}
	return nil
}

// Statements both engines' backups read their Meta with (their schemas
// agree on these tables).
const (
	// SchemaVersionQuery is the store's migration version.
	SchemaVersionQuery = "SELECT COALESCE(MAX(version_id), 0) FROM portcullis_schema_version"
	// HeadsQuery is each sandbox's current version, as Heads.
	HeadsQuery = "SELECT name, current_version, current_hash FROM sandboxes ORDER BY name"
)

// Rows is what a driver's query answers, for ScanHeads.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanHeads reads HeadsQuery's rows.
func ScanHeads(rows Rows) ([]Head, error) {
	heads := []Head{}
	for rows.Next() {
		var h Head
		if err := rows.Scan(&h.Sandbox, &h.Version, &h.Hash); err != nil {
			return nil, fmt.Errorf("read heads: %w", err)
		}
		heads = append(heads, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read heads: %w", err)
	}
	return heads, nil
}
