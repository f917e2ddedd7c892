package sentryintake

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestGate: wait passes when nobody is in, holds while anyone is, opens
// when the last leaves, and gives up with its context.
func TestGate(t *testing.T) {
	var g gate
	if err := g.wait(t.Context()); err != nil {
		t.Fatalf("wait with nobody in: %v", err)
	}
	g.enter()
	g.enter()
	passed := make(chan error, 1)
	go func() { passed <- g.wait(t.Context()) }()
	g.leave()
	select {
	case err := <-passed:
		t.Fatalf("wait passed (%v) while one holder was still in", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.leave()
	if err := <-passed; err != nil {
		t.Fatalf("wait after the last left: %v", err)
	}
	g.enter()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := g.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with an ended context = %v, want context.Canceled", err)
	}
	g.leave()
	if err := g.wait(t.Context()); err != nil {
		t.Fatalf("wait after reopening: %v", err)
	}
}

// TestGatePreempts: entering cuts short the bulk appends in flight (their
// context ends with errPreempted, and end says so), except a pinned one;
// begin waits while the gate is closed; an append that ends before any
// remediation enters is not preempted.
func TestGatePreempts(t *testing.T) {
	var g gate
	ctx, end, err := g.begin(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pend, err := g.begin(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	g.enter()
	if !errors.Is(context.Cause(ctx), errPreempted) {
		t.Fatalf("an append in flight when a remediation entered: cause %v, want errPreempted", context.Cause(ctx))
	}
	if pctx.Err() != nil {
		t.Fatalf("a pinned append was cut short: %v", context.Cause(pctx))
	}
	if !end() {
		t.Fatal("end of a preempted append reported no preemption")
	}
	if pend() {
		t.Fatal("end of a pinned append reported a preemption")
	}
	started := make(chan func() bool, 1)
	go func() {
		_, end, err := g.begin(t.Context(), false)
		if err != nil {
			t.Error(err)
		}
		started <- end
	}()
	select {
	case <-started:
		t.Fatal("a bulk append began while a remediation was in")
	case <-time.After(50 * time.Millisecond):
	}
	g.leave()
	end = <-started
	if end() {
		t.Fatal("an append that ended with nobody in reported a preemption")
	}
	if len(g.flight) != 0 {
		t.Fatalf("%d appends still tracked after every one ended", len(g.flight))
	}
}
