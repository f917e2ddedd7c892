package sqlite_test

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

func open(t *testing.T) store.Driver {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "portcullis.db"), sqlite.Config{})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// TestMain fails the package if a test leaves a goroutine behind (a pool
// not closed, a query still running).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStore(t *testing.T) {
	storetest.Run(t, open)
}

func TestOpenCreatesPrivateFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "nested")
	path := filepath.Join(dir, "portcullis.db")
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600, path + "-wal": 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %v, want %v", p, got, want)
		}
	}
}

func TestReopenKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "odd dir?#%", "p.db")
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	tok := store.Token{Name: "root", Role: store.RoleAdmin, Hash: "h", CreatedBy: "boot"}
	if _, err := store.New(s).CreateToken(t.Context(), tok, "boot"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at the path asked for: %v", err)
	}
	s, err = sqlite.Open(t.Context(), path, sqlite.Config{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if n, err := s.CountTokens(t.Context(), store.RoleAdmin); err != nil || n != 1 {
		t.Errorf("CountTokens after reopen = %d, %v", n, err)
	}
}
