package dataplane

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/match"
	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/policy"
)

// This file enforces rate_limit: after the policy allows an MCP request,
// every tools/call it carries takes a token from the bucket of the rule
// that allowed it. A request whose calls find too few tokens is answered
// 429 with a JSON-RPC error and recorded as rate_limited; it is never
// forwarded and never offered to the advisor (a limit is not widened by a
// proposal from the sandbox it limits).
//
// The buckets belong to this proxy: N proxies of one sandbox let N times
// the rate through. There is one bucket per rule with a rate_limit
// (match.Limit.Key: the entry, the endpoint and the rule's content), so
// memory is bounded by the policy; a new version keeps the buckets of the
// rules it keeps unchanged and drops the others, and a changed rule starts
// with a full bucket.

// mcpRateLimitedCode is the JSON-RPC error code of a call over its rule's
// rate_limit (policy denials use mcpDeniedCode, -32001).
const mcpRateLimitedCode = -32029

// limitedCall is one allowed tools/call message and the limit of the rule
// that allowed it.
type limitedCall struct {
	limit *match.Limit
	tool  string
	d     policy.Decision
}

// buckets holds the token bucket of every rate-limited rule of the policy
// in force.
//
// A request is charged at the proxy's own clock (Config.Now) read under
// mu once its body has been read — not at the time its head arrived
// (policy.Request.Time), and without the gateway's offset, which is there
// for expires_at and may shrink. rate.Limiter, given a time before the
// last it saw, moves its clock back on a successful take and refills that
// interval twice (held-back bodies would let calls over the limit
// through), and refills nothing while the time is behind (a step back of
// an hour would freeze the bucket for an hour while retry_after says
// seconds). So the buckets are never given a time before the latest they
// were given (last). Config.Now is time.Now, whose monotonic reading
// never runs back whatever the wall clock does.
type buckets struct {
	mu   sync.Mutex
	m    map[string]*rate.Limiter
	last time.Time // the latest time the buckets were charged at
}

// clock returns the time to charge the buckets at for the proxy's clock
// reading now: now, or the latest time they were charged at when now is
// before it. b.mu is held.
func (b *buckets) clock(now time.Time) time.Time {
	if now.After(b.last) {
		b.last = now
	}
	return b.last
}

// retain drops the buckets whose rule is not in keys (a new version).
func (b *buckets) retain(keys map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.m {
		if !keys[k] {
			delete(b.m, k)
		}
	}
}

// overLimit is a call that found too few tokens.
type overLimit struct {
	call  limitedCall
	calls int // calls of the request on that rule
	// retryAfter is how many whole seconds (at least 1) it takes until
	// that many tokens are there; 0 when calls is over the rule's burst,
	// which no wait makes pass.
	retryAfter int
}

// take takes one token per call, all or nothing: when some enforcing
// rule's bucket holds fewer tokens than the request has calls on it,
// nothing is taken and that rule is returned in over. A rule on an audit
// endpoint never refuses: its calls over the limit are returned in audit,
// and the other rules' tokens are taken. clock is the proxy's own clock
// (Config.Now), read once the lock is held.
func (b *buckets) take(calls []limitedCall, clock func() time.Time) (over, audit *overLimit) {
	type need struct {
		call limitedCall
		n    int
		lim  *rate.Limiter
		skip bool
	}
	var buf [4]need // a request is usually one call
	needs := buf[:0]
	for _, c := range calls {
		found := false
		for i := range needs {
			if needs[i].call.limit.Key == c.limit.Key {
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
		l := nd.call.limit
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
		o := &overLimit{call: nd.call, calls: nd.n}
		if nd.n <= l.Burst {
			o.retryAfter = retryAfter(float64(nd.n)-tokens, l.RequestsPerMinute)
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

// describe says why the call is over its limit, for the record and the
// error.
func (o *overLimit) describe() string {
	l := o.call.limit
	s := fmt.Sprintf("tools/call %s is over the rate_limit of %s of %s: %d/min, burst %d",
		o.call.tool, l.Rule, l.Endpoint, l.RequestsPerMinute, l.Burst)
	if o.retryAfter == 0 {
		return s + fmt.Sprintf("; the request carries %d calls on that rule, more than its burst allows at once, so it can never pass: send fewer at once", o.calls)
	}
	return s + fmt.Sprintf("; retry after %d s", o.retryAfter)
}

// rateLimited answers a request over a rate limit: 429, Retry-After and a
// JSON-RPC error per message; it is recorded as rate_limited with an id
// (which the advisor refuses to turn into a proposal), never forwarded.
// A request with more calls on a rule than its burst can never pass: its
// answer has no Retry-After and no retry_after_seconds (an agent that
// obeys them would retry forever), and its reason says to send fewer.
func (p *Proxy) rateLimited(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request, o *overLimit, mreq *mcp.Request) {
	id := decision.NewDenialID()
	rec := p.newRecord(cur, req, o.call.d, mreq, id)
	rec.Decision = decision.RateLimited
	rec.MCPMethod, rec.Tool = "tools/call", o.call.tool
	rec.Reason = o.describe()
	p.recordFor(r, rec)
	data := map[string]any{
		"rule":           o.call.limit.Rule,
		"entry":          o.call.limit.Entry,
		"policy_version": cur.version,
		"denial_id":      id,
		"reason":         rec.Reason,
	}
	w.Header().Set("Content-Type", "application/json")
	if o.retryAfter > 0 {
		data["retry_after_seconds"] = o.retryAfter
		w.Header().Set("Retry-After", strconv.Itoa(o.retryAfter))
	}
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(mreq.DenyBody(mcpRateLimitedCode, "rate limited: "+rec.Reason, data))
}
