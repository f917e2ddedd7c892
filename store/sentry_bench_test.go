package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sentrysql"
)

// BenchmarkSentryIngest measures AppendSentryEvents (idempotent, ordered
// intake: the new keys looked up, keys and events COPYed, sequence state) on Postgres
// beside a raw COPY of the same rows into a plain table of the same
// columns, in the same run and the same database, and AppendSentryEvents
// on SQLite. Each iteration is one batch of 1,000 events of one source. It
// reports events/s for each and the ratio of intake to the raw COPY floor
// (issue 13's goal: at least 0.5).
//
//	go test -run '^$' -bench SentryIngest -benchtime 50x ./store/
func BenchmarkSentryIngest(b *testing.B) {
	const batchSize = 1000
	ctx := b.Context()
	url := pgtest.Database(b)
	pg, lite := openEngines(b, url)
	raw, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatalf("connect: %v", err)
	}
	defer raw.Close(ctx)
	if _, err := raw.Exec(ctx, `CREATE TABLE raw_sentry (LIKE sentry_events INCLUDING ALL)`); err != nil {
		b.Fatal(err)
	}
	if err := pg.EnsureSentryPartitions(ctx, time.Now(), 2); err != nil {
		b.Fatal(err)
	}

	var intake, copied, onSQLite time.Duration
	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		batch := make([]store.SentryEvent, batchSize)
		now := time.Now().UTC().Truncate(time.Microsecond)
		for i := range batch {
			seq := uint64(n*batchSize + i + 1)
			id := fmt.Sprintf("evt-%d", seq)
			batch[i] = store.SentryEvent{
				Source: "bench", ID: id, Sequence: seq, Type: "portcullis.sentry.v1.tool_access",
				Subject: fmt.Sprintf("sb-%d", i%50), Time: now, ReceivedAt: now, Severity: "info",
				Processing: "store_only", PolicyHash: "5f1d9c0a", TraceID: "0af7651916cd43dd8448eb211c80319c",
				Document: fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"source":"bench","sequence":"%d",`+
					`"type":"portcullis.sentry.v1.tool_access","subject":"sb-%d","data":{"severity":"info",`+
					`"processing":"store_only","tool":{"server":"github","name":"create_issue","args_digest":`+
					`"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}}`, id, seq, i%50),
			}
		}
		start := time.Now()
		res, err := pg.AppendSentryEvents(ctx, batch)
		if err != nil || res.Stored != batchSize {
			b.Fatalf("postgres: append = %+v, %v", res, err)
		}
		intake += time.Since(start)

		start = time.Now()
		_, err = raw.CopyFrom(ctx, pgx.Identifier{"raw_sentry"}, sentrysql.Columns,
			pgx.CopyFromSlice(len(batch), func(i int) ([]any, error) {
				return sentrysql.Row(&batch[i], func(t time.Time) any { return t }), nil
			}))
		if err != nil {
			b.Fatalf("raw copy: %v", err)
		}
		copied += time.Since(start)

		start = time.Now()
		if res, err := lite.AppendSentryEvents(ctx, batch); err != nil || res.Stored != batchSize {
			b.Fatalf("sqlite: append = %+v, %v", res, err)
		}
		onSQLite += time.Since(start)
	}
	events := float64(b.N * batchSize)
	b.ReportMetric(events/intake.Seconds(), "pg-events/s")
	b.ReportMetric(events/copied.Seconds(), "pg-raw-copy-events/s")
	b.ReportMetric(copied.Seconds()/intake.Seconds(), "intake/raw-ratio")
	b.ReportMetric(events/onSQLite.Seconds(), "sqlite-events/s")
}
