package h1

import (
	"io"
	"sync"
)

// Hijacked is a set of what outlives a Server's own bookkeeping, to be
// closed at once when the proxy stops: the connections its handlers took
// (Hijack: tunnels, intercepted connections and their inner servers'),
// which Shutdown does not close. The zero value is empty and open.
type Hijacked struct {
	mu     sync.Mutex
	items  map[io.Closer]struct{}
	closed bool
}

// Add tracks c until the returned function is called. Once CloseAll has
// run, c is closed at once.
func (t *Hijacked) Add(c io.Closer) (remove func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		c.Close()
		return func() {}
	}
	if t.items == nil {
		t.items = make(map[io.Closer]struct{})
	}
	t.items[c] = struct{}{}
	return func() {
		t.mu.Lock()
		delete(t.items, c)
		t.mu.Unlock()
	}
}

// CloseAll closes everything tracked, and whatever is added later.
func (t *Hijacked) CloseAll() {
	t.mu.Lock()
	items := t.items
	t.items, t.closed = nil, true
	t.mu.Unlock()
	for c := range items {
		c.Close()
	}
}
