//go:build drills

package proxy

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// relay is a TCP relay between a proxy and the gateway that the drill
// can cut in two ways:
//
//   - cutReset: every relayed connection is closed at once and new ones
//     are accepted and closed (the proxy hears of it at once);
//   - cutBlackhole: nothing is closed, and nothing gets through: bytes
//     of the relayed connections are read and thrown away, in both
//     directions, and new connections are accepted and swallowed the
//     same way (a partition that drops packets silently, or a path whose
//     state was lost). Connections blackholed stay so after restore;
//     only new ones flow again, so the proxy has to notice on its own
//     that the old one is dead.
type relay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	mode  cutMode
	pairs map[*pair]struct{}
	// firstAfterRestore is when the first connection relayed after the
	// last restore was accepted (zero: none yet).
	restoredAt, firstAfterRestore time.Time

	wg sync.WaitGroup
}

type cutMode int

const (
	pass cutMode = iota
	cutReset
	cutBlackhole
)

func (m cutMode) String() string {
	return [...]string{"pass", "reset", "blackhole"}[m]
}

type pair struct {
	client, server net.Conn // server nil for a connection swallowed
	dead           atomic.Bool
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, pairs: map[*pair]struct{}{}}
	r.wg.Go(r.accept)
	t.Cleanup(r.close)
	return r
}

func (r *relay) url() string { return "http://" + r.ln.Addr().String() }

func (r *relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		mode := r.mode
		if mode == pass && !r.restoredAt.IsZero() && r.firstAfterRestore.IsZero() {
			r.firstAfterRestore = time.Now()
		}
		r.mu.Unlock()
		switch mode {
		case cutReset:
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // RST
			}
			c.Close()
		case cutBlackhole:
			p := &pair{client: c}
			p.dead.Store(true)
			r.track(p)
			r.wg.Go(func() { r.pipe(p, nil, c, true) })
		default:
			s, err := net.Dial("tcp", r.target)
			if err != nil {
				c.Close()
				continue
			}
			p := &pair{client: c, server: s}
			r.track(p)
			r.wg.Go(func() { r.pipe(p, s, c, true) })
			r.wg.Go(func() { r.pipe(p, c, s, false) })
		}
	}
}

func (r *relay) track(p *pair) {
	r.mu.Lock()
	r.pairs[p] = struct{}{}
	r.mu.Unlock()
}

// pipe copies src to dst until src ends, throwing bytes away while p is
// dead. The client's end closes the pair; the server's end closes it only
// while it is alive (a dead path carries no FIN either).
func (r *relay) pipe(p *pair, dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.dead.Load() && dst != nil {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if fromClient || !p.dead.Load() {
				p.close()
				r.mu.Lock()
				delete(r.pairs, p)
				r.mu.Unlock()
			}
			return
		}
	}
}

func (p *pair) close() {
	p.client.Close()
	if p.server != nil {
		p.server.Close()
	}
}

// cut starts a cut of the given mode.
func (r *relay) cut(mode cutMode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = mode
	for p := range r.pairs {
		switch mode {
		case cutReset:
			if tc, ok := p.client.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			p.close()
			delete(r.pairs, p)
		case cutBlackhole:
			p.dead.Store(true)
		}
	}
}

// restore lets new connections through again and returns when.
func (r *relay) restore() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = pass
	r.restoredAt, r.firstAfterRestore = time.Now(), time.Time{}
	return r.restoredAt
}

// reconnectedAt is when the first connection after the last restore was
// accepted (zero: none yet).
func (r *relay) reconnectedAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.firstAfterRestore
}

func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	for p := range r.pairs {
		p.close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
