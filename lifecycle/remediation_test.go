package lifecycle

import (
	"log/slog"
	"testing"

	"github.com/portcullis-dev/portcullis/store"
)

// TestQuarantineActsOnce: a quarantine freezes its sandbox and records
// its action in one transaction, so an event whose action was recorded
// before (another replica, a gateway that stopped before storing the
// event) freezes nothing: the transaction rolls back whole.
func TestQuarantineActsOnce(t *testing.T) {
	st := openSQLite(t)
	doc := parseDoc(t, raceDocV1).Canonical()
	for _, name := range []string{"a", "b"} {
		if _, err := st.CreateSandbox(ctx(t), store.CreateSandbox{
			Name: name, Actor: "test", Token: store.Token{Name: name + "-token", Hash: name},
			Policy: &store.PolicyVersion{Hash: doc.Hash(), Document: doc.CanonicalJSON(), Author: "test"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	l := New(Config{Logger: slog.New(slog.DiscardHandler)}, st)
	event := func(sandbox, id string) store.SentryAction {
		return store.SentryAction{Source: "sentry://w", EventID: id, Sandbox: sandbox, Type: "portcullis.sentry.v1.quarantine"}
	}

	a, err := l.Quarantine(ctx(t), event("a", "q1"), "exfiltration")
	sb, _ := st.GetSandbox(ctx(t), "a")
	if err != nil || a.ID == 0 || a.Status != store.SentryFrozen || a.Version != sb.CurrentVersion || !sb.Frozen {
		t.Fatalf("quarantine of a: %+v, %v; sandbox %+v", a, err, sb)
	}
	audit, err := st.ListAudit(ctx(t), store.AuditFilter{Sandbox: "a"})
	if err != nil || len(audit) < 2 || audit[0].Action != store.ActionSentryAction || audit[1].Action != store.ActionFreeze {
		t.Fatalf("audit of a: %+v, %v; want the freeze, then its action", audit, err)
	}

	// q2's action was recorded (held, say) before: quarantining b for it
	// again freezes nothing.
	if held, err := l.RecordSentryAction(ctx(t), store.SentryAction{Source: "sentry://w", EventID: "q2", Sandbox: "b", Status: store.SentryHeld, Reason: "budget"}); err != nil || held.ID == 0 {
		t.Fatalf("record q2: %+v, %v", held, err)
	}
	again, err := l.Quarantine(ctx(t), event("b", "q2"), "exfiltration")
	if err != nil || again.ID != 0 {
		t.Fatalf("quarantine for an event with an action: %+v, %v; want a zero ID", again, err)
	}
	if sb, _ := st.GetSandbox(ctx(t), "b"); sb.Frozen || sb.CurrentVersion != 1 {
		t.Fatalf("sandbox b %+v: frozen by an event handled before", sb)
	}

	// A sandbox frozen already: the action says so.
	noop, err := l.Quarantine(ctx(t), event("a", "q3"), "again")
	if err != nil || noop.ID == 0 || noop.Status != store.SentryNoop {
		t.Fatalf("quarantine of a frozen sandbox: %+v, %v", noop, err)
	}
}
