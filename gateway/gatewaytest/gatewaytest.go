// Package gatewaytest runs a real gateway for tests: a real store (SQLite
// in a temporary directory, or a fresh Postgres database), the real
// handler, and a real listener on 127.0.0.1 port 0.
package gatewaytest

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/internal/apiclient"
	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/internal/secretbox"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// Engines names the store engines every API suite runs against.
var Engines = []string{"sqlite", "postgres"}

// AdminToken is the bootstrap admin token of every test gateway.
const AdminToken = "pcs_test-admin-token-0123456789abcdef"

// Gateway is a running test gateway.
type Gateway struct {
	// URL is the base URL, http://127.0.0.1:PORT.
	URL   string
	Store *store.Store

	t         testing.TB
	engine    string
	configure []func(*gateway.Config)
	dsn       string // SQLite path or Postgres URL
	stop      func()
	// secrets is the key providers' secrets are sealed with, the same
	// across restarts.
	secrets *secretbox.Key
}

// Start runs a gateway on a new, empty store of the engine ("sqlite" or
// "postgres"). It is stopped when the test ends. configure, if given,
// adjusts the gateway's Config (Listen and BootstrapToken are set by
// Start, and Logger unless configure sets one).
func Start(t testing.TB, engine string, configure ...func(*gateway.Config)) *Gateway {
	t.Helper()
	g := &Gateway{t: t, engine: engine, configure: configure}
	switch engine {
	case "sqlite":
		g.dsn = filepath.Join(t.TempDir(), "portcullis.db")
	case "postgres":
		g.dsn = pgtest.Database(t)
	default:
		t.Fatalf("unknown engine %q", engine)
	}
	g.start()
	t.Cleanup(g.Stop)
	return g
}

// StartOn runs a gateway on the SQLite store at path, which may already
// hold data (made offline, say): the bootstrap admin token is created only
// if it has no admin token. It is stopped when the test ends.
func StartOn(t testing.TB, path string, configure ...func(*gateway.Config)) *Gateway {
	t.Helper()
	g := &Gateway{t: t, engine: "sqlite", dsn: path, configure: configure}
	g.start()
	t.Cleanup(g.Stop)
	return g
}

// Restart stops the gateway and starts a new one on the same store (and a
// new port): what survives is what the store kept.
func (g *Gateway) Restart() {
	g.t.Helper()
	g.Stop()
	g.start()
}

// Replica starts another gateway on g's Postgres database, as a second
// replica of the fleet: configure is applied after g's. It is stopped
// when the test ends.
func (g *Gateway) Replica(configure ...func(*gateway.Config)) *Gateway {
	g.t.Helper()
	if g.engine != "postgres" {
		g.t.Fatalf("replicas share a Postgres database; this gateway runs on %s", g.engine)
	}
	r := &Gateway{t: g.t, engine: g.engine, dsn: g.dsn, configure: append(slices.Clone(g.configure), configure...)}
	r.start()
	g.t.Cleanup(r.Stop)
	return r
}

// Copy starts a gateway on a copy of g's SQLite store as it is now
// (VACUUM INTO): a replica restored from a backup, whose view stays
// behind g's. It is stopped when the test ends.
func (g *Gateway) Copy() *Gateway {
	g.t.Helper()
	if g.engine != "sqlite" {
		g.t.Fatalf("Copy copies a SQLite store; this gateway runs on %s", g.engine)
	}
	c := &Gateway{t: g.t, engine: g.engine, dsn: filepath.Join(g.t.TempDir(), "copy.db"), configure: g.configure}
	db, err := g.openDB()
	if err != nil {
		g.t.Fatalf("open database: %v", err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), `VACUUM INTO ?`, c.dsn); err != nil {
		g.t.Fatalf("copy the database: %v", err)
	}
	c.start()
	g.t.Cleanup(c.Stop)
	return c
}

// Stop shuts the gateway down and closes its store. It is idempotent.
func (g *Gateway) Stop() {
	if g.stop != nil {
		g.stop()
		g.stop = nil
	}
}

func (g *Gateway) start() {
	t := g.t
	ctx := context.Background()
	var (
		d   store.Driver
		err error
	)
	if g.engine == "sqlite" {
		d, err = sqlite.Open(ctx, g.dsn, sqlite.Config{})
	} else {
		d, err = postgres.Open(ctx, g.dsn, postgres.Config{})
	}
	if err != nil {
		t.Fatalf("open %s store: %v", g.engine, err)
	}
	st := store.New(d)
	cfg := gateway.Config{
		// Clients in tests may leave a dialed, never-used connection,
		// which net/http's Shutdown waits 5s for; don't wait that long.
		ShutdownTimeout: 300 * time.Millisecond,
		// A key of its own, as gateway.Run makes an SQLite gateway one
		// (a test may take it away with a configure function).
		SecretsKey: g.secretsKey(),
	}
	for _, f := range g.configure {
		f(&cfg)
	}
	cfg.Listen, cfg.BootstrapToken = "127.0.0.1:0", AdminToken
	if cfg.Logger == nil { // a test capturing the logs sets its own
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	gw, err := gateway.New(cfg, st)
	if err != nil {
		t.Fatalf("new gateway: %v", err)
	}
	if _, _, err := gw.Bootstrap(ctx); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	// As gateway.Run does: the first signing key is made now, not by
	// whichever push first needs it (its audit entry would land among the
	// test's own).
	if _, err := gw.SigningKey(ctx); err != nil {
		t.Fatalf("signing key: %v", err)
	}
	ln, err := gw.Listen()
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	serveCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- gw.Serve(serveCtx, ln) }()
	g.URL = "http://" + ln.Addr().String()
	g.Store = st
	g.stop = func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("gateway serve: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	}
}

// Bearer is a client interceptor that sends token as the bearer token of
// every call (none when token is empty): the API client's own.
func Bearer(token string) connect.ClientInterceptor { return apiclient.Bearer(token) }

// secretsKey is the gateway's secrets key, made at its first start.
func (g *Gateway) secretsKey() *secretbox.Key {
	if g.secrets == nil {
		raw := make([]byte, secretbox.KeySize)
		rand.Read(raw)
		k, err := secretbox.New(raw)
		if err != nil {
			g.t.Fatalf("secrets key: %v", err)
		}
		g.secrets = k
	}
	return g.secrets
}
