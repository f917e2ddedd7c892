package dataplane

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/portcullis-dev/portcullis/dataplane/credentials"
	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/dataplane/mcp/relay"
	"github.com/portcullis-dev/portcullis/dataplane/wsproxy"
	"github.com/portcullis-dev/portcullis/policy"
)

// handleHTTP judges one HTTP request to t and forwards it when allowed.
// addr is the address a CONNECT tunnel resolved t to; when invalid (an
// absolute-form request), t is resolved here, after the checks that need
// no address. The request is judged by the policy version in force when
// it began, start to end.
func (p *Proxy) handleHTTP(w http.ResponseWriter, r *http.Request, scheme string, t dest, addr netip.Addr) {
	r, end := p.traceRequest(r, scheme, t)
	defer end()
	cur, req := p.inForce(w, r, t)
	if cur == nil {
		return
	}
	req.HTTPMethod = r.Method
	req.Path = r.URL.EscapedPath()
	req.Query = r.URL.RawQuery
	if p.framingDenied(w, r, cur, req) {
		return
	}
	path, reason := checkRequest(r, req.Path)
	if reason != "" {
		p.deny(w, r, cur, req, policy.Decision{Reason: reason}, nil)
		return
	}
	if !addr.IsValid() {
		var d policy.Decision
		if addr, d = p.resolve(r.Context(), cur, t, &req); !addr.IsValid() {
			p.deny(w, r, cur, req, d, nil)
			return
		}
	}
	req.Addr = addr

	var (
		d    policy.Decision
		body []byte     // the judged body, held whole (an MCP POST's)
		list *toolsList // how the answer is read (an MCP endpoint's)
		mreq *mcp.Request
	)
	limits, mcpEndpoint := cur.matcher.MCPLimits(t.host, t.port, r.Method, path)
	ep := relay.Endpoint{Host: t.host, Port: t.port, Path: path}
	switch {
	case mcpEndpoint && r.Method == http.MethodPost:
		if mreq, body, d = p.judgeMCP(w, r, cur, req, scheme, ep, limits); mreq == nil {
			return // denied, or over its rate limit: answered
		}
		list = p.toolsListFor(req, r, ep, mreq)
	case mcpEndpoint && (r.ContentLength != 0 || len(r.TransferEncoding) > 0):
		// Only POST bodies are judged; any other body would pass unread.
		p.deny(w, r, cur, req, policy.Decision{Reason: r.Method + " to an MCP endpoint must not carry a body"}, nil)
		return
	default:
		if d = cur.matcher.Decide(&req); !d.Allow {
			p.deny(w, r, cur, req, d, nil)
			return
		}
		if mcpEndpoint && r.Method == http.MethodGet {
			// A GET stream may replay a POST's answers (resumption).
			list = p.toolsListFor(req, r, ep, nil)
		}
	}
	if why := wsproxy.Refused(r, cur.matcher.Policy(), d); why != "" {
		p.deny(w, r, cur, req, policy.Decision{Entry: d.Entry, Endpoint: d.Endpoint, Rule: d.Rule, Reason: why}, nil)
		return
	}
	// The providers' credentials (dataplane/credentials), before the allow is recorded.
	creq := credentials.Request{Host: t.host, Port: t.port, TLS: scheme == "https", Endpoint: endpointOf(cur, d), Body: body, Held: d.Review > 0 && mreq == nil}
	plan, body, den := p.creds.Check(r.Context(), w, r, creq)
	if den != nil {
		p.deny(w, r, cur, req, den.Decision(d), mreq)
		return
	}
	if d.Review == 0 { // a held call's is recorded once decided
		p.recordFor(r, p.newRecord(cur, req, d, mreq, ""))
	}
	canonical, err := forwardPath(cur, d, req.Path, path)
	if err != nil {
		p.deny(w, r, cur, req, policy.Decision{Reason: "malformed request path: " + err.Error()}, nil)
		return
	}
	if d.Review > 0 {
		var done func()
		if w, body, plan, done = p.holdCall(w, r, cur, req, d, mreq, body, creq); done == nil {
			return
		}
		defer done()
	}
	if wsproxy.Requested(r) {
		p.webSocket(w, r, cur, req, d, scheme, t, addr, canonical, plan)
		return
	}
	p.forward(w, r, scheme, t, addr, canonical, body, list, plan)
	if list != nil {
		list.release()
	}
}

// checkRequest refuses what would let the upstream see another request
// than the one judged, before any policy applies (and before DNS); else
// it returns the request's path canonicalised, encoded slashes allowed.
// rawPath is the request's escaped path.
func checkRequest(r *http.Request, rawPath string) (path, reason string) {
	if h := h1.ConnectionNamesEndToEnd(r.Header); h != "" {
		// Headers named in Connection are dropped before forwarding; the
		// upstream would see a different request from the one judged.
		return "", "the Connection header names " + h + ", which would be removed before the upstream sees it"
	}
	if reason := wsproxy.CheckHandshake(r); reason != "" {
		return "", reason
	}
	if i := nonASCII(r.RequestURI); i >= 0 {
		// Go percent-encodes such a byte into the path it hands on; an
		// upstream may read the raw byte otherwise. OpenShell refuses it.
		return "", fmt.Sprintf("malformed request target: a raw non-ASCII byte (0x%02X) must be percent-encoded", r.RequestURI[i])
	}
	path, err := policy.CanonicalPath(rawPath, true)
	if err != nil {
		return "", "malformed request path: " + err.Error()
	}
	return path, ""
}

// forwardPath is the canonical path that is forwarded: canonicalised with
// the deciding endpoint's allow_encoded_slash.
// lenient is the path already canonicalised with encoded slashes allowed:
// it is the answer whenever the endpoint allows them or the path has none.
func forwardPath(cur *loaded, d policy.Decision, raw, lenient string) (string, error) {
	ep := endpointOf(cur, d)
	if ep != nil && ep.AllowEncodedSlash || !strings.Contains(lenient, "%2F") && !strings.Contains(lenient, "%5C") {
		return lenient, nil
	}
	return policy.CanonicalPath(raw, false)
}

// nonASCII returns the index of the first byte of s above 0x7F, or -1.
func nonASCII(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return i
		}
	}
	return -1
}
