package dataplane

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"

	"github.com/portcullis-dev/portcullis/dataplane/credentials"
	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/match"
	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/dataplane/mcp/relay"
	"github.com/portcullis-dev/portcullis/dataplane/ratelimit"
	"github.com/portcullis-dev/portcullis/policy"
)

// An MCP POST is judged message by message, after its body is read
// strictly (judgeMCP): each tools/call with what the proxy knows of its
// tool's definition (a pin holds only for a definition the proxy saw
// listed; relay.Relay keeps them), every message by the policy version in
// force, the allowed calls against their rules' rate limits. Its answer
// is read on its way back (toolsList): tools/list results cut to the
// tools the agent may see (visibility), and the server's requests noted,
// so that the client's answers to them may be larger.

// judgeMCP reads and judges an MCP POST to ep: its body read strictly
// (larger than mcp.max_body_bytes only when it answers requests the
// server sent in the session), every message judged (judgePinned), its
// calls charged to their rules' rate limits (the caller records the allow). It
// returns the request, its body and the deciding decision; a nil request
// when it was answered instead (denied, or over a rate limit).
func (p *Proxy) judgeMCP(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request, scheme string, ep relay.Endpoint, limits match.MCPLimits) (*mcp.Request, []byte, policy.Decision) {
	session := relay.Session{Endpoint: ep, ID: r.Header.Get(mcp.HeaderMCPSessionID)}
	answers := 0 // the larger bound, when the server waits for answers
	if p.relay.Waiting(session, req.Time) {
		answers = limits.Response
	}
	mreq, raw, reason := p.readMCP(w, r, limits.Body, answers)
	if mreq == nil {
		p.deny(w, r, cur, req, policy.Decision{Reason: reason}, nil)
		return nil, nil, policy.Decision{}
	}
	if len(raw) > limits.Body {
		if why := p.relay.OnlyAnswers(session, mreq, req.Time); why != "" {
			p.deny(w, r, cur, req, policy.Decision{Reason: fmt.Sprintf("request body over mcp.max_body_bytes (%d): %s, and only answers to the server's requests may be larger (mcp.max_response_bytes)", limits.Body, why)}, nil)
			return nil, nil, policy.Decision{}
		}
	}
	var limitedBuf [1]ratelimit.Call // a request is usually one call
	d, limited, denied := p.judgePinned(r, cur, req, scheme, ep, mreq, raw, limitedBuf[:0])
	if denied {
		p.deny(w, r, cur, req, d, mreq)
		return nil, nil, policy.Decision{}
	}
	if len(limited) > 0 {
		over, audit := p.limits.Take(limited, p.cfg.Now)
		if over != nil {
			p.rateLimited(w, r, cur, req, over, mreq)
			return nil, nil, policy.Decision{}
		}
		if audit != nil {
			d.Audit, d.Reason = true, audit.Describe()+" (enforcement: audit, forwarded)"
		}
	}
	p.relay.Answered(session, mreq)
	return mreq, raw, d
}

// judgePinned judges mreq's messages (judgeMessages), each tools/call with
// the fingerprint of its tool's definition as far as the proxy knows it.
// When a pin refused a tool whose definition the proxy does not know, it
// lists the server's tools itself, as r's caller (raw its body) would be
// forwarded: after the credential check, with its credential.
func (p *Proxy) judgePinned(r *http.Request, cur *loaded, req policy.Request, scheme string, ep relay.Endpoint, mreq *mcp.Request, raw []byte, buf []ratelimit.Call) (policy.Decision, []ratelimit.Call, bool) {
	unknown := p.relay.WithDefinitions(ep, mreq)
	d, limited, denied := p.judgeMessages(cur, req, mreq, buf)
	if !denied || !d.DefinitionRefused || unknown == 0 {
		return d, limited, denied
	}
	plan, _, den := p.creds.Check(r.Context(), nil, r, credentials.Request{Host: ep.Host, Port: ep.Port, TLS: scheme == "https", Endpoint: endpointOf(cur, d), Body: raw})
	if den != nil {
		return den.Decision(d), nil, true
	}
	listing := relay.Listing{Credential: plan.Apply,
		Scheme: scheme, Authority: net.JoinHostPort(ep.Host, strconv.Itoa(ep.Port)), Path: ep.Path,
		Host: r.Host, Header: r.Header, Version: mreq.Version,
		Upstream: p.upstreams.Get(h1.Key{Host: ep.Host, Addr: netip.AddrPortFrom(req.Addr, uint16(ep.Port)), TLS: scheme == "https"}),
	}
	if err := p.relay.Verify(r.Context(), ep, listing); err != nil {
		p.log.Warn("could not verify MCP tool definitions", "host", ep.Host, "port", ep.Port, "path", ep.Path, "err", err)
	}
	p.relay.WithDefinitions(ep, mreq)
	return p.judgeMessages(cur, req, mreq, buf)
}

// readMCP reads an MCP POST body (h1.ReadBody) within the endpoint's
// limit and parses it strictly. answers, when larger than maxBody, is the
// bound for a body of answers to the server's requests (the caller checks
// it holds only those).
func (p *Proxy) readMCP(w http.ResponseWriter, r *http.Request, maxBody, answers int) (*mcp.Request, []byte, string) {
	limit, name := maxBody, "mcp.max_body_bytes"
	if answers > maxBody {
		limit, name = answers, "mcp.max_response_bytes"
	}
	raw, err := h1.ReadBody(w, r, limit)
	if err != nil {
		return nil, nil, err.Error()
	}
	if len(raw) > limit {
		return nil, nil, fmt.Sprintf("request body over %s (%d)", name, limit)
	}
	mreq, err := mcp.Parse(r.Header, raw)
	if err != nil {
		return nil, nil, "malformed MCP request: " + err.Error()
	}
	return mreq, raw, ""
}

// judgeMessages decides every message of an MCP request. One denied message
// denies the request (and so the whole batch). It returns the deciding
// decision: the first denial, else the first message's allow; and, when
// allowed, the messages allowed by a rule with a rate_limit, appended to
// limited (the caller's buffer, empty).
func (p *Proxy) judgeMessages(cur *loaded, base policy.Request, mreq *mcp.Request, limited []ratelimit.Call) (policy.Decision, []ratelimit.Call, bool) {
	if mreq.Batch && !mcp.BatchAllowed(mreq.Version) {
		return policy.Decision{Reason: fmt.Sprintf("JSON-RPC batches are not part of MCP protocol version %q", versionLabel(mreq.Version))}, nil, true
	}
	var first policy.Decision
	audit := false
	for i := range mreq.Messages {
		req := base
		req.MCP = &mreq.Messages[i].Message
		d := cur.matcher.Decide(&req)
		if !d.Allow {
			return d, nil, true
		}
		if d.Review > 0 && mreq.Batch {
			return policy.Decision{Entry: d.Entry, Endpoint: d.Endpoint, Rule: d.Rule, Reason: "tools/call " + req.MCP.Tool + " needs review (" + d.Rule + "): send it alone, not in a JSON-RPC batch"}, nil, true
		}
		if i == 0 {
			first = d
		}
		audit = audit || d.Audit
		if l := cur.matcher.RateLimit(&d); l != nil {
			limited = append(limited, ratelimit.Call{Limit: l, Tool: req.MCP.Tool, Decision: d})
		}
	}
	first.Audit = audit
	return first, limited, false
}

func versionLabel(v string) string {
	if v == "" {
		return policy.DefaultMCPVersion + " (none given)"
	}
	return v
}

// toolsList is how one response of an MCP endpoint is read on its way to
// the agent (relay.Response), with vis judging which listed tools the
// agent may see. One is lent for every request to an MCP endpoint, and
// none outlives its response (release).
type toolsList struct {
	relay.Response
	vis visibility
}

var toolsLists = sync.Pool{New: func() any { return new(toolsList) }}

// toolsListFor returns how a response to r from the MCP endpoint ep — a
// POST whose messages are mreq, or a GET (mreq nil), which may replay a
// POST's stream — is read on its way to the agent. base is the judged
// request: its destination and caller.
func (p *Proxy) toolsListFor(base policy.Request, r *http.Request, ep relay.Endpoint, mreq *mcp.Request) *toolsList {
	l := toolsLists.Get().(*toolsList)
	version := r.Header.Get(mcp.HeaderMCPProtocolVersion)
	if mreq != nil {
		version = mreq.Version
	}
	l.vis = visibility{p: p, base: base, version: version}
	l.Init(p.relay, relay.Session{Endpoint: ep, ID: r.Header.Get(mcp.HeaderMCPSessionID)}, mreq, &l.vis)
	return l
}

// release gives l back once its response has been copied; l is not used
// after.
func (l *toolsList) release() {
	l.Reset()
	l.vis = visibility{}
	toolsLists.Put(l)
}

// visibility is which tools a tools/list through base (the request's
// destination and caller) may show under the policy in force, judged again
// when a new policy is loaded (relay.Shows).
type visibility struct {
	p       *Proxy
	base    policy.Request
	version string

	cur     *loaded
	filters bool            // the endpoint filters (not audit, filter_tools_list)
	listed  bool            // tools/list itself is allowed
	seen    map[string]bool // tool name and fingerprint → shown
}

// load judges the policy in force now.
func (v *visibility) load() {
	v.cur = v.p.current.Load()
	v.seen = map[string]bool{}
	v.filters, v.listed = true, false
	if v.cur == nil {
		return
	}
	list := v.base
	list.HTTPMethod = http.MethodPost
	list.MCP = &policy.MCPMessage{Method: "tools/list", ProtocolVersion: v.version}
	d := v.cur.matcher.Decide(&list)
	if !d.Allow {
		return // the list itself is denied now: show nothing
	}
	ep := endpointOf(v.cur, d)
	v.listed = true
	v.filters = !d.Audit && ep != nil && ep.Enforcement != policy.EnforcementAudit && ep.MCP.FiltersToolsList()
}

// Shows says whether the agent may see tool name, whose definition's
// fingerprint is fp: whether a tools/call of it with some arguments would
// be allowed. A tool the result names twice has no fingerprint: a rule
// pinning it does not show it.
func (v *visibility) Shows(name, fp string) bool {
	if v.seen == nil || v.p.current.Load() != v.cur {
		v.load() // first use, or a new policy
	}
	switch {
	case !v.filters:
		return true
	case !v.listed || v.cur == nil:
		return false
	}
	seenKey := name + "\x00" + fp
	if shown, ok := v.seen[seenKey]; ok {
		return shown
	}
	call := v.base
	call.HTTPMethod = http.MethodPost
	call.MCP = &policy.MCPMessage{Method: "tools/call", Tool: name, ProtocolVersion: v.version, AnyArguments: true, ToolDefinition: fp}
	shown := v.cur.matcher.Decide(&call).Allow
	v.seen[seenKey] = shown
	return shown
}

// endpointOf is the endpoint that made decision d, nil if none did.
func endpointOf(cur *loaded, d policy.Decision) *policy.Endpoint {
	np, ok := cur.matcher.Policy().NetworkPolicies[d.Entry]
	if !ok || d.Endpoint < 0 || d.Endpoint >= len(np.Endpoints) {
		return nil
	}
	return np.Endpoints[d.Endpoint]
}
