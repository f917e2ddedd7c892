package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/pgtest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
)

// TestSentryEventStoreApart: with Config.SentryStore (gateway
// --sentry-database-url) the events, their sources' sequences and the
// operator's reads of them live in the second database and nowhere else,
// while the quarantine's freeze, its action and its audit entry stay with
// the control plane; the timeline joins both; and the gateway is not
// ready when the event store is unreachable.
func TestSentryEventStoreApart(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			d, err := postgres.Open(t.Context(), pgtest.Database(t), postgres.Config{})
			if err != nil {
				t.Fatal(err)
			}
			events := store.New(d)
			e := startSentry(t, engine, func(c *gateway.Config) { c.SentryStore = events })
			e.sandboxWithPolicy(t, "support")
			now := time.Now().UTC()
			var batch []ce
			for i := range 3 {
				ev := toolAccess(watchdogSource, "t"+string(rune('1'+i)), uint64(i+1), "support")
				ev["time"] = now.Format(time.RFC3339Nano)
				batch = append(batch, ev)
			}
			if a := e.postBatch(t, batch...); a.Stored != 3 || a.AckedSequence != 3 {
				t.Fatalf("bulk batch: %+v", a)
			}
			q := quarantine(watchdogSource, "q1", 4, "support")
			q["time"] = now.Format(time.RFC3339Nano)
			if a := e.postBatch(t, q); a.Stored != 1 || a.AckedSequence != 4 {
				t.Fatalf("quarantine: %+v", a)
			}

			apart, err := events.ListSentryEvents(t.Context(), store.SentryEventFilter{Source: watchdogSource})
			if err != nil || len(apart) != 4 {
				t.Fatalf("the event store holds %d events (%v), want 4", len(apart), err)
			}
			if here, err := e.gw.Store.ListSentryEvents(t.Context(), store.SentryEventFilter{Source: watchdogSource}); err != nil || len(here) != 0 {
				t.Fatalf("the control plane's store holds %d events (%v), want none", len(here), err)
			}
			if got := e.events(t, watchdogSource); len(got) != 4 {
				t.Fatalf("ListEvents answered %d events, want the event store's 4", len(got))
			}
			gaps, err := e.sentry.ListGaps(t.Context(), &portcullisv1.ListSentryGapsRequest{Source: watchdogSource})
			if err != nil || len(gaps.GetSources()) != 1 || gaps.GetSources()[0].GetAckedSequence() != 4 {
				t.Fatalf("ListGaps = %v, %v; want acked 4 from the event store", gaps, err)
			}

			sb := getSandbox(t, e.admin, "support")
			if !sb.GetFrozen() || sb.GetQuarantineEventId() != "q1" {
				t.Fatalf("sandbox after the quarantine: %v", sb)
			}
			if acts, err := e.gw.Store.ListSentryActions(t.Context(), store.SentryActionFilter{Sandbox: "support"}); err != nil || len(acts) != 1 || acts[0].Status != store.SentryFrozen {
				t.Fatalf("control plane's actions = %+v, %v; want one frozen", acts, err)
			}
			if acts, err := events.ListSentryActions(t.Context(), store.SentryActionFilter{}); err != nil || len(acts) != 0 {
				t.Fatalf("the event store holds actions %+v (%v), want none", acts, err)
			}
			if got := e.auditActions(t, store.ActionSentryAction); len(got) != 1 {
				t.Fatalf("%d sentry action audit entries, want 1", len(got))
			}

			tl, err := e.sentry.Timeline(t.Context(), &portcullisv1.SentryTimelineRequest{Sandbox: "support", Since: timestamppb.New(now.Add(-time.Hour))})
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, en := range tl.GetEntries() {
				kinds[en.GetKind()]++
			}
			if kinds["sentry_event"] != 4 || kinds["sentry_action"] != 1 || kinds["version"] != 2 {
				t.Fatalf("timeline kinds = %v, want 4 events, 1 action, 2 versions", kinds)
			}

			if code, _ := get(t, e.gw.URL+"/readyz", ""); code != http.StatusOK {
				t.Fatalf("/readyz = %d, want 200", code)
			}
			d.Close()
			if code, body := get(t, e.gw.URL+"/readyz", ""); code != http.StatusServiceUnavailable || body != "sentry event store unreachable\n" {
				t.Fatalf("/readyz with the event store closed = %d %q, want 503 naming it", code, body)
			}
		})
	}
}
