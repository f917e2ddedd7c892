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

// TestReadingWaitsForAFreeze: no batch starts to be read while a
// quarantine holds the urgent gate.
func TestReadingWaitsForAFreeze(t *testing.T) {
	in := &Intake{reading: make(chan struct{}, 1)}
	in.urgent.enter()
	got := make(chan error, 1)
	go func() {
		release, err := in.Reading(t.Context())
		if err == nil {
			release()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Reading returned (%v) while a freeze held the gate", err)
	case <-time.After(50 * time.Millisecond):
	}
	in.urgent.leave()
	if err := <-got; err != nil {
		t.Fatalf("Reading after the freeze: %v", err)
	}
}
