package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

func TestDecisionConfig(t *testing.T) {
	for _, cfg := range []Config{
		{DecisionRate: 10, DecisionBurst: 9},
		{DecisionRate: 10, DecisionBurst: -1},
	} {
		cfg.setDefaults()
		if err := cfg.check(); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	var cfg Config
	cfg.setDefaults()
	if cfg.DecisionMaxAge != 7*24*time.Hour || cfg.DecisionMaxPerSandbox != 100_000 || cfg.DecisionRate != 100 || cfg.DecisionBurst != 2000 {
		t.Errorf("defaults: %+v", cfg)
	}
	if err := cfg.check(); err != nil {
		t.Error(err)
	}
}

// TestDecisionSweep: the running gateway sweeps at start and then every
// interval, by its own clock: each sandbox keeps its newest records, and
// records older than the maximum age go.
func TestDecisionSweep(t *testing.T) {
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	defer st.Close()
	for _, sb := range []string{"a", "a", "b"} {
		in := make([]store.Decision, 4)
		for i := range in {
			in[i] = store.Decision{ProxyID: "p", Record: decision.Record{Sandbox: sb, Decision: "deny", Host: "h.example.com", DenialID: fmt.Sprint("d", i)}}
		}
		if _, err := st.AppendDecisions(t.Context(), in); err != nil {
			t.Fatal(err)
		}
	}
	// The gateway's clock, moved by hand.
	start, offset := time.Now(), atomic.Int64{}
	now := func() time.Time { return start.Add(time.Duration(offset.Load())) }
	s, err := New(Config{
		Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler), Now: now, ShutdownTimeout: time.Second,
		DecisionMaxAge: 24 * time.Hour, DecisionMaxPerSandbox: 5, DecisionSweepInterval: time.Millisecond,
	}, st)
	if err != nil {
		t.Fatal(err)
	}
	swept := make(chan error)
	stop := make(chan struct{})
	s.swept = func(err error) {
		select {
		case swept <- err:
		case <-stop:
		}
	}
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	defer func() {
		close(stop)
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	sweep := func() {
		t.Helper()
		select {
		case err := <-swept:
			if err != nil {
				t.Fatalf("sweep: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no sweep within 10s")
		}
	}
	count := func(sandbox string) int {
		ds, err := st.ListDecisions(t.Context(), store.DecisionFilter{Sandbox: sandbox})
		if err != nil {
			t.Fatal(err)
		}
		return len(ds)
	}
	sweep()
	if a, b := count("a"), count("b"); a != 5 || b != 4 {
		t.Fatalf("after the first sweep: a has %d, b %d records; want 5 and 4", a, b)
	}
	// A day later by the gateway's clock. The sweep running now may have
	// read the clock before it moved: wait for the one after it.
	offset.Add(int64(24*time.Hour + time.Second))
	sweep()
	sweep()
	if a, b := count("a"), count("b"); a != 0 || b != 0 {
		t.Fatalf("a day later: a has %d, b %d records; want none", a, b)
	}
	if n := s.decisions.Pruned(); n != 12 {
		t.Errorf("pruned counter = %d, want 12", n)
	}
}
