package sqlite_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/backup"
	"github.com/portcullis-dev/portcullis/store/sqlite"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// TestBackupWhileWriting: a backup taken while sandboxes are being made is
// one moment of the store: restored, its audit chain verifies and its
// sandboxes are those its record names, each with its version 1; a
// restore over a store is refused and leaves it as it was.
func TestBackupWhileWriting(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "src", "portcullis.db")
	d, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st := store.New(d)
	storetest.MustCreate(t, st, "first", true)
	held := storetest.InsertHeldCall(t, st, storetest.HeldCallN("first", 1))

	var writer sync.WaitGroup
	stop, underWay := make(chan struct{}), make(chan struct{})
	writer.Go(func() {
		defer close(underWay)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			doc, hash := storetest.Doc(i)
			in := store.CreateSandbox{Name: fmt.Sprintf("w-%d", i), Actor: "alice", Token: storetest.NewToken(fmt.Sprintf("sandbox-w-%d", i), "", ""),
				Policy: &store.PolicyVersion{Hash: hash, Document: doc, Author: "alice", Source: store.SourceCreate}}
			if _, err := st.CreateSandbox(t.Context(), in); err != nil {
				t.Errorf("create during the backup: %v", err)
				return
			}
			if i == 5 {
				underWay <- struct{}{}
			}
		}
	})
	<-underWay
	meta, files, err := sqlite.Backup(t.Context(), path, t.TempDir())
	close(stop)
	writer.Wait()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := backup.Write(&buf, meta, files); err != nil {
		t.Fatal(err)
	}

	restored := filepath.Join(dir, "restored", "portcullis.db")
	r, err := backup.Open(bytes.NewReader(buf.Bytes()), migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlite.Restore(t.Context(), restored, r); err != nil {
		t.Fatal(err)
	}
	rd, err := sqlite.Open(t.Context(), restored, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rs := store.New(rd)
	v, err := store.VerifyAuditLog(t.Context(), rs, 0)
	if err != nil || v.Break != nil {
		t.Fatalf("the restored audit chain: %+v, %v", v, err)
	}
	sandboxes, err := rs.ListSandboxes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(sandboxes) != len(meta.Heads) || len(sandboxes) < 7 {
		t.Fatalf("restored %d sandboxes, the backup's record names %d (7 at least were made before it)", len(sandboxes), len(meta.Heads))
	}
	if got, err := rs.GetHeldCall(t.Context(), held.ID); err != nil || got != held {
		t.Fatalf("restored held call %+v, %v; want %+v", got, err, held)
	}
	for _, sb := range sandboxes {
		if sb.CurrentVersion != 1 || len(storetest.Versions(t, rs, sb.Name)) != 1 {
			t.Fatalf("restored sandbox %s at version %d", sb.Name, sb.CurrentVersion)
		}
	}

	// A restore over the source is refused and leaves it as it was.
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err = backup.Open(bytes.NewReader(buf.Bytes()), migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlite.Restore(t.Context(), path, r); !errors.Is(err, backup.ErrRefused) {
		t.Fatalf("restore over a store: %v, want refused", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("the refused restore changed the store")
	}
	if _, err := os.Stat(path + ".restoring"); !os.IsNotExist(err) {
		t.Fatalf("the refused restore left %s.restoring (%v)", path, err)
	}

	// A data dir whose store file is gone but whose WAL is left would
	// have the WAL replayed onto the restored file: refused too.
	leftover := filepath.Join(dir, "wal-only", "portcullis.db")
	if err := os.MkdirAll(filepath.Dir(leftover), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(leftover+"-wal", []byte("an old store's log"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err = backup.Open(bytes.NewReader(buf.Bytes()), migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlite.Restore(t.Context(), leftover, r); !errors.Is(err, backup.ErrRefused) || !strings.Contains(err.Error(), "-wal") {
		t.Fatalf("restore beside a leftover WAL: %v, want refused naming it", err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatalf("the refused restore wrote %s (%v)", leftover, err)
	}
}
