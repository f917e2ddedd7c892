package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
)

// runProcess runs a gateway process in the background and returns what
// it said once started, and a stop that ends it and returns Run's error.
func runProcess(t *testing.T, cfg gateway.RunConfig) (gateway.Started, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan gateway.Started, 1)
	cfg.Started = func(s gateway.Started) { started <- s }
	done := make(chan error, 1)
	go func() { done <- gateway.Run(ctx, cfg) }()
	stop := func() error {
		cancel()
		return <-done
	}
	select {
	case s := <-started:
		return s, stop
	case err := <-done:
		cancel()
		t.Fatalf("Run returned before it started: %v", err)
	case <-time.After(30 * time.Second):
		stop()
		t.Fatal("Run did not start within 30s")
	}
	return gateway.Started{}, nil
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestRun: a gateway process opens its store (creating the SQLite
// database) and its OCSF sink, creates the first admin token once,
// serves, and closes everything when its context ends (TestMain checks
// that no goroutine outlives it).
func TestRun(t *testing.T) {
	dir := t.TempDir()
	store := gateway.StoreConfig{DataDir: filepath.Join(dir, "data")}
	if store.Exists() {
		t.Fatal("a store exists before the first start")
	}
	events := filepath.Join(dir, "ocsf.jsonl")
	cfg := gateway.RunConfig{
		Server: gateway.Config{Listen: "127.0.0.1:0", Logger: quiet()},
		Store:  store,
		OCSF:   ocsf.Sinks{File: events},
	}
	s, stop := runProcess(t, cfg)
	if !s.CreatedAdmin || !strings.HasPrefix(s.AdminToken, "pcs_") || !strings.HasPrefix(s.SigningKey, "ed25519:") {
		t.Errorf("first start: %+v; want a created admin token and the signing key", s)
	}
	if want := "sqlite " + store.SQLitePath() + " (single replica)"; s.Store != want {
		t.Errorf("store %q, want %q", s.Store, want)
	}
	res, err := http.Get("http://" + s.Addr.String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %s", res.Status)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !store.Exists() {
		t.Error("no store after the first start")
	}
	if _, err := os.Stat(events); err != nil {
		t.Errorf("the OCSF file sink was not opened: %v", err)
	}

	again, stop := runProcess(t, cfg)
	if err := stop(); err != nil {
		t.Fatalf("second Run: %v", err)
	}
	if again.CreatedAdmin || again.AdminToken != "" || again.SigningKey != s.SigningKey {
		t.Errorf("second start: %+v; want no new admin token and the same signing key %s", again, s.SigningKey)
	}
}

// TestRunSettingErrors: settings the operator must fix are SettingErrors,
// and a refused start creates no admin token.
func TestRunSettingErrors(t *testing.T) {
	dir := t.TempDir()
	store := gateway.StoreConfig{DataDir: dir}
	for name, cfg := range map[string]gateway.RunConfig{
		"not postgres":        {Store: gateway.StoreConfig{DatabaseURL: "mysql://db/portcullis"}},
		"sentry not postgres": {Store: store, SentryDatabaseURL: "sqlite:///tmp/events.db"},
		"plaintext beyond loopback": {
			Server: gateway.Config{Listen: "0.0.0.0:0"},
			Store:  store,
		},
	} {
		cfg.Server.Logger = quiet()
		err := gateway.Run(t.Context(), cfg)
		if _, ok := errors.AsType[*gateway.SettingError](err); !ok {
			t.Errorf("%s: Run returned %v, want a *SettingError", name, err)
		}
	}
	s, stop := runProcess(t, gateway.RunConfig{Server: gateway.Config{Listen: "127.0.0.1:0", Logger: quiet()}, Store: store})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !s.CreatedAdmin {
		t.Error("after a refused start the first real one created no admin token")
	}
}
