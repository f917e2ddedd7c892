package store

import (
	"bytes"
	"context"
	"sync"
)

// CommitFeed is the in-process half of Driver.ListenPolicyCommits, the
// same on both engines: a driver publishes every policy version a
// transaction inserted right after that transaction commits, and each
// listener hears it. Postgres adds the versions other replicas commit
// (LISTEN/NOTIFY), so there a version this process committed may be heard
// twice; listeners tolerate duplicates (they compare versions).
//
// Publishing never waits for a listener: each has a buffer of
// CommitFeedBuffer versions, and a version that finds it full is dropped
// for that listener. Listeners already compare versions now and then (the
// commit feed may miss versions on Postgres too, while reconnecting), so a
// slow listener catches up at its next check. The zero value is ready to
// use.
type CommitFeed struct {
	mu        sync.Mutex
	listeners map[chan Commit]struct{}
}

// CommitFeedBuffer is how many versions a listener may fall behind before
// the feed drops versions for it.
const CommitFeedBuffer = 1024

// Commit is one committed policy version, as ListenPolicyCommits hears
// it.
type Commit struct {
	Sandbox string
	Version int64
	// Inserted is the version as this process inserted it, every field as
	// GetPolicyVersion would read it back, so that a listener need not
	// read it; nil for a version another replica committed (heard by
	// NOTIFY) or announced by a catch-up, and for a document larger than
	// CommitFeedRowBytes.
	Inserted *PolicyVersion
}

// CommitFeedRowBytes is the largest document a commit carries to its
// listeners (Commit.Inserted): a listener's buffer holds at most
// CommitFeedBuffer of them, so that a listener that falls behind holds
// at most 64 MiB, not CommitFeedBuffer documents of the largest size a
// policy may have. Policies are a few KiB; a deny-all even less.
const CommitFeedRowBytes = 64 << 10

// Publish announces v, a version this process inserted and committed, to
// every listener, without blocking.
func (f *CommitFeed) Publish(v PolicyVersion) {
	c := Commit{Sandbox: v.Sandbox, Version: v.Version}
	if len(v.Document) <= CommitFeedRowBytes {
		v.Document = bytes.Clone(v.Document) // the caller's may change
		c.Inserted = &v
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.listeners {
		select {
		case ch <- c:
		default: // full: this listener's next version check catches up
		}
	}
}

// Listen calls fn, in this goroutine and in commit order, for each
// version published after Listen began, until ctx ends; it returns ctx's
// error.
func (f *CommitFeed) Listen(ctx context.Context, fn func(Commit)) error {
	ch := f.subscribe()
	defer f.unsubscribe(ch)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case c := <-ch:
			fn(c)
		}
	}
}

func (f *CommitFeed) subscribe() chan Commit {
	ch := make(chan Commit, CommitFeedBuffer)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listeners == nil {
		f.listeners = make(map[chan Commit]struct{})
	}
	f.listeners[ch] = struct{}{}
	return ch
}

func (f *CommitFeed) unsubscribe(ch chan Commit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.listeners, ch)
}
