package distribution

import (
	"context"
	"sync"
	"time"

	"github.com/portcullis-dev/portcullis/lifecycle"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// Per-proxy status. Each replica keeps the status of the proxies streaming
// from it in memory and writes what changed to the store in batches, so
// that an ACK storm after a commit costs a few transactions, not one per
// proxy, and every replica's ListProxies sees every proxy.
//
// What an operator waits for (a proxy connecting, applying or refusing a
// version, going) is written at once: it wakes the writer, which takes
// everything changed by then in one transaction (the ACKs that arrive
// while it writes go in the next). Heartbeats' last-seen times wait for
// the interval. Before, every change waited for the next tick, so
// `proxies list` could show an ACK a second (and, with a client's own
// polling, seconds) after the proxy applied the version.
const (
	// statusFlushInterval: heartbeats' statuses are written at most this
	// often.
	statusFlushInterval = time.Second
	// seenWriteInterval: a live proxy's last-seen time is written at
	// least this often, so a status whose replica died shows its age.
	seenWriteInterval = 30 * time.Second
	// connectedWindow: a status claims "connected" only if last seen this
	// recently (its replica may have died without saying).
	connectedWindow = 3 * seenWriteInterval
)

type proxyKey struct{ sandbox, proxyID string }

// proxyEntry is one stream's status. A proxy that reconnects before its
// old stream ended has two entries; the newer one owns the key.
type proxyEntry struct {
	key     proxyKey
	status  store.ProxyStatus // guarded by proxyTracker.mu
	written time.Time         // when LastSeenAt was last flushed
	// nackTook is the time from the commit of the last NACKed version to
	// its NACK (the store keeps no such column).
	nackTook time.Duration
}

type proxyTracker struct {
	life    *lifecycle.Lifecycle // writes the statuses
	replica string
	now     func() time.Time

	mu    sync.Mutex
	live  map[proxyKey]*proxyEntry
	dirty map[proxyKey]store.ProxyStatus
	// changed is closed (and replaced) whenever a proxy connects,
	// applies or refuses a version, or goes: what WatchEnforcement
	// waits on.
	changed chan struct{}
	// wake asks run to write now (the same changes).
	wake chan struct{}
	// interval is statusFlushInterval (tests lengthen it).
	interval time.Duration
}

func newProxyTracker(life *lifecycle.Lifecycle, replica string, now func() time.Time) *proxyTracker {
	return &proxyTracker{life: life, replica: replica, now: now, live: make(map[proxyKey]*proxyEntry), dirty: make(map[proxyKey]store.ProxyStatus), changed: make(chan struct{}),
		wake: make(chan struct{}, 1), interval: statusFlushInterval}
}

func (t *proxyTracker) connect(key proxyKey, hello *portcullisv1.ProxyHello) *proxyEntry {
	now := t.now()
	e := &proxyEntry{key: key, written: now, status: store.ProxyStatus{
		Sandbox:        key.sandbox,
		ProxyID:        key.proxyID,
		Replica:        t.replica,
		Build:          truncate(hello.GetBuild(), 128),
		Connected:      true,
		ConnectedAt:    now,
		LastSeenAt:     now,
		AppliedVersion: int64(hello.GetHeldVersion()),
		AppliedHash:    truncate(hello.GetHeldHash(), 128),
	}}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.live[key]; ok {
		// A reconnect before the old stream ended: keep what that
		// stream learnt of the proxy's NACKs and dropped records.
		e.status.LastNackVersion, e.status.LastNackError, e.status.LastNackAt = old.status.LastNackVersion, old.status.LastNackError, old.status.LastNackAt
		e.status.DecisionsDropped = old.status.DecisionsDropped
		e.nackTook = old.nackTook
	}
	t.live[key] = e
	t.dirty[key] = e.status
	t.broadcast()
	return e
}

func (t *proxyTracker) disconnect(e *proxyEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.live[e.key] != e {
		return // a newer stream of the same proxy owns the status
	}
	delete(t.live, e.key)
	e.status.Connected = false
	e.status.LastSeenAt = t.now()
	t.dirty[e.key] = e.status
	t.broadcast()
}

// broadcast wakes the watchers of enforcement and the writer; t.mu is
// held.
func (t *proxyTracker) broadcast() {
	close(t.changed)
	t.changed = make(chan struct{})
	select {
	case t.wake <- struct{}{}:
	default: // a write is already asked for; it takes this change too
	}
}

func (t *proxyTracker) ack(e *proxyEntry, sv *signedVersion, lag time.Duration, now time.Time) {
	t.update(e, func(s *store.ProxyStatus) {
		s.AppliedVersion = int64(sv.version())
		s.AppliedHash = sv.policy.GetHash()
		s.LastAckAt = &now
		s.LastSeenAt = now
		s.LagMillis = lag.Milliseconds()
	})
	t.mu.Lock()
	t.broadcast()
	t.mu.Unlock()
}

func (t *proxyTracker) nack(e *proxyEntry, sv *signedVersion, msg string, took time.Duration, now time.Time) {
	t.update(e, func(s *store.ProxyStatus) {
		s.LastNackVersion = int64(sv.version())
		s.LastNackError = msg
		s.LastNackAt = &now
		s.LastSeenAt = now
	})
	t.mu.Lock()
	e.nackTook = max(took, 0)
	t.broadcast()
	t.mu.Unlock()
}

// credentials records a proxy's answer to a credentials delivery: the
// generation it holds, and the error if it could not open it.
func (t *proxyTracker) credentials(e *proxyEntry, generation uint64, msg string, now time.Time) {
	t.update(e, func(s *store.ProxyStatus) {
		s.CredentialsGeneration = int64(min(generation, 1<<63-1))
		s.CredentialsError = msg
		s.LastSeenAt = now
	})
	t.mu.Lock()
	t.broadcast()
	t.mu.Unlock()
}

func (t *proxyTracker) dropped(key proxyKey, n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.live[key]; ok {
		e.status.DecisionsDropped += int64(n)
		t.dirty[key] = e.status
	}
}

// seen records a heartbeat; written at most every seenWriteInterval.
func (t *proxyTracker) seen(e *proxyEntry, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.status.LastSeenAt = now
	if t.live[e.key] == e && now.Sub(e.written) >= seenWriteInterval {
		e.written = now
		t.dirty[e.key] = e.status
	}
}

func (t *proxyTracker) update(e *proxyEntry, f func(*store.ProxyStatus)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(&e.status)
	if t.live[e.key] == e {
		e.written = e.status.LastSeenAt
		t.dirty[e.key] = e.status
	}
}

// flush writes what changed since the last flush. On failure the changes
// stay pending for the next one (unless newer ones replaced them).
func (t *proxyTracker) flush(ctx context.Context) error {
	t.mu.Lock()
	if len(t.dirty) == 0 {
		t.mu.Unlock()
		return nil
	}
	batch := make([]store.ProxyStatus, 0, len(t.dirty))
	for _, s := range t.dirty {
		batch = append(batch, s)
	}
	clear(t.dirty)
	t.mu.Unlock()
	err := t.life.SaveProxyStatuses(ctx, batch)
	if err != nil {
		t.mu.Lock()
		for _, s := range batch {
			k := proxyKey{s.Sandbox, s.ProxyID}
			if _, newer := t.dirty[k]; !newer {
				t.dirty[k] = s
			}
		}
		t.mu.Unlock()
	}
	return err
}

// run flushes when woken (a connect, ACK, NACK or disconnect) and every
// interval (heartbeats) until ctx ends, then once more.
func (t *proxyTracker) run(ctx context.Context, log func(error)) {
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := t.flush(fctx); err != nil {
				log(err)
			}
			cancel()
			return
		case <-tick.C:
		case <-t.wake:
		}
		if err := t.flush(ctx); err != nil && ctx.Err() == nil {
			log(err)
		}
	}
}

// appliedVersion is a live proxy's sandbox and the version it applied.
type appliedVersion struct {
	sandbox string
	version int64
}

func (t *proxyTracker) applied() []appliedVersion {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]appliedVersion, 0, len(t.live))
	for k, e := range t.live {
		out = append(out, appliedVersion{k.sandbox, e.status.AppliedVersion})
	}
	return out
}

func (t *proxyTracker) connectedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live)
}

// StillConnected reports whether a stored status claims its proxy is
// connected and is recent enough to be believed (its replica may have died
// without saying).
func StillConnected(p store.ProxyStatus, now time.Time) bool {
	return p.Connected && now.Sub(p.LastSeenAt) < connectedWindow
}
