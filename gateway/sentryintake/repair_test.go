package sentryintake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// failingAppends is an events store whose appends fail: the gateway
// stopping between a quarantine's freeze and its event's append.
type failingAppends struct{ store.Driver }

func (failingAppends) AppendSentryEvents(context.Context, []store.SentryEvent) (store.SentryBatchResult, error) {
	return store.SentryBatchResult{}, errors.New("stopped")
}

// TestRepairFindsActionsWithoutTheirEvent: with the events in a store of
// their own, a quarantine whose event was never stored leaves its
// action, which the repair at start finds; the watchdog's resend is
// stored and linked to it, and the repair then finds nothing.
func TestRepairFindsActionsWithoutTheirEvent(t *testing.T) {
	open := func(name string) *store.Store {
		d, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), name), sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return store.New(d)
	}
	st, events := open("control.db"), open("events.db")
	pol, _, err := policy.Parse([]byte("version: 1\nnetwork_policies: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	pol = pol.Canonical()
	if _, err := st.CreateSandbox(t.Context(), store.CreateSandbox{
		Name: "sb", Actor: "test", Token: store.Token{Name: "sb-token", Hash: "00"},
		Policy: &store.PolicyVersion{Hash: pol.Hash(), Document: pol.CanonicalJSON(), Author: "test"},
	}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	intake := func(events *store.Store) *Intake {
		in := New(Config{}, st, lifecycle.New(lifecycle.Config{Logger: log, SentryEvents: events}, st), log)
		t.Cleanup(in.Wait)
		return in
	}
	q, err := sentry.ParseBatch(fmt.Appendf(nil, `[{"specversion": "1.0", "id": "q1", "source": "sentry://node-1", "sequence": 1,
		"type": "portcullis.sentry.v1.quarantine", "subject": "sb", "time": %q,
		"data": {"severity": "critical", "processing": "remediate", "finding": {"title": "exfiltration"}}}]`, time.Now().UTC().Format(time.RFC3339)))
	if err != nil {
		t.Fatal(err)
	}
	sender := Sender{Source: "sentry://node-1"}
	if res, err := intake(store.New(failingAppends{events.Driver})).Ingest(t.Context(), sender, q); err == nil {
		t.Fatalf("quarantine whose event could not be stored: %+v, no error", res)
	}

	in := intake(events) // restarted
	lost, err := in.unstored(t.Context())
	if err != nil || len(lost) != 1 || lost[0].EventID != "q1" || lost[0].Status != store.SentryFrozen {
		t.Fatalf("unstored = %+v, %v; want q1's frozen action", lost, err)
	}
	if res, err := in.Ingest(t.Context(), sender, q); err != nil || res.Stored != 1 {
		t.Fatalf("resent quarantine: %+v, %v", res, err)
	}
	if lost, err := in.unstored(t.Context()); err != nil || len(lost) != 0 {
		t.Fatalf("unstored after the resend = %+v, %v; want none", lost, err)
	}
	acts, err := st.ListSentryActions(t.Context(), store.SentryActionFilter{Sandbox: "sb"})
	if err != nil || len(acts) != 1 || acts[0].Status != store.SentryFrozen {
		t.Fatalf("actions %+v, %v; want q1's freeze alone", acts, err)
	}
}
