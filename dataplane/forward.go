package dataplane

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"

	"github.com/portcullis-dev/portcullis/dataplane/credentials"
	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/mcp"
)

// identityOnly is the Accept-Encoding of a request whose answer is
// filtered, shared by all of them (nothing writes to a header's values).
var identityOnly = []string{"identity"}

// outbound is the request forward sends upstream, lent from a pool with
// its URL and a header map for when the client's fields are changed
// (else the request carries the client's own map): nothing keeps it once
// forward returns (the response that points to it is done with by then).
type outbound struct {
	req    http.Request
	url    url.URL
	header http.Header
}

var outbounds = sync.Pool{New: func() any { return &outbound{header: make(http.Header, 8)} }}

// maxPooledHeader bounds the header map an outbound goes back to the pool
// with: a larger one (a request with many fields) is dropped, not kept.
const maxPooledHeader = 32

func (o *outbound) release() {
	h := o.header
	*o = outbound{}
	if len(h) > maxPooledHeader {
		return
	}
	clear(h)
	o.header = h
	outbounds.Put(o)
}

// forward sends the judged request upstream — to the address that was
// checked, with the canonical path, the original Host, the client's
// end-to-end fields, and the body that was judged (MCP) or streamed
// (others) — and streams the response back. Streaming responses (SSE, or
// no length) are flushed after every read so events flow one by one.
//
// Neither header is copied field by field: the request goes with the
// client's header map (the upstream client leaves out the hop-by-hop fields),
// copied only when a field is to change; the response's fields are read
// straight into w's header (anything set there before is dropped), and
// its hop-by-hop ones deleted there.
//
// list, when not nil, filters the tools/list results of the response;
// plan, when not nil, adds the bound provider's credential.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, scheme string, t dest, addr netip.Addr, canonical string, body []byte, list *toolsList, plan *credentials.Plan) {
	unescaped, err := url.PathUnescape(canonical)
	if err != nil {
		// CanonicalPath only produces valid encodings.
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal_error"})
		return
	}
	upstream := p.upstreams.Get(h1.Key{Host: t.host, Addr: netip.AddrPortFrom(addr, uint16(t.port)), TLS: scheme == "https"})
	ob := outbounds.Get().(*outbound)
	defer ob.release()
	ob.url = url.URL{Scheme: scheme, Host: r.Host, Path: unescaped, RawPath: canonical, RawQuery: r.URL.RawQuery}
	if ob.url.Host == "" {
		ob.url.Host = t.authority() // what the Host line says when the client sent none
	}
	ob.req = http.Request{
		Method:     r.Method,
		URL:        &ob.url,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     r.Header,
		Host:       r.Host,
	}
	out := &ob.req
	if list != nil || p.tracer != nil || plan != nil {
		// A field changes: on a copy, never in the client's request.
		maps.Copy(ob.header, r.Header)
		out.Header = ob.header
	}
	if list != nil {
		// A compressed answer could not be filtered.
		out.Header["Accept-Encoding"] = identityOnly
	}
	if plan != nil {
		body = plan.Apply(out, body)
	}
	switch {
	case body != nil:
		out.ContentLength = int64(len(body))
	case r.ContentLength != 0:
		out.Body = r.Body
		out.ContentLength = r.ContentLength
	}

	ctx, traced := p.traceUpstream(r.Context(), out, t.host)
	res, err := upstream.RoundTrip(ctx, out, body, w.Header())
	traced(res, err)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			p.log.Warn("upstream request failed", "host", t.host, "port", t.port, "err", err)
		}
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": "upstream_unreachable", "detail": "the upstream could not be reached"})
		return
	}
	defer res.Body.Close()

	h1.RemoveHopByHop(res.Header) // which is w.Header()
	announced := len(res.Trailer) > 0
	if announced {
		names := make([]string, 0, len(res.Trailer))
		for k := range res.Trailer {
			names = append(names, k)
		}
		w.Header().Set("Trailer", strings.Join(names, ", "))
	}
	handled := false
	if list != nil {
		var err error
		if handled, err = list.CopyFiltered(w, res); handled && err != nil && !errors.Is(err, context.Canceled) {
			p.log.Debug("filtered response ended early", "host", t.host, "err", err)
		}
	}
	if !handled {
		streaming := res.ContentLength == -1 || mcp.IsEventStream(res.Header.Get("Content-Type"))
		w.WriteHeader(res.StatusCode)
		if streaming {
			// The status and headers go now: an event stream may say
			// nothing for a while (a tool at work), and its client is
			// waiting for them (Mcp-Session-Id among them), perhaps with
			// a timeout.
			if err := http.NewResponseController(w).Flush(); err != nil {
				p.log.Debug("response header flush failed", "host", t.host, "err", err)
				return
			}
		}
		if err := h1.CopyResponse(w, res.Body, streaming); err != nil && !errors.Is(err, context.Canceled) {
			p.log.Debug("response copy ended early", "host", t.host, "err", err)
		}
	}
	if announced {
		for k, vv := range res.Trailer {
			w.Header()[k] = vv
		}
	}
}
