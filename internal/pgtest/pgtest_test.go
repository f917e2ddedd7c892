package pgtest_test

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"go.uber.org/goleak"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
)

// TestMain fails the package if a test leaves a goroutine behind (a
// connection or pool not closed).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
	if dbURL == "" || t.Failed() {
		return // the subtest skipped (no server) or already failed
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

// outcome records what Database did to a test: skipped it, failed it, or
// returned. Fatal and Skip end the goroutine, as they do for a real test.
type outcome struct {
	testing.TB
	skipped, failed bool
	msg             string
	cleanups        []func()
}

func (o *outcome) Helper() {}
func (o *outcome) Fatal(args ...any) {
	o.failed, o.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (o *outcome) Fatalf(format string, args ...any) { o.Fatal(fmt.Sprintf(format, args...)) }
func (o *outcome) Skip(args ...any) {
	o.skipped, o.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}
func (o *outcome) Skipf(format string, args ...any) { o.Skip(fmt.Sprintf(format, args...)) }
func (o *outcome) Cleanup(f func())                 { o.cleanups = append(o.cleanups, f) }

// run calls Database with a recording TB and runs its cleanups.
func run(t *testing.T) *outcome {
	o := &outcome{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		pgtest.Database(o)
	}()
	<-done
	for _, f := range slices.Backward(o.cleanups) {
		f()
	}
	return o
}

func TestSkipOnlyWhenUnreachableOutsideCI(t *testing.T) {
	const nowhere = "postgres://postgres:secret@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"
	refused := ""
	if u, err := url.Parse(pgtest.URL()); err == nil {
		u.User = url.User("portcullis_no_such_role")
		refused = u.String()
	}
	for _, tc := range []struct {
		name, url, ci string
		skip          bool
	}{
		{"unreachable", nowhere, "", true},
		{"unreachable under CI", nowhere, "true", false},
		{"malformed URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=bogus", "", false},
		{"server refuses", refused, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "server refuses" {
				pgtest.Database(t) // needs a server that answers
			}
			t.Setenv("CI", tc.ci)
			t.Setenv("PORTCULLIS_TEST_DATABASE_URL", tc.url)
			o := run(t)
			if o.skipped != tc.skip || o.failed == tc.skip {
				t.Errorf("skipped=%v failed=%v (%s); want skipped=%v failed=%v", o.skipped, o.failed, o.msg, tc.skip, !tc.skip)
			}
			if strings.Contains(o.msg, "secret") {
				t.Errorf("message leaks the password: %s", o.msg)
			}
		})
	}
}
