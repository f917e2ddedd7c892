package sentryintake_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway/sentryintake"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

const source = "sentry://node-1"

// batch is one CloudEvent of source for sandbox "sb": a quarantine that
// remediates, or a bulk tool_access event.
func batch(t *testing.T, id string, seq int, remediate bool) sentry.Batch {
	t.Helper()
	typ, data := "tool_access", `{"severity": "low", "tool_call": {"server": "orders", "tool": "refund"}}`
	if remediate {
		typ, data = "quarantine", `{"severity": "critical", "processing": "remediate", "finding": {"title": "exfiltration"}}`
	}
	b, err := sentry.ParseBatch(fmt.Appendf(nil, `[{"specversion": "1.0", "id": %q, "source": %q, "sequence": %d,
		"type": "portcullis.sentry.v1.%s", "subject": "sb", "time": %q, "data": %s}]`, id, source, seq, typ, now(), data))
	if err != nil || len(b.Events) != 1 {
		t.Fatalf("batch %s: %v, %+v", id, err, b)
	}
	return b
}

// now is the time a fresh event carries: remediating events older than
// the intake's MaxAge are stored but not acted on.
func now() string { return time.Now().UTC().Format(time.RFC3339) }

// newIntake opens a store with sandbox "sb" under a small policy and an
// intake over it whose WaitApplied is waitApplied.
func newIntake(t *testing.T, hold time.Duration, waitApplied func(context.Context, string, int64) (int, time.Time, error)) (*sentryintake.Intake, *store.Store) {
	t.Helper()
	d, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(d)
	t.Cleanup(func() { _ = st.Close() })
	pol, problems, err := policy.Parse([]byte("version: 1\nnetwork_policies: {}\n"))
	if err != nil || len(problems) > 0 {
		t.Fatalf("policy: %v %v", err, problems)
	}
	pol = pol.Canonical()
	if _, err := st.CreateSandbox(t.Context(), store.CreateSandbox{
		Name: "sb", Actor: "test", Token: store.Token{Name: "sb-token", Hash: "00"},
		Policy: &store.PolicyVersion{Hash: pol.Hash(), Document: pol.CanonicalJSON(), Author: "test"},
	}); err != nil {
		t.Fatal(err)
	}
	in := sentryintake.New(sentryintake.Config{UrgentHold: hold, WaitApplied: waitApplied},
		st, lifecycle.New(lifecycle.Config{Logger: slog.New(slog.DiscardHandler)}, st), slog.New(slog.DiscardHandler))
	t.Cleanup(in.Wait)
	return in, st
}

// bulkStored is how many tool_access events of sb are stored.
func bulkStored(t *testing.T, st *store.Store) int {
	t.Helper()
	evs, err := st.ListSentryEvents(t.Context(), store.SentryEventFilter{Sandbox: "sb", Type: "portcullis.sentry.v1.tool_access"})
	if err != nil {
		t.Fatal(err)
	}
	return len(evs)
}

// TestBulkWaitsForTheFreezeToBeEnforced: after a quarantine froze its
// sandbox, a bulk batch is not stored until the sandbox's proxies
// applied the deny-all; a proxy that never ACKs holds the bulk lane up
// only for UrgentHold.
func TestBulkWaitsForTheFreezeToBeEnforced(t *testing.T) {
	t.Run("until the ACKs", func(t *testing.T) {
		asked, applied := make(chan int64, 1), make(chan struct{})
		apply := sync.OnceFunc(func() { close(applied) })
		defer apply() // a failed test does not leave the wait behind
		in, st := newIntake(t, time.Hour, func(ctx context.Context, _ string, version int64) (int, time.Time, error) {
			asked <- version
			select {
			case <-applied:
				return 1, time.Now(), nil
			case <-ctx.Done():
				return 0, time.Time{}, ctx.Err()
			}
		})
		if res, err := in.Ingest(t.Context(), sentryintake.Sender{Source: source}, batch(t, "q1", 1, true)); err != nil || res.Stored != 1 {
			t.Fatalf("quarantine: %+v, %v", res, err)
		}
		select {
		case v := <-asked:
			if v != 2 {
				t.Fatalf("waited for version %d, want the deny-all, 2", v)
			}
		case <-time.After(time.Minute):
			t.Fatal("the quarantine never waited for its deny-all to be applied")
		}
		done := make(chan error, 1)
		go func() {
			res, err := in.Ingest(t.Context(), sentryintake.Sender{Source: source}, batch(t, "e2", 2, false))
			if err == nil && res.Stored != 1 {
				err = fmt.Errorf("stored %d of 1", res.Stored)
			}
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("the bulk batch was taken (%v) before the proxies applied the freeze", err)
		case <-time.After(100 * time.Millisecond):
		}
		if n := bulkStored(t, st); n != 0 {
			t.Fatalf("%d bulk events stored before the proxies applied the freeze, want 0", n)
		}
		apply()
		if err := <-done; err != nil {
			t.Fatalf("bulk batch after the ACKs: %v", err)
		}
		if n := bulkStored(t, st); n != 1 {
			t.Fatalf("%d bulk events stored after the ACKs, want 1", n)
		}
	})
	t.Run("at most UrgentHold", func(t *testing.T) {
		never := make(chan struct{}) // a proxy that does not ACK while the test runs
		defer close(never)
		in, st := newIntake(t, 10*time.Millisecond, func(context.Context, string, int64) (int, time.Time, error) {
			<-never
			return 0, time.Time{}, context.DeadlineExceeded
		})
		if res, err := in.Ingest(t.Context(), sentryintake.Sender{Source: source}, batch(t, "q1", 1, true)); err != nil || res.Stored != 1 {
			t.Fatalf("quarantine: %+v, %v", res, err)
		}
		if res, err := in.Ingest(t.Context(), sentryintake.Sender{Source: source}, batch(t, "e2", 2, false)); err != nil || res.Stored != 1 {
			t.Fatalf("bulk batch while the freeze is not ACKed: %+v, %v", res, err)
		}
		if n := bulkStored(t, st); n != 1 {
			t.Fatalf("%d bulk events stored, want 1", n)
		}
	})
}
