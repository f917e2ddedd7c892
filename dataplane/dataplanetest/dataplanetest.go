// Package dataplanetest owns what tests that run proxies share: running
// an Agent for the length of a test (and waiting for all of it when the
// test ends), a Reviewer deciding its held calls, and the admin clients
// of the real test gateway (gateway/gatewaytest) a gateway-mode proxy
// follows.
package dataplanetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// Serve runs a on 127.0.0.1:0 until the test ends, then stops it and
// waits for Run to return (every goroutine of the proxy has ended). It
// returns the proxy's URL, for http.ProxyURL.
func Serve(t testing.TB, a *dataplane.Agent) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

// Admin holds clients of a test gateway's API with its admin token.
type Admin struct {
	Sandbox  portcullisv1connect.SandboxServiceClient
	Policy   portcullisv1connect.PolicyServiceClient
	Proxies  portcullisv1connect.ProxyServiceClient
	Approval portcullisv1connect.ApprovalServiceClient
	Tokens   portcullisv1connect.TokenServiceClient
}

// NewAdmin returns the admin clients of the test gateway at gatewayURL.
func NewAdmin(gatewayURL string) Admin {
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, gatewayURL), gatewaytest.Bearer(gatewaytest.AdminToken))
	return Admin{
		Sandbox:  portcullisv1connect.NewSandboxServiceClient(c),
		Policy:   portcullisv1connect.NewPolicyServiceClient(c),
		Proxies:  portcullisv1connect.NewProxyServiceClient(c),
		Approval: portcullisv1connect.NewApprovalServiceClient(c),
		Tokens:   portcullisv1connect.NewTokenServiceClient(c),
	}
}

// ServeTransparent is Serve with a transparent listener beside the proxy
// listener (dataplane.Listeners), both on 127.0.0.1:0. It returns the
// proxy's URL and the transparent listener's address.
func ServeTransparent(t testing.TB, a *dataplane.Agent) (*url.URL, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Serve(ctx, dataplane.Listeners{Proxy: ln, Transparent: tln}); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}, tln.Addr().String()
}

// Redirects stands in for the kernel's NAT: Dial connects to a
// transparent listener as a redirected connection to orig would, and
// OriginalDst (for dataplane.Config.OriginalDst) answers orig for it.
type Redirects struct {
	mu   sync.Mutex
	orig map[netip.AddrPort]netip.AddrPort // by the client's address
}

// Dial connects to the transparent listener at addr as if to orig.
func (r *Redirects) Dial(t testing.TB, addr string, orig netip.AddrPort) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.mu.Lock()
	if r.orig == nil {
		r.orig = map[netip.AddrPort]netip.AddrPort{}
	}
	r.orig[conn.LocalAddr().(*net.TCPAddr).AddrPort()] = orig
	r.mu.Unlock()
	return conn
}

// OriginalDst returns the orig a connection was dialled for (Dial),
// waiting a while for Dial to have said it.
func (r *Redirects) OriginalDst(conn net.Conn) (netip.AddrPort, error) {
	client := conn.RemoteAddr().(*net.TCPAddr).AddrPort()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.mu.Lock()
		orig, ok := r.orig[client]
		r.mu.Unlock()
		if ok {
			return orig, nil
		}
	}
	return netip.AddrPort{}, fmt.Errorf("no redirect known for %s", client)
}
