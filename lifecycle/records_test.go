package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/sqlite"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// The proposal records (records.go) on both drivers: intake, status
// changes, re-basing, approval, applying, expiry and the freeze, each one
// transaction over store.Tx.

func openSQLite(t *testing.T) *store.Store {
	t.Helper()
	d, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "portcullis.db"), sqlite.Config{})
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return store.New(d)
}

func openPostgres(t *testing.T, url string) *store.Store {
	t.Helper()
	d, err := postgres.Open(t.Context(), url, postgres.Config{})
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return store.New(d)
}

func TestRecords(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s *store.Store)
	}{
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
		{"ApprovalSandboxDelete", testApprovalSandboxDelete},
	}
	engines := map[string]func(t *testing.T) *store.Store{
		"sqlite":   openSQLite,
		"postgres": func(t *testing.T) *store.Store { return openPostgres(t, pgtest.Database(t)) },
	}
	for _, engine := range slices.Sorted(maps.Keys(engines)) {
		t.Run(engine, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, engines[engine](t))
				})
			}
		})
	}
}

func ctx(t *testing.T) context.Context { return t.Context() }

// newProposal returns proposal n of sandbox as intake takes it.
func newProposal(sandbox string, n int, supersede ...string) proposalIn {
	return proposalIn{Proposal: storetest.ProposalN(sandbox, n, supersede...)}
}

// ---- advisor helpers ----

func propose(t *testing.T, s *store.Store, in proposalIn) (store.Proposal, bool) {
	t.Helper()
	p, created, err := createProposal(ctx(t), s, in, "agent")
	if err != nil {
		t.Fatalf("CreateProposal(%s, %q): %v", in.Proposal.Sandbox, in.Proposal.DedupeKey, err)
	}
	return p, created
}

// mustPropose creates a proposal that must be new.
func mustPropose(t *testing.T, s *store.Store, in proposalIn) store.Proposal {
	t.Helper()
	p, created := propose(t, s, in)
	if !created {
		t.Fatalf("CreateProposal(%s, %q) returned existing proposal %d, want a new one", in.Proposal.Sandbox, in.Proposal.DedupeKey, p.ID)
	}
	return p
}

func id(p store.Proposal) string { return strconv.FormatInt(p.ID, 10) }

// ---- approval workflow helpers ----

func approve(t *testing.T, s *store.Store, id int64, approver, hash string) store.Proposal {
	t.Helper()
	p, err := addApproval(ctx(t), s, id, store.Approval{Approver: approver, Reason: "ok by " + approver, ResultingHash: hash})
	if err != nil {
		t.Fatalf("AddApproval(%d, %s): %v", id, approver, err)
	}
	return p
}

func approvers(p store.Proposal) []string {
	var out []string
	for _, a := range p.Approvals {
		out = append(out, a.Approver)
	}
	return out
}

func currentPolicy(t *testing.T, s *store.Store, sandbox string) store.PolicyVersion {
	t.Helper()
	pv, err := s.GetPolicyVersion(ctx(t), sandbox, 0)
	if err != nil {
		t.Fatalf("GetPolicyVersion(%q, current): %v", sandbox, err)
	}
	return pv
}

// grantDoc is the resulting policy of proposal n with a grant end added,
// as the gateway commits it.
func grantDoc(n int) ([]byte, string) {
	d := fmt.Appendf(nil, `{"network_policies":{"p%d":{"endpoints":[{"expires_at":"2030-01-01T00:00:00Z","host":"h%d.example.com","port":443}]}},"version":1}`, n, n)
	return d, storetest.HashOf(d)
}

// ---- proposals ----

func testProposalCreateGetList(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "one", true)
	storetest.MustCreate(t, s, "two", true)

	in := newProposal("one", 1, "k2", "k1", "k2")
	in.Proposal.IdempotencyKey = "idem-1"
	// Set by the store, whatever the caller says.
	in.Proposal.ID, in.Proposal.Status, in.Proposal.SupersededBy = 99, store.ProposalApproved, 7
	keys := slices.Clone(in.Proposal.SupersedeKeys)
	p1 := mustPropose(t, s, in)
	if !slices.Equal(in.Proposal.SupersedeKeys, keys) {
		t.Errorf("CreateProposal changed the caller's supersede keys to %q", in.Proposal.SupersedeKeys)
	}
	want := in.Proposal
	want.ID, want.Status, want.SupersededBy = p1.ID, store.ProposalPending, 0
	want.SupersedeKeys = []string{"k1", "k2"}
	want.CreatedAt, want.UpdatedAt = p1.CreatedAt, p1.UpdatedAt
	storetest.WantSameProposal(t, "CreateProposal", p1, want)
	if p1.ID <= 0 {
		t.Errorf("CreateProposal id = %d", p1.ID)
	}
	storetest.Recent(t, "CreatedAt", p1.CreatedAt)
	storetest.Recent(t, "UpdatedAt", p1.UpdatedAt)
	storetest.WantSameProposal(t, "GetProposal", storetest.GetProposal(t, s, p1.ID), p1)

	// Optional fields may be empty and come back nil.
	bare := newProposal("two", 2)
	bare.Proposal.Findings, bare.Proposal.Rationale, bare.Proposal.DenialID = nil, "", ""
	p2 := mustPropose(t, s, bare)
	if p2.Findings != nil || p2.SupersedeKeys != nil || p2.StatusReason != "" || p2.RebaseError != "" {
		t.Errorf("CreateProposal without optional fields = %+v", p2)
	}
	storetest.WantSameProposal(t, "GetProposal(bare)", storetest.GetProposal(t, s, p2.ID), p2)
	p3 := mustPropose(t, s, newProposal("one", 3))
	if !(p1.ID < p2.ID && p2.ID < p3.ID) {
		t.Errorf("ids %d, %d, %d not increasing", p1.ID, p2.ID, p3.ID)
	}
	if _, err := setProposalStatus(ctx(t), s, p3.ID, []string{store.ProposalPending}, store.ProposalRejected, "no", "alice"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	p3 = storetest.GetProposal(t, s, p3.ID)

	for _, tc := range []struct {
		f    store.ProposalFilter
		want []store.Proposal
	}{
		{store.ProposalFilter{}, []store.Proposal{p3, p2, p1}},
		{store.ProposalFilter{Sandbox: "one"}, []store.Proposal{p3, p1}},
		{store.ProposalFilter{Sandbox: "two"}, []store.Proposal{p2}},
		{store.ProposalFilter{Sandbox: "three"}, nil},
		{store.ProposalFilter{Status: store.ProposalPending}, []store.Proposal{p2, p1}},
		{store.ProposalFilter{Status: store.ProposalRejected}, []store.Proposal{p3}},
		{store.ProposalFilter{Sandbox: "one", Status: store.ProposalPending}, []store.Proposal{p1}},
		{store.ProposalFilter{Sandbox: "two", Status: store.ProposalRejected}, nil},
		{store.ProposalFilter{Limit: 2}, []store.Proposal{p3, p2}},
		{store.ProposalFilter{Sandbox: "one", Limit: 1}, []store.Proposal{p3}},
	} {
		got := storetest.ListProposals(t, s, tc.f)
		if len(got) != len(tc.want) {
			t.Errorf("ListProposals(%+v) ids = %v, want %v", tc.f, storetest.ProposalIDs(got), storetest.ProposalIDs(tc.want))
			continue
		}
		for i := range got {
			storetest.WantSameProposal(t, fmt.Sprintf("ListProposals(%+v)[%d]", tc.f, i), got[i], tc.want[i])
		}
	}

	_, err := s.GetProposal(ctx(t), p3.ID+100)
	storetest.WantErr(t, "GetProposal(missing)", err, store.ErrNotFound)

	e := storetest.FindAudit(t, storetest.Audits(t, s, store.AuditFilter{Sandbox: "one"}), store.ActionProposalNew, id(p1))
	if e.Actor != "agent" || e.AfterHash != p1.ResultingHash || e.Sandbox != "one" {
		t.Errorf("proposal submission audit = %+v", e)
	}

	before := len(storetest.Audits(t, s, store.AuditFilter{}))
	_, _, err = createProposal(ctx(t), s, newProposal("missing", 4), "agent")
	storetest.WantErr(t, "CreateProposal(missing sandbox)", err, store.ErrNotFound)
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("CreateProposal(missing sandbox) wrote %d audit entries", after-before)
	}
	if n := len(storetest.ListProposals(t, s, store.ProposalFilter{})); n != 3 {
		t.Errorf("%d proposals stored, want 3", n)
	}
}

func testProposalIdempotency(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "idem", true)
	storetest.MustCreate(t, s, "other", true)

	first := newProposal("idem", 1)
	first.Proposal.IdempotencyKey = "retry-me"
	p := mustPropose(t, s, first)

	// A retry with the same key returns the stored proposal, even if its
	// content differs (it must not become a second proposal).
	retry := newProposal("idem", 2)
	retry.Proposal.IdempotencyKey = "retry-me"
	got, created := propose(t, s, retry)
	if created {
		t.Errorf("retry with the same idempotency key created proposal %d", got.ID)
	}
	storetest.WantSameProposal(t, "retry", got, p)

	// Still after the first was withdrawn.
	w, err := setProposalStatus(ctx(t), s, p.ID, []string{store.ProposalPending}, store.ProposalWithdrawn, "oops", "agent")
	if err != nil {
		t.Fatalf("SetProposalStatus(withdrawn): %v", err)
	}
	got, created = propose(t, s, retry)
	if created || got.ID != p.ID || got.Status != store.ProposalWithdrawn {
		t.Errorf("retry after withdrawal = %+v, created %v; want proposal %d, withdrawn", got, created, p.ID)
	}
	storetest.WantSameProposal(t, "retry after withdrawal", got, w)

	// Keys are per sandbox; no key means no idempotency.
	other := newProposal("other", 1)
	other.Proposal.IdempotencyKey = "retry-me"
	mustPropose(t, s, other)
	mustPropose(t, s, newProposal("idem", 3))
	mustPropose(t, s, newProposal("idem", 4))

	if ps := storetest.ListProposals(t, s, store.ProposalFilter{Sandbox: "idem"}); len(ps) != 3 {
		t.Errorf("proposals of idem = %v, want 3", storetest.ProposalIDs(ps))
	}
	if n := storetest.CountAudit(storetest.Audits(t, s, store.AuditFilter{Sandbox: "idem"}), store.ActionProposalNew); n != 3 {
		t.Errorf("%d submission audit entries, want 3 (retries are not audited)", n)
	}
}

func testProposalDedupe(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "dd", true)
	storetest.MustCreate(t, s, "other", true)

	p1 := mustPropose(t, s, newProposal("dd", 1))
	again := newProposal("dd", 2)
	again.Proposal.DedupeKey = p1.DedupeKey
	got, created := propose(t, s, again)
	if created {
		t.Errorf("a proposal identical to a pending one was stored as %d", got.ID)
	}
	storetest.WantSameProposal(t, "duplicate of a pending proposal", got, p1)

	// Another sandbox's pending proposal does not count.
	otherIn := newProposal("other", 1)
	mustPropose(t, s, otherIn)

	// Only pending proposals dedupe.
	if _, err := setProposalStatus(ctx(t), s, p1.ID, []string{store.ProposalPending}, store.ProposalRejected, "no", "alice"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	p2 := mustPropose(t, s, again)
	if p2.ID == p1.ID || p2.DedupeKey != p1.DedupeKey {
		t.Errorf("after rejection = %+v, want a new proposal", p2)
	}
	if ps := storetest.ListProposals(t, s, store.ProposalFilter{Sandbox: "dd"}); !slices.Equal(storetest.ProposalIDs(ps), []int64{p2.ID, p1.ID}) {
		t.Errorf("proposals of dd = %v, want [%d %d]", storetest.ProposalIDs(ps), p2.ID, p1.ID)
	}
}

func testProposalSupersede(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "sup", true)
	storetest.MustCreate(t, s, "other", true)

	old := mustPropose(t, s, newProposal("sup", 1, "api.example.com:443 curl"))
	unrelated := mustPropose(t, s, newProposal("sup", 2, "db.example.com:5432 psql"))
	withdrawn := mustPropose(t, s, newProposal("sup", 3, "pypi.org:443 pip"))
	if _, err := setProposalStatus(ctx(t), s, withdrawn.ID, []string{store.ProposalPending}, store.ProposalWithdrawn, "", "agent"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	withdrawn = storetest.GetProposal(t, s, withdrawn.ID)
	elsewhere := mustPropose(t, s, newProposal("other", 4, "api.example.com:443 curl"))
	noKeys := mustPropose(t, s, newProposal("sup", 5))

	newer := mustPropose(t, s, newProposal("sup", 6, "pypi.org:443 pip", "api.example.com:443 curl"))
	if newer.Status != store.ProposalPending || newer.SupersededBy != 0 {
		t.Errorf("superseding proposal = %+v", newer)
	}

	got := storetest.GetProposal(t, s, old.ID)
	if got.Status != store.ProposalSuperseded || got.SupersededBy != newer.ID ||
		got.StatusReason != fmt.Sprintf("superseded by proposal %d", newer.ID) {
		t.Errorf("older proposal sharing a key = %+v, want superseded by %d", got, newer.ID)
	}
	if got.UpdatedAt.Before(old.UpdatedAt) {
		t.Errorf("superseded UpdatedAt %v before %v", got.UpdatedAt, old.UpdatedAt)
	}
	storetest.Recent(t, "superseded UpdatedAt", got.UpdatedAt)
	storetest.WantSameProposal(t, "proposal without a shared key", storetest.GetProposal(t, s, unrelated.ID), unrelated)
	storetest.WantSameProposal(t, "withdrawn proposal sharing a key", storetest.GetProposal(t, s, withdrawn.ID), withdrawn)
	storetest.WantSameProposal(t, "other sandbox's proposal sharing a key", storetest.GetProposal(t, s, elsewhere.ID), elsewhere)
	storetest.WantSameProposal(t, "proposal without keys", storetest.GetProposal(t, s, noKeys.ID), noKeys)

	es := storetest.Audits(t, s, store.AuditFilter{Sandbox: "sup"})
	e := storetest.FindAudit(t, es, store.ActionProposalState, id(old))
	if e.Detail["from"] != store.ProposalPending || e.Detail["to"] != store.ProposalSuperseded {
		t.Errorf("supersede audit = %+v", e)
	}
	superseded := 0
	for _, e := range es {
		if e.Action == store.ActionProposalState && e.Detail["to"] == store.ProposalSuperseded {
			superseded++
		}
	}
	if superseded != 1 {
		t.Errorf("%d supersede audit entries, want 1", superseded)
	}

	// A superseded proposal is not pending: it neither dedupes nor is
	// superseded again.
	again := newProposal("sup", 7, "api.example.com:443 curl")
	again.Proposal.DedupeKey = old.DedupeKey
	newest := mustPropose(t, s, again)
	if got := storetest.GetProposal(t, s, old.ID); got.SupersededBy != newer.ID {
		t.Errorf("superseded proposal superseded again: %+v", got)
	}
	if got := storetest.GetProposal(t, s, newer.ID); got.Status != store.ProposalSuperseded || got.SupersededBy != newest.ID {
		t.Errorf("pending proposal sharing a key with the newest = %+v, want superseded by %d", got, newest.ID)
	}
}

func testProposalRateLimit(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "rl", true)
	storetest.MustCreate(t, s, "other", true)
	limited := func(n int) proposalIn {
		in := newProposal("rl", n)
		in.Proposal.IdempotencyKey = fmt.Sprintf("key-%d", n)
		in.RateMax, in.RateWindow = 2, time.Hour
		return in
	}
	p1 := mustPropose(t, s, limited(1))
	mustPropose(t, s, limited(2))
	// Withdrawn proposals still count: the limit is on submissions.
	if _, err := setProposalStatus(ctx(t), s, p1.ID, []string{store.ProposalPending}, store.ProposalWithdrawn, "", "agent"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	auditBefore := len(storetest.Audits(t, s, store.AuditFilter{}))
	_, _, err := createProposal(ctx(t), s, limited(3), "agent")
	storetest.WantErr(t, "CreateProposal over the limit", err, errRateLimited)
	if ps := storetest.ListProposals(t, s, store.ProposalFilter{Sandbox: "rl"}); len(ps) != 2 {
		t.Errorf("proposals after the refused one = %v, want 2", storetest.ProposalIDs(ps))
	}
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("refused proposal wrote %d audit entries", after-auditBefore)
	}

	// Retries and duplicates are answered before the limit is checked.
	if got, created, err := createProposal(ctx(t), s, limited(1), "agent"); err != nil || created || got.ID != p1.ID {
		t.Errorf("retry over the limit = %d, %v, %v; want proposal %d", got.ID, created, err, p1.ID)
	}
	dup := limited(2)
	dup.Proposal.IdempotencyKey = ""
	if _, created, err := createProposal(ctx(t), s, dup, "agent"); err != nil || created {
		t.Errorf("duplicate over the limit = %v, %v; want the pending one", created, err)
	}

	// Other sandboxes have their own count; no limit means none.
	other := limited(4)
	other.Proposal.Sandbox = "other"
	mustPropose(t, s, other)
	unlimited := limited(5)
	unlimited.RateMax = 0
	mustPropose(t, s, unlimited)

	// Only proposals created within the window count: with a window far
	// shorter than the time since the last submission there are none.
	tiny := limited(6)
	tiny.RateWindow = time.Nanosecond
	mustPropose(t, s, tiny)
	_, _, err = createProposal(ctx(t), s, limited(7), "agent")
	storetest.WantErr(t, "CreateProposal over the limit (one hour)", err, errRateLimited)
	if ps := storetest.ListProposals(t, s, store.ProposalFilter{Sandbox: "rl"}); len(ps) != 4 {
		t.Errorf("proposals of rl = %v, want 4", storetest.ProposalIDs(ps))
	}
}

func testProposalStatus(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "st", true)
	p := mustPropose(t, s, newProposal("st", 1))

	got, err := setProposalStatus(ctx(t), s, p.ID, []string{store.ProposalPending, store.ProposalApproved}, store.ProposalApproved, "looks fine", "carol")
	if err != nil {
		t.Fatalf("SetProposalStatus(approved): %v", err)
	}
	want := p
	want.Status, want.StatusReason, want.UpdatedAt = store.ProposalApproved, "looks fine", got.UpdatedAt
	// Leaving pending is the decision.
	want.DecidedAt, want.DecidedBy = got.DecidedAt, "carol"
	storetest.WantSameProposal(t, "SetProposalStatus(approved)", got, want)
	if got.DecidedAt == nil || !got.DecidedAt.Equal(got.UpdatedAt) {
		t.Errorf("DecidedAt = %v, want the change's time %v", got.DecidedAt, got.UpdatedAt)
	}
	if got.UpdatedAt.Before(p.UpdatedAt) {
		t.Errorf("UpdatedAt %v before %v", got.UpdatedAt, p.UpdatedAt)
	}
	storetest.Recent(t, "UpdatedAt", got.UpdatedAt)
	storetest.WantSameProposal(t, "GetProposal after SetProposalStatus", storetest.GetProposal(t, s, p.ID), got)
	e := storetest.FindAudit(t, storetest.Audits(t, s, store.AuditFilter{Sandbox: "st"}), store.ActionProposalState, id(p))
	if e.Actor != "carol" || e.Detail["from"] != store.ProposalPending || e.Detail["to"] != store.ProposalApproved || e.Detail["reason"] != "looks fine" {
		t.Errorf("status audit = %+v", e)
	}

	auditBefore := len(storetest.Audits(t, s, store.AuditFilter{}))
	_, err = setProposalStatus(ctx(t), s, p.ID, []string{store.ProposalPending}, store.ProposalRejected, "too late", "dave")
	storetest.WantErr(t, "SetProposalStatus(from a status it no longer has)", err, store.ErrConflict)
	storetest.WantSameProposal(t, "proposal after a conflict", storetest.GetProposal(t, s, p.ID), got)
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("conflicting status change wrote %d audit entries", after-auditBefore)
	}

	applied, err := setProposalStatus(ctx(t), s, p.ID, []string{store.ProposalApproved}, store.ProposalApplied, "version 2", "erin")
	if err != nil || applied.Status != store.ProposalApplied || applied.StatusReason != "version 2" {
		t.Errorf("SetProposalStatus(applied) = %+v, %v", applied, err)
	}
	// Not from pending: the decision stays the approval's.
	if applied.DecidedBy != "carol" || applied.DecidedAt == nil || !applied.DecidedAt.Equal(*got.DecidedAt) {
		t.Errorf("SetProposalStatus(approved to applied) decided = %v by %q, want %v by carol", applied.DecidedAt, applied.DecidedBy, got.DecidedAt)
	}

	_, err = setProposalStatus(ctx(t), s, p.ID+100, []string{store.ProposalPending}, store.ProposalRejected, "", "carol")
	storetest.WantErr(t, "SetProposalStatus(missing)", err, store.ErrNotFound)
}

func testProposalRebase(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "rb", true)
	p := mustPropose(t, s, newProposal("rb", 1))
	res, h := storetest.Doc(21)
	in := rebaseIn{
		ID: p.ID, FromVersion: 1, BaseVersion: 2, BaseHash: "base-2",
		Resulting: res, ResultingHash: h, Findings: []byte(`{"findings":[]}`), Actor: "advisor",
	}
	got, err := rebaseProposal(ctx(t), s, in)
	if err != nil {
		t.Fatalf("RebaseProposal: %v", err)
	}
	want := p
	want.BaseVersion, want.BaseHash, want.Resulting, want.ResultingHash, want.Findings = 2, "base-2", res, h, in.Findings
	want.UpdatedAt = got.UpdatedAt
	storetest.WantSameProposal(t, "RebaseProposal", got, want)
	storetest.Recent(t, "UpdatedAt", got.UpdatedAt)
	storetest.WantSameProposal(t, "GetProposal after rebase", storetest.GetProposal(t, s, p.ID), got)
	e := storetest.FindAudit(t, storetest.Audits(t, s, store.AuditFilter{Sandbox: "rb"}), store.ActionProposalBase, id(p))
	if e.Actor != "advisor" || e.BeforeHash != p.ResultingHash || e.AfterHash != h {
		t.Errorf("rebase audit = %+v", e)
	}

	auditBefore := len(storetest.Audits(t, s, store.AuditFilter{}))
	stale := in
	stale.BaseVersion, stale.ResultingHash, stale.Resulting = 3, "other", []byte("{}")
	_, err = rebaseProposal(ctx(t), s, stale) // from 1, but it is on 2 now
	storetest.WantErr(t, "RebaseProposal(stale from version)", err, store.ErrConflict)
	storetest.WantSameProposal(t, "proposal after a stale rebase", storetest.GetProposal(t, s, p.ID), got)

	// A rebase that no longer applies records the error; it may carry no
	// resulting policy.
	broken, err := rebaseProposal(ctx(t), s, rebaseIn{
		ID: p.ID, FromVersion: 2, BaseVersion: 3, BaseHash: "base-3", RebaseError: "endpoint removed", Actor: "advisor",
	})
	if err != nil {
		t.Fatalf("RebaseProposal(with error): %v", err)
	}
	if broken.BaseVersion != 3 || broken.RebaseError != "endpoint removed" || broken.Resulting != nil ||
		broken.ResultingHash != "" || broken.Findings != nil || broken.Status != store.ProposalPending {
		t.Errorf("RebaseProposal(with error) = %+v", broken)
	}
	auditBefore++

	if _, err := setProposalStatus(ctx(t), s, p.ID, []string{store.ProposalPending}, store.ProposalExpired, "", "advisor"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	auditBefore++
	expired := storetest.GetProposal(t, s, p.ID)
	notPending := in
	notPending.FromVersion = 3
	_, err = rebaseProposal(ctx(t), s, notPending)
	storetest.WantErr(t, "RebaseProposal(not pending)", err, store.ErrConflict)
	storetest.WantSameProposal(t, "expired proposal after a refused rebase", storetest.GetProposal(t, s, p.ID), expired)
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("refused rebases wrote %d audit entries", after-auditBefore)
	}

	missing := in
	missing.ID = p.ID + 100
	_, err = rebaseProposal(ctx(t), s, missing)
	storetest.WantErr(t, "RebaseProposal(missing)", err, store.ErrNotFound)
}

func testProposalConcurrentIdempotency(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "race", true)
	const n = 8
	type result struct {
		p       store.Proposal
		created bool
		err     error
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			in := newProposal("race", i) // differing content: only the key joins them
			in.Proposal.IdempotencyKey = "same"
			in.RateMax, in.RateWindow = 100, time.Hour
			<-start
			r := &results[i]
			r.p, r.created, r.err = createProposal(ctx(t), s, in, "agent")
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for i, r := range results {
		if r.err != nil {
			t.Errorf("CreateProposal %d: %v", i, r.err)
			continue
		}
		if r.created {
			created++
		}
		if r.p.ID != results[0].p.ID {
			t.Errorf("CreateProposal %d returned proposal %d, another %d", i, r.p.ID, results[0].p.ID)
		}
	}
	if created != 1 {
		t.Errorf("%d concurrent CreateProposal calls created a proposal, want 1", created)
	}
	if ps := storetest.ListProposals(t, s, store.ProposalFilter{}); len(ps) != 1 {
		t.Errorf("proposals stored = %v, want 1", storetest.ProposalIDs(ps))
	}
}

func testProposalSandboxDelete(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "doomed", true)
	storetest.MustCreate(t, s, "survivor", true)
	in := newProposal("doomed", 1, "k")
	in.Proposal.IdempotencyKey = "idem"
	p1 := mustPropose(t, s, in)
	p2 := mustPropose(t, s, newProposal("doomed", 2))
	kept := mustPropose(t, s, newProposal("survivor", 3, "k"))

	if err := s.DeleteSandbox(ctx(t), "doomed", "carol"); err != nil {
		t.Fatalf("DeleteSandbox: %v", err)
	}
	for _, p := range []store.Proposal{p1, p2} {
		_, err := s.GetProposal(ctx(t), p.ID)
		storetest.WantErr(t, fmt.Sprintf("GetProposal(%d of a deleted sandbox)", p.ID), err, store.ErrNotFound)
	}
	if ps := storetest.ListProposals(t, s, store.ProposalFilter{}); !slices.Equal(storetest.ProposalIDs(ps), []int64{kept.ID}) {
		t.Errorf("proposals after delete = %v, want [%d]", storetest.ProposalIDs(ps), kept.ID)
	}
	storetest.WantSameProposal(t, "other sandbox's proposal", storetest.GetProposal(t, s, kept.ID), kept)
	// The audit log keeps the history.
	storetest.FindAudit(t, storetest.Audits(t, s, store.AuditFilter{Sandbox: "doomed"}), store.ActionProposalNew, id(p1))

	// A sandbox of the same name starts afresh, with fresh ids.
	if _, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "doomed", Actor: "alice", Token: storetest.NewToken("sandbox-doomed-2", "", "")}); err != nil {
		t.Fatalf("re-create deleted sandbox: %v", err)
	}
	p3 := mustPropose(t, s, in)
	if p3.ID <= kept.ID {
		t.Errorf("proposal of the re-created sandbox has id %d, want above %d", p3.ID, kept.ID)
	}
}

func testAdvisorInvalidInput(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "box", true)
	p := mustPropose(t, s, newProposal("box", 1))
	auditBefore := len(storetest.Audits(t, s, store.AuditFilter{}))
	d, h := storetest.Doc(2)
	bad := func(change func(in *proposalIn)) func() error {
		return func() error {
			in := newProposal("box", 3)
			change(&in)
			_, _, err := createProposal(ctx(t), s, in, "agent")
			return err
		}
	}
	rebase := func(change func(r *rebaseIn)) func() error {
		return func() error {
			r := rebaseIn{ID: p.ID, FromVersion: 1, BaseVersion: 2, Resulting: d, ResultingHash: h, Actor: "advisor"}
			change(&r)
			_, err := rebaseProposal(ctx(t), s, r)
			return err
		}
	}
	for what, call := range map[string]func() error{
		"SetSandboxBoundary(empty sandbox)": func() error {
			_, err := s.SetSandboxBoundary(ctx(t), "", d, h, "a")
			return err
		},
		"SetSandboxBoundary(document without hash)": func() error {
			_, err := s.SetSandboxBoundary(ctx(t), "box", d, "", "a")
			return err
		},
		"UpdateCredentialedHosts(empty sandbox)": func() error {
			_, err := s.UpdateCredentialedHosts(ctx(t), "", []string{"a.example.com:443"}, nil, "a")
			return err
		},
		"UpdateCredentialedHosts(empty host)": func() error {
			_, err := s.UpdateCredentialedHosts(ctx(t), "box", []string{"a.example.com:443", ""}, nil, "a")
			return err
		},
		"UpdateCredentialedHosts(comma in host)": func() error {
			_, err := s.UpdateCredentialedHosts(ctx(t), "box", nil, []string{"a.example.com:443,b.example.com:443"}, "a")
			return err
		},
		"CreateProposal(empty sandbox)":        bad(func(in *proposalIn) { in.Proposal.Sandbox = "" }),
		"CreateProposal(empty document)":       bad(func(in *proposalIn) { in.Proposal.Document = nil }),
		"CreateProposal(empty resulting)":      bad(func(in *proposalIn) { in.Proposal.Resulting = []byte{} }),
		"CreateProposal(empty resulting hash)": bad(func(in *proposalIn) { in.Proposal.ResultingHash = "" }),
		"CreateProposal(negative base)":        bad(func(in *proposalIn) { in.Proposal.BaseVersion = -1 }),
		"CreateProposal(empty supersede key)":  bad(func(in *proposalIn) { in.Proposal.SupersedeKeys = []string{"k", ""} }),
		"CreateProposal(negative rate max)":    bad(func(in *proposalIn) { in.RateMax = -1 }),
		"CreateProposal(rate max without window)": bad(func(in *proposalIn) {
			in.RateMax, in.RateWindow = 5, 0
		}),
		"SetProposalStatus(unknown status)": func() error {
			_, err := setProposalStatus(ctx(t), s, p.ID, []string{store.ProposalPending}, "done", "", "a")
			return err
		},
		"SetProposalStatus(no from)": func() error {
			_, err := setProposalStatus(ctx(t), s, p.ID, nil, store.ProposalRejected, "", "a")
			return err
		},
		"SetProposalStatus(unknown from)": func() error {
			_, err := setProposalStatus(ctx(t), s, p.ID, []string{"open"}, store.ProposalRejected, "", "a")
			return err
		},
		"RebaseProposal(negative version)":    rebase(func(r *rebaseIn) { r.BaseVersion = -1 }),
		"RebaseProposal(hash without policy)": rebase(func(r *rebaseIn) { r.Resulting = nil }),
		"RebaseProposal(policy without hash)": rebase(func(r *rebaseIn) { r.ResultingHash = "" }),
		"RebaseProposal(no policy, no error)": rebase(func(r *rebaseIn) { r.Resulting, r.ResultingHash = nil, "" }),
	} {
		err := call()
		if err == nil {
			t.Errorf("%s succeeded, want an error", what)
			continue
		}
		for _, sentinel := range []error{store.ErrNotFound, store.ErrConflict, store.ErrAlreadyExists, errRateLimited} {
			if errors.Is(err, sentinel) {
				t.Errorf("%s: %v, want a plain error, not %v", what, err, sentinel)
			}
		}
	}
	if sb := storetest.GetSandbox(t, s, "box"); sb.Boundary != nil || sb.BoundaryHash != "" || sb.CredentialedHosts != nil {
		t.Errorf("sandbox after invalid inputs = %+v", sb)
	}
	if ps := storetest.ListProposals(t, s, store.ProposalFilter{}); len(ps) != 1 {
		t.Errorf("proposals after invalid inputs = %v, want only %d", storetest.ProposalIDs(ps), p.ID)
	}
	storetest.WantSameProposal(t, "proposal after invalid changes", storetest.GetProposal(t, s, p.ID), p)
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("invalid inputs wrote %d audit entries", after-auditBefore)
	}
}
