package ocsf_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
)

// flakySink refuses writes while down, and counts what it was handed.
type flakySink struct {
	mu     sync.Mutex
	down   bool
	writes int
	events int
}

func (s *flakySink) Name() string { return "flaky" }
func (s *flakySink) Close() error { return nil }
func (s *flakySink) Write(_ context.Context, events [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.down {
		return errors.New("refused")
	}
	s.events += len(events)
	return nil
}

// After a failed write the sink rests: events emitted meanwhile are
// dropped and counted without being built, encoded or handed to the sink;
// once the rest is over the next batch tries the sink again, and each
// failure doubles the rest.
func TestFailingSinkRests(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	sink := &flakySink{down: true}
	em := ocsf.NewEmitter(sink, ocsf.Config{Queue: 64, Now: clock})
	wrote := make(chan struct{}, 64)
	ocsf.AfterWrite(em, func() { wrote <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { em.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	var built atomic.Int64
	event := func() ocsf.Event { built.Add(1); return denial(0)() }
	writesNow := func() int { sink.mu.Lock(); defer sink.mu.Unlock(); return sink.writes }

	em.Emit(event) // fails: the sink rests for a second
	<-wrote
	if writesNow() != 1 || built.Load() != 1 {
		t.Fatalf("writes %d, built %d; want the first event tried", writesNow(), built.Load())
	}
	for range 1000 {
		em.Emit(event)
	}
	if built.Load() != 1 || writesNow() != 1 || em.Dropped() != 1001 {
		t.Fatalf("while resting: built %d, writes %d, dropped %d; want nothing built or written, all counted", built.Load(), writesNow(), em.Dropped())
	}
	now.Add(int64(1100 * time.Millisecond)) // past the first rest: tried again, fails again
	em.Emit(event)
	<-wrote
	if writesNow() != 2 {
		t.Fatalf("after the rest: %d writes; want the sink tried again", writesNow())
	}
	now.Add(int64(1500 * time.Millisecond)) // within the doubled rest (2 s)
	em.Emit(event)
	if writesNow() != 2 {
		t.Fatal("the rest did not double after a second failure")
	}
	sink.mu.Lock()
	sink.down = false
	sink.mu.Unlock()
	now.Add(int64(time.Second))
	em.Emit(event)
	<-wrote
	sink.mu.Lock()
	events := sink.events
	sink.mu.Unlock()
	if events != 2 { // the event and the drop report
		t.Fatalf("after recovery the sink took %d events; want the event and the drop report", events)
	}
}
