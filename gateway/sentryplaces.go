package gateway

import (
	"context"
	"sync"
)

// places bounds what the Sentry intake holds at once: at most cap(all)
// batches (HTTP batch bodies, RPC messages) are parsed and stored at a
// time, and one source holds at most perSource of them from the moment
// its body starts to arrive until its answer, so that a source sending
// slowly, or a great deal, waits behind itself and never behind others.
type places struct {
	all       chan struct{}
	perSource int

	mu     sync.Mutex
	source map[string]*sourcePlaces
	// streams counts each source's open IngestEvents streams. A stream
	// reads its next message before it waits for a place (an idle stream
	// holds none), so what one source may buffer is bounded by how many
	// streams it may hold open: maxStreams.
	streams map[string]int
}

// maxStreams is how many IngestEvents streams one source may hold open:
// twice its places, so a watchdog may replace a stream while the old one
// drains. With the RPC's message limit (4 MiB and 64 KiB) it bounds what
// one source's streams buffer at once.
func (p *places) maxStreams() int { return 2 * p.perSource }

// openStream counts a new IngestEvents stream of source and returns its
// release, or false when the source holds maxStreams open already.
func (p *places) openStream(source string) (func(), bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.streams[source] >= p.maxStreams() {
		return nil, false
	}
	p.streams[source]++
	return sync.OnceFunc(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.streams[source]--; p.streams[source] <= 0 {
			delete(p.streams, source)
		}
	}), true
}

// sourcePlaces are one source's places and the requests using them.
type sourcePlaces struct {
	held  chan struct{}
	users int // requests holding or waiting for a place; the entry goes at 0
}

func newPlaces(n, perSource int) *places {
	return &places{all: make(chan struct{}, n), perSource: perSource, source: map[string]*sourcePlaces{}, streams: map[string]int{}}
}

// held is how many of the shared places are taken now.
func (p *places) held() int { return len(p.all) }

// enter waits for one of source's places and returns its release. It
// holds no shared place: take one with shared once the body is read.
func (p *places) enter(ctx context.Context, source string) (func(), error) {
	p.mu.Lock()
	sp := p.source[source]
	if sp == nil {
		sp = &sourcePlaces{held: make(chan struct{}, p.perSource)}
		p.source[source] = sp
	}
	sp.users++
	p.mu.Unlock()
	leave := func() {
		p.mu.Lock()
		if sp.users--; sp.users == 0 {
			delete(p.source, source)
		}
		p.mu.Unlock()
	}
	select {
	case sp.held <- struct{}{}:
		return func() { <-sp.held; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// shared waits for one of the places all sources share and returns its
// release.
func (p *places) shared(ctx context.Context) (func(), error) {
	select {
	case p.all <- struct{}{}:
		return func() { <-p.all }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
