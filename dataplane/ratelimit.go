package dataplane

import (
	"net/http"
	"strconv"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/dataplane/ratelimit"
	"github.com/portcullis-dev/portcullis/policy"
)

// This file enforces rate_limit: after the policy allows an MCP request,
// every tools/call it carries takes a token from the bucket of the rule
// that allowed it (the buckets are package ratelimit's). A request whose
// calls find too few tokens is answered 429 with a JSON-RPC error and
// recorded as rate_limited; it is never forwarded and never offered to
// the advisor (a limit is not widened by a proposal from the sandbox it
// limits).

// mcpRateLimitedCode is the JSON-RPC error code of a call over its rule's
// rate_limit (policy denials use mcpDeniedCode, -32001).
const mcpRateLimitedCode = -32029

// rateLimited answers a request over a rate limit: 429, Retry-After and a
// JSON-RPC error per message; it is recorded as rate_limited with an id
// (which the advisor refuses to turn into a proposal), never forwarded.
// A request with more calls on a rule than its burst can never pass: its
// answer has no Retry-After and no retry_after_seconds (an agent that
// obeys them would retry forever), and its reason says to send fewer.
func (p *Proxy) rateLimited(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request, o *ratelimit.Over, mreq *mcp.Request) {
	id := decision.NewDenialID()
	rec := p.newRecord(cur, req, o.Call.Decision, mreq, id)
	rec.Decision = decision.RateLimited
	rec.MCPMethod, rec.Tool = "tools/call", o.Call.Tool
	rec.Reason = o.Describe()
	p.recordFor(r, rec)
	data := map[string]any{
		"rule":           o.Call.Limit.Rule,
		"entry":          o.Call.Limit.Entry,
		"policy_version": cur.version,
		"denial_id":      id,
		"reason":         rec.Reason,
	}
	w.Header().Set("Content-Type", "application/json")
	if o.RetryAfter > 0 {
		data["retry_after_seconds"] = o.RetryAfter
		w.Header().Set("Retry-After", strconv.Itoa(o.RetryAfter))
	}
	w.WriteHeader(http.StatusTooManyRequests)
	w.Write(mreq.DenyBody(mcpRateLimitedCode, "rate limited: "+rec.Reason, data))
}
