package distribution_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/portcullis-dev/portcullis/gateway/distribution"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// TestRunOwnsItsGoroutines: Run returns once ctx ends, and only after
// every goroutine it started (the status writer, the version check, the
// commit listener) has returned.
func TestRunOwnsItsGoroutines(t *testing.T) {
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	defer st.Close()
	before := goleak.IgnoreCurrent()
	log := slog.New(slog.DiscardHandler)
	d := distribution.New(distribution.Config{Replica: "r", VersionCheckInterval: time.Millisecond}, st, lifecycle.New(lifecycle.Config{Logger: log}, st), log)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	if _, err := d.PublicKey(ctx); err != nil { // the first key, created while Run checks
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context ending")
	}
	goleak.VerifyNone(t, before)
}
