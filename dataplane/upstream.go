package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// upstreamKey names a pool of upstream connections: the host the client
// asked for and the address that was checked for it. Keying by both means
// a connection is only ever reused for the same name on the same checked
// address — never for another name that shares the address (another TLS
// name), nor for the name after it resolved elsewhere.
type upstreamKey struct {
	host string
	addr netip.AddrPort
}

// maxUpstreamPools bounds the pools kept; beyond it, pools are dropped
// (their idle connections closed) until a quarter of the room is free.
const maxUpstreamPools = 1024

// upstreams holds one http.Transport per upstreamKey for the policy version
// in force. A new version starts with none: connections approved under
// the old version are never handed to the new one.
type upstreams struct {
	roots *x509.CertPool

	mu    sync.Mutex
	pools map[upstreamKey]*http.Transport
}

func newUpstreams(roots *x509.CertPool) *upstreams {
	return &upstreams{roots: roots, pools: make(map[upstreamKey]*http.Transport)}
}

// get returns the transport for k, creating it on first use.
func (u *upstreams) get(k upstreamKey) *http.Transport {
	u.mu.Lock()
	defer u.mu.Unlock()
	if tr, ok := u.pools[k]; ok {
		return tr
	}
	if len(u.pools) >= maxUpstreamPools {
		for key, tr := range u.pools {
			tr.CloseIdleConnections()
			delete(u.pools, key)
			if len(u.pools) <= maxUpstreamPools*3/4 {
				break
			}
		}
	}
	tr := &http.Transport{
		// Dial exactly the checked address, whatever the URL says.
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, k.addr.String())
		},
		TLSClientConfig:     &tls.Config{RootCAs: u.roots, ServerName: k.host, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		// No ResponseHeaderTimeout: MCP tool calls may take long; the
		// client decides how long to wait.
	}
	u.pools[k] = tr
	return tr
}

// reset drops every pool (a new policy version): idle connections close
// now, busy ones when their response ends.
func (u *upstreams) reset() {
	u.mu.Lock()
	old := u.pools
	u.pools = make(map[upstreamKey]*http.Transport)
	u.mu.Unlock()
	for _, tr := range old {
		tr.CloseIdleConnections()
	}
}
