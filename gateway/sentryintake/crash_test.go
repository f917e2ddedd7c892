package sentryintake_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/sentryintake"
	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

var errCrashed = errors.New("the gateway crashed")

// crashAfterFreeze is a store whose process dies as soon as a freeze
// commits: that transaction is durable, and every write after it fails.
type crashAfterFreeze struct {
	store.Driver
	crashed atomic.Bool
}

func (d *crashAfterFreeze) InTxEnforceFirst(ctx context.Context, fn func(store.Tx) error) error {
	if d.crashed.Load() {
		return errCrashed
	}
	err := d.Driver.InTxEnforceFirst(ctx, fn)
	if err == nil {
		d.crashed.Store(true)
	}
	return err
}

func (d *crashAfterFreeze) InTx(ctx context.Context, fn func(store.Tx) error) error {
	if d.crashed.Load() {
		return errCrashed
	}
	return d.Driver.InTx(ctx, fn)
}

func (d *crashAfterFreeze) AppendSentryEvents(ctx context.Context, evs []store.SentryEvent) (store.SentryBatchResult, error) {
	if d.crashed.Load() {
		return store.SentryBatchResult{}, errCrashed
	}
	return d.Driver.AppendSentryEvents(ctx, evs)
}

// sandboxStore opens a driver of engine holding sandbox "sb" under a
// small policy.
func sandboxStore(t *testing.T, engine string) store.Driver {
	t.Helper()
	var d store.Driver
	var err error
	if engine == "postgres" {
		d, err = postgres.Open(t.Context(), pgtest.Database(t), postgres.Config{})
	} else {
		d, err = sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	pol, problems, err := policy.Parse([]byte("version: 1\nnetwork_policies: {}\n"))
	if err != nil || len(problems) > 0 {
		t.Fatalf("policy: %v %v", err, problems)
	}
	pol = pol.Canonical()
	if _, err := store.New(d).CreateSandbox(t.Context(), store.CreateSandbox{
		Name: "sb", Actor: "test", Token: store.Token{Name: "sb-token", Hash: "00"},
		Policy: &store.PolicyVersion{Hash: pol.Hash(), Document: pol.CanonicalJSON(), Author: "test"},
	}); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestQuarantineCrashBeforeTheEventIsStored: the gateway dies right after
// a quarantine's freeze commits, before the event is stored; the
// watchdog, never answered, sends the event again to the restarted
// gateway. The resend is stored and linked to the action that froze the
// sandbox — its action names it, frozen at the deny-all version — not
// recorded as a quarantine of a sandbox that was "already frozen". (The
// freeze and its action used to be two transactions, and the crash fell
// between them.)
func TestQuarantineCrashBeforeTheEventIsStored(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) { quarantineCrash(t, sandboxStore(t, engine)) })
	}
}

func quarantineCrash(t *testing.T, d store.Driver) {
	log := slog.New(slog.DiscardHandler)
	open := func(st *store.Store) *sentryintake.Intake {
		in := sentryintake.New(sentryintake.Config{}, st, lifecycle.New(lifecycle.Config{Logger: log}, st), log)
		t.Cleanup(in.Wait)
		return in
	}
	sender := sentryintake.Sender{Source: source}
	q := batch(t, "q1", 1, true)

	crashing := &crashAfterFreeze{Driver: d}
	if _, err := open(store.New(crashing)).Ingest(t.Context(), sender, q); !errors.Is(err, errCrashed) {
		t.Fatalf("quarantine on a gateway that dies after the freeze: %v, want the crash", err)
	}
	st := store.New(d) // restarted
	sb, err := st.GetSandbox(t.Context(), "sb")
	if err != nil || !sb.Frozen {
		t.Fatalf("sandbox after the crash: %+v, %v; want frozen", sb, err)
	}

	res, err := open(st).Ingest(t.Context(), sender, q)
	if err != nil || res.Stored != 1 {
		t.Fatalf("the resent quarantine: %+v, %v; want it stored", res, err)
	}
	evs, err := st.ListSentryEvents(t.Context(), store.SentryEventFilter{Sandbox: "sb"})
	if err != nil || len(evs) != 1 || evs[0].ID != "q1" {
		t.Fatalf("stored events %+v, %v; want q1", evs, err)
	}
	acts, err := st.ListSentryActions(t.Context(), store.SentryActionFilter{Sandbox: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 1 || acts[0].EventID != "q1" || acts[0].Source != source || acts[0].Status != store.SentryFrozen || acts[0].Version != sb.CurrentVersion {
		t.Fatalf("actions %+v; want one: q1 froze sb at version %d", acts, sb.CurrentVersion)
	}
	// Sent once more: a duplicate, still one action.
	if res, err := open(st).Ingest(t.Context(), sender, q); err != nil || res.Duplicates != 1 {
		t.Fatalf("q1 a third time: %+v, %v; want a duplicate", res, err)
	}
	if acts, _ := st.ListSentryActions(t.Context(), store.SentryActionFilter{Sandbox: "sb"}); len(acts) != 1 {
		t.Fatalf("actions %+v; want still one", acts)
	}
}
