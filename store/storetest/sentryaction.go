package storetest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- Sentry remediation: sources' keys, the replay lookup, actions ----

// sentryPub returns a distinct Ed25519 public key for n.
func sentryPub(n byte) []byte {
	seed := bytes.Repeat([]byte{n}, ed25519.SeedSize)
	return ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
}

// keyHash is how the audit log names a public key.
func keyHash(pub []byte) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}

func sentryKeys(t *testing.T, s *store.Store) []store.SentryKey {
	t.Helper()
	ks, err := s.ListSentryKeys(ctx(t))
	if err != nil {
		t.Fatalf("ListSentryKeys: %v", err)
	}
	return ks
}

// testPrimSentryKeys: the key primitives store, replace, list (by source)
// and delete; an unknown source's key is ErrNotFound.
func testPrimSentryKeys(t *testing.T, s *store.Store) {
	_, err := s.GetSentryKey(ctx(t), "w1")
	WantErr(t, "GetSentryKey(none)", err, store.ErrNotFound)
	_, err = s.Driver.DeleteSentryKey(ctx(t), "w1")
	WantErr(t, "DeleteSentryKey(none)", err, store.ErrNotFound)
	if ks := sentryKeys(t, s); len(ks) != 0 {
		t.Errorf("ListSentryKeys on an empty store = %+v", ks)
	}

	k2 := store.SentryKey{Source: "w2", PublicKey: sentryPub(2), CreatedAt: usec(2030, 1).UTC(), CreatedBy: "alice"}
	k1 := store.SentryKey{Source: "w1", PublicKey: sentryPub(1), CreatedAt: usec(2030, 2).UTC(), CreatedBy: "bob"}
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.PutSentryKey(ctx(t), k2); err != nil {
			return err
		}
		return tx.PutSentryKey(ctx(t), k1)
	})
	for _, k := range []store.SentryKey{k1, k2} {
		if got, err := s.GetSentryKey(ctx(t), k.Source); err != nil || !reflect.DeepEqual(got, k) {
			t.Errorf("GetSentryKey(%q) = %+v, %v; want %+v", k.Source, got, err, k)
		}
	}
	// Replacing a key keeps one per source.
	k1b := store.SentryKey{Source: "w1", PublicKey: sentryPub(3), CreatedAt: usec(2030, 3).UTC(), CreatedBy: "carol"}
	if err := s.Driver.PutSentryKey(ctx(t), k1b); err != nil {
		t.Fatalf("PutSentryKey(replace): %v", err)
	}
	if got := sentryKeys(t, s); !reflect.DeepEqual(got, []store.SentryKey{k1b, k2}) {
		t.Errorf("ListSentryKeys = %+v, want %+v", got, []store.SentryKey{k1b, k2})
	}
	var deleted store.SentryKey
	inTx(t, s, func(tx store.Tx) (err error) {
		deleted, err = tx.DeleteSentryKey(ctx(t), "w1")
		return err
	})
	if !reflect.DeepEqual(deleted, k1b) {
		t.Errorf("DeleteSentryKey returned %+v, want %+v", deleted, k1b)
	}
	_, err = s.GetSentryKey(ctx(t), "w1")
	WantErr(t, "GetSentryKey(deleted)", err, store.ErrNotFound)
	_, err = s.Driver.DeleteSentryKey(ctx(t), "w1")
	WantErr(t, "DeleteSentryKey(deleted)", err, store.ErrNotFound)
	if got := sentryKeys(t, s); !reflect.DeepEqual(got, []store.SentryKey{k2}) {
		t.Errorf("ListSentryKeys after delete = %+v, want %+v", got, []store.SentryKey{k2})
	}
}

// testSentryKeySet: Store.SetSentryKey stores and audits a source's key
// (the replaced key's hash before, the new one's after); a key that is not
// an Ed25519 public key, or a bad source, is refused with nothing stored
// or audited; DeleteSentryKey audits the key it removed.
func testSentryKeySet(t *testing.T, s *store.Store) {
	k, err := s.SetSentryKey(ctx(t), store.SentryKey{Source: "urn:dpu:n1", PublicKey: sentryPub(1), CreatedBy: "ignored"}, "alice")
	if err != nil {
		t.Fatalf("SetSentryKey: %v", err)
	}
	if k.Source != "urn:dpu:n1" || !bytes.Equal(k.PublicKey, sentryPub(1)) || k.CreatedBy != "alice" {
		t.Errorf("SetSentryKey = %+v", k)
	}
	Recent(t, "sentry key CreatedAt", k.CreatedAt)
	if got, err := s.GetSentryKey(ctx(t), "urn:dpu:n1"); err != nil || !reflect.DeepEqual(got, k) {
		t.Errorf("GetSentryKey = %+v, %v; want %+v", got, err, k)
	}
	e := FindAudit(t, Audits(t, s, store.AuditFilter{}), store.ActionSentryKeySet, "urn:dpu:n1")
	if e.Actor != "alice" || e.BeforeHash != "" || e.AfterHash != keyHash(sentryPub(1)) {
		t.Errorf("sentry key audit = %+v", e)
	}

	k2, err := s.SetSentryKey(ctx(t), store.SentryKey{Source: "urn:dpu:n1", PublicKey: sentryPub(2)}, "bob")
	if err != nil || !bytes.Equal(k2.PublicKey, sentryPub(2)) || k2.CreatedBy != "bob" {
		t.Fatalf("SetSentryKey(replace) = %+v, %v", k2, err)
	}
	e = FindAudit(t, Audits(t, s, store.AuditFilter{}), store.ActionSentryKeySet, "urn:dpu:n1")
	if e.Actor != "bob" || e.BeforeHash != keyHash(sentryPub(1)) || e.AfterHash != keyHash(sentryPub(2)) {
		t.Errorf("sentry key replacement audit = %+v", e)
	}

	auditBefore := len(Audits(t, s, store.AuditFilter{}))
	for _, bad := range []store.SentryKey{
		{Source: "urn:dpu:n2", PublicKey: sentryPub(3)[:31]},
		{Source: "urn:dpu:n2", PublicKey: append(sentryPub(3), 0)},
		{Source: "urn:dpu:n2"},
		{Source: "", PublicKey: sentryPub(3)},
		{Source: "has space", PublicKey: sentryPub(3)},
	} {
		_, err := s.SetSentryKey(ctx(t), bad, "alice")
		WantPlainError(t, "SetSentryKey("+bad.Source+", "+hex.EncodeToString(bad.PublicKey)+")", err)
	}
	_, err = s.GetSentryKey(ctx(t), "urn:dpu:n2")
	WantErr(t, "GetSentryKey after a refused key", err, store.ErrNotFound)
	if got, err := s.GetSentryKey(ctx(t), "urn:dpu:n1"); err != nil || !reflect.DeepEqual(got, k2) {
		t.Errorf("GetSentryKey after refused keys = %+v, %v; want %+v", got, err, k2)
	}
	if after := len(Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("refused sentry keys wrote %d audit entries", after-auditBefore)
	}

	WantErr(t, "Store.DeleteSentryKey(none)", s.DeleteSentryKey(ctx(t), "urn:dpu:n2", "alice"), store.ErrNotFound)
	if after := len(Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("deleting a missing key wrote %d audit entries", after-auditBefore)
	}
	if err := s.DeleteSentryKey(ctx(t), "urn:dpu:n1", "carol"); err != nil {
		t.Fatalf("Store.DeleteSentryKey: %v", err)
	}
	e = FindAudit(t, Audits(t, s, store.AuditFilter{}), store.ActionSentryKeyDel, "urn:dpu:n1")
	if e.Actor != "carol" || e.BeforeHash != keyHash(sentryPub(2)) || e.AfterHash != "" {
		t.Errorf("sentry key delete audit = %+v", e)
	}
	if ks := sentryKeys(t, s); len(ks) != 0 {
		t.Errorf("keys after delete = %+v", ks)
	}
}

// testPrimSentryEventAt: the replay lookup finds a source's stored event
// by sequence (the first received of several), and nothing for another
// source, an unused sequence or one past int64.
func testPrimSentryEventAt(t *testing.T, s *store.Store) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	batch := sentrySeqs("w1", 1, 2, 3)
	later, first := sentryEvent("w1", 5, "sb"), sentryEvent("w1", 5, "sb")
	later.ID, later.ReceivedAt = "a-later", now.Add(-time.Minute)
	first.ID, first.ReceivedAt = "b-first", now.Add(-2*time.Minute)
	appendSentry(t, s, append(batch, later))
	appendSentry(t, s, []store.SentryEvent{first})
	appendSentry(t, s, sentrySeqs("w2", 7))

	stored := sentryEvents(t, s, store.SentryEventFilter{Source: "w1"})
	for _, c := range []struct {
		seq  uint64
		want string
	}{{2, "w1-2"}, {1, "w1-1"}, {5, "b-first"}} {
		var got store.SentryEvent
		inTx(t, s, func(tx store.Tx) (err error) {
			got, err = tx.SentryEventAt(ctx(t), "w1", c.seq)
			return err
		})
		i := slices.IndexFunc(stored, func(e store.SentryEvent) bool { return e.ID == c.want })
		if i < 0 || !reflect.DeepEqual(got, stored[i]) {
			t.Errorf("SentryEventAt(w1, %d) = %+v, want the stored %s", c.seq, got, c.want)
		}
	}
	if got, err := s.SentryEventAt(ctx(t), "w2", 7); err != nil || got.ID != "w2-7" {
		t.Errorf("SentryEventAt(w2, 7) = %+v, %v; want w2-7", got, err)
	}
	for _, c := range []struct {
		source string
		seq    uint64
	}{{"w1", 4}, {"w1", 7}, {"w2", 1}, {"nobody", 1}, {"w1", 1 << 63}, {"w1", 0}} {
		_, err := s.SentryEventAt(ctx(t), c.source, c.seq)
		WantErr(t, "SentryEventAt("+c.source+")", err, store.ErrNotFound)
	}
}

// sentryAction is an action of event src/id about sandbox, created at
// usec(2030, n).
func sentryAction(src, id, sandbox, status string, n int) store.SentryAction {
	return store.SentryAction{
		Source: src, EventID: id, Sandbox: sandbox, Type: "portcullis.sentry.v1.quarantine", Status: status,
		ReceivedAt: usec(2030, n).Add(-time.Millisecond).UTC(), CreatedAt: usec(2030, n).UTC(),
	}
}

func insertAction(t *testing.T, s *store.Store, a store.SentryAction) store.SentryAction {
	t.Helper()
	out, err := s.InsertSentryAction(ctx(t), a)
	if err != nil {
		t.Fatalf("InsertSentryAction(%s/%s): %v", a.Source, a.EventID, err)
	}
	return out
}

// testPrimSentryActions: an action is stored as given with a new ID, once
// per (source, event), read back and updated (its mutable fields, times
// set and cleared); unknown IDs are ErrNotFound; the schema refuses an
// unknown status; actions outlive their sandbox.
func testPrimSentryActions(t *testing.T, s *store.Store) {
	a := sentryAction("w1", "e1", "alpha", store.SentryFrozen, 1)
	a.ID, a.Reason, a.Version = 99, "quarantine", 3
	got := insertAction(t, s, a)
	if got.ID <= 0 {
		t.Fatalf("InsertSentryAction ID = %d", got.ID)
	}
	want := a
	want.ID = got.ID
	if !reflect.DeepEqual(got, want) {
		t.Errorf("InsertSentryAction =\n%+v\nwant\n%+v", got, want)
	}
	if g, err := s.GetSentryAction(ctx(t), want.ID); err != nil || !reflect.DeepEqual(g, want) {
		t.Errorf("GetSentryAction = %+v, %v; want %+v", g, err, want)
	}
	_, err := s.GetSentryAction(ctx(t), want.ID+1000)
	WantErr(t, "GetSentryAction(unknown)", err, store.ErrNotFound)

	// One action per event: refused on its own and in a transaction, which
	// stays usable.
	dup := sentryAction("w1", "e1", "beta", store.SentryHeld, 2)
	_, err = s.Driver.InsertSentryAction(ctx(t), dup)
	WantErr(t, "InsertSentryAction(same event)", err, store.ErrAlreadyExists)
	var other store.SentryAction
	inTx(t, s, func(tx store.Tx) error {
		_, err := tx.InsertSentryAction(ctx(t), dup)
		WantErr(t, "InsertSentryAction(same event) in InTx", err, store.ErrAlreadyExists)
		other, err = tx.InsertSentryAction(ctx(t), sentryAction("w2", "e1", "beta", store.SentryHeld, 2))
		return err
	})
	if other.ID == want.ID {
		t.Errorf("two actions have ID %d", other.ID)
	}
	if g, err := s.GetSentryAction(ctx(t), want.ID); err != nil || !reflect.DeepEqual(g, want) {
		t.Errorf("action after a refused duplicate = %+v, %v; want %+v", g, err, want)
	}

	// Update: the mutable fields, and the times back to none.
	acked, decided := usec(2030, 5), usec(2030, 6)
	upd := other
	upd.Status, upd.Reason, upd.Version = store.SentryApplied, "operator froze it", 8
	upd.AckedAt, upd.DecidedBy, upd.DecidedAt = &acked, "carol", &decided
	upd.Source, upd.Sandbox, upd.CreatedAt = "ignored", "ignored", usec(2031, 1) // not mutable
	inTx(t, s, func(tx store.Tx) error { return tx.UpdateSentryAction(ctx(t), upd) })
	wantUpd := other
	wantUpd.Status, wantUpd.Reason, wantUpd.Version = upd.Status, upd.Reason, upd.Version
	wantUpd.AckedAt, wantUpd.DecidedBy, wantUpd.DecidedAt = timePtr(acked.UTC()), "carol", timePtr(decided.UTC())
	if g, err := s.GetSentryAction(ctx(t), other.ID); err != nil || !reflect.DeepEqual(g, wantUpd) {
		t.Errorf("action after UpdateSentryAction =\n%+v, %v\nwant\n%+v", g, err, wantUpd)
	}
	wantUpd.AckedAt, wantUpd.DecidedAt, wantUpd.DecidedBy = nil, nil, ""
	if err := s.Driver.UpdateSentryAction(ctx(t), wantUpd); err != nil {
		t.Fatalf("UpdateSentryAction(times cleared): %v", err)
	}
	if g, err := s.GetSentryAction(ctx(t), other.ID); err != nil || !reflect.DeepEqual(g, wantUpd) {
		t.Errorf("action after clearing its times =\n%+v, %v\nwant\n%+v", g, err, wantUpd)
	}
	missing := wantUpd
	missing.ID = other.ID + 1000
	WantErr(t, "UpdateSentryAction(unknown)", s.Driver.UpdateSentryAction(ctx(t), missing), store.ErrNotFound)

	// The schema knows the statuses.
	bad := sentryAction("w1", "e2", "alpha", "exploded", 3)
	if _, err := s.Driver.InsertSentryAction(ctx(t), bad); err == nil {
		t.Error("InsertSentryAction(unknown status) succeeded, want a constraint error")
	}
	bad = wantUpd
	bad.Status = "exploded"
	if err := s.Driver.UpdateSentryAction(ctx(t), bad); err == nil {
		t.Error("UpdateSentryAction(unknown status) succeeded, want a constraint error")
	}

	// Actions outlive their sandbox.
	MustCreate(t, s, "gone", true)
	kept := insertAction(t, s, sentryAction("w1", "e3", "gone", store.SentryFrozen, 4))
	if err := s.DeleteSandbox(ctx(t), "gone", "alice"); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	if g, err := s.GetSentryAction(ctx(t), kept.ID); err != nil || !reflect.DeepEqual(g, kept) {
		t.Errorf("action of a deleted sandbox = %+v, %v; want %+v", g, err, kept)
	}
}

// testPrimSentryActionList: the list is newest first (ties by ID, newest
// first); each filter field selects what it names, Status any of its
// values, Since inclusive; a limit keeps the newest. Count counts the
// actions of some statuses since a time.
func testPrimSentryActionList(t *testing.T, s *store.Store) {
	// n: creation time; two pairs share one.
	for _, c := range []struct {
		id, sandbox, status string
		n                   int
	}{
		{"e1", "alpha", store.SentryFrozen, 1},
		{"e2", "beta", store.SentryHeld, 2},
		{"e3", "alpha", store.SentryDryRun, 3},
		{"e4", "alpha", store.SentryHeld, 3},
		{"e5", "beta", store.SentryFailed, 4},
		{"e6", "gamma", store.SentryNoop, 5},
		{"e7", "alpha", store.SentryFrozen, 6},
		{"e8", "beta", store.SentryDismissed, 6},
	} {
		insertAction(t, s, sentryAction("w1", c.id, c.sandbox, c.status, c.n))
	}
	ids := func(f store.SentryActionFilter) []string {
		t.Helper()
		var as []store.SentryAction
		inTx(t, s, func(tx store.Tx) (err error) {
			as, err = tx.ListSentryActions(ctx(t), f)
			return err
		})
		outside, err := s.ListSentryActions(ctx(t), f)
		if err != nil || !reflect.DeepEqual(outside, as) {
			t.Errorf("ListSentryActions(%+v) outside a transaction = %+v, %v; in one %+v", f, outside, err, as)
		}
		var out []string
		for _, a := range as {
			out = append(out, a.EventID)
		}
		return out
	}
	for _, c := range []struct {
		f    store.SentryActionFilter
		want []string
	}{
		{store.SentryActionFilter{}, []string{"e8", "e7", "e6", "e5", "e4", "e3", "e2", "e1"}},
		{store.SentryActionFilter{Sandbox: "alpha"}, []string{"e7", "e4", "e3", "e1"}},
		{store.SentryActionFilter{Status: []string{store.SentryHeld}}, []string{"e4", "e2"}},
		{store.SentryActionFilter{Status: []string{store.SentryHeld, store.SentryFailed, store.SentryApplied}}, []string{"e5", "e4", "e2"}},
		{store.SentryActionFilter{Since: usec(2030, 4)}, []string{"e8", "e7", "e6", "e5"}},
		{store.SentryActionFilter{Since: usec(2030, 4).Add(time.Microsecond)}, []string{"e8", "e7", "e6"}},
		{store.SentryActionFilter{Limit: 3}, []string{"e8", "e7", "e6"}},
		{store.SentryActionFilter{Sandbox: "alpha", Status: []string{store.SentryFrozen, store.SentryHeld}, Since: usec(2030, 2), Limit: 1}, []string{"e7"}},
		{store.SentryActionFilter{Sandbox: "alpha", Status: []string{store.SentryFrozen, store.SentryHeld}, Since: usec(2030, 2)}, []string{"e7", "e4"}},
		{store.SentryActionFilter{Sandbox: "nobody"}, nil},
		{store.SentryActionFilter{Status: []string{store.SentryApplied}}, nil},
	} {
		if got := ids(c.f); !slices.Equal(got, c.want) {
			t.Errorf("ListSentryActions(%+v) = %v, want %v", c.f, got, c.want)
		}
	}

	// Another source's freeze: counted for the fleet (source ""), not
	// for w1.
	insertAction(t, s, sentryAction("w2", "e9", "gamma", store.SentryFrozen, 7))
	for _, c := range []struct {
		source   string
		statuses []string
		since    time.Time
		want     int
	}{
		{"w1", []string{store.SentryFrozen, store.SentryHeld}, usec(2030, 3), 2},
		{"", []string{store.SentryFrozen, store.SentryHeld}, usec(2030, 3), 3},
		{"w1", []string{store.SentryFrozen, store.SentryHeld}, usec(2030, 1), 4},
		{"", []string{store.SentryFrozen, store.SentryHeld}, time.Time{}, 5},
		{"w1", []string{store.SentryFrozen}, usec(2030, 7), 0},
		{"w2", []string{store.SentryFrozen}, usec(2030, 7), 1},
		{"", []string{store.SentryFrozen}, usec(2030, 7), 1},
		{"w3", []string{store.SentryFrozen}, time.Time{}, 0},
		{"", []string{store.SentryApplied}, time.Time{}, 0},
		{"", nil, time.Time{}, 0},
	} {
		var n int
		inTx(t, s, func(tx store.Tx) (err error) {
			n, err = tx.CountSentryActions(ctx(t), c.source, c.statuses, c.since)
			return err
		})
		if outside, err := s.CountSentryActions(ctx(t), c.source, c.statuses, c.since); err != nil || outside != n || n != c.want {
			t.Errorf("CountSentryActions(%q, %v, %v) = %d (outside a transaction %d, %v), want %d",
				c.source, c.statuses, c.since, n, outside, err, c.want)
		}
	}
}

// testPrimSentryEventFlags: the intake's derived findings replace one
// event's flags, found by its key and received time; others keep theirs.
func testPrimSentryEventFlags(t *testing.T, s *store.Store) {
	batch := sentrySeqs("w1", 1, 2)
	batch[0].Flags = []string{"unknown_field"}
	appendSentry(t, s, batch)
	stored := sentryEvents(t, s, store.SentryEventFilter{Source: "w1"})
	if len(stored) != 2 {
		t.Fatalf("%d events stored, want 2", len(stored))
	}
	one := stored[0]
	inTx(t, s, func(tx store.Tx) error {
		return tx.SetSentryEventFlags(ctx(t), one, append(one.Flags, "drift"))
	})
	// An unknown event, or the right key at another time or with another
	// sequence, changes nothing.
	unknown, earlier, elsewhere := one, stored[1], stored[1]
	unknown.ID = "nope"
	earlier.ReceivedAt = earlier.ReceivedAt.Add(-48 * time.Hour)
	elsewhere.Sequence = one.Sequence
	for _, ev := range []store.SentryEvent{unknown, earlier, elsewhere} {
		if err := s.SetSentryEventFlags(ctx(t), ev, []string{"x"}); err != nil {
			t.Fatal(err)
		}
	}
	after := sentryEvents(t, s, store.SentryEventFilter{Source: "w1"})
	want := map[string][]string{one.ID: append(slices.Clone(one.Flags), "drift"), stored[1].ID: stored[1].Flags}
	for _, e := range after {
		if !slices.Equal(e.Flags, want[e.ID]) {
			t.Errorf("flags of %s = %q, want %q", e.ID, e.Flags, want[e.ID])
		}
	}
}
