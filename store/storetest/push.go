package storetest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/store"
)

// Tests of the policy-push state: signing keys, sandbox CAs, proxy
// statuses and decision records.

// ---- helpers ----

// newSigningKey returns a fresh Ed25519 key endorsed by prev (none when
// prev is nil), with an id derived from its public key.
func newSigningKey(t *testing.T, prev ed25519.PrivateKey) store.SigningKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k := store.SigningKey{PublicKey: pub, PrivateKey: priv}
	if prev != nil {
		k.Endorsement = ed25519.Sign(prev, pub)
	}
	sum := sha256.Sum256(pub)
	k.ID = hex.EncodeToString(sum[:8])
	return k
}

func sameKey(a, b store.SigningKey) bool {
	return a.ID == b.ID && bytes.Equal(a.PublicKey, b.PublicKey) && bytes.Equal(a.PrivateKey, b.PrivateKey) &&
		bytes.Equal(a.Endorsement, b.Endorsement)
}

func signingKeys(t *testing.T, s *store.Store) []store.SigningKey {
	t.Helper()
	ks, err := s.SigningKeys(ctx(t))
	return must(t, ks, err, "SigningKeys")
}

// CountAudit counts the entries with action.
func CountAudit(es []store.AuditEntry, action string) int {
	n := 0
	for _, e := range es {
		if e.Action == action {
			n++
		}
	}
	return n
}

// usec returns a time with microsecond precision, the finest both engines
// keep, in a zone other than UTC (it must come back in UTC).
func usec(year int, n int) time.Time {
	return time.Date(year, 3, 4, 5, 6, 7, 0, time.FixedZone("X", -5*3600)).
		Add(time.Duration(n) * 1001 * time.Microsecond)
}

func timePtr(t time.Time) *time.Time { return &t }

// sameTime compares a stored time with the one written: the same instant,
// in UTC unless zero.
func sameTime(got, want time.Time) bool {
	return got.Equal(want) && (got.IsZero() || got.Location() == time.UTC)
}

func sameTimePtr(got, want *time.Time) bool {
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	return sameTime(*got, *want)
}

func sameStatus(got, want store.ProxyStatus) bool {
	return got.Sandbox == want.Sandbox && got.ProxyID == want.ProxyID && got.Replica == want.Replica &&
		got.Build == want.Build && got.Connected == want.Connected &&
		sameTime(got.ConnectedAt, want.ConnectedAt) && sameTime(got.LastSeenAt, want.LastSeenAt) &&
		got.AppliedVersion == want.AppliedVersion && got.AppliedHash == want.AppliedHash &&
		sameTimePtr(got.LastAckAt, want.LastAckAt) &&
		got.LastNackVersion == want.LastNackVersion && got.LastNackError == want.LastNackError &&
		sameTimePtr(got.LastNackAt, want.LastNackAt) &&
		got.LagMillis == want.LagMillis && got.DecisionsDropped == want.DecisionsDropped
}

func proxyStatuses(t *testing.T, s *store.Store, sandbox string) []store.ProxyStatus {
	t.Helper()
	ps, err := s.ListProxyStatuses(ctx(t), sandbox)
	return must(t, ps, err, "ListProxyStatuses(%q)", sandbox)
}

func wantStatuses(t *testing.T, what string, got []store.ProxyStatus, want ...store.ProxyStatus) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d statuses, want %d:\n got %+v\nwant %+v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if !sameStatus(got[i], want[i]) {
			t.Errorf("%s[%d]:\n got %+v\nwant %+v", what, i, got[i], want[i])
		}
	}
}

// sameDecision compares a stored record with the one written, apart from
// the fields the store sets.
func sameDecision(got, want store.Decision) bool {
	got.ID, got.ReceivedAt, want.ID, want.ReceivedAt = 0, time.Time{}, 0, time.Time{}
	if !sameTime(got.Time, want.Time) {
		return false
	}
	got.Time, want.Time = time.Time{}, time.Time{}
	if !slices.Equal(got.Cuts, want.Cuts) || (got.Summary == nil) != (want.Summary == nil) {
		return false
	}
	got.Cuts, want.Cuts = nil, nil
	if got.Summary != nil {
		g, w := *got.Summary, *want.Summary
		if !sameTime(g.Last, w.Last) {
			return false
		}
		g.Last, w.Last = time.Time{}, time.Time{}
		got.Summary, want.Summary = &g, &w
	}
	return reflect.DeepEqual(got, want)
}

func decisions(t *testing.T, s *store.Store, f store.DecisionFilter) []store.Decision {
	t.Helper()
	ds, err := s.ListDecisions(ctx(t), f)
	return must(t, ds, err, "ListDecisions(%+v)", f)
}

// wantIDs checks ListDecisions(f) returns exactly the records want (by id),
// in that order.
func wantIDs(t *testing.T, s *store.Store, f store.DecisionFilter, want []store.Decision) {
	t.Helper()
	got := decisions(t, s, f)
	ids := func(ds []store.Decision) []int64 {
		out := make([]int64, len(ds))
		for i, d := range ds {
			out[i] = d.ID
		}
		return out
	}
	if g, w := ids(got), ids(want); !slices.Equal(g, w) {
		if len(g) > 12 || len(w) > 12 {
			t.Errorf("ListDecisions(%+v) = %d records (first %v), want %d (first %v)", f, len(g), g[:min(len(g), 5)], len(w), w[:min(len(w), 5)])
		} else {
			t.Errorf("ListDecisions(%+v) ids = %v, want %v", f, g, w)
		}
	}
}

func filterDecisions(ds []store.Decision, keep func(store.Decision) bool) []store.Decision {
	var out []store.Decision
	for _, d := range ds {
		if keep(d) {
			out = append(out, d)
		}
	}
	return out
}

// ---- signing keys ----

func testSigningKeyChain(t *testing.T, s *store.Store) {
	if ks := signingKeys(t, s); len(ks) != 0 {
		t.Fatalf("SigningKeys on an empty store = %+v", ks)
	}
	k1 := newSigningKey(t, nil)
	got1, err := s.AddSigningKey(ctx(t), k1, "", "alice")
	if err != nil {
		t.Fatalf("AddSigningKey(first): %v", err)
	}
	if !sameKey(got1, k1) || len(got1.Endorsement) != 0 {
		t.Errorf("AddSigningKey(first) = %+v, want %+v", got1, k1)
	}
	Recent(t, "SigningKey.CreatedAt", got1.CreatedAt)

	k2 := newSigningKey(t, k1.PrivateKey)
	got2, err := s.AddSigningKey(ctx(t), k2, k1.ID, "bob")
	if err != nil {
		t.Fatalf("AddSigningKey(second): %v", err)
	}
	if !sameKey(got2, k2) {
		t.Errorf("AddSigningKey(second) = %+v, want %+v", got2, k2)
	}

	// A stale or unknown previous key: ErrConflict, nothing stored.
	before := Audits(t, s, store.AuditFilter{})
	k3 := newSigningKey(t, k2.PrivateKey)
	for _, prev := range []string{"", k1.ID, "no-such-key"} {
		_, err := s.AddSigningKey(ctx(t), k3, prev, "mallory")
		WantErr(t, fmt.Sprintf("AddSigningKey(previous %q, newest %q)", prev, k2.ID), err, store.ErrConflict)
	}
	// A key already in the chain cannot be appended again.
	if _, err := s.AddSigningKey(ctx(t), k1, k2.ID, "mallory"); err == nil {
		t.Error("AddSigningKey(a key already stored) succeeded")
	}
	if ks := signingKeys(t, s); len(ks) != 2 {
		t.Fatalf("keys after refused appends = %d, want 2", len(ks))
	}
	if after := Audits(t, s, store.AuditFilter{}); len(after) != len(before) {
		t.Errorf("refused appends wrote %d audit entries", len(after)-len(before))
	}

	got3, err := s.AddSigningKey(ctx(t), k3, k2.ID, "carol")
	if err != nil {
		t.Fatalf("AddSigningKey(third): %v", err)
	}
	// The returned key does not alias the caller's bytes.
	pub := slices.Clone(k3.PublicKey)
	k3.PublicKey[0] ^= 0xff
	if !bytes.Equal(got3.PublicKey, pub) {
		t.Error("the returned key aliases the caller's bytes")
	}
	k3.PublicKey[0] ^= 0xff

	ks := signingKeys(t, s)
	want := []store.SigningKey{got1, got2, got3}
	if len(ks) != len(want) {
		t.Fatalf("SigningKeys = %d keys, want %d", len(ks), len(want))
	}
	for i, k := range ks {
		if !sameKey(k, want[i]) || !k.CreatedAt.Equal(want[i].CreatedAt) || k.CreatedAt.Location() != time.UTC {
			t.Errorf("SigningKeys[%d] = %+v, want %+v", i, k, want[i])
		}
		if i > 0 && (k.CreatedAt.Before(ks[i-1].CreatedAt) || !ed25519.Verify(ks[i-1].PublicKey, k.PublicKey, k.Endorsement)) {
			t.Errorf("SigningKeys[%d] does not follow key %d", i, i-1)
		}
	}
	if ks[0].Endorsement != nil {
		t.Errorf("first key's endorsement = %x, want none", ks[0].Endorsement)
	}

	es := Audits(t, s, store.AuditFilter{})
	if n := CountAudit(es, store.ActionSigningKeyAdd); n != 3 {
		t.Errorf("signing_key.add audit entries = %d, want 3", n)
	}
	for _, w := range []struct{ actor, id string }{{"alice", k1.ID}, {"bob", k2.ID}, {"carol", k3.ID}} {
		e := FindAudit(t, es, store.ActionSigningKeyAdd, w.id)
		if e.Actor != w.actor || e.Sandbox != "" {
			t.Errorf("signing_key.add audit of %s = %+v, want actor %s", w.id, e, w.actor)
		}
		Recent(t, "audit time", e.Time)
	}
}

// testSigningKeyConcurrent: replicas rotating at once after the same key;
// exactly one appends.
func testSigningKeyConcurrent(t *testing.T, s *store.Store) {
	first := newSigningKey(t, nil)
	if _, err := s.AddSigningKey(ctx(t), first, "", "boot"); err != nil {
		t.Fatal(err)
	}
	keys := make([]store.SigningKey, 10)
	for i := range keys {
		keys[i] = newSigningKey(t, first.PrivateKey)
	}
	winner := oneWinner(t, "replica", race(len(keys), func(i int) error {
		_, err := s.AddSigningKey(ctx(t), keys[i], first.ID, fmt.Sprint("replica-", i))
		return err
	}))
	ks := signingKeys(t, s)
	if len(ks) != 2 || !sameKey(ks[0], first) || !sameKey(ks[1], keys[winner]) {
		t.Errorf("keys after the race = %+v, want the first and the winner's", ks)
	}
	if n := CountAudit(Audits(t, s, store.AuditFilter{}), store.ActionSigningKeyAdd); n != 2 {
		t.Errorf("signing_key.add audit entries = %d, want 2", n)
	}
}

// ---- sandbox CAs ----

func testSandboxCA(t *testing.T, s *store.Store) {
	ca := func(sandbox string, n int) store.SandboxCA {
		return store.SandboxCA{
			Sandbox: sandbox,
			CertPEM: fmt.Appendf(nil, "-----BEGIN CERTIFICATE-----\nCERT%d\n-----END CERTIFICATE-----\n", n),
			KeyPEM:  fmt.Appendf(nil, "-----BEGIN PRIVATE KEY-----\nKEY%d\x00\xff\n-----END PRIVATE KEY-----\n", n),
		}
	}
	same := func(a, b store.SandboxCA) bool {
		return a.Sandbox == b.Sandbox && bytes.Equal(a.CertPEM, b.CertPEM) && bytes.Equal(a.KeyPEM, b.KeyPEM)
	}

	_, err := s.PutSandboxCA(ctx(t), ca("box", 1))
	WantErr(t, "PutSandboxCA(missing sandbox)", err, store.ErrNotFound)
	_, err = s.GetSandboxCA(ctx(t), "box")
	WantErr(t, "GetSandboxCA(missing sandbox)", err, store.ErrNotFound)

	MustCreate(t, s, "box", false)
	_, err = s.GetSandboxCA(ctx(t), "box")
	WantErr(t, "GetSandboxCA(no CA yet)", err, store.ErrNotFound)

	first, err := s.PutSandboxCA(ctx(t), ca("box", 1))
	if err != nil {
		t.Fatalf("PutSandboxCA: %v", err)
	}
	if !same(first, ca("box", 1)) {
		t.Errorf("PutSandboxCA = %+v, want %+v", first, ca("box", 1))
	}
	Recent(t, "SandboxCA.CreatedAt", first.CreatedAt)

	// The first writer wins: a second put returns the first CA unchanged.
	second, err := s.PutSandboxCA(ctx(t), ca("box", 2))
	if err != nil {
		t.Fatalf("PutSandboxCA(second): %v", err)
	}
	got, err := s.GetSandboxCA(ctx(t), "box")
	if err != nil {
		t.Fatalf("GetSandboxCA: %v", err)
	}
	for what, c := range map[string]store.SandboxCA{"second put": second, "get": got} {
		if !same(c, first) || !c.CreatedAt.Equal(first.CreatedAt) || c.CreatedAt.Location() != time.UTC {
			t.Errorf("%s = %+v, want the first CA %+v", what, c, first)
		}
	}

	// Replicas racing to create a CA all get the same one.
	MustCreate(t, s, "race", false)
	const n = 10
	cas := make([]store.SandboxCA, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { cas[i], errs[i] = s.PutSandboxCA(ctx(t), ca("race", 100+i)) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("concurrent PutSandboxCA %d: %v", i, errs[i])
		}
		if !same(cas[i], cas[0]) || !cas[i].CreatedAt.Equal(cas[0].CreatedAt) {
			t.Errorf("concurrent PutSandboxCA %d = %+v, another got %+v", i, cas[i], cas[0])
		}
	}

	// The CA goes with its sandbox, and a new sandbox of that name starts
	// without one.
	if err := s.DeleteSandbox(ctx(t), "box", "alice"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetSandboxCA(ctx(t), "box")
	WantErr(t, "GetSandboxCA(deleted sandbox)", err, store.ErrNotFound)
	if _, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "box", Actor: "alice", Token: NewToken("sandbox-box-2", "", "")}); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetSandboxCA(ctx(t), "box")
	WantErr(t, "GetSandboxCA(re-created sandbox)", err, store.ErrNotFound)
	if c, err := s.PutSandboxCA(ctx(t), ca("box", 3)); err != nil || !same(c, ca("box", 3)) {
		t.Errorf("PutSandboxCA(re-created sandbox) = %+v, %v", c, err)
	}
	if c, err := s.GetSandboxCA(ctx(t), "race"); err != nil || !same(c, cas[0]) {
		t.Errorf("other sandbox's CA = %+v, %v", c, err)
	}
}

// ---- proxy statuses ----

func testProxyStatuses(t *testing.T, s *store.Store) {
	if ps := proxyStatuses(t, s, ""); len(ps) != 0 {
		t.Fatalf("ListProxyStatuses on an empty store = %+v", ps)
	}
	MustCreate(t, s, "a", true)
	MustCreate(t, s, "b", false)
	auditBefore := len(Audits(t, s, store.AuditFilter{}))

	a2 := store.ProxyStatus{
		Sandbox: "a", ProxyID: "p2", Replica: "gw-1", Build: "v1.2.3", Connected: true,
		ConnectedAt: usec(2030, 1), LastSeenAt: usec(2030, 2),
		AppliedVersion: 1, AppliedHash: "h1", LastAckAt: timePtr(usec(2030, 3)),
		LastNackVersion: 7, LastNackError: `schema: "x" ünïcode`, LastNackAt: timePtr(usec(2029, 4)),
		LagMillis: 1234, DecisionsDropped: 1 << 40,
		CredentialsGeneration: 3, CredentialsError: `provider "gh": secret.token is required`,
	}
	a1 := store.ProxyStatus{Sandbox: "a", ProxyID: "p1", Replica: "gw-2", Connected: true, ConnectedAt: usec(2030, 5), LastSeenAt: usec(2030, 6)}
	b1 := store.ProxyStatus{Sandbox: "b", ProxyID: "p1", Replica: "gw-1"} // every time unset
	ghost := store.ProxyStatus{Sandbox: "ghost", ProxyID: "p1", Replica: "gw-1", LastSeenAt: usec(2030, 7)}
	if err := s.SaveProxyStatuses(ctx(t), []store.ProxyStatus{a2, ghost, b1, a1}); err != nil {
		t.Fatalf("SaveProxyStatuses: %v", err)
	}
	wantStatuses(t, "statuses of a", proxyStatuses(t, s, "a"), a1, a2)
	wantStatuses(t, "statuses of b", proxyStatuses(t, s, "b"), b1)
	wantStatuses(t, "all statuses", proxyStatuses(t, s, ""), a1, a2, b1)
	wantStatuses(t, "statuses of a sandbox that does not exist", proxyStatuses(t, s, "ghost"))

	// An upsert replaces every field, unset times included.
	a1u := a1
	a1u.Replica, a1u.Build, a1u.Connected = "gw-2", "v2", false
	a1u.AppliedVersion, a1u.AppliedHash, a1u.LastAckAt = 1, "h1", timePtr(usec(2031, 1))
	a1u.LagMillis = 5
	a2u := a2
	a2u.LastAckAt, a2u.LastNackAt, a2u.ConnectedAt, a2u.LastNackError = nil, nil, time.Time{}, ""
	a3v1 := store.ProxyStatus{Sandbox: "a", ProxyID: "p3", AppliedVersion: 1, LastSeenAt: usec(2030, 8)}
	a3v2 := a3v1
	a3v2.AppliedVersion = 2 // later in the batch: wins
	if err := s.SaveProxyStatuses(ctx(t), []store.ProxyStatus{a1u, a3v1, a2u, a3v2}); err != nil {
		t.Fatalf("SaveProxyStatuses(update): %v", err)
	}
	wantStatuses(t, "all statuses after update", proxyStatuses(t, s, ""), a1u, a2u, a3v2, b1)

	// A proxy that moved to another replica stays connected there
	// whatever the replica it left says last; the replica it is on may
	// say it disconnected.
	moved := a1u
	moved.Replica, moved.Connected, moved.ConnectedAt, moved.AppliedVersion = "gw-3", true, usec(2031, 2), 2
	left := a1u
	left.LastSeenAt = usec(2031, 3) // the old replica's disconnect, written after
	if err := s.SaveProxyStatuses(ctx(t), []store.ProxyStatus{moved}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveProxyStatuses(ctx(t), []store.ProxyStatus{left}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, "statuses after a stale disconnect from the replica left", proxyStatuses(t, s, "a"), moved, a2u, a3v2)
	gone := moved
	gone.Connected, gone.LastSeenAt = false, usec(2031, 4)
	if err := s.SaveProxyStatuses(ctx(t), []store.ProxyStatus{gone}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, "statuses after a disconnect from the replica it was on", proxyStatuses(t, s, "a"), gone, a2u, a3v2)

	if err := s.SaveProxyStatuses(ctx(t), nil); err != nil {
		t.Errorf("SaveProxyStatuses(none): %v", err)
	}
	if after := len(Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("SaveProxyStatuses wrote %d audit entries, want none", after-auditBefore)
	}

	// Statuses go with their sandbox.
	if err := s.DeleteSandbox(ctx(t), "a", "alice"); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, "statuses of deleted sandbox", proxyStatuses(t, s, "a"))
	wantStatuses(t, "all statuses after delete", proxyStatuses(t, s, ""), b1)
	if _, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "a", Actor: "alice", Token: NewToken("sandbox-a-2", "", "")}); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, "statuses of re-created sandbox", proxyStatuses(t, s, "a"))
}

// ---- decisions ----

func testDecisions(t *testing.T, s *store.Store) {
	if ds := decisions(t, s, store.DecisionFilter{}); len(ds) != 0 {
		t.Fatalf("ListDecisions on an empty store = %+v", ds)
	}
	if n, err := s.AppendDecisions(ctx(t), nil); n != 0 || err != nil {
		t.Errorf("AppendDecisions(none) = %d, %v", n, err)
	}

	// 1,000 records in one call, for sandboxes that need not exist.
	const n = 1000
	verdicts := []string{"allow", "deny", "audit"}
	in := make([]store.Decision, n)
	for i := range in {
		d := store.Decision{
			ID: -1, ReceivedAt: usec(2001, 0), // set by the store: ignored
			ProxyID: fmt.Sprint("proxy-", i%5),
			Record: decision.Record{
				Time: usec(2030, i), Sandbox: fmt.Sprint("s", i%2),
				Decision: verdicts[i%3], Binary: "/usr/bin/curl", Host: fmt.Sprintf("h%d.example.com", i), Port: 443,
				Addr: "10.0.0.1:443", HTTPMethod: "GET", Path: fmt.Sprintf("/p/%d?q=ü", i),
				Entry: "e", Rule: fmt.Sprint("rule-", i%7), Reason: "matched", PolicyVersion: "3",
			},
		}
		if d.Decision == "deny" {
			d.DenialID = fmt.Sprint("den-", i)
		}
		in[i] = d
	}
	in[10].DenialID = in[1].DenialID                                      // two records of one denial
	in[500] = store.Decision{ProxyID: "proxy-x", Record: decision.Record{ // every field set
		Time: usec(2030, 500), Sandbox: "s0", Decision: "deny", Binary: "/bin/node",
		Host: "mcp.example.com", Port: 65535, Addr: "[2001:db8::1]:65535", HTTPMethod: "POST", Path: "/mcp",
		MCPMethod: "tools/call", Tool: "delete_repo", Entry: "github", Rule: "no-deletes", Reason: "tool denied: \"x\"",
		PolicyVersion: "12", DenialID: "den-x", VersionProbe: true,
		ArgumentsDigest: "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
		ReasonCode:      "tool_definition_changed",
		ToolDefinition:  "sha256:fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9",
	}}
	in[502] = store.Decision{ProxyID: "proxy-x", Record: decision.Record{ // a summary of 600 denials, with a cut field
		Time: usec(2030, 502), Sandbox: "s0", Decision: "deny", Host: "h.example.com", Port: 443, Path: "/aaaa",
		Summary: &decision.Summary{Count: 600, Last: usec(2030, 503), FirstDenialID: "dn_first", LastDenialID: "dn_last"},
		Cuts:    []decision.Cut{{Field: "path", Length: 61440, SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"}},
	}}
	in[501] = store.Decision{ProxyID: "proxy-y", Record: decision.Record{Sandbox: "s1", Decision: "allow"}} // every optional field unset

	got, err := s.AppendDecisions(ctx(t), in)
	if err != nil || got != n {
		t.Fatalf("AppendDecisions(%d) = %d, %v", n, got, err)
	}
	all := decisions(t, s, store.DecisionFilter{})
	if len(all) != n {
		t.Fatalf("ListDecisions = %d records, want %d", len(all), n)
	}
	for i, d := range all {
		if !sameDecision(d, in[i]) {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, d, in[i])
		}
		if d.ID <= 0 || (i > 0 && d.ID <= all[i-1].ID) {
			t.Errorf("record %d: id %d, want > 0 and increasing", i, d.ID)
		}
		Recent(t, "Decision.ReceivedAt", d.ReceivedAt)
		if t.Failed() {
			t.FailNow()
		}
	}

	// Filters.
	for _, f := range []store.DecisionFilter{
		{Sandbox: "s1"},
		{Decision: "deny"},
		{Sandbox: "s0", Decision: "audit"},
		{DenialID: in[1].DenialID},
		{DenialID: "den-x", Sandbox: "s0", Decision: "deny"},
		{DenialID: "den-x", Sandbox: "s1"},
		{Sandbox: "nowhere"},
		{Tool: "delete_repo"},
		{Tool: "delete_repo", Sandbox: "s1"},
	} {
		wantIDs(t, s, f, filterDecisions(all, func(d store.Decision) bool {
			return (f.Sandbox == "" || d.Sandbox == f.Sandbox) && (f.Decision == "" || d.Decision == f.Decision) &&
				(f.DenialID == "" || d.DenialID == f.DenialID) && (f.Tool == "" || d.Tool == f.Tool)
		}))
	}
	if ds := decisions(t, s, store.DecisionFilter{DenialID: in[1].DenialID}); len(ds) != 2 {
		t.Errorf("records of denial %s = %d, want 2", in[1].DenialID, len(ds))
	}

	// Limit without AfterID: the newest, oldest first.
	wantIDs(t, s, store.DecisionFilter{Limit: 10}, all[n-10:])
	wantIDs(t, s, store.DecisionFilter{Limit: 1}, all[n-1:])
	wantIDs(t, s, store.DecisionFilter{Limit: 2 * n}, all)
	s1 := filterDecisions(all, func(d store.Decision) bool { return d.Sandbox == "s1" })
	wantIDs(t, s, store.DecisionFilter{Sandbox: "s1", Limit: 3}, s1[len(s1)-3:])

	// AfterID: the records after it, oldest first, Limit of them.
	wantIDs(t, s, store.DecisionFilter{AfterID: all[n-1].ID}, nil)
	wantIDs(t, s, store.DecisionFilter{AfterID: all[899].ID}, all[900:])
	wantIDs(t, s, store.DecisionFilter{AfterID: all[99].ID, Limit: 5}, all[100:105])
	wantIDs(t, s, store.DecisionFilter{AfterID: all[499].ID, Sandbox: "s1", Limit: 4},
		filterDecisions(all[500:], func(d store.Decision) bool { return d.Sandbox == "s1" })[:4])
	// A negative AfterID pages from the first record (0 would mean the
	// newest).
	wantIDs(t, s, store.DecisionFilter{AfterID: -1, Limit: 3}, all[:3])
	var paged []store.Decision
	for after, pages := int64(-1), 0; ; pages++ {
		if pages > n/100+1 {
			t.Fatalf("paging did not end after %d pages", pages)
		}
		page := decisions(t, s, store.DecisionFilter{AfterID: after, Limit: 100})
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].ID
	}
	if len(paged) != n || paged[0].ID != all[0].ID || paged[n-1].ID != all[n-1].ID {
		t.Errorf("paging by AfterID returned %d records, want all %d", len(paged), n)
	}

	// A later append: stored after, and tailing from the last id sees it.
	more := []store.Decision{
		{ProxyID: "p", Record: decision.Record{Time: usec(2030, 2000), Sandbox: "s0", Decision: "deny", DenialID: "den-late"}},
		{ProxyID: "p", Record: decision.Record{Time: usec(2030, 2001), Sandbox: "s1", Decision: "allow"}},
	}
	if got, err := s.AppendDecisions(ctx(t), more); err != nil || got != 2 {
		t.Fatalf("AppendDecisions(2) = %d, %v", got, err)
	}
	tail := decisions(t, s, store.DecisionFilter{AfterID: all[n-1].ID})
	if len(tail) != 2 || !sameDecision(tail[0], more[0]) || !sameDecision(tail[1], more[1]) || tail[0].ID <= all[n-1].ID {
		t.Errorf("tail after the first batch = %+v, want %+v", tail, more)
	}

	// Records outlive their sandbox.
	MustCreate(t, s, "gone", false)
	if _, err := s.AppendDecisions(ctx(t), []store.Decision{{ProxyID: "p", Record: decision.Record{Sandbox: "gone", Decision: "deny"}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx(t), "gone", "alice"); err != nil {
		t.Fatal(err)
	}
	if ds := decisions(t, s, store.DecisionFilter{Sandbox: "gone"}); len(ds) != 1 {
		t.Errorf("records of a deleted sandbox = %d, want 1", len(ds))
	}
}

// ---- invalid input ----

// testPushInvalidInput: inputs the schema cannot hold are refused with a
// plain error before the database is touched, and nothing of the call is
// stored (a batch with one bad item is refused whole).
func testPushInvalidInput(t *testing.T, s *store.Store) {
	MustCreate(t, s, "box", false)
	auditBefore := len(Audits(t, s, store.AuditFilter{}))
	good := newSigningKey(t, nil)
	other := newSigningKey(t, nil)
	key := func(change func(k *store.SigningKey)) store.SigningKey {
		k := good
		change(&k)
		return k
	}
	ca := store.SandboxCA{Sandbox: "box", CertPEM: []byte("cert"), KeyPEM: []byte("key")}
	status := store.ProxyStatus{Sandbox: "box", ProxyID: "p1", LastSeenAt: usec(2030, 1)}
	record := store.Decision{ProxyID: "p1", Record: decision.Record{Sandbox: "box", Decision: "allow", Port: 443}}
	for what, call := range map[string]func() error{
		"AddSigningKey(empty id)": func() error {
			_, err := s.AddSigningKey(ctx(t), key(func(k *store.SigningKey) { k.ID = "" }), "", "a")
			return err
		},
		"AddSigningKey(short public key)": func() error {
			_, err := s.AddSigningKey(ctx(t), key(func(k *store.SigningKey) { k.PublicKey = k.PublicKey[:31] }), "", "a")
			return err
		},
		"AddSigningKey(no public key)": func() error {
			_, err := s.AddSigningKey(ctx(t), key(func(k *store.SigningKey) { k.PublicKey = nil }), "", "a")
			return err
		},
		"AddSigningKey(seed as private key)": func() error {
			_, err := s.AddSigningKey(ctx(t), key(func(k *store.SigningKey) { k.PrivateKey = k.PrivateKey[:32] }), "", "a")
			return err
		},
		"AddSigningKey(long private key)": func() error {
			_, err := s.AddSigningKey(ctx(t), key(func(k *store.SigningKey) { k.PrivateKey = append(slices.Clone(k.PrivateKey), 0) }), "", "a")
			return err
		},
		"AddSigningKey(private key of another public key)": func() error {
			_, err := s.AddSigningKey(ctx(t), key(func(k *store.SigningKey) { k.PrivateKey = other.PrivateKey }), "", "a")
			return err
		},
		"PutSandboxCA(empty sandbox)": func() error {
			c := ca
			c.Sandbox = ""
			_, err := s.PutSandboxCA(ctx(t), c)
			return err
		},
		"PutSandboxCA(empty certificate)": func() error {
			c := ca
			c.CertPEM = nil
			_, err := s.PutSandboxCA(ctx(t), c)
			return err
		},
		"PutSandboxCA(empty key)": func() error {
			c := ca
			c.KeyPEM = []byte{}
			_, err := s.PutSandboxCA(ctx(t), c)
			return err
		},
		"SaveProxyStatuses(empty sandbox)": func() error {
			bad := status
			bad.Sandbox = ""
			return s.SaveProxyStatuses(ctx(t), []store.ProxyStatus{status, bad})
		},
		"SaveProxyStatuses(empty proxy id)": func() error {
			bad := status
			bad.ProxyID = ""
			return s.SaveProxyStatuses(ctx(t), []store.ProxyStatus{status, bad})
		},
		"AppendDecisions(empty sandbox)": func() error {
			bad := record
			bad.Sandbox = ""
			_, err := s.AppendDecisions(ctx(t), []store.Decision{record, bad})
			return err
		},
		"AppendDecisions(empty proxy id)": func() error {
			bad := record
			bad.ProxyID = ""
			_, err := s.AppendDecisions(ctx(t), []store.Decision{record, bad})
			return err
		},
		"AppendDecisions(port out of range)": func() error {
			bad := record
			bad.Port = 65536
			_, err := s.AppendDecisions(ctx(t), []store.Decision{record, bad})
			return err
		},
		"AppendDecisions(negative port)": func() error {
			bad := record
			bad.Port = -1
			_, err := s.AppendDecisions(ctx(t), []store.Decision{bad})
			return err
		},
	} {
		WantPlainError(t, what, call())
	}
	if ks := signingKeys(t, s); len(ks) != 0 {
		t.Errorf("invalid keys stored: %+v", ks)
	}
	if _, err := s.GetSandboxCA(ctx(t), "box"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetSandboxCA after invalid puts: %v, want ErrNotFound", err)
	}
	if ps := proxyStatuses(t, s, ""); len(ps) != 0 {
		t.Errorf("statuses stored from invalid batches: %+v", ps)
	}
	if ds := decisions(t, s, store.DecisionFilter{}); len(ds) != 0 {
		t.Errorf("records stored from invalid batches: %+v", ds)
	}
	if after := len(Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("invalid inputs wrote %d audit entries", after-auditBefore)
	}
}
