package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

func openURL(t *testing.T, url string) *postgres.Driver {
	t.Helper()
	s, err := postgres.Open(t.Context(), url, postgres.Config{})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type commit struct {
	sandbox string
	version int64
}

// listenIn runs s.ListenPolicyCommits until the test ends (or stop is
// called) and sends what it hears on the returned channel; stop returns
// its result.
func listenIn(t *testing.T, s store.Driver) (heard <-chan commit, stop func() error) {
	t.Helper()
	ch := make(chan commit, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.ListenPolicyCommits(ctx, func(c store.Commit) { ch <- commit{c.Sandbox, c.Version} })
	}()
	var result error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-done
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return ch, stop
}

// listeningPid waits until a backend of the database listens for policy
// commits (its last statement was the LISTEN) and returns its pid; one
// with pid not is ignored.
func listeningPid(t *testing.T, admin *pgx.Conn, not int32) int32 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var pid int32
		err := admin.QueryRow(t.Context(), `
			SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> $1 AND pid <> pg_backend_pid()
			  AND (query = 'LISTEN portcullis_policy' OR query LIKE '%portcullis_policy catch-up%')
			LIMIT 1`, not).Scan(&pid)
		switch {
		case err == nil:
			return pid
		case !errors.Is(err, pgx.ErrNoRows):
			t.Fatal(err)
		case time.Now().After(deadline):
			t.Fatal("no backend listening for policy commits within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func expect(t *testing.T, heard <-chan commit, want commit) {
	t.Helper()
	select {
	case got := <-heard:
		if got != want {
			t.Fatalf("heard %+v, want %+v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("did not hear %+v within 10s", want)
	}
}

func appendVersion(t *testing.T, s *store.Store, sandbox string, expected int64) error {
	t.Helper()
	_, err := storetest.AppendVersion(t.Context(), s, store.AppendPolicy{
		Sandbox: sandbox, ExpectedVersion: expected, Hash: "h", Document: []byte(`{}`), Author: "bob",
	})
	return err
}

// TestListenPolicyCommits: one replica hears the versions committed
// through another (and through itself), only committed ones, and keeps
// hearing them after its connection is killed.
func TestListenPolicyCommits(t *testing.T) {
	url := pgtest.Database(t)
	ld, wd := openURL(t, url), openURL(t, url) // two replicas
	listener, writer := store.New(ld), store.New(wd)
	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	heard, stop := listenIn(t, ld)
	pid := listeningPid(t, admin, 0)

	// A sandbox created with a policy: version 1.
	_, err = writer.CreateSandbox(t.Context(), store.CreateSandbox{
		Name: "box", Actor: "alice", Token: store.Token{Name: "t-box", Hash: "h-box"},
		Policy: &store.PolicyVersion{Hash: "h", Document: []byte(`{}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, heard, commit{"box", 1})
	if err := appendVersion(t, writer, "box", 1); err != nil {
		t.Fatal(err)
	}
	expect(t, heard, commit{"box", 2})

	// Nothing is heard of a sandbox created without a policy, nor of a
	// refused write: the next notification is the next version stored.
	if _, err := writer.CreateSandbox(t.Context(), store.CreateSandbox{
		Name: "empty", Actor: "alice", Token: store.Token{Name: "t-empty", Hash: "h-empty"},
	}); err != nil {
		t.Fatal(err)
	}
	if err := appendVersion(t, writer, "box", 1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale append: %v, want ErrConflict", err)
	}
	if _, err := writer.CreateSandbox(t.Context(), store.CreateSandbox{
		Name: "box", Actor: "alice", Token: store.Token{Name: "t-box-2", Hash: "h-box-2"},
		Policy: &store.PolicyVersion{Hash: "h", Document: []byte(`{}`)},
	}); !errors.Is(err, store.ErrAlreadyExists) {
		t.Fatalf("duplicate create: %v, want ErrAlreadyExists", err)
	}
	// A version committed through the listening replica itself.
	if err := appendVersion(t, listener, "box", 2); err != nil {
		t.Fatal(err)
	}
	expect(t, heard, commit{"box", 3})
	if err := appendVersion(t, writer, "empty", 0); err != nil {
		t.Fatal(err)
	}
	expect(t, heard, commit{"empty", 1})

	// Kill the listening connection: the listener reconnects by itself
	// and hears later commits again.
	if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	listeningPid(t, admin, pid)
	if err := appendVersion(t, writer, "box", 3); err != nil {
		t.Fatal(err)
	}
	expect(t, heard, commit{"box", 4})

	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("ListenPolicyCommits after its context ended: %v, want context.Canceled", err)
	}
	select {
	case c := <-heard:
		t.Errorf("heard %+v that was never committed", c)
	default:
	}
}

// TestListenStopsOnClose: closing the store ends its listeners and
// releases their connections; listening on a closed store fails at once.
func TestListenStopsOnClose(t *testing.T) {
	url := pgtest.Database(t)
	s, err := postgres.Open(t.Context(), url, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	_, stop := listenIn(t, s)
	listeningPid(t, admin, 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("ListenPolicyCommits after Close: %v, want an error saying the store is closed", err)
	}
	// The connection is closed when Close returns; its backend may take a
	// moment to exit.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var n int
		if err := admin.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listening connections left 10s after Close", n)
		}
	}
	err = s.ListenPolicyCommits(t.Context(), func(store.Commit) {})
	if err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("ListenPolicyCommits on a closed store: %v, want an error", err)
	}
}

// TestListenCatchesUpAfterReconnect: a version committed while the
// listening connection is down (its NOTIFY reaches no one) is announced
// as soon as the listener listens again, not at the listeners' next
// periodic check. The Postgres restart drill (drills/gateway) saw a proxy
// of another replica wait that check (5 s) for a version committed right
// after the database came back.
func TestListenCatchesUpAfterReconnect(t *testing.T) {
	url := pgtest.Database(t)
	ld, wd := openURL(t, url), openURL(t, url)
	writer := store.New(wd)
	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := writer.CreateSandbox(t.Context(), store.CreateSandbox{
		Name: "box", Actor: "alice", Token: store.Token{Name: "t-box", Hash: "h-box"},
		Policy: &store.PolicyVersion{Hash: "h", Document: []byte(`{}`)},
	}); err != nil {
		t.Fatal(err)
	}
	heard, _ := listenIn(t, ld)
	pid := listeningPid(t, admin, 0)
	if err := appendVersion(t, writer, "box", 1); err != nil {
		t.Fatal(err)
	}
	expect(t, heard, commit{"box", 2})

	// No new connection to the database until the commit is made: the
	// listener cannot be back in time to hear its NOTIFY.
	var db string
	if err := admin.QueryRow(t.Context(), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	server, err := pgx.Connect(t.Context(), pgtest.URL()) // not this database
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close(context.Background())
	allow := func(on bool) {
		t.Helper()
		if _, err := server.Exec(t.Context(), fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, pgx.Identifier{db}.Sanitize(), on)); err != nil {
			t.Fatal(err)
		}
	}
	allow(false)
	defer allow(true)
	if _, err := admin.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	if err := appendVersion(t, writer, "box", 2); err != nil { // a pooled connection
		t.Fatal(err)
	}
	allow(true)
	expect(t, heard, commit{"box", 3})
	select {
	case c := <-heard:
		t.Errorf("heard %+v after the catch-up, want nothing more", c)
	default:
	}
}
