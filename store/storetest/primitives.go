package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- Tx primitives, on the driver itself ----
//
// The Store methods above are written once over these; the tests here pin
// what each driver must give them.

// inTx runs fn in one transaction of s's driver and fails the test on an
// error.
func inTx(t *testing.T, s *store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := s.InTx(ctx(t), fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

func testPrimVersionDuplicate(t *testing.T, s *store.Store) {
	MustCreate(t, s, "dup", true)
	v1 := getVersion(t, s, "dup", 1)
	err := s.InTx(ctx(t), func(tx store.Tx) error { return tx.InsertPolicyVersion(ctx(t), v1) })
	WantErr(t, "InsertPolicyVersion(existing version) in InTx", err, store.ErrAlreadyExists)
	WantErr(t, "InsertPolicyVersion(existing version)", s.Driver.InsertPolicyVersion(ctx(t), v1), store.ErrAlreadyExists)
	v1.Sandbox = "nobody"
	WantErr(t, "InsertPolicyVersion(unknown sandbox)", s.Driver.InsertPolicyVersion(ctx(t), v1), store.ErrNotFound)
	if vs := Versions(t, s, "dup"); len(vs) != 1 {
		t.Errorf("versions after refused inserts = %d, want 1", len(vs))
	}
}

func getVersion(t *testing.T, s *store.Store, sandbox string, version int64) store.PolicyVersion {
	t.Helper()
	pv, err := s.GetPolicyVersion(ctx(t), sandbox, version)
	return must(t, pv, err, "GetPolicyVersion(%q, %d)", sandbox, version)
}

func testPrimLockUpdateSandbox(t *testing.T, s *store.Store) {
	MustCreate(t, s, "lock", true)
	var want store.Sandbox
	inTx(t, s, func(tx store.Tx) error {
		sb, err := tx.LockSandbox(ctx(t), "lock")
		if err != nil {
			return err
		}
		at := tx.Now()
		sb.CurrentVersion, sb.CurrentHash = 7, "seven"
		sb.Boundary, sb.BoundaryHash = []byte(`{"version":1}`), "bh"
		sb.CredentialedHosts = []string{"a.example.com:443", "b.example.com:443"}
		sb.Frozen, sb.FrozenReason, sb.FrozenBy, sb.FrozenAt, sb.FrozenFrom = true, "why", "alice", &at, 6
		want = sb
		return tx.UpdateSandbox(ctx(t), sb)
	})
	if got := GetSandbox(t, s, "lock"); !reflect.DeepEqual(got, want) {
		t.Errorf("sandbox after UpdateSandbox =\n%+v\nwant\n%+v", got, want)
	}
	inTx(t, s, func(tx store.Tx) error { // and back to none
		sb, err := tx.LockSandbox(ctx(t), "lock")
		if err != nil {
			return err
		}
		sb.Boundary, sb.BoundaryHash, sb.CredentialedHosts = nil, "", nil
		sb.Frozen, sb.FrozenReason, sb.FrozenBy, sb.FrozenAt, sb.FrozenFrom = false, "", "", nil, 0
		want = sb
		return tx.UpdateSandbox(ctx(t), sb)
	})
	if got := GetSandbox(t, s, "lock"); !reflect.DeepEqual(got, want) {
		t.Errorf("sandbox after clearing =\n%+v\nwant\n%+v", got, want)
	}
	err := s.InTx(ctx(t), func(tx store.Tx) error {
		_, err := tx.LockSandbox(ctx(t), "nobody")
		return err
	})
	WantErr(t, "LockSandbox(unknown)", err, store.ErrNotFound)
	err = s.InTx(ctx(t), func(tx store.Tx) error { return tx.UpdateSandbox(ctx(t), store.Sandbox{Name: "nobody"}) })
	WantErr(t, "UpdateSandbox(unknown)", err, store.ErrNotFound)
}

func testPrimListProposals(t *testing.T, s *store.Store) {
	MustCreate(t, s, "one", true)
	MustCreate(t, s, "two", true)
	soon := time.Now().Add(time.Hour).UTC()
	in1 := ProposalN("one", 1)
	in1.IdempotencyKey = "idem-1"
	in1.ExpiresAt = soon
	p1 := InsertProposal(t, s, in1)
	p2 := InsertProposal(t, s, ProposalN("one", 2))
	in3 := ProposalN("two", 3)
	in3.ExpiresAt = soon.Add(time.Hour)
	p3 := InsertProposal(t, s, in3)
	p2 = setStatus(t, s, p2.ID, store.ProposalPending, store.ProposalRejected)
	for _, tc := range []struct {
		name    string
		sandbox string
		want    error
	}{{"taken idempotency key", "one", store.ErrAlreadyExists}, {"unknown sandbox", "nobody", store.ErrNotFound}} {
		err := s.InTx(ctx(t), func(tx store.Tx) error {
			p := in1
			p.Sandbox, p.Status, p.CreatedAt, p.UpdatedAt = tc.sandbox, store.ProposalPending, tx.Now(), tx.Now()
			_, err := tx.InsertProposal(ctx(t), p)
			return err
		})
		WantErr(t, "InsertProposal("+tc.name+")", err, tc.want)
	}

	for _, tc := range []struct {
		name string
		f    store.ProposalFilter
		want []store.Proposal
	}{
		{"all", store.ProposalFilter{}, []store.Proposal{p3, p2, p1}},
		{"sandbox", store.ProposalFilter{Sandbox: "one"}, []store.Proposal{p2, p1}},
		{"status", store.ProposalFilter{Status: store.ProposalPending}, []store.Proposal{p3, p1}},
		{"idempotency key", store.ProposalFilter{IdempotencyKey: "idem-1"}, []store.Proposal{p1}},
		{"idempotency key of another sandbox", store.ProposalFilter{Sandbox: "two", IdempotencyKey: "idem-1"}, nil},
		{"dedupe key", store.ProposalFilter{DedupeKey: p2.DedupeKey}, []store.Proposal{p2}},
		{"expires before", store.ProposalFilter{ExpiresBefore: soon.Add(time.Minute)}, []store.Proposal{p1}},
		{"expires before, none set", store.ProposalFilter{ExpiresBefore: soon.Add(-time.Minute)}, nil},
		{"expires before, both", store.ProposalFilter{ExpiresBefore: soon.Add(2 * time.Hour)}, []store.Proposal{p3, p1}},
		{"limit", store.ProposalFilter{Limit: 2}, []store.Proposal{p3, p2}},
		{"sandbox and status", store.ProposalFilter{Sandbox: "one", Status: store.ProposalRejected}, []store.Proposal{p2}},
	} {
		got := ListProposals(t, s, tc.f)
		if len(got) != len(tc.want) {
			t.Errorf("%s: ListProposals = %v, want %v", tc.name, ProposalIDs(got), ProposalIDs(tc.want))
			continue
		}
		for i := range got {
			WantSameProposal(t, tc.name, got[i], tc.want[i])
		}
	}

	count := func(sandbox string, since time.Time) int {
		t.Helper()
		n, err := s.CountProposals(ctx(t), sandbox, since)
		return must(t, n, err, "CountProposals")
	}
	if n := count("one", p1.CreatedAt.Add(-time.Second)); n != 2 {
		t.Errorf("CountProposals(one, before both) = %d, want 2", n)
	}
	if n := count("one", p2.CreatedAt); n != 0 {
		t.Errorf("CountProposals(one, at the newest) = %d, want 0 (created strictly after)", n)
	}
	if n := count("nobody", time.Time{}); n != 0 {
		t.Errorf("CountProposals(unknown) = %d, want 0", n)
	}

	// Pending: p1 and p3 (p2 was rejected), p1 the older.
	pending, err := s.CountPendingProposals(ctx(t), []time.Time{p1.CreatedAt, p3.CreatedAt.Add(time.Second)})
	pending = must(t, pending, err, "CountPendingProposals")
	if pending.Total != 2 || len(pending.Before) != 2 || pending.Before[0] != 0 || pending.Before[1] != 2 || !pending.Oldest.Equal(p1.CreatedAt) {
		t.Errorf("CountPendingProposals = %+v, want 2 in all, [0 2] before (strictly), oldest %v", pending, p1.CreatedAt)
	}
}

// setStatus moves proposal id from status from to to through the Tx
// primitives.
func setStatus(t *testing.T, s *store.Store, id int64, from, to string) store.Proposal {
	t.Helper()
	var out store.Proposal
	err := s.InTx(ctx(t), func(tx store.Tx) error {
		p, err := tx.GetProposal(ctx(t), id)
		if err != nil {
			return err
		}
		if p.Status != from {
			return fmt.Errorf("proposal %d is %s, not %s", id, p.Status, from)
		}
		p.Status, p.StatusReason, p.UpdatedAt = to, "test", tx.Now()
		if err := tx.UpdateProposal(ctx(t), p); err != nil {
			return err
		}
		out, err = tx.GetProposal(ctx(t), id)
		return err
	})
	return must(t, out, err, "set status of proposal %d to %s", id, to)
}

func testPrimUpdateProposal(t *testing.T, s *store.Store) {
	MustCreate(t, s, "upd", true)
	p := InsertProposal(t, s, ProposalN("upd", 1))
	var want store.Proposal
	inTx(t, s, func(tx store.Tx) error {
		got, err := tx.GetProposal(ctx(t), p.ID)
		if err != nil {
			return err
		}
		at := tx.Now()
		got.Status, got.StatusReason = store.ProposalApplied, "done"
		got.BaseVersion, got.BaseHash = 5, "base-5"
		got.Resulting, got.ResultingHash = []byte(`{"version":5}`), "res-5"
		got.Findings, got.RebaseError, got.SupersededBy = []byte(`{"n":5}`), "none", 99
		got.UpdatedAt, got.DecidedAt, got.DecidedBy = at, &at, "bob"
		got.AppliedVersion, got.GrantExpiresAt = 6, at.Add(time.Hour)
		want = got
		return tx.UpdateProposal(ctx(t), got)
	})
	WantSameProposal(t, "proposal after UpdateProposal", GetProposal(t, s, p.ID), want)
	err := s.InTx(ctx(t), func(tx store.Tx) error {
		return tx.UpdateProposal(ctx(t), store.Proposal{ID: p.ID + 1000, Status: store.ProposalPending})
	})
	WantErr(t, "UpdateProposal(unknown)", err, store.ErrNotFound)

	a := store.Approval{Approver: "carol", Reason: "ok", ResultingHash: "res-5"}
	inTx(t, s, func(tx store.Tx) error {
		a.CreatedAt = tx.Now()
		return tx.InsertApproval(ctx(t), p.ID, a)
	})
	err = s.InTx(ctx(t), func(tx store.Tx) error { return tx.InsertApproval(ctx(t), p.ID, a) })
	WantErr(t, "InsertApproval(same approver)", err, store.ErrAlreadyExists)
	err = s.InTx(ctx(t), func(tx store.Tx) error { return tx.InsertApproval(ctx(t), p.ID+1000, a) })
	WantErr(t, "InsertApproval(unknown proposal)", err, store.ErrNotFound)
	if got := GetProposal(t, s, p.ID).Approvals; !reflect.DeepEqual(got, []store.Approval{a}) {
		t.Errorf("approvals = %+v, want %+v", got, []store.Approval{a})
	}
}

func testPrimSandboxCA(t *testing.T, s *store.Store) {
	MustCreate(t, s, "ca", false)
	var first store.SandboxCA
	for i, writer := range []string{"first", "second"} {
		ca := store.SandboxCA{Sandbox: "ca", CertPEM: []byte("cert-" + writer), KeyPEM: []byte("key-" + writer)}
		var got store.SandboxCA
		inTx(t, s, func(tx store.Tx) error {
			ca.CreatedAt = tx.Now()
			var err error
			got, err = tx.InsertSandboxCA(ctx(t), ca)
			return err
		})
		if i == 0 {
			first = ca
		}
		if !reflect.DeepEqual(got, first) {
			t.Errorf("InsertSandboxCA by the %s writer = %+v, want the first writer's %+v", writer, got, first)
		}
	}
	_, err := s.Driver.InsertSandboxCA(ctx(t), store.SandboxCA{Sandbox: "nobody", CertPEM: []byte("c"), KeyPEM: []byte("k")})
	WantErr(t, "InsertSandboxCA(unknown sandbox)", err, store.ErrNotFound)
}

// testPrimNow: Now is read once per transaction, in UTC, at the precision
// the engine stores (a time written with it reads back equal).
func testPrimNow(t *testing.T, s *store.Store) {
	var first, second time.Time
	inTx(t, s, func(tx store.Tx) error {
		first = tx.Now()
		time.Sleep(2 * time.Millisecond) // a clock read twice would move
		second = tx.Now()
		return tx.InsertSandbox(ctx(t), store.Sandbox{Name: "now", CreatedAt: first, CreatedBy: "alice"})
	})
	if !first.Equal(second) {
		t.Errorf("Now moved within one transaction: %v then %v", first, second)
	}
	Recent(t, "Now", first)
	if got := GetSandbox(t, s, "now").CreatedAt; !got.Equal(first) {
		t.Errorf("CreatedAt written with Now reads back %v, want %v (Now finer than the engine stores)", got, first)
	}
}

// testPrimCommitFeed: a version inserted in InTx is heard once its
// transaction commits, with its row as stored, and nothing is heard of a
// rolled-back one. Drivers may repeat a version (Postgres hears its own
// NOTIFY too).
func testPrimCommitFeed(t *testing.T, s *store.Store) {
	MustCreate(t, s, "feed", true)
	MustCreate(t, s, "rolled", true)
	lctx, cancel := context.WithCancel(ctx(t))
	heard := make(chan store.Commit, 1024)
	done := make(chan error, 1)
	go func() {
		done <- s.ListenPolicyCommits(lctx, func(c store.Commit) { heard <- c })
	}()
	key := func(c store.Commit) [2]any { return [2]any{c.Sandbox, c.Version} }
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("ListenPolicyCommits returned %v, want context.Canceled", err)
		}
	}()
	deadline := time.After(30 * time.Second)
	// wait hears versions until it hears (sandbox, version), and returns
	// what it heard before, and that.
	wait := func(sandbox string, version int64) ([][2]any, store.Commit) {
		t.Helper()
		var before [][2]any
		for {
			select {
			case h := <-heard:
				if key(h) == [2]any{sandbox, version} {
					return before, h
				}
				before = append(before, key(h))
			case <-deadline:
				t.Fatalf("did not hear version %d of %q; heard %v", version, sandbox, before)
			}
		}
	}
	// The listener starts at some point: commit versions until one is
	// heard.
	version := int64(1)
	for ready := false; !ready; {
		version = MustAppend(t, s, "feed", version, int(version)+1).Version
		for waiting := true; waiting && !ready; {
			select {
			case h := <-heard:
				ready = key(h) == [2]any{"feed", version}
			case <-time.After(50 * time.Millisecond):
				waiting = false
			case <-deadline:
				t.Fatal("ListenPolicyCommits heard no commit")
			}
		}
	}

	var inside bool
	inTx(t, s, func(tx store.Tx) error {
		d, h := Doc(int(version) + 1)
		v, err := store.AppendVersion(ctx(t), tx, store.AppendPolicy{
			Sandbox: "feed", ExpectedVersion: version, Hash: h, Document: d, Author: "alice",
		})
		if err != nil {
			return err
		}
		select { // not before the commit
		case h := <-heard:
			inside = key(h) == [2]any{"feed", v.Version}
		case <-time.After(100 * time.Millisecond):
		}
		return nil
	})
	if inside {
		t.Error("a version was heard before its transaction committed")
	}
	version++
	_, c := wait("feed", version)
	// The first announcement of a version this process committed is its
	// own, with the row: a listener need not read it back.
	if want := getVersion(t, s, "feed", version); c.Inserted == nil {
		t.Error("a version committed in process was heard without its row")
	} else if got := *c.Inserted; got.Sandbox != want.Sandbox || got.Version != want.Version || got.Hash != want.Hash ||
		!bytes.Equal(got.Document, want.Document) || got.Author != want.Author || got.Source != want.Source ||
		!maps.Equal(got.Provenance, want.Provenance) || !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("heard row %+v, stored %+v", got, want)
	}

	rollback := errors.New("roll back")
	err := s.InTx(ctx(t), func(tx store.Tx) error {
		v := getVersion(t, s, "rolled", 1)
		v.Version = 2
		if err := tx.InsertPolicyVersion(ctx(t), v); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatalf("InTx = %v, want fn's error", err)
	}
	version = MustAppend(t, s, "feed", version, int(version)+1).Version
	if before, _ := wait("feed", version); slices.Contains(before, [2]any{"rolled", int64(2)}) {
		t.Errorf("heard a rolled-back version: %v", before)
	}

	// InTxEnforceFirst: the same contract, and what it returned from is
	// stored; a rolled-back one is neither heard nor stored.
	err = s.InTxEnforceFirst(ctx(t), func(tx store.Tx) error {
		v := getVersion(t, s, "rolled", 1)
		v.Version = 2
		if err := tx.InsertPolicyVersion(ctx(t), v); err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatalf("InTxEnforceFirst = %v, want fn's error", err)
	}
	err = s.InTxEnforceFirst(ctx(t), func(tx store.Tx) error {
		d, h := Doc(int(version) + 1)
		_, err := store.AppendVersion(ctx(t), tx, store.AppendPolicy{
			Sandbox: "feed", ExpectedVersion: version, Hash: h, Document: d, Author: "alice",
		})
		return err
	})
	if err != nil {
		t.Fatalf("InTxEnforceFirst: %v", err)
	}
	version++
	if before, _ := wait("feed", version); slices.Contains(before, [2]any{"rolled", int64(2)}) {
		t.Errorf("heard a rolled-back version: %v", before)
	}
	if got := getVersion(t, s, "feed", 0).Version; got != version {
		t.Errorf("current version after InTxEnforceFirst = %d, want %d", got, version)
	}
	if _, err := s.GetPolicyVersion(ctx(t), "rolled", 2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("rolled-back version 2 of %q: %v, want ErrNotFound", "rolled", err)
	}
}
