package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCommitFeedNeverBlocks: a listener that does not read holds its
// buffer's worth of versions, oldest first, and publishing past that
// drops versions for it instead of waiting.
func TestCommitFeedNeverBlocks(t *testing.T) {
	var f CommitFeed
	ch := f.subscribe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for v := range int64(CommitFeedBuffer + 10) {
			f.Publish(PolicyVersion{Sandbox: "sb", Version: v + 1})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked on a listener that does not read")
	}
	if len(ch) != CommitFeedBuffer {
		t.Errorf("buffered %d versions, want %d", len(ch), CommitFeedBuffer)
	}
	if c := <-ch; c.Sandbox != "sb" || c.Version != 1 || c.Inserted == nil || c.Inserted.Version != 1 {
		t.Errorf("first version heard = %+v, want version 1 of sb", c)
	}
	f.unsubscribe(ch)
	f.Publish(PolicyVersion{Sandbox: "sb"}) // no listener left: nothing to do
	if len(ch) != CommitFeedBuffer-1 {
		t.Errorf("an unsubscribed listener got a version")
	}
}

// TestCommitFeedListen: Listen hands versions to fn in order until its
// context ends.
func TestCommitFeedListen(t *testing.T) {
	var f CommitFeed
	ctx, cancel := context.WithCancel(t.Context())
	heard := make(chan int64, CommitFeedBuffer)
	done := make(chan error, 1)
	go func() { done <- f.Listen(ctx, func(c Commit) { heard <- c.Version }) }()
	// Publish until the listener, subscribed at some point, hears one.
	var first int64
	for v := int64(1); first == 0; v++ {
		f.Publish(PolicyVersion{Sandbox: "sb", Version: v})
		select {
		case first = <-heard:
		case <-time.After(10 * time.Millisecond):
		}
	}
	const from = 1 << 20 // above every version published so far
	for v := int64(from); v < from+4; v++ {
		f.Publish(PolicyVersion{Sandbox: "sb", Version: v})
	}
	for want := int64(from); want < from+4; {
		switch got := <-heard; {
		case got < from: // published while waiting for the first
		case got != want:
			t.Fatalf("heard version %d, want %d (in order)", got, want)
		default:
			want++
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Listen = %v, want context.Canceled", err)
	}
}

// TestCommitFeedRowBounded: a commit carries its row only up to
// CommitFeedRowBytes of document, so that a listener's buffer stays
// bounded; a larger one is announced without it (listeners read it).
func TestCommitFeedRowBounded(t *testing.T) {
	var f CommitFeed
	ch := f.subscribe()
	defer f.unsubscribe(ch)
	f.Publish(PolicyVersion{Sandbox: "sb", Version: 1, Document: make([]byte, CommitFeedRowBytes)})
	f.Publish(PolicyVersion{Sandbox: "sb", Version: 2, Document: make([]byte, CommitFeedRowBytes+1)})
	if c := <-ch; c.Version != 1 || c.Inserted == nil || len(c.Inserted.Document) != CommitFeedRowBytes {
		t.Errorf("a document of CommitFeedRowBytes: %+v, want it carried", c)
	}
	if c := <-ch; c.Version != 2 || c.Inserted != nil {
		t.Errorf("a document over CommitFeedRowBytes: carried %v, want only the version announced", c.Inserted != nil)
	}
}
