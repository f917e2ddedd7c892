package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

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
		done <- b.ListenPolicyCommits(lctx, func(c store.Commit) {
			if c.Sandbox == "n" {
				heard <- c.Version
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
		if _, err := storetest.AppendVersion(ctx, a, store.AppendPolicy{
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
