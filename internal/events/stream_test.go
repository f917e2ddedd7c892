package events_test

import (
	"context"
	"sync"
	"testing"

	"github.com/portcullis-dev/portcullis/internal/events"
)

// TestStream: every subscriber hears every event, in the order they
// subscribed; a nil stream and one without subscribers drop events.
func TestStream(t *testing.T) {
	var nilStream *events.Stream
	nilStream.Publish(events.ProxyNacked{}) // must not panic
	s := events.New()
	s.Publish(events.ProxyNacked{})
	var heard []string
	s.Subscribe(func(e events.Event) { heard = append(heard, "a:"+e.(events.ProxyAcked).Sandbox) })
	s.Subscribe(func(e events.Event) { heard = append(heard, "b:"+e.(events.ProxyAcked).Sandbox) })
	s.Publish(events.ProxyAcked{Sandbox: "x"})
	s.Publish(events.ProxyAcked{Sandbox: "y"})
	want := []string{"a:x", "b:x", "a:y", "b:y"}
	if len(heard) != len(want) {
		t.Fatalf("heard %v, want %v", heard, want)
	}
	for i := range want {
		if heard[i] != want[i] {
			t.Fatalf("heard %v, want %v", heard, want)
		}
	}
}

// TestQueue: a slow subscriber's queue never holds the publisher up: it
// keeps what fits, counts the rest as dropped, and hands the kept events
// over in order.
func TestQueue(t *testing.T) {
	release := make(chan struct{})
	got := make(chan string, 10)
	q := events.NewQueue(2, func(e events.Event) {
		<-release
		got <- e.(events.ProxyAcked).Sandbox
	})
	s := events.New()
	s.Subscribe(q.Publish)
	for _, sb := range []string{"a", "b", "c", "d"} {
		s.Publish(events.ProxyAcked{Sandbox: sb}) // returns at once: nothing runs the queue yet
	}
	if q.Dropped() != 2 {
		t.Fatalf("dropped %d, want 2", q.Dropped())
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { q.Run(ctx) })
	close(release)
	for _, want := range []string{"a", "b"} {
		if sb := <-got; sb != want {
			t.Fatalf("delivered %s, want %s", sb, want)
		}
	}
	cancel()
	wg.Wait()
}
