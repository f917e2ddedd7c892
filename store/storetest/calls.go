package storetest

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// HeldCallN is the nth held call of a test: held, filed by proxy p1's
// instance i1, requested n seconds after a fixed time and due a minute
// later.
func HeldCallN(sandbox string, n int) store.HeldCall {
	at := time.Date(2026, 12, 1, 12, 0, n, 0, time.UTC)
	return store.HeldCall{
		Sandbox: sandbox, ProxyID: "p1", Instance: "i1", Key: fmt.Sprintf("k%d", n),
		Binary: "/usr/bin/agent", Host: "orders.example", Port: 443, Method: "POST", Path: "/mcp",
		MCPMethod: "tools/call", Tool: "refund", ArgumentsJSON: fmt.Sprintf(`{"order":%d}`, n),
		ArgumentsDigest: fmt.Sprintf("sha256:%064d", n), PolicyVersion: 1, Entry: "orders", Rule: "rules[0]",
		Status: store.CallHeld, RequestedAt: at, Deadline: at.Add(time.Minute),
	}
}

// InsertHeldCall stores c (through the driver: lifecycle is the writer
// elsewhere) and returns it with its ID.
func InsertHeldCall(t *testing.T, s *store.Store, c store.HeldCall) store.HeldCall {
	t.Helper()
	out, err := s.InsertHeldCall(ctx(t), c)
	return must(t, out, err, "InsertHeldCall(%s)", c.Key)
}

// testHeldCalls: a call is stored as given with a new ID, once per
// proxy key; read by ID and by key; listed newest first by sandbox and
// status; decided once (compare-and-set from held); the bulk endings
// touch only held calls; arguments are cleared after the retention, the
// digest kept; approvals are kept once per approver.
func testHeldCalls(t *testing.T, s *store.Store) {
	MustCreate(t, s, "orders", true)
	MustCreate(t, s, "support", true)
	a := InsertHeldCall(t, s, HeldCallN("orders", 1))
	b := InsertHeldCall(t, s, HeldCallN("orders", 2))
	other := InsertHeldCall(t, s, HeldCallN("support", 3))
	want := HeldCallN("orders", 1)
	want.ID = a.ID
	if a.ID == 0 || !reflect.DeepEqual(a, want) {
		t.Fatalf("InsertHeldCall =\n%+v\nwant\n%+v", a, want)
	}
	if g, err := s.GetHeldCall(ctx(t), a.ID); err != nil || !reflect.DeepEqual(g, want) {
		t.Errorf("GetHeldCall = %+v, %v; want %+v", g, err, want)
	}
	if g, err := s.HeldCallByKey(ctx(t), "orders", "p1", "i1", "k1"); err != nil || g.ID != a.ID {
		t.Errorf("HeldCallByKey = %+v, %v; want call %d", g, err, a.ID)
	}
	_, err := s.HeldCallByKey(ctx(t), "orders", "p1", "i2", "k1")
	WantErr(t, "HeldCallByKey(other instance)", err, store.ErrNotFound)
	_, err = s.GetHeldCall(ctx(t), other.ID+100)
	WantErr(t, "GetHeldCall(unknown)", err, store.ErrNotFound)
	inTx(t, s, func(tx store.Tx) error {
		_, err := tx.InsertHeldCall(ctx(t), HeldCallN("orders", 1))
		WantErr(t, "InsertHeldCall(same key) in InTx", err, store.ErrAlreadyExists)
		_, err = tx.GetHeldCall(ctx(t), a.ID) // the transaction is still usable
		return err
	})
	_, err = s.Driver.InsertHeldCall(ctx(t), HeldCallN("ghost", 4))
	WantErr(t, "InsertHeldCall(unknown sandbox)", err, store.ErrNotFound)

	ids := func(list []store.HeldCall, err error) []int64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		out := []int64{}
		for _, c := range list {
			out = append(out, c.ID)
		}
		return out
	}
	for name, tc := range map[string]struct {
		f    store.HeldCallFilter
		want []int64
	}{
		"all":     {store.HeldCallFilter{}, []int64{other.ID, b.ID, a.ID}},
		"sandbox": {store.HeldCallFilter{Sandbox: "orders"}, []int64{b.ID, a.ID}},
		"limit":   {store.HeldCallFilter{Limit: 1}, []int64{other.ID}},
		"status":  {store.HeldCallFilter{Status: store.CallApproved}, []int64{}},
	} {
		if got := ids(s.ListHeldCalls(ctx(t), tc.f)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ListHeldCalls(%s) = %v, want %v", name, got, tc.want)
		}
	}
	if got := ids(s.DecidedHeldCalls(ctx(t), []int64{a.ID, b.ID, other.ID})); len(got) != 0 {
		t.Errorf("DecidedHeldCalls while all are held = %v", got)
	}
	if n, err := s.CountHeldCalls(ctx(t), "orders"); err != nil || n != 2 {
		t.Errorf("CountHeldCalls(orders) = %d, %v; want 2", n, err)
	}

	// Decided once.
	decided := a
	decided.Status, decided.DecidedAt, decided.DecidedBy, decided.Reason = store.CallApproved, a.RequestedAt.Add(time.Second), "olive", "ok"
	got, err := s.DecideHeldCall(ctx(t), decided)
	got = must(t, got, err, "DecideHeldCall")
	if !reflect.DeepEqual(got, decided) {
		t.Errorf("DecideHeldCall =\n%+v\nwant\n%+v", got, decided)
	}
	again := decided
	again.Status = store.CallDenied
	_, err = s.Driver.DecideHeldCall(ctx(t), again)
	WantErr(t, "DecideHeldCall(twice)", err, store.ErrConflict)
	missing := decided
	missing.ID = other.ID + 100
	_, err = s.Driver.DecideHeldCall(ctx(t), missing)
	WantErr(t, "DecideHeldCall(unknown)", err, store.ErrNotFound)
	if err := s.Driver.SetHeldCallProposal(ctx(t), a.ID, 42); err != nil {
		t.Fatal(err)
	}
	if g, _ := s.GetHeldCall(ctx(t), a.ID); g.ProposalID != 42 {
		t.Errorf("proposal after SetHeldCallProposal = %d, want 42", g.ProposalID)
	}

	// A new instance of p1 fails the earlier one's held calls only.
	at := b.RequestedAt.Add(2 * time.Second)
	failed, err := s.Driver.FailHeldCalls(ctx(t), "orders", "p1", "i2", "proxy restarted", at)
	failed = must(t, failed, err, "FailHeldCalls")
	if len(failed) != 1 || failed[0].ID != b.ID || failed[0].Status != store.CallFailed || failed[0].DecidedBy != "gateway" ||
		failed[0].Reason != "proxy restarted" || !failed[0].DecidedAt.Equal(at) {
		t.Errorf("FailHeldCalls = %+v, want call %d failed", failed, b.ID)
	}
	// Past its deadline: expired; the approved call is not touched.
	expired, err := s.Driver.ExpireHeldCalls(ctx(t), other.Deadline, "review_timeout")
	expired = must(t, expired, err, "ExpireHeldCalls")
	if len(expired) != 1 || expired[0].ID != other.ID || expired[0].Status != store.CallExpired || expired[0].Reason != "review_timeout" {
		t.Errorf("ExpireHeldCalls = %+v, want call %d expired", expired, other.ID)
	}
	if got := ids(s.DecidedHeldCalls(ctx(t), []int64{other.ID, other.ID + 100, a.ID})); len(got) != 2 {
		t.Errorf("DecidedHeldCalls = %v, want calls %d and %d", got, a.ID, other.ID)
	}
	if n, err := s.CountHeldCalls(ctx(t), ""); err != nil || n != 0 {
		t.Errorf("CountHeldCalls() = %d, %v; want 0", n, err)
	}
	// The retention: only calls decided before the cutoff lose their
	// arguments.
	n, err := s.Driver.ClearHeldCallArguments(ctx(t), decided.DecidedAt.Add(time.Second))
	n = must(t, n, err, "ClearHeldCallArguments")
	if n != 1 {
		t.Errorf("ClearHeldCallArguments = %d, want 1", n)
	}
	if g, _ := s.GetHeldCall(ctx(t), a.ID); g.ArgumentsJSON != "" || g.ArgumentsDigest != a.ArgumentsDigest {
		t.Errorf("call after the retention: arguments %q, digest %q", g.ArgumentsJSON, g.ArgumentsDigest)
	}
	if g, _ := s.GetHeldCall(ctx(t), b.ID); g.ArgumentsJSON == "" {
		t.Error("a call decided after the cutoff lost its arguments")
	}

	// Approvals, once per approver.
	ap := store.CallApproval{Approver: "olive", Reason: "ok", CreatedAt: at}
	if err := s.Driver.InsertCallApproval(ctx(t), other.ID, ap); err != nil {
		t.Fatal(err)
	}
	WantErr(t, "InsertCallApproval(twice)", s.Driver.InsertCallApproval(ctx(t), other.ID, ap), store.ErrAlreadyExists)
	WantErr(t, "InsertCallApproval(unknown call)", s.Driver.InsertCallApproval(ctx(t), other.ID+100, ap), store.ErrNotFound)
	if got, err := s.CallApprovals(ctx(t), other.ID); err != nil || !reflect.DeepEqual(got, []store.CallApproval{ap}) {
		t.Errorf("CallApprovals = %+v, %v", got, err)
	}
}
