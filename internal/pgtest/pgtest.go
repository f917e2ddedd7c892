// Package pgtest gives tests their own throwaway PostgreSQL database.
//
// Tests read the server from PORTCULLIS_TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable). When no
// server answers they skip with a message, except under CI=true, where a
// missing database is a failure rather than a silent pass. A server that
// answers but refuses the connection always fails the test.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultURL is used when PORTCULLIS_TEST_DATABASE_URL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// URL returns the administrative URL tests connect to.
func URL() string {
	if u := os.Getenv("PORTCULLIS_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Database creates an empty database with a random name on the test server
// and returns its URL. The database is dropped (forcing out connections
// still open) when the test ends. Each call makes a new database, so tests
// and packages may run in parallel.
func Database(t testing.TB) string {
	t.Helper()
	admin := URL()
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: parse PORTCULLIS_TEST_DATABASE_URL: %v", err)
	}

	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		// A malformed URL is a mistake to fix, not a missing server.
		t.Fatalf("pgtest: PORTCULLIS_TEST_DATABASE_URL %s: invalid", redact(admin))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		unreachable(t, err)
	}
	defer conn.Close(context.Background())

	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "portcullis_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})

	u.Path = "/" + name
	return u.String()
}

// unreachable skips the test when no server answered, outside CI. A server
// that answered and refused (unknown role, wrong password, no such
// database) is a broken setup, never a reason to skip.
func unreachable(t testing.TB, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		t.Fatalf("pgtest: PostgreSQL at %s refused the connection (check PORTCULLIS_TEST_DATABASE_URL): %v", redact(URL()), err)
	}
	msg := fmt.Sprintf("pgtest: PostgreSQL unreachable at %s (set PORTCULLIS_TEST_DATABASE_URL): %v", redact(URL()), err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// redact hides a password in a URL before it reaches test output.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
