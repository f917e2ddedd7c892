package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// heldWorld is a lifecycle on SQLite with a clock the test moves, a
// sandbox "box" and the events it publishes.
type heldWorld struct {
	l   *Lifecycle
	now time.Time
	mu  sync.Mutex
	evs []events.Event
}

func newHeldWorld(t *testing.T) *heldWorld {
	t.Helper()
	s := openSQLite(t)
	w := &heldWorld{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	stream := events.New()
	stream.Subscribe(func(e events.Event) { w.mu.Lock(); w.evs = append(w.evs, e); w.mu.Unlock() })
	w.l = New(Config{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { w.mu.Lock(); defer w.mu.Unlock(); return w.now }, Stream: stream, MaxHeldCalls: 2}, s)
	doc := parseDoc(t, contextPolicy).Canonical()
	if _, err := w.l.CreateSandbox(ctx(t), store.CreateSandbox{Name: "box", Actor: "op", Token: storetest.NewToken("sandbox-box", "", ""),
		Policy: &store.PolicyVersion{Hash: doc.Hash(), Document: doc.CanonicalJSON(), Author: "op"}}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *heldWorld) advance(d time.Duration) { w.mu.Lock(); w.now = w.now.Add(d); w.mu.Unlock() }

// call is a held tools/call of box with args under key.
func call(t *testing.T, key, args string) store.HeldCall {
	t.Helper()
	digest, err := CallArgumentsDigest("tools/call", args)
	if err != nil {
		t.Fatal(err)
	}
	return store.HeldCall{Sandbox: "box", ProxyID: "p1", Instance: "i1", Key: key, Host: "orders.example.com", Port: 443,
		Method: "POST", Path: "/mcp", MCPMethod: "tools/call", Tool: "refund", ArgumentsJSON: args, ArgumentsDigest: digest, PolicyVersion: 1}
}

// TestCallSweeps: a call past its deadline is expired (review_timeout)
// and told on the stream; a decided call keeps its arguments for the
// retention, then only its digest.
func TestCallSweeps(t *testing.T) {
	w := newHeldWorld(t)
	c, filed, err := w.l.FileCall(ctx(t), call(t, "k1", `{"order":1}`), time.Minute)
	if err != nil || !filed || !c.Deadline.Equal(c.RequestedAt.Add(time.Minute)) {
		t.Fatalf("FileCall = %+v, %v, %v", c, filed, err)
	}
	w.advance(59 * time.Second)
	if err := w.l.SweepCalls(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if got, _ := w.l.st.GetHeldCall(ctx(t), c.ID); got.Status != store.CallHeld {
		t.Fatalf("before its deadline the call is %s", got.Status)
	}
	w.advance(time.Second)
	if err := w.l.SweepCalls(ctx(t)); err != nil {
		t.Fatal(err)
	}
	got, _ := w.l.st.GetHeldCall(ctx(t), c.ID)
	if got.Status != store.CallExpired || got.Reason != ReasonReviewTimeout || got.DecidedBy != "gateway" {
		t.Fatalf("at its deadline the call is %+v, want expired", got)
	}
	var decided []store.HeldCall
	for _, e := range w.evs {
		if d, ok := e.(events.CallDecided); ok {
			decided = append(decided, d.Call)
		}
	}
	if len(decided) != 1 || decided[0].ID != c.ID {
		t.Errorf("CallDecided events %+v, want the expired call", decided)
	}
	w.advance(DefaultHeldCallRetention - time.Second)
	if err := w.l.SweepCalls(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if got, _ := w.l.st.GetHeldCall(ctx(t), c.ID); got.ArgumentsJSON == "" {
		t.Fatal("arguments cleared before the retention")
	}
	w.advance(2 * time.Second)
	if err := w.l.SweepCalls(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if got, _ := w.l.st.GetHeldCall(ctx(t), c.ID); got.ArgumentsJSON != "" || got.ArgumentsDigest != c.ArgumentsDigest {
		t.Errorf("after the retention: arguments %q, digest %q", got.ArgumentsJSON, got.ArgumentsDigest)
	}
}

// TestFileCallRules: a REST call's digest is its body's bytes, JSON or
// not; a frozen or unknown sandbox files nothing; past MaxHeldCalls a
// BusyError; a decision needs an operator or admin, and a decision past
// the deadline expires the call instead.
func TestFileCallRules(t *testing.T) {
	w := newHeldWorld(t)
	rest := store.HeldCall{Sandbox: "box", ProxyID: "p1", Instance: "i1", Key: "rest", Host: "api.example.com", Port: 443,
		Method: "POST", Path: "/v1/refunds", ArgumentsJSON: "order=1&amount=5", PolicyVersion: 1}
	rest.ArgumentsDigest, _ = CallArgumentsDigest("", rest.ArgumentsJSON)
	if sum := sha256.Sum256([]byte(rest.ArgumentsJSON)); rest.ArgumentsDigest != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("REST digest %q", rest.ArgumentsDigest)
	}
	r, _, err := w.l.FileCall(ctx(t), rest, time.Minute)
	if err != nil {
		t.Fatalf("a REST call with a form body: %v", err)
	}
	ghost := call(t, "g", `{}`)
	ghost.Sandbox = "ghost"
	if _, _, err := w.l.FileCall(ctx(t), ghost, time.Minute); !errors.As(err, new(*NotFoundError)) {
		t.Errorf("unknown sandbox: %v, want NotFoundError", err)
	}
	if _, _, err := w.l.FileCall(ctx(t), call(t, "k2", `{"order":2}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.l.FileCall(ctx(t), call(t, "k3", `{"order":3}`), time.Minute); !errors.As(err, new(*BusyError)) {
		t.Errorf("past MaxHeldCalls: %v, want BusyError", err)
	}
	_, err = w.l.DecideCall(ctx(t), CallDecision{ID: r.ID, Approve: true, Reason: "mine", Decider: "sandbox-box", Role: store.RoleSandbox, Sandbox: "box", Actor: "sandbox:box"})
	if !errors.As(err, new(*PermissionError)) {
		t.Errorf("a sandbox token deciding: %v, want PermissionError", err)
	}
	w.advance(time.Minute)
	_, err = w.l.DecideCall(ctx(t), CallDecision{ID: r.ID, Approve: true, Reason: "late", Decider: "olive", Role: store.RoleOperator, Actor: "olive"})
	if !errors.As(err, new(*PreconditionError)) {
		t.Errorf("deciding past the deadline: %v, want PreconditionError", err)
	}
	if got, _ := w.l.st.GetHeldCall(ctx(t), r.ID); got.Status != store.CallExpired {
		t.Errorf("a call decided past its deadline is %s, want expired", got.Status)
	}
	if _, err := w.l.Freeze(ctx(t), "box", "incident", "op"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.l.FileCall(ctx(t), call(t, "k4", `{"order":4}`), time.Minute); !errors.As(err, new(*PreconditionError)) {
		t.Errorf("frozen sandbox: %v, want PreconditionError", err)
	}
}
