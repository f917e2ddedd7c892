package backup_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store/backup"
)

// write returns the backup of meta with one entry, "data".
func write(t *testing.T, meta backup.Meta) []byte {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(data, []byte("rows"), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := backup.Write(&buf, meta, []backup.File{{Name: "data", Path: data}}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestRoundTrip(t *testing.T) {
	latest, err := migrations.Latest(migrations.SQLite)
	if err != nil || latest < 17 {
		t.Fatalf("Latest(sqlite) = %d, %v", latest, err)
	}
	meta := backup.Meta{Engine: migrations.SQLite, SchemaVersion: latest, TakenAt: time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC),
		Heads: []backup.Head{{Sandbox: "orders", Version: 3, Hash: "abc"}}}
	r, err := backup.Open(bytes.NewReader(write(t, meta)), migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if r.Meta.Format != backup.Format || r.Meta.SchemaVersion != latest || !r.Meta.TakenAt.Equal(meta.TakenAt) || len(r.Meta.Heads) != 1 || r.Meta.Heads[0] != meta.Heads[0] {
		t.Fatalf("read back %+v, wrote %+v", r.Meta, meta)
	}
	name, body, err := r.Next()
	if err != nil || name != "data" {
		t.Fatalf("Next = %q, %v", name, err)
	}
	if got, _ := io.ReadAll(body); string(got) != "rows" {
		t.Fatalf("entry data holds %q", got)
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last entry: %v, want io.EOF", err)
	}
}

// TestOpenRefuses: each refusal wraps ErrRefused and names what is wrong.
func TestOpenRefuses(t *testing.T) {
	latest, _ := migrations.Latest(migrations.Postgres)
	pg := backup.Meta{Engine: migrations.Postgres, SchemaVersion: latest}
	for _, tt := range []struct {
		name, engine string
		file         []byte
		want         string
	}{
		{"not a backup", migrations.SQLite, []byte("hello"), "not a portcullis backup"},
		{"other engine", migrations.SQLite, write(t, pg), "the backup is of a postgres store and restores only into postgres (--database-url)"},
		{"newer schema", migrations.Postgres, write(t, backup.Meta{Engine: migrations.Postgres, SchemaVersion: latest + 1}),
			"newer than this binary's migrations"},
	} {
		_, err := backup.Open(bytes.NewReader(tt.file), tt.engine)
		if !errors.Is(err, backup.ErrRefused) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrRefused saying %q", tt.name, err, tt.want)
		}
	}
}
