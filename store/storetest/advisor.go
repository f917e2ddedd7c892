package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- advisor helpers ----

// newProposal returns a proposal of sandbox numbered n: its dedupe key and
// documents differ from every other n's.
func newProposal(sandbox string, n int, supersede ...string) store.NewProposal {
	res, h := doc(n)
	return store.NewProposal{Proposal: store.Proposal{
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
	}}
}

func propose(t *testing.T, s *store.Store, in store.NewProposal) (store.Proposal, bool) {
	t.Helper()
	p, created, err := s.CreateProposal(ctx(t), in, "agent")
	if err != nil {
		t.Fatalf("CreateProposal(%s, %q): %v", in.Proposal.Sandbox, in.Proposal.DedupeKey, err)
	}
	return p, created
}

// mustPropose creates a proposal that must be new.
func mustPropose(t *testing.T, s *store.Store, in store.NewProposal) store.Proposal {
	t.Helper()
	p, created := propose(t, s, in)
	if !created {
		t.Fatalf("CreateProposal(%s, %q) returned existing proposal %d, want a new one", in.Proposal.Sandbox, in.Proposal.DedupeKey, p.ID)
	}
	return p
}

func getProposal(t *testing.T, s *store.Store, id int64) store.Proposal {
	t.Helper()
	p, err := s.GetProposal(ctx(t), id)
	if err != nil {
		t.Fatalf("GetProposal(%d): %v", id, err)
	}
	return p
}

func listProposals(t *testing.T, s *store.Store, f store.ProposalFilter) []store.Proposal {
	t.Helper()
	ps, err := s.ListProposals(ctx(t), f)
	if err != nil {
		t.Fatalf("ListProposals(%+v): %v", f, err)
	}
	return ps
}

func proposalIDs(ps []store.Proposal) []int64 {
	ids := make([]int64, 0, len(ps))
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	return ids
}

// sameProposal compares every field, times with Equal.
func sameProposal(got, want store.Proposal) bool {
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) {
		return false
	}
	got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(got, want)
}

func wantSameProposal(t *testing.T, what string, got, want store.Proposal) {
	t.Helper()
	if !sameProposal(got, want) {
		t.Errorf("%s =\n%+v\nwant\n%+v", what, got, want)
	}
}

func getSandbox(t *testing.T, s *store.Store, name string) store.Sandbox {
	t.Helper()
	sb, err := s.GetSandbox(ctx(t), name)
	if err != nil {
		t.Fatalf("GetSandbox(%q): %v", name, err)
	}
	return sb
}

func id(p store.Proposal) string { return strconv.FormatInt(p.ID, 10) }

// ---- boundary and credentialed hosts ----

func testSandboxBoundary(t *testing.T, s *store.Store) {
	created, _ := mustCreate(t, s, "bounded", true)
	if created.Boundary != nil || created.BoundaryHash != "" {
		t.Errorf("CreateSandbox boundary = %q, %q; want none", created.Boundary, created.BoundaryHash)
	}
	if sb := getSandbox(t, s, "bounded"); sb.Boundary != nil || sb.BoundaryHash != "" {
		t.Errorf("GetSandbox boundary of a new sandbox = %q, %q; want none", sb.Boundary, sb.BoundaryHash)
	}

	d1, h1 := doc(11)
	arg := bytes.Clone(d1)
	sb, err := s.SetSandboxBoundary(ctx(t), "bounded", arg, h1, "alice")
	if err != nil {
		t.Fatalf("SetSandboxBoundary: %v", err)
	}
	arg[0] = 'X' // the store must have kept its own copy
	if !bytes.Equal(sb.Boundary, d1) || sb.BoundaryHash != h1 || sb.CurrentVersion != 1 || sb.Name != "bounded" {
		t.Errorf("SetSandboxBoundary = %+v", sb)
	}
	got := getSandbox(t, s, "bounded")
	if !bytes.Equal(got.Boundary, d1) || got.BoundaryHash != h1 || got.CurrentVersion != 1 || got.CurrentHash != created.CurrentHash {
		t.Errorf("GetSandbox after SetSandboxBoundary = %+v", got)
	}
	sbs, err := s.ListSandboxes(ctx(t))
	if err != nil || len(sbs) != 1 || !bytes.Equal(sbs[0].Boundary, d1) || sbs[0].BoundaryHash != h1 {
		t.Errorf("ListSandboxes after SetSandboxBoundary = %+v, %v", sbs, err)
	}
	e := findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "bounded"}), store.ActionBoundarySet, "bounded")
	if e.Actor != "alice" || e.BeforeHash != "" || e.AfterHash != h1 {
		t.Errorf("first boundary audit = %+v", e)
	}

	d2, h2 := doc(12)
	if _, err := s.SetSandboxBoundary(ctx(t), "bounded", d2, h2, "bob"); err != nil {
		t.Fatalf("SetSandboxBoundary(replace): %v", err)
	}
	e = findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "bounded"}), store.ActionBoundarySet, "bounded")
	if e.Actor != "bob" || e.BeforeHash != h1 || e.AfterHash != h2 {
		t.Errorf("replacing boundary audit = %+v, want %s -> %s", e, h1, h2)
	}

	// An empty document removes it; the hash given is ignored.
	sb, err = s.SetSandboxBoundary(ctx(t), "bounded", nil, "ignored", "carol")
	if err != nil {
		t.Fatalf("SetSandboxBoundary(clear): %v", err)
	}
	if sb.Boundary != nil || sb.BoundaryHash != "" {
		t.Errorf("SetSandboxBoundary(clear) = %q, %q; want none", sb.Boundary, sb.BoundaryHash)
	}
	if got := getSandbox(t, s, "bounded"); got.Boundary != nil || got.BoundaryHash != "" {
		t.Errorf("GetSandbox after clearing = %q, %q; want none", got.Boundary, got.BoundaryHash)
	}
	e = findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "bounded"}), store.ActionBoundarySet, "bounded")
	if e.Actor != "carol" || e.BeforeHash != h2 || e.AfterHash != "" {
		t.Errorf("clearing boundary audit = %+v", e)
	}
	if _, err := s.SetSandboxBoundary(ctx(t), "bounded", []byte{}, "", "carol"); err != nil {
		t.Errorf("SetSandboxBoundary(clear with empty document): %v", err)
	}

	before := len(audits(t, s, store.AuditFilter{}))
	_, err = s.SetSandboxBoundary(ctx(t), "missing", d1, h1, "alice")
	wantErr(t, "SetSandboxBoundary(missing sandbox)", err, store.ErrNotFound)
	if after := len(audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("SetSandboxBoundary(missing sandbox) wrote %d audit entries", after-before)
	}
}

func testCredentialedHosts(t *testing.T, s *store.Store) {
	created, _ := mustCreate(t, s, "creds", false)
	if created.CredentialedHosts != nil {
		t.Errorf("CreateSandbox credentialed hosts = %q, want nil", created.CredentialedHosts)
	}
	if sb := getSandbox(t, s, "creds"); sb.CredentialedHosts != nil {
		t.Errorf("GetSandbox credentialed hosts of a new sandbox = %q, want nil", sb.CredentialedHosts)
	}

	sb, err := s.UpdateCredentialedHosts(ctx(t), "creds",
		[]string{"b.example.com:443", "a.example.com:443", "b.example.com:443"}, nil, "alice")
	if err != nil {
		t.Fatalf("UpdateCredentialedHosts(add): %v", err)
	}
	want := []string{"a.example.com:443", "b.example.com:443"}
	if !slices.Equal(sb.CredentialedHosts, want) || sb.Name != "creds" {
		t.Errorf("UpdateCredentialedHosts(add) = %+v, want hosts %q", sb, want)
	}
	if got := getSandbox(t, s, "creds"); !slices.Equal(got.CredentialedHosts, want) {
		t.Errorf("GetSandbox hosts = %q, want %q", got.CredentialedHosts, want)
	}
	e := findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "creds"}), store.ActionCredentials, "creds")
	if e.Actor != "alice" || e.Detail["before"] != "" || e.Detail["after"] != "a.example.com:443,b.example.com:443" {
		t.Errorf("credentials audit = %+v", e)
	}

	// Add, then remove: an entry both added and removed ends up absent;
	// removing an absent entry is fine; hosts are kept lower-case.
	sb, err = s.UpdateCredentialedHosts(ctx(t), "creds",
		[]string{"C.Example.com:8443", "d.example.com:443"},
		[]string{"a.example.com:443", "absent.example.com:1", "d.example.com:443"}, "bob")
	if err != nil {
		t.Fatalf("UpdateCredentialedHosts(add and remove): %v", err)
	}
	want = []string{"b.example.com:443", "c.example.com:8443"}
	if !slices.Equal(sb.CredentialedHosts, want) {
		t.Errorf("UpdateCredentialedHosts(add and remove) hosts = %q, want %q", sb.CredentialedHosts, want)
	}
	sbs, err := s.ListSandboxes(ctx(t))
	if err != nil || len(sbs) != 1 || !slices.Equal(sbs[0].CredentialedHosts, want) {
		t.Errorf("ListSandboxes = %+v, %v; want hosts %q", sbs, err, want)
	}
	e = findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "creds"}), store.ActionCredentials, "creds")
	if e.Actor != "bob" || e.Detail["before"] != "a.example.com:443,b.example.com:443" ||
		e.Detail["after"] != "b.example.com:443,c.example.com:8443" {
		t.Errorf("second credentials audit = %+v", e)
	}

	sb, err = s.UpdateCredentialedHosts(ctx(t), "creds", nil, want, "carol")
	if err != nil || sb.CredentialedHosts != nil {
		t.Errorf("UpdateCredentialedHosts(remove all) = %q, %v; want nil", sb.CredentialedHosts, err)
	}
	if got := getSandbox(t, s, "creds"); got.CredentialedHosts != nil {
		t.Errorf("GetSandbox hosts after removing all = %q, want nil", got.CredentialedHosts)
	}
	e = findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "creds"}), store.ActionCredentials, "creds")
	if e.Actor != "carol" || e.Detail["before"] != "b.example.com:443,c.example.com:8443" || e.Detail["after"] != "" {
		t.Errorf("third credentials audit = %+v", e)
	}

	before := len(audits(t, s, store.AuditFilter{}))
	_, err = s.UpdateCredentialedHosts(ctx(t), "missing", []string{"a.example.com:443"}, nil, "alice")
	wantErr(t, "UpdateCredentialedHosts(missing sandbox)", err, store.ErrNotFound)
	if after := len(audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("UpdateCredentialedHosts(missing sandbox) wrote %d audit entries", after-before)
	}
}

// ---- proposals ----

func testProposalCreateGetList(t *testing.T, s *store.Store) {
	mustCreate(t, s, "one", true)
	mustCreate(t, s, "two", true)

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
	wantSameProposal(t, "CreateProposal", p1, want)
	if p1.ID <= 0 {
		t.Errorf("CreateProposal id = %d", p1.ID)
	}
	recent(t, "CreatedAt", p1.CreatedAt)
	recent(t, "UpdatedAt", p1.UpdatedAt)
	wantSameProposal(t, "GetProposal", getProposal(t, s, p1.ID), p1)

	// Optional fields may be empty and come back nil.
	bare := newProposal("two", 2)
	bare.Proposal.Findings, bare.Proposal.Rationale, bare.Proposal.DenialID = nil, "", ""
	p2 := mustPropose(t, s, bare)
	if p2.Findings != nil || p2.SupersedeKeys != nil || p2.StatusReason != "" || p2.RebaseError != "" {
		t.Errorf("CreateProposal without optional fields = %+v", p2)
	}
	wantSameProposal(t, "GetProposal(bare)", getProposal(t, s, p2.ID), p2)
	p3 := mustPropose(t, s, newProposal("one", 3))
	if !(p1.ID < p2.ID && p2.ID < p3.ID) {
		t.Errorf("ids %d, %d, %d not increasing", p1.ID, p2.ID, p3.ID)
	}
	if _, err := s.SetProposalStatus(ctx(t), p3.ID, []string{store.ProposalPending}, store.ProposalRejected, "no", "alice"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	p3 = getProposal(t, s, p3.ID)

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
		got := listProposals(t, s, tc.f)
		if len(got) != len(tc.want) {
			t.Errorf("ListProposals(%+v) ids = %v, want %v", tc.f, proposalIDs(got), proposalIDs(tc.want))
			continue
		}
		for i := range got {
			wantSameProposal(t, fmt.Sprintf("ListProposals(%+v)[%d]", tc.f, i), got[i], tc.want[i])
		}
	}

	_, err := s.GetProposal(ctx(t), p3.ID+100)
	wantErr(t, "GetProposal(missing)", err, store.ErrNotFound)

	e := findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "one"}), store.ActionProposalNew, id(p1))
	if e.Actor != "agent" || e.AfterHash != p1.ResultingHash || e.Sandbox != "one" {
		t.Errorf("proposal submission audit = %+v", e)
	}

	before := len(audits(t, s, store.AuditFilter{}))
	_, _, err = s.CreateProposal(ctx(t), newProposal("missing", 4), "agent")
	wantErr(t, "CreateProposal(missing sandbox)", err, store.ErrNotFound)
	if after := len(audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("CreateProposal(missing sandbox) wrote %d audit entries", after-before)
	}
	if n := len(listProposals(t, s, store.ProposalFilter{})); n != 3 {
		t.Errorf("%d proposals stored, want 3", n)
	}
}

func testProposalIdempotency(t *testing.T, s *store.Store) {
	mustCreate(t, s, "idem", true)
	mustCreate(t, s, "other", true)

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
	wantSameProposal(t, "retry", got, p)

	// Still after the first was withdrawn.
	w, err := s.SetProposalStatus(ctx(t), p.ID, []string{store.ProposalPending}, store.ProposalWithdrawn, "oops", "agent")
	if err != nil {
		t.Fatalf("SetProposalStatus(withdrawn): %v", err)
	}
	got, created = propose(t, s, retry)
	if created || got.ID != p.ID || got.Status != store.ProposalWithdrawn {
		t.Errorf("retry after withdrawal = %+v, created %v; want proposal %d, withdrawn", got, created, p.ID)
	}
	wantSameProposal(t, "retry after withdrawal", got, w)

	// Keys are per sandbox; no key means no idempotency.
	other := newProposal("other", 1)
	other.Proposal.IdempotencyKey = "retry-me"
	mustPropose(t, s, other)
	mustPropose(t, s, newProposal("idem", 3))
	mustPropose(t, s, newProposal("idem", 4))

	if ps := listProposals(t, s, store.ProposalFilter{Sandbox: "idem"}); len(ps) != 3 {
		t.Errorf("proposals of idem = %v, want 3", proposalIDs(ps))
	}
	if n := countAudit(audits(t, s, store.AuditFilter{Sandbox: "idem"}), store.ActionProposalNew); n != 3 {
		t.Errorf("%d submission audit entries, want 3 (retries are not audited)", n)
	}
}

func testProposalDedupe(t *testing.T, s *store.Store) {
	mustCreate(t, s, "dd", true)
	mustCreate(t, s, "other", true)

	p1 := mustPropose(t, s, newProposal("dd", 1))
	again := newProposal("dd", 2)
	again.Proposal.DedupeKey = p1.DedupeKey
	got, created := propose(t, s, again)
	if created {
		t.Errorf("a proposal identical to a pending one was stored as %d", got.ID)
	}
	wantSameProposal(t, "duplicate of a pending proposal", got, p1)

	// Another sandbox's pending proposal does not count.
	otherIn := newProposal("other", 1)
	mustPropose(t, s, otherIn)

	// Only pending proposals dedupe.
	if _, err := s.SetProposalStatus(ctx(t), p1.ID, []string{store.ProposalPending}, store.ProposalRejected, "no", "alice"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	p2 := mustPropose(t, s, again)
	if p2.ID == p1.ID || p2.DedupeKey != p1.DedupeKey {
		t.Errorf("after rejection = %+v, want a new proposal", p2)
	}
	if ps := listProposals(t, s, store.ProposalFilter{Sandbox: "dd"}); !slices.Equal(proposalIDs(ps), []int64{p2.ID, p1.ID}) {
		t.Errorf("proposals of dd = %v, want [%d %d]", proposalIDs(ps), p2.ID, p1.ID)
	}
}

func testProposalSupersede(t *testing.T, s *store.Store) {
	mustCreate(t, s, "sup", true)
	mustCreate(t, s, "other", true)

	old := mustPropose(t, s, newProposal("sup", 1, "api.example.com:443 curl"))
	unrelated := mustPropose(t, s, newProposal("sup", 2, "db.example.com:5432 psql"))
	withdrawn := mustPropose(t, s, newProposal("sup", 3, "pypi.org:443 pip"))
	if _, err := s.SetProposalStatus(ctx(t), withdrawn.ID, []string{store.ProposalPending}, store.ProposalWithdrawn, "", "agent"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	withdrawn = getProposal(t, s, withdrawn.ID)
	elsewhere := mustPropose(t, s, newProposal("other", 4, "api.example.com:443 curl"))
	noKeys := mustPropose(t, s, newProposal("sup", 5))

	newer := mustPropose(t, s, newProposal("sup", 6, "pypi.org:443 pip", "api.example.com:443 curl"))
	if newer.Status != store.ProposalPending || newer.SupersededBy != 0 {
		t.Errorf("superseding proposal = %+v", newer)
	}

	got := getProposal(t, s, old.ID)
	if got.Status != store.ProposalSuperseded || got.SupersededBy != newer.ID ||
		got.StatusReason != fmt.Sprintf("superseded by proposal %d", newer.ID) {
		t.Errorf("older proposal sharing a key = %+v, want superseded by %d", got, newer.ID)
	}
	if got.UpdatedAt.Before(old.UpdatedAt) {
		t.Errorf("superseded UpdatedAt %v before %v", got.UpdatedAt, old.UpdatedAt)
	}
	recent(t, "superseded UpdatedAt", got.UpdatedAt)
	wantSameProposal(t, "proposal without a shared key", getProposal(t, s, unrelated.ID), unrelated)
	wantSameProposal(t, "withdrawn proposal sharing a key", getProposal(t, s, withdrawn.ID), withdrawn)
	wantSameProposal(t, "other sandbox's proposal sharing a key", getProposal(t, s, elsewhere.ID), elsewhere)
	wantSameProposal(t, "proposal without keys", getProposal(t, s, noKeys.ID), noKeys)

	es := audits(t, s, store.AuditFilter{Sandbox: "sup"})
	e := findAudit(t, es, store.ActionProposalState, id(old))
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
	if got := getProposal(t, s, old.ID); got.SupersededBy != newer.ID {
		t.Errorf("superseded proposal superseded again: %+v", got)
	}
	if got := getProposal(t, s, newer.ID); got.Status != store.ProposalSuperseded || got.SupersededBy != newest.ID {
		t.Errorf("pending proposal sharing a key with the newest = %+v, want superseded by %d", got, newest.ID)
	}
}

func testProposalRateLimit(t *testing.T, s *store.Store) {
	mustCreate(t, s, "rl", true)
	mustCreate(t, s, "other", true)
	limited := func(n int) store.NewProposal {
		in := newProposal("rl", n)
		in.Proposal.IdempotencyKey = fmt.Sprintf("key-%d", n)
		in.RateMax, in.RateWindow = 2, time.Hour
		return in
	}
	p1 := mustPropose(t, s, limited(1))
	mustPropose(t, s, limited(2))
	// Withdrawn proposals still count: the limit is on submissions.
	if _, err := s.SetProposalStatus(ctx(t), p1.ID, []string{store.ProposalPending}, store.ProposalWithdrawn, "", "agent"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	auditBefore := len(audits(t, s, store.AuditFilter{}))
	_, _, err := s.CreateProposal(ctx(t), limited(3), "agent")
	wantErr(t, "CreateProposal over the limit", err, store.ErrRateLimited)
	if ps := listProposals(t, s, store.ProposalFilter{Sandbox: "rl"}); len(ps) != 2 {
		t.Errorf("proposals after the refused one = %v, want 2", proposalIDs(ps))
	}
	if after := len(audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("refused proposal wrote %d audit entries", after-auditBefore)
	}

	// Retries and duplicates are answered before the limit is checked.
	if got, created, err := s.CreateProposal(ctx(t), limited(1), "agent"); err != nil || created || got.ID != p1.ID {
		t.Errorf("retry over the limit = %d, %v, %v; want proposal %d", got.ID, created, err, p1.ID)
	}
	dup := limited(2)
	dup.Proposal.IdempotencyKey = ""
	if _, created, err := s.CreateProposal(ctx(t), dup, "agent"); err != nil || created {
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
	_, _, err = s.CreateProposal(ctx(t), limited(7), "agent")
	wantErr(t, "CreateProposal over the limit (one hour)", err, store.ErrRateLimited)
	if ps := listProposals(t, s, store.ProposalFilter{Sandbox: "rl"}); len(ps) != 4 {
		t.Errorf("proposals of rl = %v, want 4", proposalIDs(ps))
	}
}

func testProposalStatus(t *testing.T, s *store.Store) {
	mustCreate(t, s, "st", true)
	p := mustPropose(t, s, newProposal("st", 1))

	got, err := s.SetProposalStatus(ctx(t), p.ID, []string{store.ProposalPending, store.ProposalApproved}, store.ProposalApproved, "looks fine", "carol")
	if err != nil {
		t.Fatalf("SetProposalStatus(approved): %v", err)
	}
	want := p
	want.Status, want.StatusReason, want.UpdatedAt = store.ProposalApproved, "looks fine", got.UpdatedAt
	// Leaving pending is the decision.
	want.DecidedAt, want.DecidedBy = got.DecidedAt, "carol"
	wantSameProposal(t, "SetProposalStatus(approved)", got, want)
	if got.DecidedAt == nil || !got.DecidedAt.Equal(got.UpdatedAt) {
		t.Errorf("DecidedAt = %v, want the change's time %v", got.DecidedAt, got.UpdatedAt)
	}
	if got.UpdatedAt.Before(p.UpdatedAt) {
		t.Errorf("UpdatedAt %v before %v", got.UpdatedAt, p.UpdatedAt)
	}
	recent(t, "UpdatedAt", got.UpdatedAt)
	wantSameProposal(t, "GetProposal after SetProposalStatus", getProposal(t, s, p.ID), got)
	e := findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "st"}), store.ActionProposalState, id(p))
	if e.Actor != "carol" || e.Detail["from"] != store.ProposalPending || e.Detail["to"] != store.ProposalApproved || e.Detail["reason"] != "looks fine" {
		t.Errorf("status audit = %+v", e)
	}

	auditBefore := len(audits(t, s, store.AuditFilter{}))
	_, err = s.SetProposalStatus(ctx(t), p.ID, []string{store.ProposalPending}, store.ProposalRejected, "too late", "dave")
	wantErr(t, "SetProposalStatus(from a status it no longer has)", err, store.ErrConflict)
	wantSameProposal(t, "proposal after a conflict", getProposal(t, s, p.ID), got)
	if after := len(audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("conflicting status change wrote %d audit entries", after-auditBefore)
	}

	applied, err := s.SetProposalStatus(ctx(t), p.ID, []string{store.ProposalApproved}, store.ProposalApplied, "version 2", "erin")
	if err != nil || applied.Status != store.ProposalApplied || applied.StatusReason != "version 2" {
		t.Errorf("SetProposalStatus(applied) = %+v, %v", applied, err)
	}
	// Not from pending: the decision stays the approval's.
	if applied.DecidedBy != "carol" || applied.DecidedAt == nil || !applied.DecidedAt.Equal(*got.DecidedAt) {
		t.Errorf("SetProposalStatus(approved to applied) decided = %v by %q, want %v by carol", applied.DecidedAt, applied.DecidedBy, got.DecidedAt)
	}

	_, err = s.SetProposalStatus(ctx(t), p.ID+100, []string{store.ProposalPending}, store.ProposalRejected, "", "carol")
	wantErr(t, "SetProposalStatus(missing)", err, store.ErrNotFound)
}

func testProposalRebase(t *testing.T, s *store.Store) {
	mustCreate(t, s, "rb", true)
	p := mustPropose(t, s, newProposal("rb", 1))
	res, h := doc(21)
	in := store.Rebase{
		ID: p.ID, FromVersion: 1, BaseVersion: 2, BaseHash: "base-2",
		Resulting: res, ResultingHash: h, Findings: []byte(`{"findings":[]}`), Actor: "advisor",
	}
	got, err := s.RebaseProposal(ctx(t), in)
	if err != nil {
		t.Fatalf("RebaseProposal: %v", err)
	}
	want := p
	want.BaseVersion, want.BaseHash, want.Resulting, want.ResultingHash, want.Findings = 2, "base-2", res, h, in.Findings
	want.UpdatedAt = got.UpdatedAt
	wantSameProposal(t, "RebaseProposal", got, want)
	recent(t, "UpdatedAt", got.UpdatedAt)
	wantSameProposal(t, "GetProposal after rebase", getProposal(t, s, p.ID), got)
	e := findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "rb"}), store.ActionProposalBase, id(p))
	if e.Actor != "advisor" || e.BeforeHash != p.ResultingHash || e.AfterHash != h {
		t.Errorf("rebase audit = %+v", e)
	}

	auditBefore := len(audits(t, s, store.AuditFilter{}))
	stale := in
	stale.BaseVersion, stale.ResultingHash, stale.Resulting = 3, "other", []byte("{}")
	_, err = s.RebaseProposal(ctx(t), stale) // from 1, but it is on 2 now
	wantErr(t, "RebaseProposal(stale from version)", err, store.ErrConflict)
	wantSameProposal(t, "proposal after a stale rebase", getProposal(t, s, p.ID), got)

	// A rebase that no longer applies records the error; it may carry no
	// resulting policy.
	broken, err := s.RebaseProposal(ctx(t), store.Rebase{
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

	if _, err := s.SetProposalStatus(ctx(t), p.ID, []string{store.ProposalPending}, store.ProposalExpired, "", "advisor"); err != nil {
		t.Fatalf("SetProposalStatus: %v", err)
	}
	auditBefore++
	expired := getProposal(t, s, p.ID)
	notPending := in
	notPending.FromVersion = 3
	_, err = s.RebaseProposal(ctx(t), notPending)
	wantErr(t, "RebaseProposal(not pending)", err, store.ErrConflict)
	wantSameProposal(t, "expired proposal after a refused rebase", getProposal(t, s, p.ID), expired)
	if after := len(audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("refused rebases wrote %d audit entries", after-auditBefore)
	}

	missing := in
	missing.ID = p.ID + 100
	_, err = s.RebaseProposal(ctx(t), missing)
	wantErr(t, "RebaseProposal(missing)", err, store.ErrNotFound)
}

func testProposalConcurrentIdempotency(t *testing.T, s *store.Store) {
	mustCreate(t, s, "race", true)
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
			r.p, r.created, r.err = s.CreateProposal(ctx(t), in, "agent")
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
	if ps := listProposals(t, s, store.ProposalFilter{}); len(ps) != 1 {
		t.Errorf("proposals stored = %v, want 1", proposalIDs(ps))
	}
}

func testProposalSandboxDelete(t *testing.T, s *store.Store) {
	mustCreate(t, s, "doomed", true)
	mustCreate(t, s, "survivor", true)
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
		wantErr(t, fmt.Sprintf("GetProposal(%d of a deleted sandbox)", p.ID), err, store.ErrNotFound)
	}
	if ps := listProposals(t, s, store.ProposalFilter{}); !slices.Equal(proposalIDs(ps), []int64{kept.ID}) {
		t.Errorf("proposals after delete = %v, want [%d]", proposalIDs(ps), kept.ID)
	}
	wantSameProposal(t, "other sandbox's proposal", getProposal(t, s, kept.ID), kept)
	// The audit log keeps the history.
	findAudit(t, audits(t, s, store.AuditFilter{Sandbox: "doomed"}), store.ActionProposalNew, id(p1))

	// A sandbox of the same name starts afresh, with fresh ids.
	if _, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "doomed", Actor: "alice", Token: newToken("sandbox-doomed-2", "", "")}); err != nil {
		t.Fatalf("re-create deleted sandbox: %v", err)
	}
	p3 := mustPropose(t, s, in)
	if p3.ID <= kept.ID {
		t.Errorf("proposal of the re-created sandbox has id %d, want above %d", p3.ID, kept.ID)
	}
}

func testAdvisorInvalidInput(t *testing.T, s *store.Store) {
	mustCreate(t, s, "box", true)
	p := mustPropose(t, s, newProposal("box", 1))
	auditBefore := len(audits(t, s, store.AuditFilter{}))
	d, h := doc(2)
	bad := func(change func(in *store.NewProposal)) func() error {
		return func() error {
			in := newProposal("box", 3)
			change(&in)
			_, _, err := s.CreateProposal(ctx(t), in, "agent")
			return err
		}
	}
	rebase := func(change func(r *store.Rebase)) func() error {
		return func() error {
			r := store.Rebase{ID: p.ID, FromVersion: 1, BaseVersion: 2, Resulting: d, ResultingHash: h, Actor: "advisor"}
			change(&r)
			_, err := s.RebaseProposal(ctx(t), r)
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
		"CreateProposal(empty sandbox)":        bad(func(in *store.NewProposal) { in.Proposal.Sandbox = "" }),
		"CreateProposal(empty document)":       bad(func(in *store.NewProposal) { in.Proposal.Document = nil }),
		"CreateProposal(empty resulting)":      bad(func(in *store.NewProposal) { in.Proposal.Resulting = []byte{} }),
		"CreateProposal(empty resulting hash)": bad(func(in *store.NewProposal) { in.Proposal.ResultingHash = "" }),
		"CreateProposal(negative base)":        bad(func(in *store.NewProposal) { in.Proposal.BaseVersion = -1 }),
		"CreateProposal(empty supersede key)":  bad(func(in *store.NewProposal) { in.Proposal.SupersedeKeys = []string{"k", ""} }),
		"CreateProposal(negative rate max)":    bad(func(in *store.NewProposal) { in.RateMax = -1 }),
		"CreateProposal(rate max without window)": bad(func(in *store.NewProposal) {
			in.RateMax, in.RateWindow = 5, 0
		}),
		"SetProposalStatus(unknown status)": func() error {
			_, err := s.SetProposalStatus(ctx(t), p.ID, []string{store.ProposalPending}, "done", "", "a")
			return err
		},
		"SetProposalStatus(no from)": func() error {
			_, err := s.SetProposalStatus(ctx(t), p.ID, nil, store.ProposalRejected, "", "a")
			return err
		},
		"SetProposalStatus(unknown from)": func() error {
			_, err := s.SetProposalStatus(ctx(t), p.ID, []string{"open"}, store.ProposalRejected, "", "a")
			return err
		},
		"RebaseProposal(negative version)":    rebase(func(r *store.Rebase) { r.BaseVersion = -1 }),
		"RebaseProposal(hash without policy)": rebase(func(r *store.Rebase) { r.Resulting = nil }),
		"RebaseProposal(policy without hash)": rebase(func(r *store.Rebase) { r.ResultingHash = "" }),
		"RebaseProposal(no policy, no error)": rebase(func(r *store.Rebase) { r.Resulting, r.ResultingHash = nil, "" }),
	} {
		err := call()
		if err == nil {
			t.Errorf("%s succeeded, want an error", what)
			continue
		}
		for _, sentinel := range []error{store.ErrNotFound, store.ErrConflict, store.ErrAlreadyExists, store.ErrRateLimited} {
			if errors.Is(err, sentinel) {
				t.Errorf("%s: %v, want a plain error, not %v", what, err, sentinel)
			}
		}
	}
	if sb := getSandbox(t, s, "box"); sb.Boundary != nil || sb.BoundaryHash != "" || sb.CredentialedHosts != nil {
		t.Errorf("sandbox after invalid inputs = %+v", sb)
	}
	if ps := listProposals(t, s, store.ProposalFilter{}); len(ps) != 1 {
		t.Errorf("proposals after invalid inputs = %v, want only %d", proposalIDs(ps), p.ID)
	}
	wantSameProposal(t, "proposal after invalid changes", getProposal(t, s, p.ID), p)
	if after := len(audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("invalid inputs wrote %d audit entries", after-auditBefore)
	}
}
