// Package events is the gateway's one stream of what happened: a typed,
// in-process feed that the parts which do things (lifecycle, the Sentry
// intake, distribution) publish to once, after the fact, and that the
// parts which tell of things (metrics, OCSF, webhooks) subscribe to. It
// replaces a callback field per feature and per consumer.
//
// Publishing never blocks and never fails: a subscriber is called on the
// publisher's goroutine and must return at once — bump a counter, or hand
// the event to a bounded queue of its own (the OCSF emitters', the
// webhook's, or Queue here) that drops and counts what it cannot hold. A
// slow subscriber therefore costs its own events, never a commit or an
// ingest.
//
// The stream is in-process: it tells what this replica did. The audit
// log, which every replica writes, is followed from the store
// (lifecycle.FollowAudit) and published here as AuditAppended events.
package events

import (
	"context"
	"sync"
	"sync/atomic"
)

// Event is one thing that happened: one of this package's types (the
// method keeps others out, so a subscriber's type switch is the list).
type Event interface{ event() }

// Stream fans each event out to every subscriber. The zero Stream has no
// subscribers, and a nil *Stream drops everything: publishers need not
// check.
type Stream struct {
	mu   sync.Mutex // serialises Subscribe
	subs atomic.Pointer[[]func(Event)]
}

// New returns a stream with no subscribers.
func New() *Stream { return &Stream{} }

// Subscribe adds fn, which is called with every event published after
// this returns, on the publisher's goroutine: it must return at once.
func (s *Stream) Subscribe(fn func(Event)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var subs []func(Event)
	if old := s.subs.Load(); old != nil {
		subs = append(subs, *old...)
	}
	subs = append(subs, fn)
	s.subs.Store(&subs)
}

// Publish hands e to every subscriber, in the order they subscribed.
func (s *Stream) Publish(e Event) {
	if s == nil {
		return
	}
	subs := s.subs.Load()
	if subs == nil {
		return
	}
	for _, fn := range *subs {
		fn(e)
	}
}

// Queue is a slow subscriber's own bounded queue: Publish (the subscriber
// the stream calls) keeps an event if there is room and drops and counts
// it otherwise; Run hands the kept ones, in order, to the slow function.
type Queue struct {
	ch      chan Event
	fn      func(Event)
	dropped atomic.Uint64
}

// NewQueue returns a queue of size events in front of fn.
func NewQueue(size int, fn func(Event)) *Queue {
	return &Queue{ch: make(chan Event, max(size, 1)), fn: fn}
}

// Publish queues e without waiting: subscribe it to a Stream.
func (q *Queue) Publish(e Event) {
	select {
	case q.ch <- e:
	default:
		q.dropped.Add(1)
	}
}

// Dropped is how many events found the queue full.
func (q *Queue) Dropped() uint64 { return q.dropped.Load() }

// Run calls the slow function with each queued event until ctx ends.
func (q *Queue) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-q.ch:
			q.fn(e)
		}
	}
}
