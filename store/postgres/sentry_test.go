package postgres_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
)

// TestSentryPartitions: partitions are made ahead, idempotently, by
// replicas racing each other; intake makes a missing day's (and the
// next); retention drops whole partitions before the cutoff's day and
// nothing else.
func TestSentryPartitions(t *testing.T) {
	url := pgtest.Database(t)
	ctx := t.Context()
	d, err := postgres.Open(ctx, url, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	raw, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close(ctx)
	partitions := func() (names []string) {
		t.Helper()
		rows, err := raw.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = 'sentry_events'::regclass ORDER BY 1`)
		if err == nil {
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	// Open made today's partitions and the next days' ahead.
	today := time.Now().UTC()
	opened := partitions()
	var ahead []string
	for i := range postgres.SentryPartitionDays {
		ahead = append(ahead, "sentry_events_"+today.AddDate(0, 0, i).Format("20060102"))
	}
	if !slices.Equal(opened, ahead) {
		t.Fatalf("partitions after Open = %v, want %v", opened, ahead)
	}
	first := time.Date(2030, 12, 30, 15, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := d.EnsureSentryPartitions(ctx, first, 4); err != nil {
				t.Errorf("EnsureSentryPartitions: %v", err)
			}
		})
	}
	wg.Wait()
	want := append(opened, "sentry_events_20301230", "sentry_events_20301231", "sentry_events_20310101", "sentry_events_20310102")
	if got := partitions(); !slices.Equal(got, want) {
		t.Fatalf("partitions = %v, want %v", got, want)
	}
	e := store.SentryEvent{Source: "w", ID: "1", Sequence: 1, Document: []byte(`{}`),
		ReceivedAt: time.Date(2031, 1, 5, 1, 0, 0, 0, time.UTC)}
	if res, err := d.AppendSentryEvents(ctx, []store.SentryEvent{e}); err != nil || res.Stored != 1 {
		t.Fatalf("append on a day without a partition = %+v, %v", res, err)
	}
	want = append(want, "sentry_events_20310105", "sentry_events_20310106")
	if got := partitions(); !slices.Equal(got, want) {
		t.Fatalf("partitions after intake = %v, want %v", got, want)
	}
	if n, err := d.PruneSentryEvents(ctx, time.Date(2031, 1, 5, 23, 0, 0, 0, time.UTC)); err != nil || n != 0 {
		t.Fatalf("PruneSentryEvents = %d, %v; want 0 (the event's own day is kept)", n, err)
	}
	if got, kept := partitions(), want[len(want)-2:]; !slices.Equal(got, kept) {
		t.Errorf("partitions after pruning = %v, want %v", got, kept)
	}
}

// TestSentryConcurrentFirstAppends: the first batches into a new database
// arrive at once (several watchdogs, one connection each); none of them
// has to make its day's partition, so none deadlocks with another.
func TestSentryConcurrentFirstAppends(t *testing.T) {
	d, err := postgres.Open(t.Context(), pgtest.Database(t), postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			batch := make([]store.SentryEvent, 200)
			for i := range batch {
				batch[i] = store.SentryEvent{Source: fmt.Sprint("w", w), ID: fmt.Sprint(i), Sequence: uint64(i + 1), Document: []byte(`{}`)}
			}
			if res, err := d.AppendSentryEvents(t.Context(), batch); err != nil || res.Stored != len(batch) {
				t.Errorf("first append of w%d = %+v, %v", w, res, err)
			}
		})
	}
	wg.Wait()
}
