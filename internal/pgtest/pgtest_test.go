package pgtest_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
)

func TestDatabaseIsFreshAndDropped(t *testing.T) {
	var dbURL string
	t.Run("use", func(t *testing.T) {
		dbURL = pgtest.Database(t)
		conn, err := pgx.Connect(t.Context(), dbURL)
		if err != nil {
			t.Fatalf("connect to the new database: %v", err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("new database has %d tables, %v; want an empty one", n, err)
		}
		if other := pgtest.Database(t); other == dbURL {
			t.Fatalf("two calls returned the same database %s", other)
		}
	})
	if dbURL == "" {
		t.Skip("no database")
	}
	u, _ := url.Parse(dbURL)
	name := u.Path[1:]
	conn, err := pgx.Connect(t.Context(), pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

func TestUnreachableSkipsOutsideCI(t *testing.T) {
	t.Setenv("CI", "")
	t.Setenv("PORTCULLIS_TEST_DATABASE_URL", "postgres://postgres:secret@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")
	var sub *testing.T
	reached := false
	t.Run("unreachable", func(t *testing.T) {
		sub = t
		pgtest.Database(t)
		reached = true
	})
	if reached || !sub.Skipped() {
		t.Errorf("Database with no server: reached=%v skipped=%v; want a skip", reached, sub.Skipped())
	}
}
