package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/storetest"
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
	_, err = storetest.AppendVersion(c, st, store.AppendPolicy{Sandbox: "box", Hash: "h", Document: []byte("{}")})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, store.ErrConflict) {
		t.Fatalf("AppendVersion behind a lock past its deadline: %v, want context.DeadlineExceeded", err)
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

// TestRefusalLeavesTxUsable: the refusals a workflow may expect from the
// Insert primitives (a taken key, a token for a missing sandbox) do not
// abort the Postgres transaction, as they do not on SQLite: the caller
// may go on, and what it wrote before and after commits.
func TestRefusalLeavesTxUsable(t *testing.T) {
	s := openInternal(t)
	ctx := t.Context()
	taken := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrAlreadyExists) {
			t.Errorf("%s again: %v, want ErrAlreadyExists", what, err)
		}
	}
	err := s.InTx(ctx, func(tx store.Tx) error {
		now := tx.Now()
		sb := store.Sandbox{Name: "box", CurrentVersion: 1, CurrentHash: "h", CreatedAt: now, CreatedBy: "a"}
		if err := tx.InsertSandbox(ctx, sb); err != nil {
			return err
		}
		taken("InsertSandbox", tx.InsertSandbox(ctx, sb))
		v := store.PolicyVersion{Sandbox: "box", Version: 1, Hash: "h", Document: []byte(`{}`), Source: store.SourceSet, CreatedAt: now}
		if err := tx.InsertPolicyVersion(ctx, v); err != nil {
			return err
		}
		taken("InsertPolicyVersion", tx.InsertPolicyVersion(ctx, v))
		tok := store.Token{Name: "t", Role: store.RoleSandbox, Sandbox: "box", Hash: "h1", CreatedBy: "a", CreatedAt: now}
		if _, err := tx.InsertToken(ctx, tok); err != nil {
			return err
		}
		tok.Hash = "h2"
		_, err := tx.InsertToken(ctx, tok)
		taken("InsertToken", err)
		tok.Name, tok.Sandbox = "u", "nobox"
		if _, err := tx.InsertToken(ctx, tok); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("InsertToken for a missing sandbox: %v, want ErrNotFound", err)
		}
		p := store.Proposal{Sandbox: "box", Status: store.ProposalPending, IdempotencyKey: "k", Document: []byte(`{}`), CreatedAt: now, UpdatedAt: now}
		if p, err = tx.InsertProposal(ctx, p); err != nil {
			return err
		}
		_, err = tx.InsertProposal(ctx, p)
		taken("InsertProposal", err)
		a := store.Approval{Approver: "carol", ResultingHash: "r", CreatedAt: now}
		if err := tx.InsertApproval(ctx, p.ID, a); err != nil {
			return err
		}
		taken("InsertApproval", tx.InsertApproval(ctx, p.ID, a))
		ap := store.ApprovalPolicy{Version: 1, Module: "m", Hash: "mh", Author: "a", CreatedAt: now}
		if err := tx.InsertApprovalPolicy(ctx, ap); err != nil {
			return err
		}
		taken("InsertApprovalPolicy", tx.InsertApprovalPolicy(ctx, ap))
		sb.CredentialedHosts = []string{"example.com:443"}
		return tx.UpdateSandbox(ctx, sb)
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	if sb, err := s.GetSandbox(ctx, "box"); err != nil || len(sb.CredentialedHosts) != 1 {
		t.Errorf("sandbox after the transaction = %+v, %v; want its last update committed", sb, err)
	}
	if p, err := s.ListProposals(ctx, store.ProposalFilter{IdempotencyKey: "k"}); err != nil || len(p) != 1 || len(p[0].Approvals) != 1 {
		t.Errorf("proposals = %+v, %v; want the one, with its approval", p, err)
	}
}

// TestNowIsTransactionStart: Tx.Now is the database's clock at the
// transaction's start, in microseconds, the same on every call.
func TestNowIsTransactionStart(t *testing.T) {
	s := openInternal(t)
	ctx := t.Context()
	err := s.InTx(ctx, func(tx store.Tx) error {
		first := tx.Now()
		time.Sleep(2 * time.Millisecond)
		var db time.Time
		if err := tx.(*txn).db.QueryRow(ctx, `SELECT now()`).Scan(&db); err != nil {
			return err
		}
		if again := tx.Now(); !again.Equal(first) || !first.Equal(db) || first.Location() != time.UTC ||
			first.Nanosecond()%1000 != 0 {
			t.Errorf("Now = %v then %v, database now() %v; want one UTC time in microseconds", first, again, db)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLostConnectionIsUnavailable: a database out of reach — no server
// on the port, or a connection the server ended as a restart does — is
// store.ErrUnavailable (the gateway answers Unavailable, the CLI exits 4),
// never an internal error; and the pool's next connection works. The
// Postgres restart drill (drills/gateway) saw every call during an
// outage answered "internal error".
func TestLostConnectionIsUnavailable(t *testing.T) {
	ctx := t.Context()
	_, err := pgconn.Connect(ctx, "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=5")
	if err == nil || !errors.Is(mapErr(err), store.ErrUnavailable) {
		t.Errorf("connect to a closed port: %v, mapped %v; want ErrUnavailable", err, mapErr(err))
	}
	for _, e := range []error{context.Canceled, context.DeadlineExceeded, errors.New("syntax")} {
		if errors.Is(mapErr(e), store.ErrUnavailable) {
			t.Errorf("mapErr(%v) is ErrUnavailable", e)
		}
	}

	s, err := Open(ctx, pgtest.Database(t), Config{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	st := store.New(s)
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := c.Conn().PgConn().PID()
	c.Release()
	admin, err := pgx.Connect(ctx, s.pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	_, err = st.ListSandboxes(ctx)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a call on a connection the server ended: %v, want ErrUnavailable", err)
	}
	if _, err := st.ListSandboxes(ctx); err != nil {
		t.Errorf("the call after: %v, want a new connection", err)
	}
}

// TestFlushMakesEarlierCommitsDurable: a commit made with
// synchronous_commit off (as InTxEnforceFirst's) is on disk once flush
// returns — the log is flushed past its commit record.
func TestFlushMakesEarlierCommitsDurable(t *testing.T) {
	s := openInternal(t)
	ctx := t.Context()
	for i := range 20 {
		var committed string
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO sandboxes (name, created_by) VALUES ($1, 'tester')`, "flush-"+string(rune('a'+i)))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// The log's end now lies past the commit record.
		if err := s.pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&committed); err != nil {
			t.Fatal(err)
		}
		if err := s.flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		var durable bool
		if err := s.pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn`, committed).Scan(&durable); err != nil {
			t.Fatal(err)
		}
		if !durable {
			t.Fatalf("round %d: the log is not flushed past %s after flush returned", i, committed)
		}
	}
}
