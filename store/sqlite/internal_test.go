package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

func openInternal(t *testing.T, cfg Config) (*Driver, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "p.db")
	s, err := Open(t.Context(), path, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func pragma(t *testing.T, db *sql.DB, name string) string {
	t.Helper()
	var v string
	if err := db.QueryRowContext(t.Context(), "PRAGMA "+name).Scan(&v); err != nil {
		t.Fatalf("PRAGMA %s: %v", name, err)
	}
	return v
}

// TestPragmasApplied reads back what the DSNs ask for, on both pools: a
// typo in a _pragma parameter would otherwise go unnoticed.
func TestPragmasApplied(t *testing.T) {
	s, _ := openInternal(t, Config{})
	for _, tc := range []struct {
		pool string
		db   *sql.DB
		want map[string]string
	}{
		{"writer", s.w, map[string]string{
			"journal_mode": "wal", "busy_timeout": "5000", "foreign_keys": "1", "synchronous": "2", "query_only": "0",
		}},
		{"reader", s.r, map[string]string{
			"journal_mode": "wal", "busy_timeout": "5000", "foreign_keys": "1", "query_only": "1",
		}},
	} {
		for name, want := range tc.want {
			if got := pragma(t, tc.db, name); got != want {
				t.Errorf("%s: PRAGMA %s = %s, want %s", tc.pool, name, got, want)
			}
		}
	}
	if _, err := s.r.ExecContext(t.Context(), `INSERT INTO audit_log (at, actor, action) VALUES (0, 'a', 'x')`); err == nil {
		t.Error("the read pool accepted a write")
	}
}

// holdWriteLock takes the database's write lock from a connection of its
// own, as another process would, until the test ends.
func holdWriteLock(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("BEGIN IMMEDIATE from another connection: %v", err)
	}
	t.Cleanup(func() { _, _ = conn.ExecContext(context.Background(), "ROLLBACK") })
}

// TestWriteTransactionsBeginImmediate: a write transaction takes the write
// lock when it begins, so it can never fail half-way with SQLITE_BUSY when
// it upgrades from reading to writing.
func TestWriteTransactionsBeginImmediate(t *testing.T) {
	s, path := openInternal(t, Config{})
	tx, err := s.w.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(t.Context(), "BEGIN IMMEDIATE; ROLLBACK"); err == nil {
		t.Error("another connection took the write lock while a write transaction was open: it began DEFERRED")
	}
}

// TestBusyIsNotAConflict: when another process holds the write lock past
// the busy timeout, the write fails with an engine error, not ErrConflict
// (which tells the client a concurrent writer won and to re-read).
func TestBusyIsNotAConflict(t *testing.T) {
	s, path := openInternal(t, Config{BusyTimeout: 50 * time.Millisecond})
	if got := pragma(t, s.w, "busy_timeout"); got != "50" {
		t.Errorf("busy_timeout = %s, want 50", got)
	}
	holdWriteLock(t, path)
	_, err := store.New(s).CreateToken(t.Context(), store.Token{Name: "t", Role: store.RoleAdmin, Hash: "h", CreatedBy: "a"}, "a")
	if err == nil {
		t.Fatal("CreateToken succeeded while another connection held the write lock")
	}
	for _, sentinel := range []error{store.ErrConflict, store.ErrNotFound, store.ErrAlreadyExists} {
		if errors.Is(err, sentinel) {
			t.Errorf("CreateToken with the database locked: %v, want no store sentinel", err)
		}
	}
}
