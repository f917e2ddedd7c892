package postgres_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/backup"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// TestBackupRoundTrip: a backup restored into a new database holds the
// same rows in every table (partitions of Sentry events included), the
// restored identities go on past the restored ids, and a restore into a
// database that is not empty is refused with nothing written.
func TestBackupRoundTrip(t *testing.T) {
	src := pgtest.Database(t)
	withStore(t, src, func(st *store.Store) {
		storetest.MustCreate(t, st, "orders", true)
		storetest.MustCreate(t, st, "support", false)
		storetest.InsertProposal(t, st, storetest.ProposalN("orders", 1))
		held := storetest.InsertHeldCall(t, st, storetest.HeldCallN("orders", 1))
		if err := st.Driver.InsertCallApproval(t.Context(), held.ID, store.CallApproval{Approver: "olive", Reason: "ok", CreatedAt: held.RequestedAt}); err != nil {
			t.Fatal(err)
		}
		events := make([]store.SentryEvent, 3)
		for i := range events {
			id := fmt.Sprintf("node-1-%d", i+1)
			events[i] = store.SentryEvent{Source: "node-1", ID: id, Sequence: uint64(i + 1), Type: "portcullis.sentry.v1.heartbeat", Subject: "orders",
				Document: fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"source":"node-1","sequence":"%d"}`, id, i+1)}
		}
		if _, err := st.AppendSentryEvents(t.Context(), events); err != nil {
			t.Fatal(err)
		}
		// Providers and their attachments, which refer to both sides.
		if _, err := st.CreateProvider(t.Context(), storetest.TestProvider("gh"), "ada"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := st.AttachProvider(t.Context(), "orders", "gh", "ada"); err != nil {
			t.Fatal(err)
		}
	})
	file := backupOf(t, src)
	dst := pgtest.Database(t)
	r, err := backup.Open(bytes.NewReader(file), migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Meta.Heads) != 2 || r.Meta.Heads[0].Sandbox != "orders" || r.Meta.Heads[0].Version != 1 || r.Meta.Heads[1].Version != 0 {
		t.Fatalf("heads %+v, want orders at 1 and support at 0", r.Meta.Heads)
	}
	if err := postgres.Restore(t.Context(), dst, r); err != nil {
		t.Fatal(err)
	}
	want, got := tables(t, src), tables(t, dst)
	if len(got) != len(want) {
		t.Fatalf("restored tables %v, the source's %v", keys(got), keys(want))
	}
	for name, rows := range want {
		if got[name] != rows {
			t.Errorf("table %s: restored\n%s\nthe source's\n%s", name, got[name], rows)
		}
	}
	if !strings.Contains(want["held_calls"], "refund") || !strings.Contains(want["held_call_approvals"], "olive") {
		t.Errorf("the held calls are not in the backup: %v", keys(want))
	}
	if !strings.Contains(want["sentry_events_"+strings.ReplaceAll(r.Meta.TakenAt.Format("2006-01-02"), "-", "")], "node-1-3") {
		t.Errorf("the events are not in today's partition: %v", keys(want))
	}

	// A second restore is refused and writes nothing.
	r, err = backup.Open(bytes.NewReader(file), migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Restore(t.Context(), dst, r); !errors.Is(err, backup.ErrRefused) || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore into a restored database: %v, want refused as not empty", err)
	}
	if again := tables(t, dst); !maps.Equal(again, got) {
		t.Fatal("the refused restore changed the database")
	}
	withStore(t, dst, func(st *store.Store) {
		storetest.MustCreate(t, st, "more", true)
		p := storetest.InsertProposal(t, st, storetest.ProposalN("more", 1))
		if p.ID != 2 {
			t.Fatalf("the restored database's next proposal id is %d, want 2", p.ID)
		}
	})
}

func withStore(t *testing.T, url string, fn func(*store.Store)) {
	t.Helper()
	d, err := postgres.Open(t.Context(), url, postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fn(store.New(d))
}

// backupOf returns a backup of the database at url.
func backupOf(t *testing.T, url string) []byte {
	t.Helper()
	meta, files, err := postgres.Backup(t.Context(), url, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := backup.Write(&buf, meta, files); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tables returns every table's rows (COPY text, sorted) of the database at
// url, by table name.
func tables(t *testing.T, url string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	meta, files, err := postgres.Backup(t.Context(), url, dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for i, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.Base(f.Path)))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		slices.Sort(lines)
		out[meta.Tables[i].Name] = strings.Join(lines, "\n")
	}
	return out
}

func keys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// TestRestoreRefusesForeignTables: a backup's table list is input, not
// trusted. A partition bound with SQL after it, a table this schema does
// not make, and a partition of a table that is not partitioned are each
// refused, and nothing is written (the database stays empty of rows and
// of the named tables).
func TestRestoreRefusesForeignTables(t *testing.T) {
	src := pgtest.Database(t)
	withStore(t, src, func(st *store.Store) { storetest.MustCreate(t, st, "orders", true) })
	meta, files, err := postgres.Backup(t.Context(), src, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	partition := slices.IndexFunc(meta.Tables, func(tb backup.Table) bool { return tb.Parent != "" })
	if partition < 0 {
		t.Fatal("the backup has no partition to tamper with")
	}
	for name, tamper := range map[string]func(m *backup.Meta){
		"SQL after the bound": func(m *backup.Meta) {
			m.Tables[partition].Bound += "; CREATE TABLE pwned (x int)"
		},
		"a table the schema does not make": func(m *backup.Meta) {
			m.Tables = append(m.Tables, backup.Table{Name: "pwned"})
		},
		"a partition of an unpartitioned table": func(m *backup.Meta) {
			m.Tables[partition].Parent = "tokens"
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := meta
			m.Tables = slices.Clone(meta.Tables)
			tamper(&m)
			var buf bytes.Buffer
			if err := backup.Write(&buf, m, files); err != nil {
				t.Fatal(err)
			}
			r, err := backup.Open(&buf, migrations.Postgres)
			if err != nil {
				t.Fatal(err)
			}
			dst := pgtest.Database(t)
			if err := postgres.Restore(t.Context(), dst, r); !errors.Is(err, backup.ErrRefused) {
				t.Fatalf("restore of a tampered backup: %v, want refused", err)
			}
			for table, rows := range tables(t, dst) {
				if table == "pwned" || rows != "" && table != "audit_head" {
					t.Errorf("the refused restore wrote table %s: %q", table, rows)
				}
			}
		})
	}
}
