package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/store"
)

// Tests of policy versions (append, compare-and-swap, hashes, history,
// documents and provenance kept as given, concurrent writers), and the
// helpers that append versions the way tests of the store and of what
// reads versions need them: without package lifecycle, which commits every
// version of the product.

// ---- helpers ----

// AppendVersion stores the next version of in.Sandbox if its current
// version is still in.ExpectedVersion (store.ErrConflict otherwise): it
// is store.AppendVersion in a transaction of its own, with none of the
// product's rules (frozen sandboxes, fixed sections), which package
// lifecycle adds when it commits a version. For the suite and the tests of
// what reads versions.
func AppendVersion(ctx context.Context, s *store.Store, in store.AppendPolicy) (store.PolicyVersion, error) {
	if err := in.Prepare(); err != nil {
		return store.PolicyVersion{}, err
	}
	pv, err := store.Transact(ctx, s.Driver, func(tx store.Tx) (store.PolicyVersion, error) { return store.AppendVersion(ctx, tx, in) })
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("append policy version of %q: %w", in.Sandbox, err)
	}
	return pv, nil
}

// MustAppend commits Doc(n) as the version after expected.
func MustAppend(t *testing.T, s *store.Store, sandbox string, expected int64, n int) store.PolicyVersion {
	t.Helper()
	d, h := Doc(n)
	pv, err := AppendVersion(ctx(t), s, store.AppendPolicy{
		Sandbox: sandbox, ExpectedVersion: expected, Hash: h, Document: d, Author: "bob", Source: store.SourceSet,
	})
	return must(t, pv, err, "AppendVersion(%q, expected %d)", sandbox, expected)
}

// ---- policy versions ----

func testPolicyAppend(t *testing.T, s *store.Store) {
	MustCreate(t, s, "app", false)
	_, err := s.GetPolicyVersion(ctx(t), "app", 0)
	WantErr(t, "GetPolicyVersion(current, none yet)", err, store.ErrNotFound)
	if vs, err := s.ListPolicyVersions(ctx(t), "app"); err != nil || len(vs) != 0 {
		t.Errorf("ListPolicyVersions(no policy) = %v, %v; want none", vs, err)
	}

	v1 := MustAppend(t, s, "app", 0, 1)
	d1, h1 := Doc(1)
	if v1.Version != 1 || v1.Hash != h1 || string(v1.Document) != string(d1) || v1.Author != "bob" ||
		v1.Source != store.SourceSet || v1.Sandbox != "app" {
		t.Errorf("first append = %+v", v1)
	}
	Recent(t, "PolicyVersion.CreatedAt", v1.CreatedAt)
	d2, h2 := Doc(2)
	v2, err := AppendVersion(ctx(t), s, store.AppendPolicy{
		Sandbox: "app", ExpectedVersion: 1, Hash: h2, Document: d2, Author: "carol", Source: store.SourceRollback,
	})
	if err != nil {
		t.Fatalf("second append: %v", err)
	}
	if v2.Version != 2 || v2.Source != store.SourceRollback || v2.Author != "carol" {
		t.Errorf("second append = %+v", v2)
	}

	sb, err := s.GetSandbox(ctx(t), "app")
	if err != nil || sb.CurrentVersion != 2 || sb.CurrentHash != h2 {
		t.Errorf("GetSandbox after two appends = %+v, %v", sb, err)
	}
	for _, tc := range []struct {
		ask  int64
		want int64
		hash string
		doc  []byte
	}{{0, 2, h2, d2}, {1, 1, h1, d1}, {2, 2, h2, d2}} {
		pv, err := s.GetPolicyVersion(ctx(t), "app", tc.ask)
		if err != nil {
			t.Fatalf("GetPolicyVersion(%d): %v", tc.ask, err)
		}
		if pv.Version != tc.want || pv.Hash != tc.hash || string(pv.Document) != string(tc.doc) {
			t.Errorf("GetPolicyVersion(%d) = version %d hash %s, want %d %s", tc.ask, pv.Version, pv.Hash, tc.want, tc.hash)
		}
	}
	for _, v := range []int64{3, 99, -1} {
		_, err := s.GetPolicyVersion(ctx(t), "app", v)
		WantErr(t, fmt.Sprintf("GetPolicyVersion(%d)", v), err, store.ErrNotFound)
	}

	es := Audits(t, s, store.AuditFilter{Sandbox: "app"})
	if es[0].Action != store.ActionPolicySet || es[0].BeforeHash != h1 || es[0].AfterHash != h2 ||
		es[0].Actor != "carol" || es[0].Detail["version"] != "2" || es[0].Detail["source"] != store.SourceRollback {
		t.Errorf("newest audit entry = %+v, want policy.set v2 by carol %s -> %s", es[0], h1, h2)
	}
	if es[1].Action != store.ActionPolicySet || es[1].BeforeHash != "" || es[1].AfterHash != h1 || es[1].Actor != "bob" {
		t.Errorf("second newest audit entry = %+v, want policy.set v1 by bob", es[1])
	}
}

func testPolicyStale(t *testing.T, s *store.Store) {
	MustCreate(t, s, "stale", true)
	MustAppend(t, s, "stale", 1, 2)
	before := Audits(t, s, store.AuditFilter{})
	for _, expected := range []int64{0, 1, 3, 100} {
		d, h := Doc(50)
		_, err := AppendVersion(ctx(t), s, store.AppendPolicy{
			Sandbox: "stale", ExpectedVersion: expected, Hash: h, Document: d, Author: "eve",
		})
		WantErr(t, fmt.Sprintf("AppendVersion(expected %d, current 2)", expected), err, store.ErrConflict)
	}
	vs, err := s.ListPolicyVersions(ctx(t), "stale")
	if err != nil || len(vs) != 2 {
		t.Fatalf("versions after stale writes = %v, %v; want 2", vs, err)
	}
	_, h2 := Doc(2)
	if sb, err := s.GetSandbox(ctx(t), "stale"); err != nil || sb.CurrentVersion != 2 || sb.CurrentHash != h2 {
		t.Errorf("sandbox after stale writes = %+v, %v", sb, err)
	}
	if after := Audits(t, s, store.AuditFilter{}); len(after) != len(before) {
		t.Errorf("audit grew from %d to %d entries on refused writes", len(before), len(after))
	}
}

func testPolicyMissingSandbox(t *testing.T, s *store.Store) {
	d, h := Doc(1)
	_, err := AppendVersion(ctx(t), s, store.AppendPolicy{Sandbox: "ghost", Hash: h, Document: d, Author: "bob"})
	WantErr(t, "AppendVersion(missing sandbox)", err, store.ErrNotFound)
	_, err = s.GetPolicyVersion(ctx(t), "ghost", 0)
	WantErr(t, "GetPolicyVersion(missing sandbox)", err, store.ErrNotFound)
	_, err = s.ListPolicyVersions(ctx(t), "ghost")
	WantErr(t, "ListPolicyVersions(missing sandbox)", err, store.ErrNotFound)
	if es := Audits(t, s, store.AuditFilter{}); len(es) != 0 {
		t.Errorf("audit after refused writes = %+v, want empty", es)
	}
}

// PolicyHashes lists a range of one sandbox's versions' hashes, oldest
// first: none outside it, none of another sandbox.
func testPolicyHashes(t *testing.T, s *store.Store) {
	MustCreate(t, s, "hashes", true)
	MustCreate(t, s, "other", true)
	for v := int64(1); v < 5; v++ {
		MustAppend(t, s, "hashes", v, int(v)+1)
	}
	vs := Versions(t, s, "hashes")
	for _, tc := range []struct{ from, to int64 }{{1, 5}, {2, 4}, {3, 3}, {5, 9}, {6, 9}, {4, 2}} {
		got, err := s.PolicyHashes(ctx(t), "hashes", tc.from, tc.to)
		if err != nil {
			t.Fatalf("PolicyHashes(%d, %d): %v", tc.from, tc.to, err)
		}
		var want []string
		for _, v := range vs {
			if v.Version >= tc.from && v.Version <= tc.to {
				want = append(want, v.Hash)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("PolicyHashes(%d, %d) = %v, want %v", tc.from, tc.to, got, want)
		}
	}
}

func testPolicyHistory(t *testing.T, s *store.Store) {
	MustCreate(t, s, "hist", true)
	MustAppend(t, s, "hist", 1, 2)
	_, err := AppendVersion(ctx(t), s, store.AppendPolicy{
		Sandbox: "hist", ExpectedVersion: 2, Hash: HashOf([]byte(`{"v":3}`)), Document: []byte(`{"v":3}`),
		Author: "dave", Source: store.SourceRollback, Provenance: map[string]string{"rollback_to": "1"},
	})
	if err != nil {
		t.Fatalf("append v3: %v", err)
	}
	MustCreate(t, s, "other", true) // must not show up

	vs, err := s.ListPolicyVersions(ctx(t), "hist")
	if err != nil {
		t.Fatalf("ListPolicyVersions: %v", err)
	}
	if len(vs) != 3 {
		t.Fatalf("ListPolicyVersions = %d versions, want 3: %+v", len(vs), vs)
	}
	wantSrc := []string{store.SourceCreate, store.SourceSet, store.SourceRollback}
	wantAuthor := []string{"alice", "bob", "dave"}
	for i, v := range vs {
		if v.Version != int64(i+1) || v.Sandbox != "hist" || v.Source != wantSrc[i] || v.Author != wantAuthor[i] {
			t.Errorf("history[%d] = %+v", i, v)
		}
		if v.Document != nil {
			t.Errorf("history[%d] carries a document (%d bytes); history must not", i, len(v.Document))
		}
		if v.Hash == "" {
			t.Errorf("history[%d] has no hash", i)
		}
		if i > 0 && v.CreatedAt.Before(vs[i-1].CreatedAt) {
			t.Errorf("history[%d] created before history[%d]", i, i-1)
		}
	}
	if vs[2].Provenance["rollback_to"] != "1" {
		t.Errorf("history[2].Provenance = %v", vs[2].Provenance)
	}
}

func testPolicyDocumentBytes(t *testing.T, s *store.Store) {
	MustCreate(t, s, "bytes", false)
	big := `{"x":"` + strings.Repeat("a", 1<<20) + `"}`
	docs := []string{
		`{"z":1,"a":2}`,                          // key order JSONB would change
		"{\n  \"a\" :  [ 3, 1, 2 ] ,\"b\":{}}\n", // whitespace and trailing newline
		`{"a":1,"a":2}`,                          // duplicate keys JSONB would collapse
		`{"s":"caf\u00e9 é 日本 \ud83d\ude00"}`,    // escapes next to raw UTF-8
		`{"n":1.0e+2,"m":-0,"big":12345678901234567890}`,
		big,
	}
	for i, d := range docs {
		h := HashOf([]byte(d))
		pv, err := AppendVersion(ctx(t), s, store.AppendPolicy{
			Sandbox: "bytes", ExpectedVersion: int64(i), Hash: h, Document: []byte(d), Author: "bob",
		})
		if err != nil {
			t.Fatalf("append doc %d: %v", i, err)
		}
		got, err := s.GetPolicyVersion(ctx(t), "bytes", pv.Version)
		if err != nil {
			t.Fatalf("get doc %d: %v", i, err)
		}
		if string(got.Document) != d || HashOf(got.Document) != h || got.Hash != h {
			t.Errorf("doc %d came back changed:\n got %.200q\nwant %.200q", i, got.Document, d)
		}
	}
}

func testPolicyProvenance(t *testing.T, s *store.Store) {
	MustCreate(t, s, "prov", false)
	prov := map[string]string{
		"proposal": "42", "approved_by": "alice,bob", "reason": `needs "quotes" and ünïcode`, "empty": "",
	}
	d, h := Doc(1)
	in := store.AppendPolicy{Sandbox: "prov", Hash: h, Document: d, Author: "bob", Source: "proposal", Provenance: prov}
	pv, err := AppendVersion(ctx(t), s, in)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	prov["proposal"] = "changed after the call"
	if pv.Provenance["proposal"] != "42" {
		t.Errorf("returned provenance aliases the caller's map")
	}
	prov["proposal"] = "42"
	got, err := s.GetPolicyVersion(ctx(t), "prov", 1)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if len(got.Provenance) != len(prov) {
		t.Errorf("provenance = %v, want %v", got.Provenance, prov)
	}
	for k, v := range prov {
		if got.Provenance[k] != v {
			t.Errorf("provenance[%q] = %q, want %q", k, got.Provenance[k], v)
		}
	}
	if got.Source != "proposal" {
		t.Errorf("source = %q, want proposal", got.Source)
	}

	// No provenance reads back empty.
	MustAppend(t, s, "prov", 1, 2)
	got, err = s.GetPolicyVersion(ctx(t), "prov", 2)
	if err != nil || len(got.Provenance) != 0 {
		t.Errorf("empty provenance = %v, %v", got.Provenance, err)
	}
}

// testPolicyConcurrentWriters is the compare-and-swap under load: many
// writers expecting the same version, exactly one wins.
func testPolicyConcurrentWriters(t *testing.T, s *store.Store) {
	MustCreate(t, s, "race", true)
	errs := race(100, func(i int) error {
		d := fmt.Appendf(nil, `{"writer":%d}`, i)
		_, err := AppendVersion(ctx(t), s, store.AppendPolicy{
			Sandbox: "race", ExpectedVersion: 1, Hash: HashOf(d), Document: d, Author: fmt.Sprint("w", i),
		})
		return err
	})
	winner := oneWinner(t, "writer", errs)
	vs, err := s.ListPolicyVersions(ctx(t), "race")
	if err != nil || len(vs) != 2 {
		t.Fatalf("versions after the race = %d, %v; want 2", len(vs), err)
	}
	cur, err := s.GetPolicyVersion(ctx(t), "race", 0)
	if err != nil {
		t.Fatalf("GetPolicyVersion: %v", err)
	}
	if want := fmt.Sprintf(`{"writer":%d}`, winner); cur.Version != 2 || string(cur.Document) != want || cur.Author != fmt.Sprint("w", winner) {
		t.Errorf("current = version %d %s by %s, want 2 %s", cur.Version, cur.Document, cur.Author, want)
	}
	sets := 0
	for _, e := range Audits(t, s, store.AuditFilter{Sandbox: "race"}) {
		if e.Action == store.ActionPolicySet {
			sets++
		}
	}
	if sets != 2 {
		t.Errorf("policy.set audit entries = %d, want 2 (create + winner)", sets)
	}
}
