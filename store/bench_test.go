package store_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/sqlite"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// BenchmarkPolicySetThroughput measures sequential AppendVersion
// (the write behind `portcullis policy set`) on Postgres and SQLite in the
// same run, interleaved so machine noise hits both alike. It reports
// versions/s for each engine and their ratio; absolute numbers drift on
// shared machines, the ratio less so.
//
//	go test -run '^$' -bench PolicySetThroughput -benchtime 2000x ./store/
func BenchmarkPolicySetThroughput(b *testing.B) {
	ctx := b.Context()
	pg, lite := openEngines(b, pgtest.Database(b))

	engines := []struct {
		name    string
		s       *store.Store
		version int64
		spent   time.Duration
	}{{name: "postgres", s: store.New(pg)}, {name: "sqlite", s: store.New(lite)}}
	for i := range engines {
		_, err := engines[i].s.CreateSandbox(ctx, store.CreateSandbox{
			Name: "bench", Actor: "bench",
			Token: store.Token{Name: "sandbox-bench", Hash: engines[i].name, CreatedBy: "bench"},
		})
		if err != nil {
			b.Fatalf("%s: CreateSandbox: %v", engines[i].name, err)
		}
	}

	// A document of realistic size (~3 KiB, a dozen endpoints).
	var sb strings.Builder
	sb.WriteString(`{"network_policies":{`)
	for i := range 12 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"svc%d":{"binaries":[{"path":"/usr/bin/python3"}],"endpoints":[{"host":"api%d.example.com","port":443,"protocol":"rest","rules":[{"allow":{"method":"GET","path":"/v1/items/*"}},{"allow":{"method":"POST","path":"/v1/items"}}]}]}`, i, i)
	}
	sb.WriteString(`},"version":1,"rev":%d}`)
	tmpl := sb.String()

	b.ResetTimer()
	for n := 0; b.Loop(); n++ {
		d := fmt.Appendf(nil, tmpl, n)
		sum := sha256.Sum256(d)
		in := store.AppendPolicy{
			Sandbox: "bench", Hash: hex.EncodeToString(sum[:]), Document: d, Author: "bench",
			Source: store.SourceSet, Provenance: map[string]string{"run": "bench"},
		}
		for i := range engines {
			e := &engines[i]
			in.ExpectedVersion = e.version
			start := time.Now()
			if _, err := storetest.AppendVersion(ctx, e.s, in); err != nil {
				b.Fatalf("%s: append: %v", e.name, err)
			}
			e.spent += time.Since(start)
			e.version++
		}
	}
	b.StopTimer()

	pgRate := float64(engines[0].version) / engines[0].spent.Seconds()
	liteRate := float64(engines[1].version) / engines[1].spent.Seconds()
	b.ReportMetric(pgRate, "pg-versions/s")
	b.ReportMetric(liteRate, "sqlite-versions/s")
	b.ReportMetric(pgRate/liteRate, "pg/sqlite")
	b.ReportMetric(0, "ns/op") // one op is one write on each engine; the rates above say more
}

// openEngines opens Postgres at url and a new SQLite file, both closed
// when the benchmark ends.
func openEngines(b *testing.B, url string) (*postgres.Driver, *sqlite.Driver) {
	pg, err := postgres.Open(b.Context(), url, postgres.Config{})
	if err != nil {
		b.Fatalf("postgres.Open: %v", err)
	}
	b.Cleanup(func() { pg.Close() })
	lite, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Config{})
	if err != nil {
		b.Fatalf("sqlite.Open: %v", err)
	}
	b.Cleanup(func() { lite.Close() })
	return pg, lite
}
