package gateway_test

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/ocsftest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// ocsfCollector is Config.OCSF building each event at once.
type ocsfCollector struct {
	mu     sync.Mutex
	events []ocsf.Event
}

func (c *ocsfCollector) emit(build func() ocsf.Event) {
	ev := build()
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
}

// uids returns the metadata.uid of every event of class, each validated.
func (c *ocsfCollector) uids(t *testing.T, class int) []string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, ev := range c.events {
		b, _ := json.Marshal(ev)
		if err := ocsftest.Validate(b); err != nil {
			t.Errorf("%v\n%s", err, b)
		}
		if ev.ClassUID == class {
			out = append(out, ev.Metadata.UID)
		}
	}
	slices.Sort(out)
	return out
}

// TestSentryOCSF: what the intake emits as OCSF. Each quarantine is a
// Detection Finding and what was done about it a Remediation Activity
// (frozen, held, failed, and the operator's dismissal of the held one);
// of the bulk events only the high-severity one is a finding; the
// derived unmediated calls are findings. Resends emit nothing again.
func TestSentryOCSF(t *testing.T) {
	col := &ocsfCollector{}
	e := startSentry(t, "sqlite", func(c *gateway.Config) {
		c.QuarantineBudget = 1
		c.SentrySettle = 10 * time.Millisecond
		c.OCSF = col.emit
	})
	e.sandboxWithPolicy(t, "a")
	e.sandboxWithPolicy(t, "b")
	e.postBatch(t, quarantine(watchdogSource, "q-a", 1, "a"))
	e.postBatch(t, quarantine(watchdogSource, "q-b", 2, "b"))
	e.postBatch(t, quarantine(watchdogSource, "q-ghost", 3, "ghost"))
	e.postBatch(t, quarantine(watchdogSource, "q-a", 1, "a")) // a resend
	loud := toolAccess(watchdogSource, "t-high", 5, "a")
	loud["data"].(map[string]any)["severity"] = "high"
	bulk := []ce{
		{"specversion": "1.0", "id": "h-4", "source": watchdogSource, "sequence": 4, "type": "portcullis.sentry.v1.heartbeat",
			"time": "2026-12-01T19:00:00Z", "data": map[string]any{"severity": "info"}},
		loud,
		toolAccess(watchdogSource, "t-low", 6, "a"),
	}
	e.postBatch(t, bulk...)
	e.postBatch(t, bulk...) // a resend: all stored before
	held := e.actions(t, "b")
	if len(held) != 1 || held[0].GetStatus() != store.SentryHeld {
		t.Fatalf("actions of b = %v, want one held", held)
	}
	if _, err := e.operatorSentry(t).DecideAction(t.Context(), &portcullisv1.DecideSentryActionRequest{Id: held[0].GetId(), Decision: "dismiss", Reason: "false positive"}); err != nil {
		t.Fatal(err)
	}
	wantFindings := []string{
		watchdogSource + "/q-a", watchdogSource + "/q-b", watchdogSource + "/q-ghost", watchdogSource + "/t-high",
		"unmediated:" + watchdogSource + "/t-high", "unmediated:" + watchdogSource + "/t-low",
	}
	slices.Sort(wantFindings)
	// Checks are done in receive order: once a later event's finding is
	// there, the resend's would be too.
	e.postBatch(t, toolAccess(watchdogSource, "t-last", 7, "a"))
	wantFindings = append(wantFindings, "unmediated:"+watchdogSource+"/t-last")
	slices.Sort(wantFindings)
	waitFor(t, "the last call's finding", func() bool {
		return slices.Contains(col.uids(t, ocsf.ClassDetectionFinding), "unmediated:"+watchdogSource+"/t-last")
	})
	if got := col.uids(t, ocsf.ClassDetectionFinding); !slices.Equal(got, wantFindings) {
		t.Errorf("findings %q, want %q", got, wantFindings)
	}
	remediations := col.uids(t, ocsf.ClassRemediation)
	want := []string{"sentry-action-1-frozen", "sentry-action-2-held", "sentry-action-2-dismissed", "sentry-action-3-failed"}
	slices.Sort(want)
	if !slices.Equal(remediations, want) {
		t.Errorf("remediations %q, want %q", remediations, want)
	}
}
