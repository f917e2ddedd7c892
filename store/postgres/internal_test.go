package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
)

func openInternal(t *testing.T) *Driver {
	t.Helper()
	s, err := Open(t.Context(), pgtest.Database(t), Config{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitLockedOrDone returns when done has a result (returned) or a backend
// of this database is waiting for a lock (nil, false).
func waitLockedOrDone(t *testing.T, s *Driver, done <-chan error) (error, bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err, true
		case <-deadline:
			t.Fatal("neither finished nor blocked on a lock within 10s")
		case <-tick.C:
			var n int
			if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return nil, false
			}
		}
	}
}

// TestContextDeadline checks a call stuck behind a lock gives up when its
// context ends and says so (the gateway maps it to DeadlineExceeded, not to
// an internal error or a conflict).
func TestContextDeadline(t *testing.T) {
	s := openInternal(t)
	st := store.New(s)
	ctx := t.Context()
	if _, err := st.CreateSandbox(ctx, store.CreateSandbox{Name: "box", Actor: "a", Token: store.Token{Name: "t", Hash: "h"}}); err != nil {
		t.Fatal(err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `UPDATE sandboxes SET created_by = 'x' WHERE name = 'box'`); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = st.AppendPolicyVersion(c, store.AppendPolicy{Sandbox: "box", Hash: "h", Document: []byte("{}")})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrConflict) {
		t.Fatalf("AppendPolicyVersion behind a lock past its deadline: %v, want context.DeadlineExceeded", err)
	}
}

// TestCreateTokenRacingDelete: a sandbox token created while its sandbox is
// being deleted must not survive live. tokens.sandbox has no foreign key,
// so the existence check must lock the sandbox row; otherwise the delete
// revokes the tokens it sees, the new one commits after it, and a live
// token is left that would open a later sandbox of the same name.
func TestCreateTokenRacingDelete(t *testing.T) {
	s := openInternal(t)
	st := store.New(s)
	ctx := t.Context()
	if _, err := st.CreateSandbox(ctx, store.CreateSandbox{Name: "box", Actor: "a", Token: store.Token{Name: "first", Hash: "h1"}}); err != nil {
		t.Fatal(err)
	}
	// The token's transaction stays open, its insert done, until commit
	// is closed.
	late := store.Token{Name: "late", Role: store.RoleSandbox, Sandbox: "box", Hash: "h-late", CreatedBy: "a"}
	inserted, commit, committed := make(chan error, 1), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	release := func() { once.Do(func() { close(commit) }) }
	defer release()
	go func() {
		committed <- s.InTx(ctx, func(tx store.Tx) error {
			_, err := tx.InsertToken(ctx, late)
			inserted <- err
			<-commit
			return err
		})
	}()
	if err := <-inserted; err != nil {
		release()
		t.Fatalf("InsertToken: %v", err)
	}

	done := make(chan error, 1)
	go func() { done <- st.DeleteSandbox(ctx, "box", "carol") }()
	delErr, finished := waitLockedOrDone(t, s, done)
	release()
	if err := <-committed; err != nil {
		t.Fatalf("commit token: %v", err)
	}
	if !finished {
		delErr = <-done
	}
	if delErr != nil {
		t.Fatalf("DeleteSandbox: %v", delErr)
	}
	got, err := st.TokenByHash(ctx, late.Hash)
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	if got.RevokedAt == nil {
		t.Errorf("token created during the delete of its sandbox is live: %+v", got)
	}
}
