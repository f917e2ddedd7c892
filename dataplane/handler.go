package dataplane

import (
	"bufio"
	"net"
	"net/http"
	"net/netip"

	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/policylocal"
	"github.com/portcullis-dev/portcullis/dataplane/transparent"
	"github.com/portcullis-dev/portcullis/policy"
)

// ServeHTTP handles one proxy request: CONNECT, or an absolute-form HTTP
// request. Requests for policy.local are answered by the proxy itself,
// before any policy applies.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect && policylocal.IsHost(r.Host),
		r.URL.IsAbs() && r.URL.Scheme != "http" && policylocal.IsHost(r.URL.Host):
		policylocal.Refuse(w)
	case r.Method == http.MethodConnect:
		p.handleConnect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		// r.Host is the URI's authority; a Host header naming another
		// marks the connection (h1.Problem). What is judged and
		// forwarded is the URI's authority.
		t, err := parseTarget(r.URL.Host, "80")
		if err != nil {
			p.refuse(w, r, dest{host: r.URL.Hostname()}, err.Error())
			return
		}
		if t.host == policylocal.Host {
			p.local.Serve(w, r, t.port)
			return
		}
		p.handleHTTP(w, r, "http", t, netip.Addr{})
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "not_a_proxy_request", "detail": "send absolute-form HTTP requests or CONNECT to this proxy"})
	}
}

// handleConnect opens a tunnel to the CONNECT's authority (connect).
func (p *Proxy) handleConnect(w http.ResponseWriter, r *http.Request) {
	t, err := parseTarget(r.Host, "")
	if err != nil {
		p.refuse(w, r, dest{host: r.Host}, err.Error())
		return
	}
	p.connect(w, r, t)
}

// connect judges a tunnel to t and opens it: the one judging of CONNECTs
// and of transparent connections (transparent.go, whose w is a
// transparent.Writer and t.orig the address they were sent to). L4
// destinations are decided here and relayed byte for byte; destinations
// that need inspection get a TLS terminating (or plain HTTP) inner server
// that judges every request.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request, t dest) {
	r, end := p.traceConnect(r, t)
	defer end()
	cur, req := p.inForce(w, r, t)
	if cur == nil || p.framingDenied(w, r, cur, req) {
		return
	}
	addr, d := p.resolve(r.Context(), cur, t, &req)
	if !addr.IsValid() {
		p.deny(w, r, cur, req, d, nil)
		return
	}
	req.Addr = addr
	if cur.matcher.Inspect(t.host, t.port) {
		// Every inner request goes to this address: the name is resolved
		// once per tunnel. Each has a span of its own.
		end()
		p.intercept(w, r, cur, req, t)
		return
	}
	if d = cur.matcher.Decide(&req); !d.Allow {
		p.deny(w, r, cur, req, d, nil)
		return
	}
	if reason, shared := p.servesInspected(r.Context(), cur, t, addr, true); shared {
		p.deny(w, r, cur, req, policy.Decision{Reason: reason}, nil)
		return
	}
	p.recordFor(r, p.newRecord(cur, req, d, nil, ""))
	p.tunnel(w, r, cur, req, addr, t)
}

// takeConn takes the client's connection from w for a tunnel, with the
// reader of what it sends: a CONNECT's is hijacked and answered 200
// first, a transparent connection's taken as it came (transparent.Writer).
func takeConn(w http.ResponseWriter) (net.Conn, *bufio.Reader, error) {
	if tw, ok := w.(*transparent.Writer); ok {
		conn, r := tw.Take()
		return conn, r, nil
	}
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, buf.Reader, nil
}

// inForce returns the policy in force and the request to t under it
// (baseRequest); with no policy loaded it refuses the request and returns
// nil.
func (p *Proxy) inForce(w http.ResponseWriter, r *http.Request, t dest) (*loaded, policy.Request) {
	cur := p.current.Load()
	if cur == nil {
		p.refuse(w, r, t, "no policy is loaded")
		return nil, policy.Request{}
	}
	return cur, p.baseRequest(r.Context(), cur, t)
}

// framingDenied denies req, and reports true, when h1 marked its
// connection with a framing problem (h1.Problem): before anything else,
// DNS included, such a request is not judged.
func (p *Proxy) framingDenied(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request) bool {
	problem := h1.Problem(r.Context())
	if problem == "" {
		return false
	}
	w.Header().Set("Connection", "close")
	p.deny(w, r, cur, req, policy.Decision{Reason: problem}, nil)
	return true
}
