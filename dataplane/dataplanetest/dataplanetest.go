// Package dataplanetest owns what tests that run proxies share: running
// an Agent for the length of a test (and waiting for all of it when the
// test ends), and the admin clients of the real test gateway
// (gateway/gatewaytest) a gateway-mode proxy follows.
package dataplanetest

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"testing"

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
