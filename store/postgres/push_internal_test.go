package postgres

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

func testKey(t *testing.T) store.SigningKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return store.SigningKey{ID: hex.EncodeToString(pub[:8]), PublicKey: pub, PrivateKey: priv}
}

func TestParsePolicyPayload(t *testing.T) {
	for _, tc := range []struct {
		in      string
		sandbox string
		version int64
		ok      bool
	}{
		{policyPayload("box", 7), "box", 7, true},
		{"a:b:12", "a:b", 12, true},
		{"box", "", 0, false},
		{":3", "", 0, false},
		{"box:", "", 0, false},
		{"box:x", "", 0, false},
		{"box:0", "", 0, false},
		{"box:-1", "", 0, false},
	} {
		sb, v, ok := parsePolicyPayload(tc.in)
		if sb != tc.sandbox || v != tc.version || ok != tc.ok {
			t.Errorf("parsePolicyPayload(%q) = %q, %d, %v; want %q, %d, %v", tc.in, sb, v, ok, tc.sandbox, tc.version, tc.ok)
		}
	}
}

// TestAddSigningKeyRace: a replica that checked the newest key while
// another's append was still uncommitted must lose on the unique seq, not
// append a second key after the same one.
func TestAddSigningKeyRace(t *testing.T) {
	s := openInternal(t)
	st := store.New(s)
	ctx := t.Context()
	first := testKey(t)
	if _, err := st.AddSigningKey(ctx, first, "", "boot"); err != nil {
		t.Fatal(err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	other := testKey(t)
	if _, err := tx.Exec(ctx, `INSERT INTO signing_keys (id, seq, public_key, private_key) VALUES ($1, 2, $2, $3)`,
		other.ID, other.PublicKey, other.PrivateKey); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := st.AddSigningKey(ctx, testKey(t), first.ID, "replica-2")
		done <- err
	}()
	addErr, finished := waitLockedOrDone(t, s, done)
	if finished {
		t.Fatalf("AddSigningKey did not wait for the uncommitted key: %v", addErr)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, store.ErrConflict) {
		t.Fatalf("AddSigningKey racing an append after the same key: %v, want ErrConflict", err)
	}
	ks, err := s.SigningKeys(ctx)
	if err != nil || len(ks) != 2 || ks[1].ID != other.ID {
		t.Errorf("keys after the race = %+v, %v; want the first and the other replica's", ks, err)
	}
}

// TestSigningKeysImmutable: the database itself refuses to change or drop
// a signing key, whoever connects.
func TestSigningKeysImmutable(t *testing.T) {
	s := openInternal(t)
	ctx := t.Context()
	if _, err := store.New(s).AddSigningKey(ctx, testKey(t), "", "boot"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE signing_keys SET endorsement = '\x00'`,
		`DELETE FROM signing_keys`,
	} {
		if _, err := s.pool.Exec(ctx, q); err == nil {
			t.Errorf("%s succeeded, want refused", q)
		}
	}
	if ks, err := s.SigningKeys(ctx); err != nil || len(ks) != 1 || ks[0].Endorsement != nil {
		t.Errorf("keys = %+v, %v; want the one stored, unchanged", ks, err)
	}
}

// TestSaveProxyStatusesRacingDelete: a status saved while its sandbox is
// being deleted is skipped, not a foreign key error failing the batch.
func TestSaveProxyStatusesRacingDelete(t *testing.T) {
	s := openInternal(t)
	ctx := t.Context()
	for _, name := range []string{"doomed", "kept"} {
		if _, err := store.New(s).CreateSandbox(ctx, store.CreateSandbox{Name: name, Actor: "a", Token: store.Token{Name: name, Hash: name}}); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `DELETE FROM sandboxes WHERE name = 'doomed'`); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		done <- s.SaveProxyStatuses(ctx, []store.ProxyStatus{
			{Sandbox: "doomed", ProxyID: "p1"}, {Sandbox: "kept", ProxyID: "p1"},
		})
	}()
	saveErr, finished := waitLockedOrDone(t, s, done)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !finished {
		saveErr = <-done
	}
	if saveErr != nil {
		t.Fatalf("SaveProxyStatuses racing DeleteSandbox: %v", saveErr)
	}
	ps, err := s.ListProxyStatuses(ctx, "")
	if err != nil || len(ps) != 1 || ps[0].Sandbox != "kept" {
		t.Errorf("statuses = %+v, %v; want only the kept sandbox's", ps, err)
	}
}

// TestListenSurvivesIdleChecks: an idle listening connection is pinged,
// and stays the one listening.
func TestListenSurvivesIdleChecks(t *testing.T) {
	idle := listenIdleCheck
	listenIdleCheck = 20 * time.Millisecond
	t.Cleanup(func() { listenIdleCheck = idle })
	s := openInternal(t)
	ctx, cancel := context.WithCancel(t.Context())
	heard := make(chan int64, 10)
	done := make(chan error, 1)
	go func() {
		done <- s.ListenPolicyCommits(ctx, func(c store.Commit) { heard <- c.Version })
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("ListenPolicyCommits: %v, want context.Canceled", err)
		}
	}()
	st := store.New(s)
	if _, err := st.CreateSandbox(ctx, store.CreateSandbox{Name: "box", Actor: "a", Token: store.Token{Name: "t", Hash: "h"}}); err != nil {
		t.Fatal(err)
	}
	// backend waits until a backend (pid, or any when 0) last ran query,
	// and returns its pid.
	backend := func(pid int32, queries ...string) int32 {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			var got int32
			err := s.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
				WHERE datname = current_database() AND query = ANY($1) AND ($2 = 0 OR pid = $2)`, queries, pid).Scan(&got)
			if err == nil {
				return got
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("backend %d did not run %q within 10s", pid, queries)
			}
		}
	}
	// The listening connection: its last query is the LISTEN, or a ping
	// when the idle check (every 20 ms) ran since; under load a poll can
	// miss the LISTEN's short moment.
	pid := backend(0, "LISTEN portcullis_policy", "-- ping")
	for v := int64(1); v <= 3; v++ {
		backend(pid, "-- ping") // the same connection, pinged
		_, err := storetest.AppendVersion(ctx, st, store.AppendPolicy{Sandbox: "box", ExpectedVersion: v - 1, Hash: "h", Document: []byte("{}")})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-heard:
			if got != v {
				t.Fatalf("heard version %d, want %d", got, v)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("version %d not heard", v)
		}
	}
}
