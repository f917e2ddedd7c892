package sentryintake

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// stallingDriver holds its first bulk append (more than one event) until
// the append's context ends, as a long COPY would, and counts appends.
type stallingDriver struct {
	store.Driver
	stalled chan struct{} // closed when the first bulk append is held
	bulk    atomic.Int32
	cause   atomic.Value // the first append's context's cause
}

func (d *stallingDriver) AppendSentryEvents(ctx context.Context, events []store.SentryEvent) (store.SentryBatchResult, error) {
	if len(events) > 1 && d.bulk.Add(1) == 1 {
		close(d.stalled)
		<-ctx.Done()
		d.cause.Store(context.Cause(ctx))
		return store.SentryBatchResult{}, ctx.Err()
	}
	return d.Driver.AppendSentryEvents(ctx, events)
}

// TestQuarantinePreemptsBulkAppend: a quarantine arriving while a bulk
// append is in flight cuts it short; the freeze commits, and the bulk
// batch is then stored whole, once, with an exact count (no duplicates).
func TestQuarantinePreemptsBulkAppend(t *testing.T) {
	ctx := t.Context()
	lite, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	d := &stallingDriver{Driver: lite, stalled: make(chan struct{})}
	st := store.New(d)
	pol, _, err := policy.Parse([]byte("version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {host: api.example.com, port: 443}\n    binaries:\n      - {path: /usr/bin/curl}\n"))
	if err != nil {
		t.Fatal(err)
	}
	pol = pol.Canonical()
	if _, err := st.CreateSandbox(ctx, store.CreateSandbox{
		Name: "agent-1", Actor: "test", Token: store.Token{Name: "sandbox-agent-1", Hash: "h"},
		Policy: &store.PolicyVersion{Hash: pol.Hash(), Document: pol.CanonicalJSON(), Author: "test"},
	}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	in := New(Config{}, st, lifecycle.New(lifecycle.Config{Logger: log}, st), log)

	const n = 50
	var bulk strings.Builder
	bulk.WriteByte('[')
	for i := range n {
		if i > 0 {
			bulk.WriteByte(',')
		}
		fmt.Fprintf(&bulk, `{"specversion":"1.0","id":"b%d","source":"bulk","sequence":%d,"type":"portcullis.sentry.v1.heartbeat","time":"2026-12-01T19:00:00Z","data":{"severity":"info"}}`, i, i+1)
	}
	bulk.WriteByte(']')
	batch, err := sentry.ParseBatch([]byte(bulk.String()))
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := in.Ingest(ctx, "bulk", batch)
		done <- outcome{res, err}
	}()
	select {
	case <-d.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the bulk append never started")
	}

	q, _ := json.Marshal([]map[string]any{{
		"specversion": "1.0", "id": "q1", "source": "watchdog", "sequence": 1,
		"type": "portcullis.sentry.v1.quarantine", "subject": "agent-1", "time": "2026-12-01T19:00:00Z",
		"data": map[string]any{"severity": "critical", "processing": "remediate", "finding": map[string]any{"title": "exfiltration", "confidence": 0.9}},
	}})
	qb, err := sentry.ParseBatch(q)
	if err != nil {
		t.Fatal(err)
	}
	qres, err := in.Ingest(ctx, "watchdog", qb)
	if err != nil || len(qres.Refused) > 0 {
		t.Fatalf("quarantine: %v, refused %v", err, qres.Refused)
	}
	if sb, err := st.GetSandbox(ctx, "agent-1"); err != nil || !sb.Frozen {
		acts, _ := st.ListSentryActions(ctx, store.SentryActionFilter{})
		t.Fatalf("after the quarantine: frozen %v, err %v; actions %+v", sb.Frozen, err, acts)
	}
	var got outcome
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the bulk batch never finished after the freeze")
	}
	if got.err != nil {
		t.Fatalf("bulk batch: %v", got.err)
	}
	if cause, _ := d.cause.Load().(error); cause != errPreempted {
		t.Fatalf("the held append ended with %v, want errPreempted", cause)
	}
	if got.res.Stored != n || got.res.Duplicates != 0 {
		t.Fatalf("bulk batch: stored %d, duplicates %d; want %d, 0", got.res.Stored, got.res.Duplicates, n)
	}
	if in.Preempted() != 1 {
		t.Fatalf("Preempted() = %d, want 1", in.Preempted())
	}
	evs, err := st.ListSentryEvents(ctx, store.SentryEventFilter{Source: "bulk"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n {
		t.Fatalf("%d bulk events stored, want %d", len(evs), n)
	}
}
