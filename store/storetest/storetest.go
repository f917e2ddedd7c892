// Package storetest is the behaviour suite every store.Driver must pass.
// Each engine's tests call Run with a function that opens a fresh, empty
// driver; the suite runs the Store methods through store.New(driver) and
// the Tx primitives on the driver itself, so the same assertions hold for
// Postgres and SQLite.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Run runs the suite. open must return a new, empty driver for every call
// and close it when the test ends (t.Cleanup). Subtests run in parallel.
func Run(t *testing.T, open func(t *testing.T) store.Driver) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s *store.Store)
	}{
		{"SandboxCreateGetList", testSandboxCreateGetList},
		{"SandboxDuplicate", testSandboxDuplicate},
		{"SandboxCreateWithPolicy", testSandboxCreateWithPolicy},
		{"SandboxConcurrentCreate", testSandboxConcurrentCreate},
		{"SandboxDelete", testSandboxDelete},
		{"SandboxRotateToken", testSandboxRotateToken},
		{"PolicyAppend", testPolicyAppend},
		{"PolicyStaleExpectedVersion", testPolicyStale},
		{"PolicyMissingSandbox", testPolicyMissingSandbox},
		{"PolicyHistory", testPolicyHistory},
		{"PolicyDocumentBytes", testPolicyDocumentBytes},
		{"PolicyProvenance", testPolicyProvenance},
		{"PolicyConcurrentWriters", testPolicyConcurrentWriters},
		{"TokenCreateAndLookup", testTokenCreateAndLookup},
		{"TokenInvalid", testTokenInvalid},
		{"InvalidInput", testInvalidInput},
		{"CallerInputUnchanged", testCallerInputUnchanged},
		{"TokenList", testTokenList},
		{"TokenRevoke", testTokenRevoke},
		{"LastAdmin", testLastAdmin},
		{"TokenTouch", testTokenTouch},
		{"TokenCount", testTokenCount},
		{"Audit", testAudit},
		{"SigningKeyChain", testSigningKeyChain},
		{"SigningKeyConcurrentAdd", testSigningKeyConcurrent},
		{"SandboxCA", testSandboxCA},
		{"ProxyStatuses", testProxyStatuses},
		{"Decisions", testDecisions},
		{"DecisionRetention", testDecisionRetention},
		{"DecisionRetentionBatches", testDecisionRetentionBatches},
		{"PushInvalidInput", testPushInvalidInput},
		{"SandboxBoundary", testSandboxBoundary},
		{"CredentialedHosts", testCredentialedHosts},
		{"ProposalCreateGetList", testProposalCreateGetList},
		{"ProposalIdempotency", testProposalIdempotency},
		{"ProposalDedupe", testProposalDedupe},
		{"ProposalSupersede", testProposalSupersede},
		{"ProposalRateLimit", testProposalRateLimit},
		{"ProposalStatus", testProposalStatus},
		{"ProposalRebase", testProposalRebase},
		{"ProposalConcurrentIdempotency", testProposalConcurrentIdempotency},
		{"ProposalSandboxDelete", testProposalSandboxDelete},
		{"AdvisorInvalidInput", testAdvisorInvalidInput},
		{"ApprovalAdd", testApprovalAdd},
		{"ApplyProposal", testApplyProposal},
		{"ApplyStaleBase", testApplyStaleBase},
		{"ApplyConcurrent", testApplyConcurrent},
		{"ExpireProposals", testExpireProposals},
		{"FreezeSandbox", testFreezeSandbox},
		{"ApprovalPolicies", testApprovalPolicies},
		{"ApprovalSandboxDelete", testApprovalSandboxDelete},
		{"Ping", testPing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, store.New(open(t)))
		})
	}
}

// ---- helpers ----

func ctx(t *testing.T) context.Context { return t.Context() }

// newToken returns a token with a random secret's hash.
func newToken(name, role, sandbox string) store.Token {
	var b [32]byte
	_, _ = rand.Read(b[:])
	sum := sha256.Sum256(b[:])
	return store.Token{Name: name, Role: role, Sandbox: sandbox, Hash: hex.EncodeToString(sum[:]), CreatedBy: "tester"}
}

// doc returns a small canonical-looking policy document and its hash.
func doc(n int) ([]byte, string) {
	d := fmt.Appendf(nil, `{"network_policies":{"p%d":{"endpoints":[{"host":"h%d.example.com","port":443}]}},"version":1}`, n, n)
	return d, hashOf(d)
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func mustCreate(t *testing.T, s *store.Store, name string, withPolicy bool) (store.Sandbox, store.Token) {
	t.Helper()
	tok := newToken("sandbox-"+name, "", "")
	in := store.CreateSandbox{Name: name, Actor: "alice", Token: tok}
	if withPolicy {
		d, h := doc(1)
		in.Policy = &store.PolicyVersion{Hash: h, Document: d, Author: "alice", Source: store.SourceCreate}
	}
	sb, err := s.CreateSandbox(ctx(t), in)
	if err != nil {
		t.Fatalf("CreateSandbox(%q): %v", name, err)
	}
	return sb, tok
}

func mustAppend(t *testing.T, s *store.Store, sandbox string, expected int64, n int) store.PolicyVersion {
	t.Helper()
	d, h := doc(n)
	pv, err := s.AppendPolicyVersion(ctx(t), store.AppendPolicy{
		Sandbox: sandbox, ExpectedVersion: expected, Hash: h, Document: d, Author: "bob", Source: store.SourceSet,
	})
	if err != nil {
		t.Fatalf("AppendPolicyVersion(%q, expected %d): %v", sandbox, expected, err)
	}
	return pv
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// recent checks a store-assigned time is close to now, in UTC.
func recent(t *testing.T, what string, at time.Time) {
	t.Helper()
	if d := time.Since(at); d < -5*time.Second || d > 5*time.Minute {
		t.Errorf("%s = %v, not close to now (%v)", what, at, time.Now())
	}
	if at.Location() != time.UTC {
		t.Errorf("%s = %v, want UTC", what, at)
	}
}

func audits(t *testing.T, s *store.Store, f store.AuditFilter) []store.AuditEntry {
	t.Helper()
	es, err := s.ListAudit(ctx(t), f)
	if err != nil {
		t.Fatalf("ListAudit(%+v): %v", f, err)
	}
	return es
}

// findAudit returns the newest entry with that action and target.
func findAudit(t *testing.T, es []store.AuditEntry, action, target string) store.AuditEntry {
	t.Helper()
	for _, e := range es {
		if e.Action == action && e.Target == target {
			return e
		}
	}
	t.Fatalf("no audit entry %s on %q in %+v", action, target, es)
	return store.AuditEntry{}
}

// ---- sandboxes ----

func testSandboxCreateGetList(t *testing.T, s *store.Store) {
	sbs, err := s.ListSandboxes(ctx(t))
	if err != nil || len(sbs) != 0 {
		t.Fatalf("ListSandboxes on an empty store = %v, %v; want none", sbs, err)
	}
	b, _ := mustCreate(t, s, "beta", false)
	mustCreate(t, s, "alpha", false)
	if b.Name != "beta" || b.CurrentVersion != 0 || b.CurrentHash != "" || b.CreatedBy != "alice" {
		t.Errorf("CreateSandbox = %+v", b)
	}
	recent(t, "CreatedAt", b.CreatedAt)

	got, err := s.GetSandbox(ctx(t), "beta")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if got.Name != b.Name || got.CurrentVersion != 0 || got.CreatedBy != "alice" || !got.CreatedAt.Equal(b.CreatedAt) {
		t.Errorf("GetSandbox = %+v, want %+v", got, b)
	}
	_, err = s.GetSandbox(ctx(t), "gamma")
	wantErr(t, "GetSandbox(missing)", err, store.ErrNotFound)

	sbs, err = s.ListSandboxes(ctx(t))
	if err != nil {
		t.Fatalf("ListSandboxes: %v", err)
	}
	var names []string
	for _, sb := range sbs {
		names = append(names, sb.Name)
	}
	if !slices.Equal(names, []string{"alpha", "beta"}) {
		t.Errorf("ListSandboxes names = %v, want [alpha beta]", names)
	}
}

func testSandboxDuplicate(t *testing.T, s *store.Store) {
	mustCreate(t, s, "dup", false)
	before := audits(t, s, store.AuditFilter{})
	tok := newToken("sandbox-dup-2", "", "")
	d, h := doc(7)
	_, err := s.CreateSandbox(ctx(t), store.CreateSandbox{
		Name: "dup", Actor: "mallory", Token: tok,
		Policy: &store.PolicyVersion{Hash: h, Document: d, Author: "mallory"},
	})
	wantErr(t, "CreateSandbox(duplicate)", err, store.ErrAlreadyExists)

	// Nothing of the failed call is stored.
	_, err = s.TokenByHash(ctx(t), tok.Hash)
	wantErr(t, "TokenByHash(token of the failed create)", err, store.ErrNotFound)
	sb, err := s.GetSandbox(ctx(t), "dup")
	if err != nil || sb.CurrentVersion != 0 || sb.CreatedBy != "alice" {
		t.Errorf("GetSandbox after duplicate create = %+v, %v", sb, err)
	}
	if after := audits(t, s, store.AuditFilter{}); len(after) != len(before) {
		t.Errorf("audit grew from %d to %d entries on a failed create", len(before), len(after))
	}

	// A token name already used is refused too, and nothing is created.
	_, err = s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "other", Actor: "alice", Token: newToken("sandbox-dup", "", "")})
	wantErr(t, "CreateSandbox(token name taken)", err, store.ErrAlreadyExists)
	_, err = s.GetSandbox(ctx(t), "other")
	wantErr(t, "GetSandbox(rolled back)", err, store.ErrNotFound)
}

func testSandboxCreateWithPolicy(t *testing.T, s *store.Store) {
	sb, tok := mustCreate(t, s, "web", true)
	d, h := doc(1)
	if sb.CurrentVersion != 1 || sb.CurrentHash != h {
		t.Errorf("CreateSandbox with policy = %+v, want version 1 hash %s", sb, h)
	}
	pv, err := s.GetPolicyVersion(ctx(t), "web", 0)
	if err != nil {
		t.Fatalf("GetPolicyVersion(current): %v", err)
	}
	if pv.Version != 1 || pv.Hash != h || string(pv.Document) != string(d) || pv.Source != store.SourceCreate ||
		pv.Author != "alice" || pv.Sandbox != "web" {
		t.Errorf("version 1 = %+v", pv)
	}
	recent(t, "PolicyVersion.CreatedAt", pv.CreatedAt)

	got, err := s.TokenByHash(ctx(t), tok.Hash)
	if err != nil {
		t.Fatalf("TokenByHash(sandbox token): %v", err)
	}
	if got.Role != store.RoleSandbox || got.Sandbox != "web" || got.Name != tok.Name || got.RevokedAt != nil || got.ID == 0 {
		t.Errorf("sandbox token = %+v", got)
	}

	es := audits(t, s, store.AuditFilter{Sandbox: "web"})
	c := findAudit(t, es, store.ActionSandboxCreate, "web")
	if c.Actor != "alice" || c.AfterHash != h || c.BeforeHash != "" {
		t.Errorf("sandbox.create audit = %+v", c)
	}
	p := findAudit(t, es, store.ActionPolicySet, "web")
	if p.Actor != "alice" || p.BeforeHash != "" || p.AfterHash != h || p.Detail["version"] != "1" {
		t.Errorf("policy.set audit = %+v", p)
	}
	findAudit(t, es, store.ActionTokenCreate, tok.Name)
}

func testSandboxConcurrentCreate(t *testing.T, s *store.Store) {
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.CreateSandbox(ctx(t), store.CreateSandbox{
				Name: "race", Actor: "alice", Token: newToken(fmt.Sprintf("sandbox-race-%d", i), "", ""),
			})
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrAlreadyExists):
			t.Errorf("concurrent CreateSandbox: %v, want nil or ErrAlreadyExists", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d concurrent creates succeeded, want 1", ok)
	}
	if c, err := s.CountTokens(ctx(t), store.RoleSandbox); err != nil || c != 1 {
		t.Errorf("CountTokens(sandbox) = %d, %v; want 1", c, err)
	}
}

func testSandboxDelete(t *testing.T, s *store.Store) {
	_, tok := mustCreate(t, s, "doomed", true)
	_, hash2 := doc(2)
	mustAppend(t, s, "doomed", 1, 2)
	admin, err := s.CreateToken(ctx(t), newToken("root", store.RoleAdmin, ""), "alice")
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	mustCreate(t, s, "survivor", true)

	if err := s.DeleteSandbox(ctx(t), "doomed", "carol"); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	_, err = s.GetSandbox(ctx(t), "doomed")
	wantErr(t, "GetSandbox(deleted)", err, store.ErrNotFound)
	for _, v := range []int64{0, 1, 2} {
		_, err = s.GetPolicyVersion(ctx(t), "doomed", v)
		wantErr(t, fmt.Sprintf("GetPolicyVersion(deleted, %d)", v), err, store.ErrNotFound)
	}
	_, err = s.ListPolicyVersions(ctx(t), "doomed")
	wantErr(t, "ListPolicyVersions(deleted)", err, store.ErrNotFound)
	_, err = s.AppendPolicyVersion(ctx(t), store.AppendPolicy{Sandbox: "doomed", ExpectedVersion: 2, Hash: "h", Document: []byte("{}")})
	wantErr(t, "AppendPolicyVersion(deleted)", err, store.ErrNotFound)

	// Its tokens are revoked, not deleted; other tokens are untouched.
	got, err := s.TokenByHash(ctx(t), tok.Hash)
	if err != nil || got.RevokedAt == nil {
		t.Errorf("sandbox token after delete = %+v, %v; want revoked", got, err)
	}
	if got, err := s.TokenByHash(ctx(t), admin.Hash); err != nil || got.RevokedAt != nil {
		t.Errorf("admin token after delete = %+v, %v; want live", got, err)
	}
	if sb, err := s.GetSandbox(ctx(t), "survivor"); err != nil || sb.CurrentVersion != 1 {
		t.Errorf("other sandbox after delete = %+v, %v", sb, err)
	}

	// The audit log keeps the sandbox's history.
	es := audits(t, s, store.AuditFilter{Sandbox: "doomed"})
	del := findAudit(t, es, store.ActionSandboxDelete, "doomed")
	if del.Actor != "carol" || del.BeforeHash != hash2 || del.AfterHash != "" || del.Detail["tokens_revoked"] != "1" {
		t.Errorf("sandbox.delete audit = %+v", del)
	}
	if es[0].ID != del.ID {
		t.Errorf("newest audit entry = %+v, want the delete", es[0])
	}
	findAudit(t, es, store.ActionSandboxCreate, "doomed")
	if n := len(es); n != 5 { // create, token, policy v1, policy v2, delete
		t.Errorf("audit entries of deleted sandbox = %d, want 5: %+v", n, es)
	}

	err = s.DeleteSandbox(ctx(t), "doomed", "carol")
	wantErr(t, "DeleteSandbox(twice)", err, store.ErrNotFound)

	// The name can be used again, starting afresh.
	if _, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "doomed", Actor: "alice", Token: newToken("sandbox-doomed-2", "", "")}); err != nil {
		t.Fatalf("re-create deleted sandbox: %v", err)
	}
	if vs, err := s.ListPolicyVersions(ctx(t), "doomed"); err != nil || len(vs) != 0 {
		t.Errorf("versions of re-created sandbox = %v, %v; want none", vs, err)
	}
}

func testSandboxRotateToken(t *testing.T, s *store.Store) {
	_, old := mustCreate(t, s, "rot", false)
	next := newToken("sandbox-rot-2", "", "") // role and sandbox are filled in by the store
	got, err := s.RotateSandboxToken(ctx(t), "rot", "alice", next)
	if err != nil {
		t.Fatalf("RotateSandboxToken: %v", err)
	}
	if got.ID == 0 || got.Name != next.Name || got.Role != store.RoleSandbox || got.Sandbox != "rot" || got.RevokedAt != nil {
		t.Errorf("rotated token = %+v", got)
	}
	recent(t, "Token.CreatedAt", got.CreatedAt)
	if o, err := s.TokenByHash(ctx(t), old.Hash); err != nil || o.RevokedAt == nil {
		t.Errorf("old token = %+v, %v; want revoked", o, err)
	}
	if n, err := s.TokenByHash(ctx(t), next.Hash); err != nil || n.RevokedAt != nil {
		t.Errorf("new token = %+v, %v; want live", n, err)
	}
	if c, err := s.CountTokens(ctx(t), store.RoleSandbox); err != nil || c != 1 {
		t.Errorf("CountTokens(sandbox) = %d, %v; want 1", c, err)
	}
	e := findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "rot"}), store.ActionSandboxToken, next.Name)
	if e.Actor != "alice" || e.Sandbox != "rot" || e.Detail["tokens_revoked"] != "1" {
		t.Errorf("rotate audit = %+v", e)
	}

	_, err = s.RotateSandboxToken(ctx(t), "nope", "alice", newToken("sandbox-nope", "", ""))
	wantErr(t, "RotateSandboxToken(missing sandbox)", err, store.ErrNotFound)

	// A name already used fails the whole rotation: the live token stays live.
	_, err = s.RotateSandboxToken(ctx(t), "rot", "alice", newToken(old.Name, "", ""))
	wantErr(t, "RotateSandboxToken(name reused)", err, store.ErrAlreadyExists)
	if n, err := s.TokenByHash(ctx(t), next.Hash); err != nil || n.RevokedAt != nil {
		t.Errorf("live token after failed rotation = %+v, %v; want live", n, err)
	}
}

// ---- policy versions ----

func testPolicyAppend(t *testing.T, s *store.Store) {
	mustCreate(t, s, "app", false)
	_, err := s.GetPolicyVersion(ctx(t), "app", 0)
	wantErr(t, "GetPolicyVersion(current, none yet)", err, store.ErrNotFound)
	if vs, err := s.ListPolicyVersions(ctx(t), "app"); err != nil || len(vs) != 0 {
		t.Errorf("ListPolicyVersions(no policy) = %v, %v; want none", vs, err)
	}

	v1 := mustAppend(t, s, "app", 0, 1)
	d1, h1 := doc(1)
	if v1.Version != 1 || v1.Hash != h1 || string(v1.Document) != string(d1) || v1.Author != "bob" ||
		v1.Source != store.SourceSet || v1.Sandbox != "app" {
		t.Errorf("first append = %+v", v1)
	}
	recent(t, "PolicyVersion.CreatedAt", v1.CreatedAt)
	d2, h2 := doc(2)
	v2, err := s.AppendPolicyVersion(ctx(t), store.AppendPolicy{
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
		wantErr(t, fmt.Sprintf("GetPolicyVersion(%d)", v), err, store.ErrNotFound)
	}

	es := audits(t, s, store.AuditFilter{Sandbox: "app"})
	if es[0].Action != store.ActionPolicySet || es[0].BeforeHash != h1 || es[0].AfterHash != h2 ||
		es[0].Actor != "carol" || es[0].Detail["version"] != "2" || es[0].Detail["source"] != store.SourceRollback {
		t.Errorf("newest audit entry = %+v, want policy.set v2 by carol %s -> %s", es[0], h1, h2)
	}
	if es[1].Action != store.ActionPolicySet || es[1].BeforeHash != "" || es[1].AfterHash != h1 || es[1].Actor != "bob" {
		t.Errorf("second newest audit entry = %+v, want policy.set v1 by bob", es[1])
	}
}

func testPolicyStale(t *testing.T, s *store.Store) {
	mustCreate(t, s, "stale", true)
	mustAppend(t, s, "stale", 1, 2)
	before := audits(t, s, store.AuditFilter{})
	for _, expected := range []int64{0, 1, 3, 100} {
		d, h := doc(50)
		_, err := s.AppendPolicyVersion(ctx(t), store.AppendPolicy{
			Sandbox: "stale", ExpectedVersion: expected, Hash: h, Document: d, Author: "eve",
		})
		wantErr(t, fmt.Sprintf("AppendPolicyVersion(expected %d, current 2)", expected), err, store.ErrConflict)
	}
	vs, err := s.ListPolicyVersions(ctx(t), "stale")
	if err != nil || len(vs) != 2 {
		t.Fatalf("versions after stale writes = %v, %v; want 2", vs, err)
	}
	_, h2 := doc(2)
	if sb, err := s.GetSandbox(ctx(t), "stale"); err != nil || sb.CurrentVersion != 2 || sb.CurrentHash != h2 {
		t.Errorf("sandbox after stale writes = %+v, %v", sb, err)
	}
	if after := audits(t, s, store.AuditFilter{}); len(after) != len(before) {
		t.Errorf("audit grew from %d to %d entries on refused writes", len(before), len(after))
	}
}

func testPolicyMissingSandbox(t *testing.T, s *store.Store) {
	d, h := doc(1)
	_, err := s.AppendPolicyVersion(ctx(t), store.AppendPolicy{Sandbox: "ghost", Hash: h, Document: d, Author: "bob"})
	wantErr(t, "AppendPolicyVersion(missing sandbox)", err, store.ErrNotFound)
	_, err = s.GetPolicyVersion(ctx(t), "ghost", 0)
	wantErr(t, "GetPolicyVersion(missing sandbox)", err, store.ErrNotFound)
	_, err = s.ListPolicyVersions(ctx(t), "ghost")
	wantErr(t, "ListPolicyVersions(missing sandbox)", err, store.ErrNotFound)
	if es := audits(t, s, store.AuditFilter{}); len(es) != 0 {
		t.Errorf("audit after refused writes = %+v, want empty", es)
	}
}

func testPolicyHistory(t *testing.T, s *store.Store) {
	mustCreate(t, s, "hist", true)
	mustAppend(t, s, "hist", 1, 2)
	_, err := s.AppendPolicyVersion(ctx(t), store.AppendPolicy{
		Sandbox: "hist", ExpectedVersion: 2, Hash: hashOf([]byte(`{"v":3}`)), Document: []byte(`{"v":3}`),
		Author: "dave", Source: store.SourceRollback, Provenance: map[string]string{"rollback_to": "1"},
	})
	if err != nil {
		t.Fatalf("append v3: %v", err)
	}
	mustCreate(t, s, "other", true) // must not show up

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
	mustCreate(t, s, "bytes", false)
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
		h := hashOf([]byte(d))
		pv, err := s.AppendPolicyVersion(ctx(t), store.AppendPolicy{
			Sandbox: "bytes", ExpectedVersion: int64(i), Hash: h, Document: []byte(d), Author: "bob",
		})
		if err != nil {
			t.Fatalf("append doc %d: %v", i, err)
		}
		got, err := s.GetPolicyVersion(ctx(t), "bytes", pv.Version)
		if err != nil {
			t.Fatalf("get doc %d: %v", i, err)
		}
		if string(got.Document) != d || hashOf(got.Document) != h || got.Hash != h {
			t.Errorf("doc %d came back changed:\n got %.200q\nwant %.200q", i, got.Document, d)
		}
	}
}

func testPolicyProvenance(t *testing.T, s *store.Store) {
	mustCreate(t, s, "prov", false)
	prov := map[string]string{
		"proposal": "42", "approved_by": "alice,bob", "reason": `needs "quotes" and ünïcode`, "empty": "",
	}
	d, h := doc(1)
	in := store.AppendPolicy{Sandbox: "prov", Hash: h, Document: d, Author: "bob", Source: "proposal", Provenance: prov}
	pv, err := s.AppendPolicyVersion(ctx(t), in)
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
	mustAppend(t, s, "prov", 1, 2)
	got, err = s.GetPolicyVersion(ctx(t), "prov", 2)
	if err != nil || len(got.Provenance) != 0 {
		t.Errorf("empty provenance = %v, %v", got.Provenance, err)
	}
}

// testPolicyConcurrentWriters is the compare-and-swap under load: many
// writers expecting the same version, exactly one wins.
func testPolicyConcurrentWriters(t *testing.T, s *store.Store) {
	mustCreate(t, s, "race", true)
	const n = 100
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			d := fmt.Appendf(nil, `{"writer":%d}`, i)
			_, errs[i] = s.AppendPolicyVersion(ctx(t), store.AppendPolicy{
				Sandbox: "race", ExpectedVersion: 1, Hash: hashOf(d), Document: d, Author: fmt.Sprint("w", i),
			})
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Errorf("writers %d and %d both succeeded", winner, i)
			}
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("writer %d: %v, want ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer succeeded")
	}
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
	for _, e := range audits(t, s, store.AuditFilter{Sandbox: "race"}) {
		if e.Action == store.ActionPolicySet {
			sets++
		}
	}
	if sets != 2 {
		t.Errorf("policy.set audit entries = %d, want 2 (create + winner)", sets)
	}
}

// ---- tokens ----

func testTokenCreateAndLookup(t *testing.T, s *store.Store) {
	in := newToken("ops-alice", store.RoleOperator, "")
	got, err := s.CreateToken(ctx(t), in, "root")
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	if got.ID == 0 || got.Name != in.Name || got.Role != store.RoleOperator || got.Sandbox != "" ||
		got.Hash != in.Hash || got.CreatedBy != "tester" || got.LastUsedAt != nil || got.RevokedAt != nil {
		t.Errorf("CreateToken = %+v", got)
	}
	recent(t, "Token.CreatedAt", got.CreatedAt)

	by, err := s.TokenByHash(ctx(t), in.Hash)
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	if by.ID != got.ID || by.Name != in.Name || by.Hash != in.Hash || by.Role != in.Role || !by.CreatedAt.Equal(got.CreatedAt) {
		t.Errorf("TokenByHash = %+v, want %+v", by, got)
	}
	_, err = s.TokenByHash(ctx(t), strings.Repeat("0", 64))
	wantErr(t, "TokenByHash(unknown)", err, store.ErrNotFound)

	_, err = s.CreateToken(ctx(t), newToken("ops-alice", store.RoleAdmin, ""), "root")
	wantErr(t, "CreateToken(duplicate name)", err, store.ErrAlreadyExists)
	if err := s.RevokeToken(ctx(t), "ops-alice", "root"); err != nil {
		t.Fatalf("RevokeToken: %v", err)
	}
	_, err = s.CreateToken(ctx(t), newToken("ops-alice", store.RoleAdmin, ""), "root")
	wantErr(t, "CreateToken(name of a revoked token)", err, store.ErrAlreadyExists)

	// A sandbox token made directly needs its sandbox.
	_, err = s.CreateToken(ctx(t), newToken("sb", store.RoleSandbox, "nowhere"), "root")
	wantErr(t, "CreateToken(sandbox token, missing sandbox)", err, store.ErrNotFound)
	mustCreate(t, s, "somewhere", false)
	st, err := s.CreateToken(ctx(t), newToken("sb", store.RoleSandbox, "somewhere"), "root")
	if err != nil || st.Sandbox != "somewhere" || st.Role != store.RoleSandbox {
		t.Errorf("CreateToken(sandbox token) = %+v, %v", st, err)
	}

	e := findAudit(t, audits(t, s, store.AuditFilter{}), store.ActionTokenCreate, "ops-alice")
	if e.Actor != "root" || e.Detail["role"] != store.RoleOperator {
		t.Errorf("token.create audit = %+v", e)
	}
}

func testTokenInvalid(t *testing.T, s *store.Store) {
	for _, tok := range []store.Token{
		newToken("x", "superuser", ""),
		newToken("x", store.RoleAdmin, "some-sandbox"),
		newToken("x", store.RoleSandbox, ""),
		newToken("", store.RoleAdmin, ""),
		{Name: "x", Role: store.RoleAdmin},
	} {
		if _, err := s.CreateToken(ctx(t), tok, "root"); err == nil {
			t.Errorf("CreateToken(%+v) succeeded, want an error", tok)
		}
	}
	if ts, err := s.ListTokens(ctx(t)); err != nil || len(ts) != 0 {
		t.Errorf("tokens after invalid creates = %v, %v", ts, err)
	}
}

// testInvalidInput: inputs the schema cannot hold are refused before the
// database is touched, with a plain error (not a sentinel the gateway
// would turn into NotFound or Conflict), and nothing is written.
func testInvalidInput(t *testing.T, s *store.Store) {
	mustCreate(t, s, "box", true)
	before := len(audits(t, s, store.AuditFilter{}))
	d, h := doc(2)
	tok := newToken("sandbox-new", "", "")
	for what, call := range map[string]func() error{
		"CreateSandbox(empty name)": func() error {
			_, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Actor: "a", Token: tok})
			return err
		},
		"CreateSandbox(token without hash)": func() error {
			_, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "new", Actor: "a", Token: store.Token{Name: "n"}})
			return err
		},
		"CreateSandbox(policy without document)": func() error {
			_, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "new", Actor: "a", Token: tok, Policy: &store.PolicyVersion{Hash: h}})
			return err
		},
		"AppendPolicyVersion(empty sandbox)": func() error {
			_, err := s.AppendPolicyVersion(ctx(t), store.AppendPolicy{ExpectedVersion: 1, Hash: h, Document: d})
			return err
		},
		"AppendPolicyVersion(negative expected version)": func() error {
			_, err := s.AppendPolicyVersion(ctx(t), store.AppendPolicy{Sandbox: "box", ExpectedVersion: -1, Hash: h, Document: d})
			return err
		},
		"AppendPolicyVersion(empty hash)": func() error {
			_, err := s.AppendPolicyVersion(ctx(t), store.AppendPolicy{Sandbox: "box", ExpectedVersion: 1, Document: d})
			return err
		},
		"AppendPolicyVersion(empty document)": func() error {
			_, err := s.AppendPolicyVersion(ctx(t), store.AppendPolicy{Sandbox: "box", ExpectedVersion: 1, Hash: h})
			return err
		},
		"RotateSandboxToken(empty hash)": func() error {
			_, err := s.RotateSandboxToken(ctx(t), "box", "a", store.Token{Name: "n"})
			return err
		},
	} {
		err := call()
		if err == nil {
			t.Errorf("%s succeeded, want an error", what)
			continue
		}
		for _, sentinel := range []error{store.ErrNotFound, store.ErrConflict, store.ErrAlreadyExists} {
			if errors.Is(err, sentinel) {
				t.Errorf("%s: %v, want a plain error, not %v", what, err, sentinel)
			}
		}
	}
	if after := len(audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("invalid inputs wrote %d audit entries", after-before)
	}
	if sb, err := s.GetSandbox(ctx(t), "box"); err != nil || sb.CurrentVersion != 1 {
		t.Errorf("sandbox after invalid inputs = %+v, %v", sb, err)
	}
}

// testCallerInputUnchanged: the store fills in defaults on its own copy;
// the caller's values (which it may reuse) are left as they were.
func testCallerInputUnchanged(t *testing.T, s *store.Store) {
	d, h := doc(1)
	pol := &store.PolicyVersion{Hash: h, Document: d, Author: "alice"}
	if _, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "box", Actor: "alice", Token: newToken("sandbox-box", "", ""), Policy: pol}); err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	if pol.Source != "" {
		t.Errorf("CreateSandbox set the caller's Policy.Source to %q", pol.Source)
	}
	if pv, err := s.GetPolicyVersion(ctx(t), "box", 1); err != nil || pv.Source != store.SourceCreate {
		t.Errorf("version 1 = %+v, %v; want source %q", pv, err, store.SourceCreate)
	}
}

func testTokenList(t *testing.T, s *store.Store) {
	mustCreate(t, s, "box", false) // token "sandbox-box"
	for _, tok := range []store.Token{newToken("zed", store.RoleAdmin, ""), newToken("amy", store.RoleOperator, "")} {
		if _, err := s.CreateToken(ctx(t), tok, "root"); err != nil {
			t.Fatalf("CreateToken: %v", err)
		}
	}
	if err := s.RevokeToken(ctx(t), "amy", "root"); err != nil {
		t.Fatal(err)
	}
	ts, err := s.ListTokens(ctx(t))
	if err != nil {
		t.Fatalf("ListTokens: %v", err)
	}
	var names []string
	for _, tk := range ts {
		names = append(names, tk.Name)
		if tk.Hash != "" {
			t.Errorf("ListTokens returned the hash of %q", tk.Name)
		}
		if tk.ID == 0 || tk.Role == "" {
			t.Errorf("ListTokens entry = %+v", tk)
		}
	}
	if !slices.Equal(names, []string{"amy", "sandbox-box", "zed"}) {
		t.Errorf("ListTokens names = %v, want [amy sandbox-box zed]", names)
	}
	if ts[0].RevokedAt == nil || ts[2].RevokedAt != nil {
		t.Errorf("revoked flags wrong: %+v", ts)
	}
	if ts[1].Sandbox != "box" || ts[1].Role != store.RoleSandbox {
		t.Errorf("sandbox token in list = %+v", ts[1])
	}
}

func testTokenRevoke(t *testing.T, s *store.Store) {
	tok := newToken("temp", store.RoleOperator, "")
	if _, err := s.CreateToken(ctx(t), tok, "root"); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeToken(ctx(t), "temp", "root"); err != nil {
		t.Fatalf("RevokeToken: %v", err)
	}
	got, err := s.TokenByHash(ctx(t), tok.Hash)
	if err != nil || got.RevokedAt == nil {
		t.Fatalf("TokenByHash(revoked) = %+v, %v; want found and revoked", got, err)
	}
	recent(t, "RevokedAt", *got.RevokedAt)
	wantErr(t, "RevokeToken(twice)", s.RevokeToken(ctx(t), "temp", "root"), store.ErrNotFound)
	wantErr(t, "RevokeToken(missing)", s.RevokeToken(ctx(t), "never", "root"), store.ErrNotFound)

	again, err := s.TokenByHash(ctx(t), tok.Hash)
	if err != nil || again.RevokedAt == nil || !again.RevokedAt.Equal(*got.RevokedAt) {
		t.Errorf("second revoke changed the token: %+v", again)
	}
	es := audits(t, s, store.AuditFilter{})
	e := findAudit(t, es, store.ActionTokenRevoke, "temp")
	if e.Actor != "root" {
		t.Errorf("token.revoke audit = %+v", e)
	}
	revokes := 0
	for _, e := range es {
		if e.Action == store.ActionTokenRevoke {
			revokes++
		}
	}
	if revokes != 1 {
		t.Errorf("token.revoke audit entries = %d, want 1", revokes)
	}
}

func testTokenTouch(t *testing.T, s *store.Store) {
	tok, err := s.CreateToken(ctx(t), newToken("toucher", store.RoleOperator, ""), "root")
	if err != nil {
		t.Fatal(err)
	}
	before := len(audits(t, s, store.AuditFilter{}))
	// Microsecond precision: the finest both engines keep.
	t1 := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	if err := s.TouchToken(ctx(t), tok.ID, t1); err != nil {
		t.Fatalf("TouchToken: %v", err)
	}
	got, err := s.TokenByHash(ctx(t), tok.Hash)
	if err != nil || got.LastUsedAt == nil || !got.LastUsedAt.Equal(t1) {
		t.Fatalf("LastUsedAt = %v, %v; want %v", got.LastUsedAt, err, t1)
	}
	// An older, late-arriving touch does not move it back.
	if err := s.TouchToken(ctx(t), tok.ID, t1.Add(-time.Hour)); err != nil {
		t.Fatalf("TouchToken(older): %v", err)
	}
	if got, _ := s.TokenByHash(ctx(t), tok.Hash); got.LastUsedAt == nil || !got.LastUsedAt.Equal(t1) {
		t.Errorf("LastUsedAt after older touch = %v, want %v", got.LastUsedAt, t1)
	}
	t2 := t1.Add(time.Minute)
	if err := s.TouchToken(ctx(t), tok.ID, t2.In(time.FixedZone("X", 3600))); err != nil {
		t.Fatalf("TouchToken(newer): %v", err)
	}
	if got, _ := s.TokenByHash(ctx(t), tok.Hash); got.LastUsedAt == nil || !got.LastUsedAt.Equal(t2) || got.LastUsedAt.Location() != time.UTC {
		t.Errorf("LastUsedAt after newer touch = %v, want %v in UTC", got.LastUsedAt, t2)
	}
	wantErr(t, "TouchToken(missing)", s.TouchToken(ctx(t), tok.ID+1000, t1), store.ErrNotFound)
	if after := len(audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("TouchToken wrote %d audit entries, want none", after-before)
	}
}

func testTokenCount(t *testing.T, s *store.Store) {
	for _, role := range []string{store.RoleAdmin, store.RoleOperator, store.RoleSandbox} {
		if n, err := s.CountTokens(ctx(t), role); err != nil || n != 0 {
			t.Errorf("CountTokens(%s) on empty store = %d, %v", role, n, err)
		}
	}
	for _, tok := range []store.Token{
		newToken("a1", store.RoleAdmin, ""), newToken("a2", store.RoleAdmin, ""), newToken("o1", store.RoleOperator, ""),
	} {
		if _, err := s.CreateToken(ctx(t), tok, "root"); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(t, s, "s1", false)
	mustCreate(t, s, "s2", false)
	if err := s.RevokeToken(ctx(t), "a1", "root"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx(t), "s2", "root"); err != nil {
		t.Fatal(err)
	}
	for role, want := range map[string]int{store.RoleAdmin: 1, store.RoleOperator: 1, store.RoleSandbox: 1, "nobody": 0} {
		if n, err := s.CountTokens(ctx(t), role); err != nil || n != want {
			t.Errorf("CountTokens(%s) = %d, %v; want %d", role, n, err, want)
		}
	}
}

// testLastAdmin: revoking the last live admin token is refused, and two
// admins revoking each other at once cannot both succeed.
func testLastAdmin(t *testing.T, s *store.Store) {
	for _, tok := range []store.Token{newToken("a1", store.RoleAdmin, ""), newToken("a2", store.RoleAdmin, ""), newToken("op", store.RoleOperator, "")} {
		if _, err := s.CreateToken(ctx(t), tok, "root"); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 2)
	for _, name := range []string{"a1", "a2"} {
		go func() { errs <- s.RevokeToken(ctx(t), name, "root") }()
	}
	var ok, last int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, store.ErrLastAdmin):
			last++
		default:
			t.Errorf("concurrent revoke: %v", err)
		}
	}
	if ok != 1 || last != 1 {
		t.Fatalf("two admins revoking each other: %d succeeded, %d refused as last admin; want 1 and 1", ok, last)
	}
	if n, err := s.CountTokens(ctx(t), store.RoleAdmin); err != nil || n != 1 {
		t.Fatalf("live admins = %d, %v; want 1", n, err)
	}
	before := audits(t, s, store.AuditFilter{})
	for _, name := range []string{"a1", "a2"} {
		if err := s.RevokeToken(ctx(t), name, "root"); err != nil && !errors.Is(err, store.ErrLastAdmin) && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoke %s: %v", name, err)
		}
	}
	if n, _ := s.CountTokens(ctx(t), store.RoleAdmin); n != 1 {
		t.Fatalf("the last admin was revoked: %d live admins", n)
	}
	if after := audits(t, s, store.AuditFilter{}); len(after) != len(before) {
		t.Errorf("a refused revocation wrote to the audit log")
	}
	if err := s.RevokeToken(ctx(t), "op", "root"); err != nil {
		t.Errorf("revoking an operator with one admin left: %v", err)
	}
}

// ---- audit ----

func testAudit(t *testing.T, s *store.Store) {
	if es := audits(t, s, store.AuditFilter{}); len(es) != 0 {
		t.Fatalf("audit of an empty store = %+v", es)
	}
	admin := newToken("adm", store.RoleOperator, "")
	if _, err := s.CreateToken(ctx(t), admin, "boot"); err != nil {
		t.Fatal(err)
	}
	_, sbTok := mustCreate(t, s, "aud", true)
	_, h1 := doc(1)
	_, h2 := doc(2)
	mustAppend(t, s, "aud", 1, 2)
	if _, err := s.RotateSandboxToken(ctx(t), "aud", "alice", newToken("sandbox-aud-2", "", "")); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "elsewhere", false)
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
	es := audits(t, s, store.AuditFilter{})
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
		recent(t, fmt.Sprintf("audit[%d].Time", i), e.Time)
		if i > 0 && e.Time.After(es[i-1].Time) {
			t.Errorf("audit[%d] is newer than audit[%d]", i, i-1)
		}
	}

	scoped := audits(t, s, store.AuditFilter{Sandbox: "aud"})
	if len(scoped) != 6 {
		t.Errorf("audit for sandbox aud = %d entries, want 6", len(scoped))
	}
	for _, e := range scoped {
		if e.Sandbox != "aud" {
			t.Errorf("filtered audit has entry of %q", e.Sandbox)
		}
	}
	limited := audits(t, s, store.AuditFilter{Limit: 3})
	if len(limited) != 3 || limited[0].ID != es[0].ID || limited[2].ID != es[2].ID {
		t.Errorf("audit limit 3 = %+v, want the newest three", limited)
	}
	if got := audits(t, s, store.AuditFilter{Sandbox: "aud", Limit: 2}); len(got) != 2 || got[0].Action != store.ActionSandboxDelete {
		t.Errorf("audit for aud limit 2 = %+v", got)
	}
	if got := audits(t, s, store.AuditFilter{Sandbox: "none"}); len(got) != 0 {
		t.Errorf("audit for unknown sandbox = %+v, want none", got)
	}
}

func testPing(t *testing.T, s *store.Store) {
	if err := s.Ping(ctx(t)); err != nil {
		t.Errorf("Ping: %v", err)
	}
}
