package gatewayclient

import (
	"sync"
	"sync/atomic"
	"time"
)

// The gateway's clock, as the proxy sees it. A grant with expires_at must
// end no later than the gateway says, even when the proxy's own clock is
// behind (a host whose clock was never set, or drifted) and even while
// the proxy is cut off. So the proxy judges expiry by the later of its
// clock and its estimate of the gateway's (dataplane: Proxy.now), and the
// estimate errs towards the gateway being ahead.
//
// The estimate comes from the heartbeats: the proxy stamps each one it
// sends with its clock (t0) and the gateway answers each with its own
// (g). The gateway answers only after a heartbeat arrived, and answers
// the heartbeats of a stream in order (several that arrive together get
// one answer); so the k-th answer on a stream was sent after the k-th
// heartbeat arrived, and g - t0 of the pair is at least how far the
// gateway's clock is ahead: transit only adds to it. The latest pair
// wins (a clock stepped since an older one is followed within one
// heartbeat), and the estimate outlives the stream: a proxy cut off keeps
// judging by the last one.
type gatewayClock struct {
	mu sync.Mutex
	// pending are the send times of this stream's heartbeats not yet
	// answered, oldest first; nil once too many went unanswered (the
	// pairing is lost until the next stream).
	pending []time.Time
	lost    bool
	ahead   time.Duration // the latest g - t0
	known   bool
	logged  time.Duration // the ahead last logged
	// published is what aheadOf answers (ahead when known and positive,
	// else 0), read without the lock: every request the proxy judges
	// reads it.
	published atomic.Int64
}

// maxPending bounds the unanswered heartbeats kept: a stream with three
// unanswered is ended anyway (errGatewaySilent).
const maxPending = 8

// restart starts a new stream's pairing.
func (c *gatewayClock) restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending, c.lost = c.pending[:0], false
}

// sent records a heartbeat sent at t0 (the proxy's clock).
func (c *gatewayClock) sent(t0 time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost {
		return
	}
	if len(c.pending) == maxPending {
		c.pending, c.lost = c.pending[:0], true
		return
	}
	c.pending = append(c.pending, t0)
}

// answered pairs the gateway's answer stamped g with the oldest
// heartbeat unanswered. It reports the new estimate and whether it moved
// by a second or more since it was last reported (worth a log line).
func (c *gatewayClock) answered(g time.Time) (ahead time.Duration, news bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost || len(c.pending) == 0 || g.IsZero() {
		return c.ahead, false
	}
	t0 := c.pending[0]
	c.pending = append(c.pending[:0], c.pending[1:]...)
	c.ahead, c.known = g.Sub(t0), true
	c.published.Store(int64(max(c.ahead, 0)))
	if d := c.ahead - c.logged; d >= time.Second || d <= -time.Second {
		c.logged = c.ahead
		return c.ahead, true
	}
	return c.ahead, false
}

// aheadOf returns how far the gateway's clock is ahead of the proxy's
// (0 when it is not, or not known yet).
func (c *gatewayClock) aheadOf() time.Duration {
	return time.Duration(c.published.Load())
}
