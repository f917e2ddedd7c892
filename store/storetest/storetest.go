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
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Run runs the suite. open must return a new, empty driver for every call
// and close it when the test ends (t.Cleanup). Subtests run in parallel.
func Run(t *testing.T, open func(t *testing.T) store.Driver) {
	tests := []suiteTest[*store.Store]{
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
		{"PolicyHashes", testPolicyHashes},
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
		{"TokenSentry", testTokenSentry},
		{"TokenSentrySandboxes", testTokenSentrySandboxes},
		{"TokenExpiry", testTokenExpiry},
		{"Audit", testAudit},
		{"SigningKeyChain", testSigningKeyChain},
		{"SigningKeyConcurrentAdd", testSigningKeyConcurrent},
		{"SandboxCA", testSandboxCA},
		{"ProxyStatuses", testProxyStatuses},
		{"Decisions", testDecisions},
		{"DecisionRetention", testDecisionRetention},
		{"DecisionRetentionBatches", testDecisionRetentionBatches},
		{"PushInvalidInput", testPushInvalidInput},
		{"ToolDefinitions", testToolDefinitions},
		{"ToolDefinitionsBound", testToolDefinitionsBound},
		{"ToolDefinitionsInvalid", testToolDefinitionsInvalid},
		{"SentryDuplicates", testSentryDuplicates},
		{"SentryReusedID", testSentryReusedID},
		{"SentryCancelledAppend", testSentryCancelledAppend},
		{"SentryGaps", testSentryGaps},
		{"SentryOutOfOrder", testSentryOutOfOrder},
		{"SentryGapsBounded", testSentryGapsBounded},
		{"SentryGapsKept", testSentryGapsKept},
		{"SentryManySources", testSentryManySources},
		{"SentryFilter", testSentryFilter},
		{"SentryRetention", testSentryRetention},
		{"SentryConcurrent", testSentryConcurrent},
		{"SentryInvalid", testSentryInvalid},
		{"SentryKeySet", testSentryKeySet},
		{"TxSentryKeys", testPrimSentryKeys},
		{"TxSentryEventAt", testPrimSentryEventAt},
		{"TxSentryEventFlags", testPrimSentryEventFlags},
		{"TxSentryActions", testPrimSentryActions},
		{"TxSentryActionList", testPrimSentryActionList},
		{"HeldCalls", testHeldCalls},
		{"SandboxBoundary", testSandboxBoundary},
		{"CredentialedHosts", testCredentialedHosts},
		{"Providers", testProviders},
		{"ProvidersConcurrent", testProvidersConcurrent},
		{"ProviderDeleteAttachRace", testProviderDeleteAttachRace},
		{"TxProviderDeleteReferenced", testPrimProviderDeleteReferenced},
		{"ApprovalPolicies", testApprovalPolicies},
		{"Ping", testPing},
		{"TxVersionDuplicate", testPrimVersionDuplicate},
		{"TxLockUpdateSandbox", testPrimLockUpdateSandbox},
		{"TxListCountProposals", testPrimListProposals},
		{"TxUpdateProposalApproval", testPrimUpdateProposal},
		{"TxSandboxCA", testPrimSandboxCA},
		{"TxNow", testPrimNow},
		{"TxCommitFeed", testPrimCommitFeed},
	}
	runParallel(t, tests, func(t *testing.T) *store.Store { return store.New(open(t)) })
}

// ---- helpers ----

func ctx(t *testing.T) context.Context { return t.Context() }

// runParallel runs each test as a parallel subtest, on what arg returns
// for that subtest.
func runParallel[A any](t *testing.T, tests []suiteTest[A], arg func(t *testing.T) A) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, arg(t))
		})
	}
}

// suiteTest is one named test of a suite run by runParallel.
type suiteTest[A any] struct {
	name string
	fn   func(t *testing.T, a A)
}

// must returns v, or ends the test when err is set, naming the call that
// failed (format and args) before the error.
func must[T any](t *testing.T, v T, err error, format string, args ...any) T {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
	return v
}

// Fixtures, exported for the suites written over a Store elsewhere (the
// lifecycle's records run on both drivers with them).

// NewToken returns a token with a random secret's hash.
func NewToken(name, role, sandbox string) store.Token {
	var b [32]byte
	_, _ = rand.Read(b[:])
	sum := sha256.Sum256(b[:])
	return store.Token{Name: name, Role: role, Sandbox: sandbox, Hash: hex.EncodeToString(sum[:]), CreatedBy: "tester"}
}

// Doc returns a small canonical-looking policy document and its hash.
func Doc(n int) ([]byte, string) {
	d := fmt.Appendf(nil, `{"network_policies":{"p%d":{"endpoints":[{"host":"h%d.example.com","port":443}]}},"version":1}`, n, n)
	return d, HashOf(d)
}

// HashOf is the hex SHA-256 of b.
func HashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// MustCreate creates sandbox name with its token and, withPolicy, version
// 1 (Doc(1)).
func MustCreate(t *testing.T, s *store.Store, name string, withPolicy bool) (store.Sandbox, store.Token) {
	t.Helper()
	tok := NewToken("sandbox-"+name, "", "")
	in := store.CreateSandbox{Name: name, Actor: "alice", Token: tok}
	if withPolicy {
		d, h := Doc(1)
		in.Policy = &store.PolicyVersion{Hash: h, Document: d, Author: "alice", Source: store.SourceCreate}
	}
	sb, err := s.CreateSandbox(ctx(t), in)
	if err != nil {
		t.Fatalf("CreateSandbox(%q): %v", name, err)
	}
	return sb, tok
}

// WantErr fails unless err is (or wraps) want.
func WantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// Recent checks a store-assigned time is close to now, in UTC.
func Recent(t *testing.T, what string, at time.Time) {
	t.Helper()
	if d := time.Since(at); d < -5*time.Second || d > 5*time.Minute {
		t.Errorf("%s = %v, not close to now (%v)", what, at, time.Now())
	}
	if at.Location() != time.UTC {
		t.Errorf("%s = %v, want UTC", what, at)
	}
}

// Audits lists the audit entries f matches.
func Audits(t *testing.T, s *store.Store, f store.AuditFilter) []store.AuditEntry {
	t.Helper()
	es, err := s.ListAudit(ctx(t), f)
	return must(t, es, err, "ListAudit(%+v)", f)
}

// FindAudit returns the newest entry with that action and target.
func FindAudit(t *testing.T, es []store.AuditEntry, action, target string) store.AuditEntry {
	t.Helper()
	for _, e := range es {
		if e.Action == action && e.Target == target {
			return e
		}
	}
	t.Fatalf("no audit entry %s on %q in %+v", action, target, es)
	return store.AuditEntry{}
}

// GetSandbox reads sandbox name.
func GetSandbox(t *testing.T, s *store.Store, name string) store.Sandbox {
	t.Helper()
	sb, err := s.GetSandbox(ctx(t), name)
	return must(t, sb, err, "GetSandbox(%q)", name)
}

// Versions lists sandbox's versions.
func Versions(t *testing.T, s *store.Store, sandbox string) []store.PolicyVersion {
	t.Helper()
	vs, err := s.ListPolicyVersions(ctx(t), sandbox)
	return must(t, vs, err, "ListPolicyVersions(%q)", sandbox)
}

// WantPlainError checks err is an input error, not one of the sentinels.
func WantPlainError(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s succeeded, want an error", what)
		return
	}
	for _, sentinel := range []error{store.ErrNotFound, store.ErrConflict, store.ErrAlreadyExists} {
		if errors.Is(err, sentinel) {
			t.Errorf("%s: %v, want a plain error, not %v", what, err, sentinel)
		}
	}
}

// race calls call(0) … call(n-1) each on its own goroutine, released
// together so that they meet in the store at once, and returns their
// errors by index.
func race(n int, call func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = call(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// oneWinner checks that exactly one of the racers' errs is nil and every
// other is ErrConflict, and returns the winner's index. who names a racer.
func oneWinner(t *testing.T, who string, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Errorf("%ss %d and %d both succeeded", who, winner, i)
			}
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Errorf("%s %d: %v, want ErrConflict", who, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no %s succeeded", who)
	}
	return winner
}

// ProposalN returns a proposal of sandbox numbered n: its dedupe key and
// documents differ from every other n's.
func ProposalN(sandbox string, n int, supersede ...string) store.Proposal {
	res, h := Doc(n)
	return store.Proposal{
		Sandbox:       sandbox,
		Rationale:     fmt.Sprintf("needs h%d", n),
		Proposer:      "sandbox-" + sandbox,
		DenialID:      fmt.Sprintf("denial-%d", n),
		Document:      fmt.Appendf(nil, `{"operations":[{"allow":"h%d.example.com:443"}]}`, n),
		DedupeKey:     fmt.Sprintf("dedupe-%d", n),
		SupersedeKeys: supersede,
		BaseVersion:   1,
		BaseHash:      "base-hash",
		Resulting:     res,
		ResultingHash: h,
		Findings:      fmt.Appendf(nil, `{"findings":[{"n":%d}]}`, n),
	}
}

// InsertProposal stores p pending through the Tx primitive.
func InsertProposal(t *testing.T, s *store.Store, p store.Proposal) store.Proposal {
	t.Helper()
	var out store.Proposal
	err := s.InTx(ctx(t), func(tx store.Tx) error {
		p.Status, p.CreatedAt, p.UpdatedAt = store.ProposalPending, tx.Now(), tx.Now()
		var err error
		out, err = tx.InsertProposal(ctx(t), p)
		return err
	})
	return must(t, out, err, "InsertProposal(%s, %q)", p.Sandbox, p.DedupeKey)
}

// ListProposals lists the proposals f matches.
func ListProposals(t *testing.T, s *store.Store, f store.ProposalFilter) []store.Proposal {
	t.Helper()
	ps, err := s.ListProposals(ctx(t), f)
	return must(t, ps, err, "ListProposals(%+v)", f)
}

// ProposalIDs are the proposals' ids.
func ProposalIDs(ps []store.Proposal) []int64 {
	ids := make([]int64, 0, len(ps))
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	return ids
}

// SameProposal compares every field, times with Equal.
func SameProposal(got, want store.Proposal) bool {
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) {
		return false
	}
	got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(got, want)
}

// WantSameProposal fails unless got and want are the same proposal.
func WantSameProposal(t *testing.T, what string, got, want store.Proposal) {
	t.Helper()
	if !SameProposal(got, want) {
		t.Errorf("%s =\n%+v\nwant\n%+v", what, got, want)
	}
}

// GetProposal reads proposal id.
func GetProposal(t *testing.T, s *store.Store, id int64) store.Proposal {
	t.Helper()
	p, err := s.GetProposal(ctx(t), id)
	return must(t, p, err, "GetProposal(%d)", id)
}

// ---- sandboxes ----

func testSandboxCreateGetList(t *testing.T, s *store.Store) {
	sbs, err := s.ListSandboxes(ctx(t))
	if err != nil || len(sbs) != 0 {
		t.Fatalf("ListSandboxes on an empty store = %v, %v; want none", sbs, err)
	}
	b, _ := MustCreate(t, s, "beta", false)
	MustCreate(t, s, "alpha", false)
	if b.Name != "beta" || b.CurrentVersion != 0 || b.CurrentHash != "" || b.CreatedBy != "alice" {
		t.Errorf("CreateSandbox = %+v", b)
	}
	Recent(t, "CreatedAt", b.CreatedAt)

	got, err := s.GetSandbox(ctx(t), "beta")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if got.Name != b.Name || got.CurrentVersion != 0 || got.CreatedBy != "alice" || !got.CreatedAt.Equal(b.CreatedAt) {
		t.Errorf("GetSandbox = %+v, want %+v", got, b)
	}
	_, err = s.GetSandbox(ctx(t), "gamma")
	WantErr(t, "GetSandbox(missing)", err, store.ErrNotFound)

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
	MustCreate(t, s, "dup", false)
	before := Audits(t, s, store.AuditFilter{})
	tok := NewToken("sandbox-dup-2", "", "")
	d, h := Doc(7)
	_, err := s.CreateSandbox(ctx(t), store.CreateSandbox{
		Name: "dup", Actor: "mallory", Token: tok,
		Policy: &store.PolicyVersion{Hash: h, Document: d, Author: "mallory"},
	})
	WantErr(t, "CreateSandbox(duplicate)", err, store.ErrAlreadyExists)

	// Nothing of the failed call is stored.
	_, err = s.TokenByHash(ctx(t), tok.Hash)
	WantErr(t, "TokenByHash(token of the failed create)", err, store.ErrNotFound)
	sb, err := s.GetSandbox(ctx(t), "dup")
	if err != nil || sb.CurrentVersion != 0 || sb.CreatedBy != "alice" {
		t.Errorf("GetSandbox after duplicate create = %+v, %v", sb, err)
	}
	if after := Audits(t, s, store.AuditFilter{}); len(after) != len(before) {
		t.Errorf("audit grew from %d to %d entries on a failed create", len(before), len(after))
	}

	// A token name already used is refused too, and nothing is created.
	_, err = s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "other", Actor: "alice", Token: NewToken("sandbox-dup", "", "")})
	WantErr(t, "CreateSandbox(token name taken)", err, store.ErrAlreadyExists)
	_, err = s.GetSandbox(ctx(t), "other")
	WantErr(t, "GetSandbox(rolled back)", err, store.ErrNotFound)
}

func testSandboxCreateWithPolicy(t *testing.T, s *store.Store) {
	sb, tok := MustCreate(t, s, "web", true)
	d, h := Doc(1)
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
	Recent(t, "PolicyVersion.CreatedAt", pv.CreatedAt)

	got, err := s.TokenByHash(ctx(t), tok.Hash)
	if err != nil {
		t.Fatalf("TokenByHash(sandbox token): %v", err)
	}
	if got.Role != store.RoleSandbox || got.Sandbox != "web" || got.Name != tok.Name || got.RevokedAt != nil || got.ID == 0 {
		t.Errorf("sandbox token = %+v", got)
	}

	es := Audits(t, s, store.AuditFilter{Sandbox: "web"})
	c := FindAudit(t, es, store.ActionSandboxCreate, "web")
	if c.Actor != "alice" || c.AfterHash != h || c.BeforeHash != "" {
		t.Errorf("sandbox.create audit = %+v", c)
	}
	p := FindAudit(t, es, store.ActionPolicySet, "web")
	if p.Actor != "alice" || p.BeforeHash != "" || p.AfterHash != h || p.Detail["version"] != "1" {
		t.Errorf("policy.set audit = %+v", p)
	}
	FindAudit(t, es, store.ActionTokenCreate, tok.Name)
}

func testSandboxConcurrentCreate(t *testing.T, s *store.Store) {
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, errs[i] = s.CreateSandbox(ctx(t), store.CreateSandbox{
				Name: "race", Actor: "alice", Token: NewToken(fmt.Sprintf("sandbox-race-%d", i), "", ""),
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
	_, tok := MustCreate(t, s, "doomed", true)
	_, hash2 := Doc(2)
	MustAppend(t, s, "doomed", 1, 2)
	admin, err := s.CreateToken(ctx(t), NewToken("root", store.RoleAdmin, ""), "alice")
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	MustCreate(t, s, "survivor", true)

	if err := s.DeleteSandbox(ctx(t), "doomed", "carol"); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	_, err = s.GetSandbox(ctx(t), "doomed")
	WantErr(t, "GetSandbox(deleted)", err, store.ErrNotFound)
	for _, v := range []int64{0, 1, 2} {
		_, err = s.GetPolicyVersion(ctx(t), "doomed", v)
		WantErr(t, fmt.Sprintf("GetPolicyVersion(deleted, %d)", v), err, store.ErrNotFound)
	}
	_, err = s.ListPolicyVersions(ctx(t), "doomed")
	WantErr(t, "ListPolicyVersions(deleted)", err, store.ErrNotFound)
	_, err = AppendVersion(ctx(t), s, store.AppendPolicy{Sandbox: "doomed", ExpectedVersion: 2, Hash: "h", Document: []byte("{}")})
	WantErr(t, "AppendVersion(deleted)", err, store.ErrNotFound)

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
	es := Audits(t, s, store.AuditFilter{Sandbox: "doomed"})
	del := FindAudit(t, es, store.ActionSandboxDelete, "doomed")
	if del.Actor != "carol" || del.BeforeHash != hash2 || del.AfterHash != "" || del.Detail["tokens_revoked"] != "1" {
		t.Errorf("sandbox.delete audit = %+v", del)
	}
	if es[0].ID != del.ID {
		t.Errorf("newest audit entry = %+v, want the delete", es[0])
	}
	FindAudit(t, es, store.ActionSandboxCreate, "doomed")
	if n := len(es); n != 5 { // create, token, policy v1, policy v2, delete
		t.Errorf("audit entries of deleted sandbox = %d, want 5: %+v", n, es)
	}

	err = s.DeleteSandbox(ctx(t), "doomed", "carol")
	WantErr(t, "DeleteSandbox(twice)", err, store.ErrNotFound)

	// The name can be used again, starting afresh.
	if _, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "doomed", Actor: "alice", Token: NewToken("sandbox-doomed-2", "", "")}); err != nil {
		t.Fatalf("re-create deleted sandbox: %v", err)
	}
	if vs, err := s.ListPolicyVersions(ctx(t), "doomed"); err != nil || len(vs) != 0 {
		t.Errorf("versions of re-created sandbox = %v, %v; want none", vs, err)
	}
}

func testSandboxRotateToken(t *testing.T, s *store.Store) {
	_, old := MustCreate(t, s, "rot", false)
	next := NewToken("sandbox-rot-2", "", "") // role and sandbox are filled in by the store
	got, err := s.RotateSandboxToken(ctx(t), "rot", "alice", next)
	if err != nil {
		t.Fatalf("RotateSandboxToken: %v", err)
	}
	if got.ID == 0 || got.Name != next.Name || got.Role != store.RoleSandbox || got.Sandbox != "rot" || got.RevokedAt != nil {
		t.Errorf("rotated token = %+v", got)
	}
	Recent(t, "Token.CreatedAt", got.CreatedAt)
	if o, err := s.TokenByHash(ctx(t), old.Hash); err != nil || o.RevokedAt == nil {
		t.Errorf("old token = %+v, %v; want revoked", o, err)
	}
	if n, err := s.TokenByHash(ctx(t), next.Hash); err != nil || n.RevokedAt != nil {
		t.Errorf("new token = %+v, %v; want live", n, err)
	}
	if c, err := s.CountTokens(ctx(t), store.RoleSandbox); err != nil || c != 1 {
		t.Errorf("CountTokens(sandbox) = %d, %v; want 1", c, err)
	}
	e := FindAudit(t, Audits(t, s, store.AuditFilter{Sandbox: "rot"}), store.ActionSandboxToken, next.Name)
	if e.Actor != "alice" || e.Sandbox != "rot" || e.Detail["tokens_revoked"] != "1" {
		t.Errorf("rotate audit = %+v", e)
	}

	_, err = s.RotateSandboxToken(ctx(t), "nope", "alice", NewToken("sandbox-nope", "", ""))
	WantErr(t, "RotateSandboxToken(missing sandbox)", err, store.ErrNotFound)

	// A name already used fails the whole rotation: the live token stays live.
	_, err = s.RotateSandboxToken(ctx(t), "rot", "alice", NewToken(old.Name, "", ""))
	WantErr(t, "RotateSandboxToken(name reused)", err, store.ErrAlreadyExists)
	if n, err := s.TokenByHash(ctx(t), next.Hash); err != nil || n.RevokedAt != nil {
		t.Errorf("live token after failed rotation = %+v, %v; want live", n, err)
	}
}
