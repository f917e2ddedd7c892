// Package ratelimit holds the proxy's token buckets of rate_limit: after
// the policy allows an MCP request, every tools/call it carries takes a
// token from the bucket of the rule that allowed it (Buckets.Take, all or
// nothing for a request). A request whose calls find too few tokens is
// refused by the proxy (dataplane answers it 429 and records it as
// rate_limited; Over says why and when to retry).
//
// The buckets belong to one proxy: N proxies of one sandbox let N times
// the rate through. There is one bucket per rule with a rate_limit
// (match.Limit.Key: the entry, the endpoint and the rule's content), so
// memory is bounded by the policy; a new version keeps the buckets of the
// rules it keeps unchanged and drops the others (Buckets.Retain), and a
// changed rule starts with a full bucket.
package ratelimit

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/portcullis-dev/portcullis/dataplane/match"
	"github.com/portcullis-dev/portcullis/policy"
)

// Call is one allowed tools/call message and the limit of the rule that
// allowed it.
type Call struct {
	Limit    *match.Limit
	Tool     string
	Decision policy.Decision
}

// Buckets holds the token bucket of every rate-limited rule of the policy
// in force. The zero value holds none and is ready to use.
//
// A request is charged at the proxy's own clock (dataplane.Config.Now)
// read under mu once its body has been read — not at the time its head
// arrived (policy.Request.Time), and without the gateway's offset, which
// is there for expires_at and may shrink. rate.Limiter, given a time
// before the last it saw, moves its clock back on a successful take and
// refills that interval twice (held-back bodies would let calls over the
// limit through), and refills nothing while the time is behind (a step
// back of an hour would freeze the bucket for an hour while retry_after
// says seconds). So the buckets are never given a time before the latest
// they were given (last). dataplane.Config.Now is time.Now, whose
// monotonic reading never runs back whatever the wall clock does.
type Buckets struct {
	mu   sync.Mutex
	m    map[string]*rate.Limiter
	last time.Time // the latest time the buckets were charged at
}

// clock returns the time to charge the buckets at for the proxy's clock
// reading now: now, or the latest time they were charged at when now is
// before it. b.mu is held.
func (b *Buckets) clock(now time.Time) time.Time {
	if now.After(b.last) {
		b.last = now
	}
	return b.last
}

// Retain drops the buckets whose rule is not in keys (a new version).
func (b *Buckets) Retain(keys map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.m {
		if !keys[k] {
			delete(b.m, k)
		}
	}
}

// Over is a call that found too few tokens.
type Over struct {
	Call  Call
	Calls int // calls of the request on that rule
	// RetryAfter is how many whole seconds (at least 1) it takes until
	// that many tokens are there; 0 when Calls is over the rule's burst,
	// which no wait makes pass.
	RetryAfter int
}

// Take takes one token per call, all or nothing: when some enforcing
// rule's bucket holds fewer tokens than the request has calls on it,
// nothing is taken and that rule is returned in over. A rule on an audit
// endpoint never refuses: its calls over the limit are returned in audit,
// and the other rules' tokens are taken. clock is the proxy's own clock
// (dataplane.Config.Now), read once the lock is held.
func (b *Buckets) Take(calls []Call, clock func() time.Time) (over, audit *Over) {
	type need struct {
		call Call
		n    int
		lim  *rate.Limiter
		skip bool
	}
	var buf [4]need // a request is usually one call
	needs := buf[:0]
	for _, c := range calls {
		found := false
		for i := range needs {
			if needs[i].call.Limit.Key == c.Limit.Key {
				needs[i].n++
				found = true
			}
		}
		if !found {
			needs = append(needs, need{call: c, n: 1})
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock(clock())
	for i := range needs {
		nd := &needs[i]
		l := nd.call.Limit
		nd.lim = b.m[l.Key]
		if nd.lim == nil {
			nd.lim = rate.NewLimiter(rate.Limit(float64(l.RequestsPerMinute)/60), l.Burst) // full
			if b.m == nil {
				b.m = map[string]*rate.Limiter{}
			}
			b.m[l.Key] = nd.lim
		}
		tokens := nd.lim.TokensAt(now)
		if tokens >= float64(nd.n) {
			continue
		}
		o := &Over{Call: nd.call, Calls: nd.n}
		if nd.n <= l.Burst {
			o.RetryAfter = retryAfter(float64(nd.n)-tokens, l.RequestsPerMinute)
		} // else the request can never pass: no retry after

		if !l.Audit {
			return o, nil
		}
		nd.skip = true
		if audit == nil {
			audit = o
		}
	}
	for _, nd := range needs {
		if !nd.skip {
			nd.lim.AllowN(now, nd.n)
		}
	}
	return nil, audit
}

// retryAfter is how many whole seconds (at least 1) it takes to refill
// missing tokens at perMinute.
func retryAfter(missing float64, perMinute int) int {
	return max(1, int(math.Ceil(missing*60/float64(perMinute))))
}

// Describe says why the call is over its limit, for the record and the
// error.
func (o *Over) Describe() string {
	l := o.Call.Limit
	s := fmt.Sprintf("tools/call %s is over the rate_limit of %s of %s: %d/min, burst %d",
		o.Call.Tool, l.Rule, l.Endpoint, l.RequestsPerMinute, l.Burst)
	if o.RetryAfter == 0 {
		return s + fmt.Sprintf("; the request carries %d calls on that rule, more than its burst allows at once, so it can never pass: send fewer at once", o.Calls)
	}
	return s + fmt.Sprintf("; retry after %d s", o.RetryAfter)
}
