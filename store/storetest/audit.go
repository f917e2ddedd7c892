package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// AuditDB is a fresh store for the audit chain suite, with what an
// attacker holding the database's owner rights could do to it.
type AuditDB struct {
	Store *store.Store
	// Replica, if set, opens another store on the same database (a second
	// gateway replica), closed when the test ends. Nil for engines that
	// serve one replica.
	Replica func() *store.Store
	// Edit sets column (of audit_log) of the entry with seq to value,
	// going around the append-only triggers.
	Edit func(seq int64, column string, value any)
	// Delete removes the entry with seq, likewise.
	Delete func(seq int64)
}

// AuditHarness is what RunAudit needs of an engine.
type AuditHarness struct {
	// Open returns a new, empty store and its tampering hooks.
	Open func(t *testing.T) AuditDB
	// Legacy stores entries (Time, Actor, Action, Sandbox, Target, hashes,
	// Detail) as a binary from before the hash chain did — raw rows in a
	// new database at migration 3 — then opens a store on it, which must
	// chain them.
	Legacy func(t *testing.T, entries []store.AuditEntry) *store.Store
}

// RunAudit runs the audit chain suite. Subtests run in parallel.
func RunAudit(t *testing.T, h AuditHarness) {
	tests := []suiteTest[AuditHarness]{
		{"Chain", testAuditChain},
		{"ConcurrentWriters", testAuditConcurrent},
		{"EditedRow", testAuditEdited},
		{"EditedAndRehashed", testAuditRehashed},
		{"DeletedRow", testAuditDeleted},
		{"UpgradeChainsOldEntries", testAuditUpgrade},
	}
	runParallel(t, tests, func(*testing.T) AuditHarness { return h })
}

// someChanges makes audited changes of several kinds and returns how many
// entries they wrote.
func someChanges(t *testing.T, s *store.Store) int {
	t.Helper()
	MustCreate(t, s, "alpha", true) // sandbox, token, policy: 3
	MustAppend(t, s, "alpha", 1, 2) // 1
	if _, err := s.CreateToken(ctx(t), NewToken("olive", store.RoleOperator, ""), "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeToken(ctx(t), "olive", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateCredentialedHosts(ctx(t), "alpha", []string{"api.example.com:443"}, nil, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx(t), "alpha", "carol"); err != nil {
		t.Fatal(err)
	}
	return 8
}

func verify(t *testing.T, s *store.Store, page int) store.AuditVerification {
	t.Helper()
	v, err := store.VerifyAuditLog(ctx(t), s, page)
	return must(t, v, err, "VerifyAuditLog")
}

func wantVerified(t *testing.T, s *store.Store, entries int) store.AuditVerification {
	t.Helper()
	v := verify(t, s, 3)
	if v.Break != nil || v.Entries != int64(entries) {
		t.Fatalf("VerifyAuditLog = %d entries, break %v; want %d entries, no break", v.Entries, v.Break, entries)
	}
	seq, hash, err := s.AuditHead(ctx(t))
	if err != nil || seq != int64(entries) || hash != v.HeadHash {
		t.Fatalf("AuditHead = %d, %q, %v; want %d, %q", seq, hash, err, entries, v.HeadHash)
	}
	return v
}

func wantBreak(t *testing.T, s *store.Store, seq int64, problem string) {
	t.Helper()
	v := verify(t, s, 3)
	if v.Break == nil || v.Break.Seq != seq || v.Break.Problem != problem {
		t.Fatalf("VerifyAuditLog break = %v; want seq %d: %s", v.Break, seq, problem)
	}
	if v.Entries != seq-1 {
		t.Errorf("VerifyAuditLog entries before the break = %d, want %d", v.Entries, seq-1)
	}
}

func chain(t *testing.T, s *store.Store, after int64, limit int) []store.AuditEntry {
	t.Helper()
	es, err := s.AuditChain(ctx(t), after, limit)
	return must(t, es, err, "AuditChain(%d, %d)", after, limit)
}

func seqs(es []store.AuditEntry) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

func testAuditChain(t *testing.T, h AuditHarness) {
	db := h.Open(t)
	s := db.Store
	if seq, hash, err := s.AuditHead(ctx(t)); err != nil || seq != 0 || hash != "" {
		t.Fatalf("AuditHead of an empty log = %d, %q, %v; want 0, \"\"", seq, hash, err)
	}
	wantVerified(t, s, 0)

	n := someChanges(t, s)
	all := chain(t, s, 0, 0)
	if want := seqRange(1, n); !slices.Equal(seqs(all), want) {
		t.Fatalf("AuditChain seqs = %v, want %v", seqs(all), want)
	}
	prev := ""
	for _, e := range all {
		if e.PrevHash != prev || e.Hash != store.AuditHash(e) || len(e.Hash) != 64 {
			t.Fatalf("entry %d: prev %q hash %q; want prev %q and its own hash %q", e.Seq, e.PrevHash, e.Hash, prev, store.AuditHash(e))
		}
		Recent(t, "audit time", e.Time)
		prev = e.Hash
	}
	if got := chain(t, s, 2, 3); !slices.Equal(seqs(got), []int64{3, 4, 5}) {
		t.Errorf("AuditChain(2, 3) seqs = %v, want [3 4 5]", seqs(got))
	}
	if got := chain(t, s, int64(n), 10); len(got) != 0 {
		t.Errorf("AuditChain after the head = %v, want none", seqs(got))
	}
	// ListAudit returns the chain fields too, newest first.
	listed := Audits(t, s, store.AuditFilter{})
	slices.Reverse(listed)
	if len(listed) != n {
		t.Fatalf("ListAudit = %d entries, want %d", len(listed), n)
	}
	for i := range listed {
		if !sameEntry(listed[i], all[i]) {
			t.Errorf("ListAudit entry %d = %+v, AuditChain has %+v", i, listed[i], all[i])
		}
	}
	// The policy version of the sandbox created with one is in the chain
	// with its detail, which the hash covers.
	e := FindAudit(t, listed, store.ActionPolicySet, "alpha")
	if e.Detail["version"] == "" {
		t.Errorf("policy.set entry without its detail: %+v", e)
	}
	changed := e
	changed.Detail = map[string]string{"version": "99", "source": e.Detail["source"]}
	if store.AuditHash(changed) == e.Hash {
		t.Error("the hash does not cover the detail")
	}
	v := wantVerified(t, s, n)
	if v.HeadHash != all[n-1].Hash {
		t.Errorf("verified head = %q, want the last entry's %q", v.HeadHash, all[n-1].Hash)
	}
}

func seqRange(from, to int) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, int64(i))
	}
	return out
}

func sameEntry(a, b store.AuditEntry) bool {
	return a.ID == b.ID && a.Seq == b.Seq && a.Time.Equal(b.Time) && a.Actor == b.Actor && a.Action == b.Action &&
		a.Sandbox == b.Sandbox && a.Target == b.Target && a.BeforeHash == b.BeforeHash && a.AfterHash == b.AfterHash &&
		fmt.Sprint(a.Detail) == fmt.Sprint(b.Detail) && a.PrevHash == b.PrevHash && a.Hash == b.Hash
}

// testAuditConcurrent: writers on two stores of one database (two
// replicas, where the engine has them) append at once; the chain has no
// gap, no fork and verifies.
func testAuditConcurrent(t *testing.T, h AuditHarness) {
	db := h.Open(t)
	stores := []*store.Store{db.Store, db.Store}
	if db.Replica != nil {
		stores[1] = db.Replica()
	}
	const writers, each = 8, 6
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	start := make(chan struct{})
	for w := range writers {
		s := stores[w%2]
		wg.Go(func() {
			<-start
			for i := range each {
				var err error
				if i%2 == 0 {
					_, err = s.CreateToken(ctx(t), NewToken(fmt.Sprintf("op-%d-%d", w, i), store.RoleOperator, ""), "alice")
				} else {
					_, err = s.CreateSandbox(ctx(t), store.CreateSandbox{
						Name: fmt.Sprintf("box-%d-%d", w, i), Actor: "alice", Token: NewToken(fmt.Sprintf("sb-%d-%d", w, i), "", ""),
					})
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent write: %v", err)
	}
	// A token is one entry; a sandbox two (sandbox and its token).
	n := writers * (each/2 + 2*(each/2))
	for i, s := range stores {
		wantVerified(t, s, n)
		if got := chain(t, s, 0, 0); !slices.Equal(seqs(got), seqRange(1, n)) {
			t.Errorf("store %d: chain seqs = %v, want 1…%d", i, seqs(got), n)
		}
	}
}

func testAuditEdited(t *testing.T, h AuditHarness) {
	db := h.Open(t)
	n := someChanges(t, db.Store)
	wantVerified(t, db.Store, n)
	db.Edit(4, "actor", "mallory")
	wantBreak(t, db.Store, 4, store.ChainContentChanged)
	// Detail is covered too.
	db2 := h.Open(t)
	someChanges(t, db2.Store)
	db2.Edit(3, "detail", `{"version":"7","source":"set"}`)
	wantBreak(t, db2.Store, 3, store.ChainContentChanged)
}

// testAuditRehashed: an attacker who edits a row and recomputes its hash
// still breaks the link to the next entry.
func testAuditRehashed(t *testing.T, h AuditHarness) {
	db := h.Open(t)
	n := someChanges(t, db.Store)
	e := chain(t, db.Store, 4, 1)[0]
	e.Actor = "mallory"
	db.Edit(5, "actor", e.Actor)
	db.Edit(5, "hash", store.AuditHash(e))
	wantBreak(t, db.Store, 6, store.ChainPrevMismatch)

	// Rewriting every later entry too leaves only the head, which the
	// store recorded (and the gateway logged) at the last append.
	prev := store.AuditHash(e)
	for _, later := range chain(t, db.Store, 5, 0) {
		later.PrevHash = prev
		prev = store.AuditHash(later)
		db.Edit(later.Seq, "prev_hash", later.PrevHash)
		db.Edit(later.Seq, "hash", prev)
	}
	wantBreak(t, db.Store, int64(n), store.ChainHeadMismatch)
}

func testAuditDeleted(t *testing.T, h AuditHarness) {
	db := h.Open(t)
	n := someChanges(t, db.Store)
	db.Delete(3)
	wantBreak(t, db.Store, 3, store.ChainGap)

	// The last entry: only the recorded head shows it is gone.
	db2 := h.Open(t)
	someChanges(t, db2.Store)
	db2.Delete(int64(n))
	wantBreak(t, db2.Store, int64(n), store.ChainGap)
}

// testAuditUpgrade: entries written before the chain existed are chained
// when the store opens, in the order they were written, unchanged; new
// entries follow them.
func testAuditUpgrade(t *testing.T, h AuditHarness) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	old := []store.AuditEntry{
		{Time: base, Actor: "bootstrap", Action: store.ActionTokenCreate, Target: "admin", Detail: map[string]string{"role": "admin"}},
		{Time: base.Add(time.Second), Actor: "admin", Action: store.ActionSandboxCreate, Sandbox: "old", Target: "old", AfterHash: "abc"},
		{Time: base.Add(2 * time.Second), Actor: "admin", Action: store.ActionPolicySet, Sandbox: "old", Target: "old",
			BeforeHash: "abc", AfterHash: "def", Detail: map[string]string{"version": "2", "source": "set"}},
	}
	s := h.Legacy(t, old)
	got := chain(t, s, 0, 0)
	if len(got) != len(old) {
		t.Fatalf("chain after upgrade = %d entries, want %d", len(got), len(old))
	}
	for i, e := range got {
		w := old[i]
		if e.Seq != int64(i+1) || !e.Time.Equal(w.Time) || e.Actor != w.Actor || e.Action != w.Action ||
			e.Sandbox != w.Sandbox || e.Target != w.Target || e.BeforeHash != w.BeforeHash || e.AfterHash != w.AfterHash ||
			fmt.Sprint(e.Detail) != fmt.Sprint(w.Detail) {
			t.Errorf("entry %d after upgrade = %+v, want %+v", i+1, e, w)
		}
	}
	wantVerified(t, s, len(old))
	if _, err := s.CreateToken(ctx(t), NewToken("later", store.RoleOperator, ""), "admin"); err != nil {
		t.Fatal(err)
	}
	wantVerified(t, s, len(old)+1)
}

// ---- audit ----

func testAudit(t *testing.T, s *store.Store) {
	if es := Audits(t, s, store.AuditFilter{}); len(es) != 0 {
		t.Fatalf("audit of an empty store = %+v", es)
	}
	admin := NewToken("adm", store.RoleOperator, "")
	if _, err := s.CreateToken(ctx(t), admin, "boot"); err != nil {
		t.Fatal(err)
	}
	_, sbTok := MustCreate(t, s, "aud", true)
	_, h1 := Doc(1)
	_, h2 := Doc(2)
	MustAppend(t, s, "aud", 1, 2)
	if _, err := s.RotateSandboxToken(ctx(t), "aud", "alice", NewToken("sandbox-aud-2", "", "")); err != nil {
		t.Fatal(err)
	}
	MustCreate(t, s, "elsewhere", false)
	if err := s.RevokeToken(ctx(t), "adm", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx(t), "aud", "alice"); err != nil {
		t.Fatal(err)
	}

	type row struct{ actor, action, sandbox, target, before, after string }
	want := []row{ // newest first
		{"alice", store.ActionSandboxDelete, "aud", "aud", h2, ""},
		{"alice", store.ActionTokenRevoke, "", "adm", "", ""},
		{"alice", store.ActionTokenCreate, "elsewhere", "sandbox-elsewhere", "", ""},
		{"alice", store.ActionSandboxCreate, "elsewhere", "elsewhere", "", ""},
		{"alice", store.ActionSandboxToken, "aud", "sandbox-aud-2", "", ""},
		{"bob", store.ActionPolicySet, "aud", "aud", h1, h2},
		{"alice", store.ActionPolicySet, "aud", "aud", "", h1},
		{"alice", store.ActionTokenCreate, "aud", sbTok.Name, "", ""},
		{"alice", store.ActionSandboxCreate, "aud", "aud", "", h1},
		{"boot", store.ActionTokenCreate, "", "adm", "", ""},
	}
	es := Audits(t, s, store.AuditFilter{})
	// Entries written in one transaction may be stored in any order
	// relative to each other only if the engine says so; ours keep call order.
	if len(es) != len(want) {
		t.Fatalf("audit has %d entries, want %d: %+v", len(es), len(want), es)
	}
	for i, e := range es {
		got := row{e.Actor, e.Action, e.Sandbox, e.Target, e.BeforeHash, e.AfterHash}
		if got != want[i] {
			t.Errorf("audit[%d] = %+v, want %+v", i, got, want[i])
		}
		if e.ID == 0 || (i > 0 && e.ID >= es[i-1].ID) {
			t.Errorf("audit[%d].ID = %d, want > 0 and decreasing", i, e.ID)
		}
		Recent(t, fmt.Sprintf("audit[%d].Time", i), e.Time)
		if i > 0 && e.Time.After(es[i-1].Time) {
			t.Errorf("audit[%d] is newer than audit[%d]", i, i-1)
		}
	}

	scoped := Audits(t, s, store.AuditFilter{Sandbox: "aud"})
	if len(scoped) != 6 {
		t.Errorf("audit for sandbox aud = %d entries, want 6", len(scoped))
	}
	for _, e := range scoped {
		if e.Sandbox != "aud" {
			t.Errorf("filtered audit has entry of %q", e.Sandbox)
		}
	}
	limited := Audits(t, s, store.AuditFilter{Limit: 3})
	if len(limited) != 3 || limited[0].ID != es[0].ID || limited[2].ID != es[2].ID {
		t.Errorf("audit limit 3 = %+v, want the newest three", limited)
	}
	if got := Audits(t, s, store.AuditFilter{Sandbox: "aud", Limit: 2}); len(got) != 2 || got[0].Action != store.ActionSandboxDelete {
		t.Errorf("audit for aud limit 2 = %+v", got)
	}
	if got := Audits(t, s, store.AuditFilter{Sandbox: "none"}); len(got) != 0 {
		t.Errorf("audit for unknown sandbox = %+v, want none", got)
	}
}

func testPing(t *testing.T, s *store.Store) {
	if err := s.Ping(ctx(t)); err != nil {
		t.Errorf("Ping: %v", err)
	}
}
