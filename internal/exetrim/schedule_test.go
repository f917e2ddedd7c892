package exetrim

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The schedule releases the executable's pages once after the server is
// ready (the proxy: its first policy version), then after each spell of
// work once it has been idle, and never while idle without work in
// between.
func TestScheduleReleasesAfterStartAndAfterWork(t *testing.T) {
	var decided atomic.Uint64
	var mu sync.Mutex
	var releases []bool // each release's traffic flag
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(releases)
	}
	enforcing := make(chan struct{})
	s := Schedule{
		Ready:    enforcing,
		Activity: decided.Load,
		release: func(traffic bool) {
			mu.Lock()
			releases = append(releases, traffic)
			mu.Unlock()
		},
		Settle: 10 * time.Millisecond,
		Idle:   20 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()

	time.Sleep(50 * time.Millisecond)
	if n := count(); n != 0 {
		t.Fatalf("%d releases before the first policy version", n)
	}
	close(enforcing)
	eventually(t, "the release after start", func() bool { return count() == 1 })
	// Idle without traffic: nothing more.
	time.Sleep(100 * time.Millisecond)
	if n := count(); n != 1 {
		t.Fatalf("%d releases while idle without traffic, want 1", n)
	}
	// Traffic, then idle: one more release, with the heap's. (One step of
	// the count: a loop of steps could outlast a tick on a loaded machine,
	// which the trimmer rightly takes for idle.)
	decided.Add(15)
	eventually(t, "the release after traffic", func() bool { return count() == 2 })
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(releases) != 2 || releases[0] || !releases[1] {
		t.Errorf("releases %v, want [false true]: one after start, one after the traffic", releases)
	}
}

// eventually polls cond until it holds, failing the test after 15 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
