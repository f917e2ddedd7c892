// Package benchdb gives the benchmark programs a Postgres database of
// their own: a new, empty database on a server, dropped at the end, so a
// gateway under test bootstraps its own admin token and nothing a previous
// run left skews the figures.
package benchdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// Fresh creates an empty database named prefix_<random hex> on the
// Postgres server of serverURL (which names a database to connect to for
// that, e.g. postgres) and returns its URL and what drops it (with
// FORCE: connections still open are ended). The gateway bootstraps its
// own admin token, which needs an empty store.
func Fresh(ctx context.Context, serverURL, prefix string) (string, func() error, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("-database-url: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", u.Redacted(), err)
	}
	defer conn.Close(context.Background())
	var b [8]byte
	rand.Read(b[:])
	name := prefix + "_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(cctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}
