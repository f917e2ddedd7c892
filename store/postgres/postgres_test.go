package postgres_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	"go.uber.org/goleak"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

func open(t *testing.T) store.Driver {
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

// TestConcurrentOpenMigratesOnce starts several replicas on one empty
// database at once: the migration lock must let exactly one apply the
// schema while the others wait, and every Open must succeed.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	url := pgtest.Database(t)
	const replicas = 4
	stores := make([]*postgres.Driver, replicas)
	errs := make([]error, replicas)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = postgres.Open(t.Context(), url, postgres.Config{MaxConns: 2})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: Open: %v", i, err)
			continue
		}
		defer stores[i].Close()
	}
	if t.Failed() {
		return
	}
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var applied, distinct int
	err = db.QueryRowContext(t.Context(), `SELECT count(*), count(DISTINCT version_id)
		FROM portcullis_schema_version WHERE version_id > 0`).Scan(&applied, &distinct)
	if err != nil {
		t.Fatal(err)
	}
	if applied != distinct || applied == 0 {
		t.Errorf("schema version rows = %d for %d migrations; want each applied once", applied, distinct)
	}
}

// TestOpenWaitsForMigrationLock holds the migration lock as another
// replica would while it migrates: Open must wait for it rather than
// migrate alongside, then succeed once it is released.
func TestOpenWaitsForMigrationLock(t *testing.T) {
	url := pgtest.Database(t)
	ctx := t.Context()
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrations.LockID); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		s, err := postgres.Open(ctx, url, postgres.Config{MaxConns: 2})
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	// Wait, with a deadline, until Open has tried the lock and been refused.
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for tried := false; !tried; {
		select {
		case err := <-done:
			t.Fatalf("Open finished (%v) while another replica held the migration lock", err)
		case <-deadline:
			t.Fatal("Open never tried the migration lock")
		case <-tick.C:
			err := holder.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()
				  AND query LIKE '%pg_try_advisory_lock%')`).Scan(&tried)
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	var tables int
	if err := holder.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_schema = 'public' AND table_name = 'sandboxes'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("schema applied while the lock was held (%d, %v)", tables, err)
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, migrations.LockID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Open after the lock was released: %v", err)
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
