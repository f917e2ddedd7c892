package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

func entry() store.AuditEntry {
	return store.AuditEntry{
		Seq: 1, Time: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), Actor: "alice", Action: store.ActionPolicySet,
		Sandbox: "box", Target: "box", BeforeHash: "b", AfterHash: "a", Detail: map[string]string{"version": "2", "source": "set"},
	}
}

// TestAuditHashFixed pins the encoding: an entry hashed by an older binary
// must still verify. Changing it needs a new domain string. The value was
// computed from the encoding AuditHash documents by a separate (Python)
// implementation, not by this one.
func TestAuditHashFixed(t *testing.T) {
	const want = "854d8b2f71baf89b393cc6face6aa933a545ab31c48831b2953e8cbc0eaf68a9"
	if got := store.AuditHash(entry()); got != want {
		t.Errorf("AuditHash = %s, want %s", got, want)
	}
}

// TestAuditHashCoversEveryField: each field changes the hash, and moving
// bytes from one field to the next does too (the length prefixes).
func TestAuditHashCoversEveryField(t *testing.T) {
	base := store.AuditHash(entry())
	for name, change := range map[string]func(e *store.AuditEntry){
		"seq":          func(e *store.AuditEntry) { e.Seq = 2 },
		"time":         func(e *store.AuditEntry) { e.Time = e.Time.Add(time.Microsecond) },
		"actor":        func(e *store.AuditEntry) { e.Actor = "mallory" },
		"action":       func(e *store.AuditEntry) { e.Action = store.ActionTokenCreate },
		"sandbox":      func(e *store.AuditEntry) { e.Sandbox = "other" },
		"target":       func(e *store.AuditEntry) { e.Target = "other" },
		"before_hash":  func(e *store.AuditEntry) { e.BeforeHash = "x" },
		"after_hash":   func(e *store.AuditEntry) { e.AfterHash = "x" },
		"detail value": func(e *store.AuditEntry) { e.Detail = map[string]string{"version": "3", "source": "set"} },
		"detail key":   func(e *store.AuditEntry) { e.Detail = map[string]string{"version": "2", "sourcE": "set"} },
		"detail gone":  func(e *store.AuditEntry) { e.Detail = nil },
		"prev_hash":    func(e *store.AuditEntry) { e.PrevHash = "p" },
		"shifted":      func(e *store.AuditEntry) { e.Actor, e.Action = "alicep", "olicy.set" },
		"detail shift": func(e *store.AuditEntry) { e.Detail = map[string]string{"version": "2s", "ource": "set"} },
	} {
		e := entry()
		change(&e)
		if store.AuditHash(e) == base {
			t.Errorf("changing %s leaves the hash unchanged", name)
		}
	}
	e := entry()
	e.ID, e.Hash, e.Time = 99, "ignored", e.Time.In(time.FixedZone("x", 3600))
	if store.AuditHash(e) != base {
		t.Error("ID, Hash or the time zone changed the hash")
	}
}

func TestVerifyAuditChain(t *testing.T) {
	chain := make([]store.AuditEntry, 4)
	prev := ""
	for i := range chain {
		e := entry()
		e.Seq, e.PrevHash = int64(i+1), prev
		e.Hash = store.AuditHash(e)
		chain[i], prev = e, e.Hash
	}
	seq, head, err := store.VerifyAuditChain(0, "", chain)
	if err != nil || seq != 4 || head != chain[3].Hash {
		t.Fatalf("VerifyAuditChain(good) = %d, %s, %v", seq, head, err)
	}
	// Paged: the second page continues from the first.
	if seq, _, err := store.VerifyAuditChain(2, chain[1].Hash, chain[2:]); err != nil || seq != 4 {
		t.Fatalf("VerifyAuditChain(second page) = %d, %v", seq, err)
	}
	edited := func(i int, f func(e *store.AuditEntry)) []store.AuditEntry {
		out := append([]store.AuditEntry(nil), chain...)
		f(&out[i])
		return out
	}
	for _, tc := range []struct {
		name    string
		entries []store.AuditEntry
		seq     int64
		problem string
	}{
		{"edited", edited(1, func(e *store.AuditEntry) { e.Actor = "mallory" }), 2, store.ChainContentChanged},
		{"rehashed", edited(1, func(e *store.AuditEntry) { e.Actor = "mallory"; e.Hash = store.AuditHash(*e) }), 3, store.ChainPrevMismatch},
		{"removed", append(append([]store.AuditEntry(nil), chain[:2]...), chain[3:]...), 3, store.ChainGap},
		{"swapped", []store.AuditEntry{chain[0], chain[2], chain[1], chain[3]}, 2, store.ChainGap},
		{"first removed", chain[1:], 1, store.ChainGap},
	} {
		_, _, err := store.VerifyAuditChain(0, "", tc.entries)
		var ce *store.ChainError
		if !errors.As(err, &ce) || ce.Seq != tc.seq || ce.Problem != tc.problem {
			t.Errorf("%s: got %v; want seq %d: %s", tc.name, err, tc.seq, tc.problem)
		}
	}
}
