package sentryintake_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway/sentryintake"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// TestFreezeCountedOnceInTheBudget: a freeze committed but not yet done
// (its place in the budget not yet given back) is one freeze, not two.
// With a budget of 2, a second quarantine arriving in that window
// freezes its sandbox; the third is held. CI once saw five concurrent
// quarantines freeze one sandbox and hold four.
func TestFreezeCountedOnceInTheBudget(t *testing.T) {
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
	for _, name := range []string{"a", "b", "c"} {
		if _, err := st.CreateSandbox(t.Context(), store.CreateSandbox{
			Name: name, Actor: "test", Token: store.Token{Name: name + "-token", Hash: "00" + name},
			Policy: &store.PolicyVersion{Hash: pol.Hash(), Document: pol.CanonicalJSON(), Author: "test"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The first freeze stops, once recorded, until the test lets it go:
	// its action is stored and its place is still taken.
	recorded, resume := make(chan struct{}), make(chan struct{})
	stream := events.New()
	stream.Subscribe(func(e events.Event) {
		if a, ok := e.(events.SentryActed); ok && a.Action.Sandbox == "a" {
			close(recorded)
			<-resume
		}
	})
	in := sentryintake.New(sentryintake.Config{QuarantineBudget: 2, Stream: stream},
		st, lifecycle.New(lifecycle.Config{Logger: slog.New(slog.DiscardHandler)}, st), slog.New(slog.DiscardHandler))
	t.Cleanup(in.Wait)

	quarantine := func(seq int, sandbox string) error {
		b, err := sentry.ParseBatch(fmt.Appendf(nil, `[{"specversion": "1.0", "id": "q-%s", "source": %q, "sequence": %d,
			"type": "portcullis.sentry.v1.quarantine", "subject": %q, "time": %q,
			"data": {"severity": "critical", "processing": "remediate", "finding": {"title": "exfiltration"}}}]`,
			sandbox, source, seq, sandbox, time.Now().UTC().Format(time.RFC3339)))
		if err != nil {
			return err
		}
		res, err := in.Ingest(t.Context(), sentryintake.Sender{Source: source}, b)
		if err == nil && res.Stored != 1 {
			err = fmt.Errorf("stored %d of 1", res.Stored)
		}
		return err
	}
	first := make(chan error, 1)
	go func() { first <- quarantine(1, "a") }()
	select {
	case <-recorded:
	case err := <-first:
		close(resume)
		t.Fatalf("the first quarantine ended (%v) without recording a freeze of a", err)
	}
	second := quarantine(2, "b")
	close(resume)
	if err := <-first; err != nil {
		t.Fatalf("quarantine of a: %v", err)
	}
	if second != nil {
		t.Fatalf("quarantine of b: %v", second)
	}
	if err := quarantine(3, "c"); err != nil {
		t.Fatalf("quarantine of c: %v", err)
	}
	for name, want := range map[string]string{"a": store.SentryFrozen, "b": store.SentryFrozen, "c": store.SentryHeld} {
		acts, err := st.ListSentryActions(t.Context(), store.SentryActionFilter{Sandbox: name})
		if err != nil {
			t.Fatal(err)
		}
		if len(acts) != 1 || acts[0].Status != want {
			t.Errorf("actions of %s = %+v, want one, %s", name, acts, want)
		}
	}
}
