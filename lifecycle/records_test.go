package lifecycle

import (
	"bytes"
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

// ---- approvals ----

func testApprovalAdd(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "ap", true)
	in := newProposal("ap", 1)
	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	in.Proposal.ExpiresAt = expires
	p := mustPropose(t, s, in)
	if !p.ExpiresAt.Equal(expires) || p.Approvals != nil || p.DecidedAt != nil || p.DecidedBy != "" ||
		p.AppliedVersion != 0 || !p.GrantExpiresAt.IsZero() {
		t.Errorf("CreateProposal = %+v, want ExpiresAt %v and no approval, decision or grant", p, expires)
	}
	other := mustPropose(t, s, newProposal("ap", 2))

	got, err := addApproval(ctx(t), s, p.ID, store.Approval{Approver: "alice", Reason: "fine", ResultingHash: p.ResultingHash})
	if err != nil {
		t.Fatalf("AddApproval: %v", err)
	}
	if len(got.Approvals) != 1 {
		t.Fatalf("AddApproval approvals = %+v, want one", got.Approvals)
	}
	a := got.Approvals[0]
	if a.Approver != "alice" || a.Reason != "fine" || a.ResultingHash != p.ResultingHash {
		t.Errorf("approval = %+v", a)
	}
	storetest.Recent(t, "approval CreatedAt", a.CreatedAt)
	want := p
	want.Approvals = got.Approvals
	storetest.WantSameProposal(t, "AddApproval (only approvals change)", got, want)
	storetest.WantSameProposal(t, "GetProposal after AddApproval", storetest.GetProposal(t, s, p.ID), got)
	e := storetest.FindAudit(t, storetest.Audits(t, s, store.AuditFilter{Sandbox: "ap"}), store.ActionProposalOK, id(p))
	if e.Actor != "alice" || e.AfterHash != p.ResultingHash || e.Detail["approver"] != "alice" || e.Detail["reason"] != "fine" {
		t.Errorf("approval audit = %+v", e)
	}

	got = approve(t, s, p.ID, "bob", p.ResultingHash)
	if !slices.Equal(approvers(got), []string{"alice", "bob"}) {
		t.Errorf("approvers = %q, want alice then bob", approvers(got))
	}
	// ListProposals fills every proposal's approvals, and none for those
	// without.
	ps := storetest.ListProposals(t, s, store.ProposalFilter{Sandbox: "ap"})
	if len(ps) != 2 || ps[0].ID != other.ID || ps[1].ID != p.ID {
		t.Fatalf("ListProposals = %v, want [%d %d]", storetest.ProposalIDs(ps), other.ID, p.ID)
	}
	storetest.WantSameProposal(t, "ListProposals[approved twice]", ps[1], got)
	if ps[0].Approvals != nil {
		t.Errorf("ListProposals approvals of an unapproved proposal = %+v, want nil", ps[0].Approvals)
	}

	auditBefore := len(storetest.Audits(t, s, store.AuditFilter{}))
	_, err = addApproval(ctx(t), s, p.ID, store.Approval{Approver: "alice", ResultingHash: p.ResultingHash})
	storetest.WantErr(t, "AddApproval(same approver again)", err, store.ErrAlreadyExists)
	_, err = addApproval(ctx(t), s, p.ID, store.Approval{Approver: "bob", Reason: "again", ResultingHash: p.ResultingHash})
	storetest.WantErr(t, "AddApproval(second approver again)", err, store.ErrAlreadyExists)
	_, err = addApproval(ctx(t), s, p.ID, store.Approval{Approver: "carol", ResultingHash: "stale"})
	storetest.WantErr(t, "AddApproval(stale hash)", err, store.ErrConflict)
	_, err = addApproval(ctx(t), s, p.ID+100, store.Approval{Approver: "carol", ResultingHash: p.ResultingHash})
	storetest.WantErr(t, "AddApproval(missing proposal)", err, store.ErrNotFound)
	storetest.WantPlainError(t, "AddApproval(empty approver)", func() error {
		_, err := addApproval(ctx(t), s, p.ID, store.Approval{ResultingHash: p.ResultingHash})
		return err
	}())
	storetest.WantPlainError(t, "AddApproval(empty hash)", func() error {
		_, err := addApproval(ctx(t), s, p.ID, store.Approval{Approver: "carol"})
		return err
	}())
	storetest.WantSameProposal(t, "proposal after refused approvals", storetest.GetProposal(t, s, p.ID), got)
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("refused approvals wrote %d audit entries", after-auditBefore)
	}

	// Only a pending proposal takes approvals.
	rejected, err := setProposalStatus(ctx(t), s, other.ID, []string{store.ProposalPending}, store.ProposalRejected, "no", "carol")
	if err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	_, err = addApproval(ctx(t), s, other.ID, store.Approval{Approver: "alice", ResultingHash: other.ResultingHash})
	storetest.WantErr(t, "AddApproval(rejected proposal)", err, store.ErrConflict)
	storetest.WantSameProposal(t, "rejected proposal after a refused approval", storetest.GetProposal(t, s, other.ID), rejected)

	// Status changes keep the approvals.
	st, err := setProposalStatus(ctx(t), s, p.ID, []string{store.ProposalPending}, store.ProposalApproved, "two approvals", "gateway")
	if err != nil || !slices.Equal(approvers(st), []string{"alice", "bob"}) {
		t.Errorf("SetProposalStatus = approvers %q, %v; want alice, bob", approvers(st), err)
	}
	_, err = addApproval(ctx(t), s, p.ID, store.Approval{Approver: "carol", ResultingHash: p.ResultingHash})
	storetest.WantErr(t, "AddApproval(approved proposal)", err, store.ErrConflict)
}

// ---- applying ----

func testApplyProposal(t *testing.T, s *store.Store) {
	sb, _ := storetest.MustCreate(t, s, "app", true)
	p := mustPropose(t, s, newProposal("app", 1))
	approve(t, s, p.ID, "bob", p.ResultingHash)
	approve(t, s, p.ID, "alice", p.ResultingHash)

	d, h := grantDoc(1)
	grantEnd := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	prov := map[string]string{"rule": "two-approvers", "proposal": "forged"}
	provBefore := maps.Clone(prov)
	in := applyIn{
		ID: p.ID, ResultingHash: p.ResultingHash, Document: d, Hash: h,
		GrantExpiresAt: grantEnd, Actor: "carol", Provenance: prov,
	}
	got, pv, err := applyProposal(ctx(t), s, in)
	if err != nil {
		t.Fatalf("ApplyProposal: %v", err)
	}
	if !maps.Equal(prov, provBefore) {
		t.Errorf("ApplyProposal changed the caller's provenance to %v", prov)
	}
	wantProv := map[string]string{"rule": "two-approvers", "proposal": id(p), "approvers": "bob,alice"}
	if pv.Sandbox != "app" || pv.Version != 2 || pv.Hash != h || !bytes.Equal(pv.Document, d) || pv.Author != "carol" ||
		pv.Source != store.SourceProposal || !maps.Equal(pv.Provenance, wantProv) {
		t.Errorf("ApplyProposal version = %+v, want version 2 of %s with provenance %v", pv, h, wantProv)
	}
	storetest.Recent(t, "version CreatedAt", pv.CreatedAt)
	cur := currentPolicy(t, s, "app")
	if cur.Version != 2 || cur.Hash != h || !bytes.Equal(cur.Document, d) || cur.Source != store.SourceProposal ||
		!maps.Equal(cur.Provenance, wantProv) || cur.Author != "carol" {
		t.Errorf("current policy after apply = %+v", cur)
	}
	if sbNow := storetest.GetSandbox(t, s, "app"); sbNow.CurrentVersion != 2 || sbNow.CurrentHash != h {
		t.Errorf("sandbox after apply at version %d (%s), want 2 (%s)", sbNow.CurrentVersion, sbNow.CurrentHash, h)
	}

	if got.Status != store.ProposalApplied || got.AppliedVersion != 2 || !got.GrantExpiresAt.Equal(grantEnd) ||
		got.DecidedBy != "carol" || got.DecidedAt == nil || !slices.Equal(approvers(got), []string{"bob", "alice"}) {
		t.Errorf("applied proposal = %+v", got)
	}
	if got.DecidedAt != nil {
		storetest.Recent(t, "DecidedAt", *got.DecidedAt)
	}
	storetest.Recent(t, "UpdatedAt", got.UpdatedAt)
	storetest.WantSameProposal(t, "GetProposal after apply", storetest.GetProposal(t, s, p.ID), got)

	es := storetest.Audits(t, s, store.AuditFilter{Sandbox: "app"})
	set := storetest.FindAudit(t, es, store.ActionPolicySet, "app")
	if set.Actor != "carol" || set.BeforeHash != sb.CurrentHash || set.AfterHash != h ||
		set.Detail["version"] != "2" || set.Detail["source"] != store.SourceProposal {
		t.Errorf("policy.set audit of the apply = %+v", set)
	}
	ap := storetest.FindAudit(t, es, store.ActionProposalApply, id(p))
	if ap.Actor != "carol" || ap.Sandbox != "app" || ap.BeforeHash != sb.CurrentHash || ap.AfterHash != h {
		t.Errorf("proposal.apply audit = %+v", ap)
	}

	// Applied: it cannot be applied again, and the refusal writes nothing.
	auditBefore := len(storetest.Audits(t, s, store.AuditFilter{}))
	_, _, err = applyProposal(ctx(t), s, in)
	storetest.WantErr(t, "ApplyProposal(applied)", err, store.ErrConflict)
	if vs := storetest.Versions(t, s, "app"); len(vs) != 2 {
		t.Errorf("%d versions after applying twice, want 2", len(vs))
	}
	if n := len(storetest.Audits(t, s, store.AuditFilter{})); n != auditBefore {
		t.Errorf("a refused apply wrote %d audit entries", n-auditBefore)
	}
	storetest.WantSameProposal(t, "proposal after applying twice", storetest.GetProposal(t, s, p.ID), got)

	// An approved proposal applies too, without approvals and grant end.
	in2 := newProposal("app", 2)
	in2.Proposal.BaseVersion = 2
	p2 := mustPropose(t, s, in2)
	if _, err := setProposalStatus(ctx(t), s, p2.ID, []string{store.ProposalPending}, store.ProposalApproved, "rules", "gateway"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	auditBefore = len(storetest.Audits(t, s, store.AuditFilter{}))

	stale := applyIn{ID: p2.ID, ResultingHash: "other", Document: p2.Resulting, Hash: p2.ResultingHash, Actor: "carol"}
	_, _, err = applyProposal(ctx(t), s, stale)
	storetest.WantErr(t, "ApplyProposal(stale resulting hash)", err, store.ErrConflict)
	missing := stale
	missing.ID, missing.ResultingHash = p2.ID+100, p2.ResultingHash
	_, _, err = applyProposal(ctx(t), s, missing)
	storetest.WantErr(t, "ApplyProposal(missing)", err, store.ErrNotFound)
	for what, change := range map[string]func(in *applyIn){
		"empty resulting hash": func(in *applyIn) { in.ResultingHash = "" },
		"empty document":       func(in *applyIn) { in.Document = nil },
		"empty hash":           func(in *applyIn) { in.Hash = "" },
	} {
		bad := applyIn{ID: p2.ID, ResultingHash: p2.ResultingHash, Document: p2.Resulting, Hash: p2.ResultingHash, Actor: "carol"}
		change(&bad)
		_, _, err := applyProposal(ctx(t), s, bad)
		storetest.WantPlainError(t, "ApplyProposal("+what+")", err)
	}
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("refused applies wrote %d audit entries", after-auditBefore)
	}

	got2, pv2, err := applyProposal(ctx(t), s, applyIn{
		ID: p2.ID, ResultingHash: p2.ResultingHash, Document: p2.Resulting, Hash: p2.ResultingHash, Actor: "dave",
	})
	if err != nil {
		t.Fatalf("ApplyProposal(approved): %v", err)
	}
	wantProv = map[string]string{"proposal": id(p2), "approvers": ""}
	if pv2.Version != 3 || !maps.Equal(pv2.Provenance, wantProv) || got2.AppliedVersion != 3 ||
		!got2.GrantExpiresAt.IsZero() || got2.DecidedBy != "dave" || got2.Approvals != nil {
		t.Errorf("ApplyProposal(approved) = %+v, %+v", got2, pv2)
	}
	e := storetest.FindAudit(t, storetest.Audits(t, s, store.AuditFilter{Sandbox: "app"}), store.ActionProposalApply, id(p2))
	if e.BeforeHash != h || e.AfterHash != p2.ResultingHash || e.Actor != "dave" {
		t.Errorf("second proposal.apply audit = %+v", e)
	}
}

// testApplyStaleBase: a proposal based on a version that is no longer
// current is refused and nothing changes.
func testApplyStaleBase(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "moved", true)
	p := mustPropose(t, s, newProposal("moved", 1)) // based on version 1
	approve(t, s, p.ID, "alice", p.ResultingHash)
	moved := storetest.MustAppend(t, s, "moved", 1, 7)
	p = storetest.GetProposal(t, s, p.ID)
	auditBefore := len(storetest.Audits(t, s, store.AuditFilter{}))

	_, _, err := applyProposal(ctx(t), s, applyIn{
		ID: p.ID, ResultingHash: p.ResultingHash, Document: p.Resulting, Hash: p.ResultingHash, Actor: "carol",
	})
	storetest.WantErr(t, "ApplyProposal(base moved)", err, store.ErrConflict)
	storetest.WantSameProposal(t, "proposal after a refused apply", storetest.GetProposal(t, s, p.ID), p)
	if vs := storetest.Versions(t, s, "moved"); len(vs) != 2 {
		t.Errorf("%d versions after a refused apply, want 2", len(vs))
	}
	if sb := storetest.GetSandbox(t, s, "moved"); sb.CurrentVersion != 2 || sb.CurrentHash != moved.Hash {
		t.Errorf("sandbox after a refused apply at %d (%s), want 2 (%s)", sb.CurrentVersion, sb.CurrentHash, moved.Hash)
	}
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("a refused apply wrote %d audit entries", after-auditBefore)
	}
}

func testApplyConcurrent(t *testing.T, s *store.Store) { applyRace(t, s) }

// applyRace applies one proposal from 8 goroutines at once, spread over
// stores (several stores on one database stand for gateway replicas):
// exactly one must win, the others get ErrConflict, and exactly one
// version is committed. The stores must be empty and share one database.
func applyRace(t *testing.T, stores ...*store.Store) {
	s := stores[0]
	storetest.MustCreate(t, s, "race", true)
	p := mustPropose(t, s, newProposal("race", 1))
	approve(t, s, p.ID, "alice", p.ResultingHash)
	const n = 8
	type result struct {
		p   store.Proposal
		pv  store.PolicyVersion
		err error
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			r := &results[i]
			r.p, r.pv, r.err = applyProposal(ctx(t), stores[i%len(stores)], applyIn{
				ID: p.ID, ResultingHash: p.ResultingHash, Document: p.Resulting, Hash: p.ResultingHash,
				Actor: fmt.Sprint("applier-", i),
			})
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i, r := range results {
		switch {
		case r.err == nil:
			if won >= 0 {
				t.Errorf("appliers %d and %d both won", won, i)
			}
			won = i
		case !errors.Is(r.err, store.ErrConflict):
			t.Errorf("applier %d: %v, want ErrConflict", i, r.err)
		}
	}
	if won < 0 {
		t.Fatal("no applier won")
	}
	for _, other := range stores {
		if vs := storetest.Versions(t, other, "race"); len(vs) != 2 || vs[1].Source != store.SourceProposal {
			t.Errorf("versions after the race = %+v, want 2, the second from the proposal", vs)
		}
		got := storetest.GetProposal(t, other, p.ID)
		if got.Status != store.ProposalApplied || got.AppliedVersion != 2 || got.DecidedBy != fmt.Sprint("applier-", won) {
			t.Errorf("proposal after the race = %+v, want applied as version 2 by applier-%d", got, won)
		}
	}
	if w := results[won]; w.pv.Version != 2 || w.p.AppliedVersion != 2 {
		t.Errorf("winner got %+v, %+v", w.p, w.pv)
	}
	applies := 0
	for _, e := range storetest.Audits(t, s, store.AuditFilter{Sandbox: "race"}) {
		if e.Action == store.ActionProposalApply {
			applies++
		}
	}
	if applies != 1 {
		t.Errorf("%d proposal.apply audit entries, want 1", applies)
	}
}

// ---- expiry ----

func testExpireProposals(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "ex", true)
	storetest.MustCreate(t, s, "ex2", true)
	now := time.Now().UTC().Truncate(time.Second)
	withExpiry := func(sandbox string, n int, at time.Time) store.Proposal {
		in := newProposal(sandbox, n)
		in.Proposal.ExpiresAt = at
		p := mustPropose(t, s, in)
		if !p.ExpiresAt.Equal(at) {
			t.Errorf("CreateProposal ExpiresAt = %v, want %v", p.ExpiresAt, at)
		}
		return p
	}
	due := withExpiry("ex", 1, now.Add(-time.Hour))
	approve(t, s, due.ID, "alice", due.ResultingHash)
	later := withExpiry("ex", 2, now.Add(time.Hour))
	never := withExpiry("ex", 3, time.Time{})
	decided := withExpiry("ex", 4, now.Add(-time.Hour))
	if _, err := setProposalStatus(ctx(t), s, decided.ID, []string{store.ProposalPending}, store.ProposalRejected, "no", "carol"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	atCutoff := withExpiry("ex", 5, now) // not before now
	dueElsewhere := withExpiry("ex2", 6, now.Add(-time.Minute))

	untouched := map[int64]store.Proposal{}
	for _, p := range []store.Proposal{later, never, decided, atCutoff} {
		untouched[p.ID] = storetest.GetProposal(t, s, p.ID)
	}
	auditBefore := len(storetest.Audits(t, s, store.AuditFilter{}))

	got, err := expireProposals(ctx(t), s, now, "sweeper")
	if err != nil {
		t.Fatalf("ExpireProposals: %v", err)
	}
	if ids := storetest.ProposalIDs(got); !slices.Equal(ids, []int64{due.ID, dueElsewhere.ID}) {
		t.Fatalf("ExpireProposals = %v, want [%d %d]", ids, due.ID, dueElsewhere.ID)
	}
	for _, p := range got {
		if p.Status != store.ProposalExpired || p.StatusReason != "expired" || p.DecidedBy != "sweeper" ||
			p.DecidedAt == nil || !p.DecidedAt.Equal(now) {
			t.Errorf("expired proposal = %+v", p)
		}
		storetest.WantSameProposal(t, "GetProposal of an expired proposal", storetest.GetProposal(t, s, p.ID), p)
		e := storetest.FindAudit(t, storetest.Audits(t, s, store.AuditFilter{Sandbox: p.Sandbox}), store.ActionProposalState, id(p))
		if e.Actor != "sweeper" || e.Detail["from"] != store.ProposalPending || e.Detail["to"] != store.ProposalExpired {
			t.Errorf("expiry audit = %+v", e)
		}
	}
	if !slices.Equal(approvers(got[0]), []string{"alice"}) {
		t.Errorf("expired proposal approvals = %q, want alice's", approvers(got[0]))
	}
	for id, before := range untouched {
		storetest.WantSameProposal(t, fmt.Sprintf("proposal %d not due", id), storetest.GetProposal(t, s, id), before)
	}
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != auditBefore+2 {
		t.Errorf("ExpireProposals wrote %d audit entries, want 2", after-auditBefore)
	}

	again, err := expireProposals(ctx(t), s, now, "sweeper")
	if err != nil || len(again) != 0 {
		t.Errorf("ExpireProposals again = %v, %v; want none", storetest.ProposalIDs(again), err)
	}
	// An expired proposal can no longer be approved or applied.
	_, err = addApproval(ctx(t), s, due.ID, store.Approval{Approver: "bob", ResultingHash: due.ResultingHash})
	storetest.WantErr(t, "AddApproval(expired)", err, store.ErrConflict)
	_, _, err = applyProposal(ctx(t), s, applyIn{
		ID: due.ID, ResultingHash: due.ResultingHash, Document: due.Resulting, Hash: due.ResultingHash, Actor: "bob",
	})
	storetest.WantErr(t, "ApplyProposal(expired)", err, store.ErrConflict)

	later2, err := expireProposals(ctx(t), s, now.Add(2*time.Hour), "sweeper")
	if err != nil || !slices.Equal(storetest.ProposalIDs(later2), []int64{later.ID, atCutoff.ID}) {
		t.Errorf("ExpireProposals two hours on = %v, %v; want [%d %d]", storetest.ProposalIDs(later2), err, later.ID, atCutoff.ID)
	}
}

// ---- freeze ----

func testFreezeSandbox(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "fz", true)
	v2 := storetest.MustAppend(t, s, "fz", 1, 2)
	in := newProposal("fz", 1)
	in.Proposal.BaseVersion, in.Proposal.IdempotencyKey = 2, "idem-fz"
	p := mustPropose(t, s, in)

	deny := []byte(`{"network_policies":{},"version":1}`)
	denyHash := storetest.HashOf(deny)
	sb, pv, err := freezeSandbox(ctx(t), s, "fz", "incident 42", "oncall", deny, denyHash)
	if err != nil {
		t.Fatalf("FreezeSandbox: %v", err)
	}
	if !sb.Frozen || sb.FrozenReason != "incident 42" || sb.FrozenBy != "oncall" || sb.FrozenAt == nil ||
		sb.FrozenFrom != 2 || sb.CurrentVersion != 3 || sb.CurrentHash != denyHash || sb.Name != "fz" {
		t.Errorf("FreezeSandbox sandbox = %+v", sb)
	}
	if sb.FrozenAt != nil {
		storetest.Recent(t, "FrozenAt", *sb.FrozenAt)
	}
	if pv.Version != 3 || pv.Source != store.SourceFreeze || pv.Hash != denyHash || !bytes.Equal(pv.Document, deny) || pv.Author != "oncall" ||
		pv.Provenance["frozen_from"] != "2" || pv.Provenance["reason"] != "incident 42" {
		t.Errorf("FreezeSandbox version = %+v", pv)
	}
	got := storetest.GetSandbox(t, s, "fz")
	if !got.Frozen || got.FrozenReason != sb.FrozenReason || got.FrozenBy != sb.FrozenBy || got.FrozenFrom != 2 ||
		got.FrozenAt == nil || !got.FrozenAt.Equal(*sb.FrozenAt) || got.CurrentVersion != 3 {
		t.Errorf("GetSandbox of a frozen sandbox = %+v, want %+v", got, sb)
	}
	if sbs, err := s.ListSandboxes(ctx(t)); err != nil || len(sbs) != 1 || !sbs[0].Frozen || sbs[0].FrozenFrom != 2 {
		t.Errorf("ListSandboxes of a frozen sandbox = %+v, %v", sbs, err)
	}
	if cur := currentPolicy(t, s, "fz"); cur.Version != 3 || !bytes.Equal(cur.Document, deny) {
		t.Errorf("current policy of a frozen sandbox = %+v", cur)
	}
	es := storetest.Audits(t, s, store.AuditFilter{Sandbox: "fz"})
	e := storetest.FindAudit(t, es, store.ActionFreeze, "fz")
	if e.Actor != "oncall" || e.BeforeHash != v2.Hash || e.AfterHash != denyHash || e.Detail["reason"] != "incident 42" {
		t.Errorf("freeze audit = %+v", e)
	}
	if set := storetest.FindAudit(t, es, store.ActionPolicySet, "fz"); set.Detail["source"] != store.SourceFreeze || set.AfterHash != denyHash {
		t.Errorf("policy.set audit of the freeze = %+v", set)
	}

	// Frozen: no new proposal, nothing stored; a retry of an earlier
	// submission still gets its proposal.
	auditBefore := len(storetest.Audits(t, s, store.AuditFilter{}))
	_, _, err = createProposal(ctx(t), s, newProposal("fz", 9), "agent")
	storetest.WantErr(t, "CreateProposal(frozen)", err, errFrozen)
	if retry, created := propose(t, s, in); created || retry.ID != p.ID {
		t.Errorf("CreateProposal(frozen, same idempotency key) = %d, created %v; want %d", retry.ID, created, p.ID)
	}
	if ps := storetest.ListProposals(t, s, store.ProposalFilter{Sandbox: "fz"}); !slices.Equal(storetest.ProposalIDs(ps), []int64{p.ID}) {
		t.Errorf("proposals of a frozen sandbox = %v, want [%d]", storetest.ProposalIDs(ps), p.ID)
	}
	_, _, err = freezeSandbox(ctx(t), s, "fz", "again", "oncall", deny, denyHash)
	storetest.WantErr(t, "FreezeSandbox(frozen)", err, store.ErrConflict)
	// Nothing is applied to a frozen sandbox, even on its current version.
	if _, err := rebaseProposal(ctx(t), s, rebaseIn{
		ID: p.ID, FromVersion: 2, BaseVersion: 3, BaseHash: denyHash, Resulting: p.Resulting, ResultingHash: p.ResultingHash, Actor: "advisor",
	}); err != nil {
		t.Fatalf("RebaseProposal: %v", err)
	}
	auditBefore++
	_, _, err = applyProposal(ctx(t), s, applyIn{
		ID: p.ID, ResultingHash: p.ResultingHash, Document: p.Resulting, Hash: p.ResultingHash, Actor: "carol",
	})
	storetest.WantErr(t, "ApplyProposal(frozen sandbox)", err, store.ErrConflict)
	storetest.WantErr(t, "ApplyProposal(frozen sandbox)", err, errFrozen)
	if vs := storetest.Versions(t, s, "fz"); len(vs) != 3 {
		t.Errorf("%d versions after refused writes to a frozen sandbox, want 3", len(vs))
	}
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("refused writes to a frozen sandbox wrote %d audit entries", after-auditBefore)
	}

	sb, pv, err = unfreezeSandbox(ctx(t), s, "fz", "resolved", "lead")
	if err != nil {
		t.Fatalf("UnfreezeSandbox: %v", err)
	}
	if sb.Frozen || sb.FrozenReason != "" || sb.FrozenBy != "" || sb.FrozenAt != nil || sb.FrozenFrom != 0 ||
		sb.CurrentVersion != 4 || sb.CurrentHash != v2.Hash {
		t.Errorf("UnfreezeSandbox sandbox = %+v", sb)
	}
	if pv.Version != 4 || pv.Source != store.SourceUnfreeze || pv.Hash != v2.Hash || pv.Author != "lead" ||
		pv.Provenance["restored_from"] != "2" || pv.Provenance["reason"] != "resolved" {
		t.Errorf("UnfreezeSandbox version = %+v", pv)
	}
	if cur := currentPolicy(t, s, "fz"); cur.Version != 4 || cur.Hash != v2.Hash || !bytes.Equal(cur.Document, v2.Document) {
		t.Errorf("current policy after unfreeze = %+v, want version 2's content", cur)
	}
	if got := storetest.GetSandbox(t, s, "fz"); got.Frozen || got.FrozenAt != nil || got.FrozenFrom != 0 || got.FrozenBy != "" {
		t.Errorf("GetSandbox after unfreeze = %+v", got)
	}
	e = storetest.FindAudit(t, storetest.Audits(t, s, store.AuditFilter{Sandbox: "fz"}), store.ActionUnfreeze, "fz")
	if e.Actor != "lead" || e.BeforeHash != denyHash || e.AfterHash != v2.Hash || e.Detail["reason"] != "resolved" {
		t.Errorf("unfreeze audit = %+v", e)
	}
	auditBefore = len(storetest.Audits(t, s, store.AuditFilter{}))
	_, _, err = unfreezeSandbox(ctx(t), s, "fz", "again", "lead")
	storetest.WantErr(t, "UnfreezeSandbox(not frozen)", err, store.ErrConflict)
	if vs := storetest.Versions(t, s, "fz"); len(vs) != 4 {
		t.Errorf("%d versions after unfreezing twice, want 4", len(vs))
	}
	mustPropose(t, s, newProposal("fz", 10)) // takes proposals again
	auditBefore++

	_, _, err = freezeSandbox(ctx(t), s, "missing", "r", "oncall", deny, denyHash)
	storetest.WantErr(t, "FreezeSandbox(missing)", err, store.ErrNotFound)
	_, _, err = unfreezeSandbox(ctx(t), s, "missing", "r", "oncall")
	storetest.WantErr(t, "UnfreezeSandbox(missing)", err, store.ErrNotFound)
	// A sandbox without a policy has nothing to come back to.
	storetest.MustCreate(t, s, "empty", false)
	_, _, err = freezeSandbox(ctx(t), s, "empty", "r", "oncall", deny, denyHash)
	storetest.WantErr(t, "FreezeSandbox(no policy)", err, store.ErrConflict)
	if got := storetest.GetSandbox(t, s, "empty"); got.Frozen || got.CurrentVersion != 0 {
		t.Errorf("sandbox without policy after a refused freeze = %+v", got)
	}
	auditBefore += 2 // the sandbox and its token
	_, _, err = freezeSandbox(ctx(t), s, "fz", "r", "oncall", nil, denyHash)
	storetest.WantPlainError(t, "FreezeSandbox(empty document)", err)
	_, _, err = freezeSandbox(ctx(t), s, "fz", "r", "oncall", deny, "")
	storetest.WantPlainError(t, "FreezeSandbox(empty hash)", err)
	_, _, err = freezeSandbox(ctx(t), s, "", "r", "oncall", deny, denyHash)
	storetest.WantPlainError(t, "FreezeSandbox(empty sandbox)", err)
	if after := len(storetest.Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("refused freezes wrote %d audit entries", after-auditBefore)
	}
}

// ---- deleting ----

func testApprovalSandboxDelete(t *testing.T, s *store.Store) {
	storetest.MustCreate(t, s, "gone", true)
	storetest.MustCreate(t, s, "kept", true)
	p := mustPropose(t, s, newProposal("gone", 1))
	approve(t, s, p.ID, "alice", p.ResultingHash)
	k := mustPropose(t, s, newProposal("kept", 2))
	k = approve(t, s, k.ID, "alice", k.ResultingHash)
	if _, _, err := freezeSandbox(ctx(t), s, "gone", "r", "oncall", []byte(`{}`), storetest.HashOf([]byte(`{}`))); err != nil {
		t.Fatalf("FreezeSandbox: %v", err)
	}

	if err := s.DeleteSandbox(ctx(t), "gone", "carol"); err != nil {
		t.Fatalf("DeleteSandbox with approved proposals: %v", err)
	}
	_, err := s.GetProposal(ctx(t), p.ID)
	storetest.WantErr(t, "GetProposal(of a deleted sandbox)", err, store.ErrNotFound)
	_, err = addApproval(ctx(t), s, p.ID, store.Approval{Approver: "bob", ResultingHash: p.ResultingHash})
	storetest.WantErr(t, "AddApproval(of a deleted sandbox)", err, store.ErrNotFound)
	storetest.WantSameProposal(t, "other sandbox's approved proposal", storetest.GetProposal(t, s, k.ID), k)

	// A sandbox of the same name starts afresh: not frozen, no approvals.
	sb, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "gone", Actor: "alice", Token: storetest.NewToken("sandbox-gone-2", "", "")})
	if err != nil {
		t.Fatalf("re-create deleted sandbox: %v", err)
	}
	if sb.Frozen || storetest.GetSandbox(t, s, "gone").Frozen {
		t.Errorf("re-created sandbox is frozen")
	}
	again := mustPropose(t, s, newProposal("gone", 1))
	if again.Approvals != nil || storetest.GetProposal(t, s, again.ID).Approvals != nil {
		t.Errorf("new proposal of the re-created sandbox has approvals")
	}
	// The audit log keeps the approval.
	storetest.FindAudit(t, storetest.Audits(t, s, store.AuditFilter{Sandbox: "gone"}), store.ActionProposalOK, id(p))
}

// openPair opens two stores on one new database, as two gateway replicas.
func openPair(t *testing.T) (*store.Store, *store.Store) {
	t.Helper()
	url := pgtest.Database(t)
	return openPostgres(t, url), openPostgres(t, url)
}

// TestApplyRaceAcrossReplicas: appliers on two replicas racing for one
// proposal; exactly one wins.
func TestApplyRaceAcrossReplicas(t *testing.T) {
	a, b := openPair(t)
	applyRace(t, a, b)
}

// TestApprovalCommitsNotify: applying a proposal, freezing and unfreezing
// commit versions every replica hears of, like any other commit.
func TestApprovalCommitsNotify(t *testing.T) {
	a, b := openPair(t)
	ctx := t.Context()
	heard := make(chan int64, 16)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.ListenPolicyCommits(lctx, func(sandbox string, version int64) {
			if sandbox == "n" {
				heard <- version
			}
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	wait := func(want int64) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case v := <-heard:
				if v == want {
					return
				}
			case <-deadline:
				t.Fatalf("no notification of version %d", want)
			}
		}
	}

	doc := []byte(`{"version":1}`)
	if _, err := a.CreateSandbox(ctx, store.CreateSandbox{
		Name: "n", Actor: "alice", Token: store.Token{Name: "sandbox-n", Hash: "h-n"},
		Policy: &store.PolicyVersion{Hash: "h1", Document: doc, Author: "alice"},
	}); err != nil {
		t.Fatal(err)
	}
	// Wait until the listener is up: commit versions until one is heard.
	for v := int64(2); ; v++ {
		if _, err := a.AppendPolicyVersion(ctx, store.AppendPolicy{
			Sandbox: "n", ExpectedVersion: v - 1, Hash: "h1", Document: doc, Author: "alice",
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard: // version 1 or one of these: listening
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	sb, err := a.GetSandbox(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := createProposal(ctx, a, proposalIn{Proposal: store.Proposal{
		Sandbox: "n", Document: []byte(`{"operations":[]}`), BaseVersion: sb.CurrentVersion,
		Resulting: []byte(`{"version":1,"x":1}`), ResultingHash: "h2",
	}}, "agent")
	if err != nil {
		t.Fatal(err)
	}
	_, pv, err := applyProposal(ctx, a, applyIn{
		ID: p.ID, ResultingHash: "h2", Document: p.Resulting, Hash: "h2", Actor: "carol",
	})
	if err != nil {
		t.Fatal(err)
	}
	wait(pv.Version)
	_, pv, err = freezeSandbox(ctx, a, "n", "incident", "oncall", []byte(`{"version":1}`), "deny")
	if err != nil {
		t.Fatal(err)
	}
	wait(pv.Version)
	_, pv, err = unfreezeSandbox(ctx, a, "n", "resolved", "oncall")
	if err != nil {
		t.Fatal(err)
	}
	wait(pv.Version)
}
