package dataplane

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"

	"github.com/portcullis-dev/portcullis/dataplane/credentials"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/wsproxy"
	"github.com/portcullis-dev/portcullis/policy"
)

// webSocket carries the WebSocket r opens, which d allowed (wsproxy),
// until it closes: judged again with the open tunnels (recheckTunnels),
// the client's text messages rewritten for plan's provider, a refused
// message recorded as a denial.
func (p *Proxy) webSocket(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request, d policy.Decision, scheme string, t dest, addr netip.Addr, canonical string, plan *credentials.Plan) {
	o := wsproxy.Options{Apply: func(out *http.Request) { plan.Apply(out, nil) }, Track: p.hijacked.Add}
	o.Rewriter.Provider, o.Rewriter.Credential = plan.WebSocketRewrite()
	o.Opened = func(end func(string)) func() {
		return p.trackTunnel(&openTunnel{req: req, end: end, webSocket: true, bound: wsproxy.Bound(endpointOf(cur, d))})
	}
	upstream := p.upstreams.Get(h1.Key{Host: t.host, Addr: netip.AddrPortFrom(addr, uint16(t.port)), TLS: scheme == "https"})
	ref, err := wsproxy.Forward(r.Context(), w, r, canonical, cmp.Or(r.Host, t.authority()), upstream, o)
	if ref != nil {
		p.record(cur, req, policy.Decision{Entry: d.Entry, Endpoint: d.Endpoint, Rule: d.Rule, Reason: ref.Reason, ReasonCode: ref.Code}, nil, decision.NewDenialID())
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, net.ErrClosed) {
		p.log.Debug("websocket ended", "host", t.host, "err", err)
	}
}
