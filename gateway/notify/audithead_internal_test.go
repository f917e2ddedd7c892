package notify

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// records passes on the "audit head" records a logger receives.
type records chan slog.Record

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r records) WithGroup(string) slog.Handler            { return r }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	if rec.Message == "audit head" {
		r <- rec
	}
	return nil
}

func attrs(rec slog.Record) map[string]any {
	out := map[string]any{}
	rec.Attrs(func(a slog.Attr) bool {
		out[a.Key] = a.Value.Any()
		return true
	})
	return out
}

// TestLogAuditHead: the head is logged at start and again after each
// change, with the seq and hash the store records, and not at polls that
// find it unmoved (the next record after a change would be a repeat).
func TestLogAuditHead(t *testing.T) {
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	defer st.Close()
	got := make(records, 16)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { LogAuditHead(ctx, st, slog.New(got), nil, 5*time.Millisecond) })
	defer wg.Wait()
	defer cancel()

	next := func() map[string]any {
		t.Helper()
		select {
		case rec := <-got:
			return attrs(rec)
		case <-time.After(10 * time.Second):
			t.Fatal("no audit head logged within 10s")
			return nil
		}
	}
	if a := next(); a["seq"] != int64(0) || a["hash"] != "" {
		t.Fatalf("first audit head logged = %v, want seq 0 and no hash", a)
	}
	for i, name := range []string{"a", "b"} {
		if _, err := st.CreateToken(ctx, store.Token{Name: name, Role: store.RoleOperator, Hash: "h" + name, CreatedBy: "t"}, "t"); err != nil {
			t.Fatal(err)
		}
		seq, hash, err := st.AuditHead(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a := next(); a["seq"] != seq || a["hash"] != hash || seq != int64(i+1) {
			t.Fatalf("audit head logged after change %d = %v, want seq %d hash %s", i+1, a, seq, hash)
		}
	}
}
