package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/store"
)

// appendN stores n records of sandbox (denials named prefix-i) and
// returns them as stored, oldest first.
func appendN(t *testing.T, s *store.Store, sandbox, prefix string, n int) []store.Decision {
	t.Helper()
	in := make([]store.Decision, n)
	for i := range in {
		in[i] = store.Decision{ProxyID: "p", Record: decision.Record{Time: usec(2030, i), Sandbox: sandbox, Decision: "deny",
			Host: "h.example.com", Port: 443, DenialID: fmt.Sprintf("%s-%d", prefix, i)}}
	}
	if got, err := s.AppendDecisions(ctx(t), in); err != nil || got != n {
		t.Fatalf("AppendDecisions(%d for %s) = %d, %v", n, sandbox, got, err)
	}
	all := decisions(t, s, store.DecisionFilter{Sandbox: sandbox})
	return all[len(all)-n:]
}

func prune(t *testing.T, s *store.Store, r store.DecisionRetention) int64 {
	t.Helper()
	n, err := s.PruneDecisions(ctx(t), r)
	return must(t, n, err, "PruneDecisions(%+v)", r)
}

// wantKept checks the store holds exactly the records want (by id).
func wantKept(t *testing.T, s *store.Store, what string, want []store.Decision) {
	t.Helper()
	ids := func(ds []store.Decision) []int64 {
		out := make([]int64, len(ds))
		for i, d := range ds {
			out[i] = d.ID
		}
		slices.Sort(out)
		return out
	}
	if g, w := ids(decisions(t, s, store.DecisionFilter{})), ids(want); !slices.Equal(g, w) {
		t.Errorf("%s: kept %d records %v, want %d %v", what, len(g), g, len(w), w)
	}
}

// testDecisionRetention: PruneDecisions deletes by age (when the store
// received a record, not the time the proxy wrote in it) and by rank within
// each sandbox, and never deletes a denial a proposal of its sandbox names.
func testDecisionRetention(t *testing.T, s *store.Store) {
	// Refused before anything is deleted; nothing to prune is not an error.
	if n, err := s.PruneDecisions(ctx(t), store.DecisionRetention{KeepPerSandbox: -1}); err == nil || n != 0 {
		t.Errorf("PruneDecisions(keep -1) = %d, %v; want an error", n, err)
	}
	if n := prune(t, s, store.DecisionRetention{Before: time.Now().Add(time.Hour), KeepPerSandbox: 1}); n != 0 {
		t.Errorf("PruneDecisions on an empty store = %d", n)
	}

	MustCreate(t, s, "s0", true)
	MustCreate(t, s, "s1", true)
	old0 := appendN(t, s, "s0", "old0", 30)
	old1 := appendN(t, s, "s1", "old1", 5)
	gone := appendN(t, s, "gone", "gone", 12) // a sandbox that no longer exists
	// A proposal of s0 names old0-3; one of s1 names old0-4, a denial of
	// another sandbox, which protects nothing.
	p := ProposalN("s0", 1)
	p.DenialID = old0[3].DenialID
	InsertProposal(t, s, p)
	p = ProposalN("s1", 2)
	p.DenialID = old0[4].DenialID
	InsertProposal(t, s, p)
	newer := appendN(t, s, "s0", "new0", 4)
	all := decisions(t, s, store.DecisionFilter{})

	// Nothing past either bound: nothing goes.
	if n := prune(t, s, store.DecisionRetention{}); n != 0 {
		t.Errorf("PruneDecisions with no bounds deleted %d", n)
	}
	if n := prune(t, s, store.DecisionRetention{Before: all[0].ReceivedAt, KeepPerSandbox: 34}); n != 0 {
		t.Errorf("PruneDecisions within both bounds deleted %d", n)
	}
	wantKept(t, s, "within the bounds", all)

	// By count: each sandbox keeps its newest 10, and s0 its named denial.
	keep0 := append([]store.Decision{old0[3]}, append(old0[24:], newer...)...)
	want := slices.Concat(keep0, old1, gone[2:])
	if n := prune(t, s, store.DecisionRetention{KeepPerSandbox: 10}); n != int64(len(all)-len(want)) {
		t.Errorf("PruneDecisions(keep 10) deleted %d, want %d", n, len(all)-len(want))
	}
	wantKept(t, s, "keep 10 per sandbox", want)
	if n := prune(t, s, store.DecisionRetention{KeepPerSandbox: 10}); n != 0 {
		t.Errorf("PruneDecisions(keep 10) again deleted %d", n)
	}

	// By age: the cut is the store's receive time; the proxy's Time (in
	// 2030 here) does not matter.
	cut := newer[0].ReceivedAt
	var young []store.Decision
	for _, d := range want {
		if !d.ReceivedAt.Before(cut) || d.ID == old0[3].ID {
			young = append(young, d)
		}
	}
	if len(young) == len(want) || len(young) <= len(newer) {
		t.Fatalf("test setup: records received before %v: %d of %d", cut, len(want)-len(young), len(want))
	}
	if n := prune(t, s, store.DecisionRetention{Before: cut}); n != int64(len(want)-len(young)) {
		t.Errorf("PruneDecisions(before %v) deleted %d, want %d", cut, n, len(want)-len(young))
	}
	wantKept(t, s, "by age", young)
	prune(t, s, store.DecisionRetention{Before: time.Now().Add(time.Hour)})
	wantKept(t, s, "all aged out", []store.Decision{old0[3]})

	// Ids are never reused, so tailing by id after a prune misses nothing.
	last := all[len(all)-1].ID
	later := appendN(t, s, "s1", "later", 1)
	if later[0].ID <= last {
		t.Errorf("id after a prune = %d, want > %d", later[0].ID, last)
	}
	if ds := decisions(t, s, store.DecisionFilter{AfterID: last}); len(ds) != 1 || ds[0].ID != later[0].ID {
		t.Errorf("tail after a prune = %+v", ds)
	}

	// The protection goes with the proposal's sandbox.
	if err := s.DeleteSandbox(ctx(t), "s0", "alice"); err != nil {
		t.Fatal(err)
	}
	prune(t, s, store.DecisionRetention{Before: time.Now().Add(time.Hour)})
	wantKept(t, s, "after the proposal's sandbox went", nil)
}

// testDecisionRetentionBatches: a prune larger than one batch deletes
// everything it should.
func testDecisionRetentionBatches(t *testing.T, s *store.Store) {
	const n = 2*store.PruneBatch + 17
	big := appendN(t, s, "big", "b", n)
	small := appendN(t, s, "small", "s", 3)
	if got := prune(t, s, store.DecisionRetention{KeepPerSandbox: 100}); got != n-100 {
		t.Errorf("PruneDecisions(keep 100) deleted %d, want %d", got, n-100)
	}
	wantKept(t, s, "keep 100", append(big[n-100:], small...))
	if got := prune(t, s, store.DecisionRetention{Before: time.Now().Add(time.Hour)}); got != 103 {
		t.Errorf("PruneDecisions(all) deleted %d, want 103", got)
	}
	wantKept(t, s, "all", nil)
}
