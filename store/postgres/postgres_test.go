package postgres_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

func open(t *testing.T) store.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), pgtest.Database(t), postgres.Config{})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
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

func TestOpenTwiceMigratesOnce(t *testing.T) {
	url := pgtest.Database(t)
	for range 2 {
		s, err := postgres.Open(t.Context(), url, postgres.Config{MaxConns: 2})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if err := s.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
}

func TestOpenBadURL(t *testing.T) {
	_, err := postgres.Open(t.Context(), "postgres://user:s3cret@127.0.0.1:1/x?sslmode=bogus", postgres.Config{})
	if err == nil {
		t.Fatal("Open with a bad URL succeeded")
	}
	if got := err.Error(); strings.Contains(got, "s3cret") {
		t.Errorf("error leaks the password: %s", got)
	}
}
