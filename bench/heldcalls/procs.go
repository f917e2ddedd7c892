package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/bench/internal/procs"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// The processes the benchmark runs are the shipped binary as users run
// it: `portcullis gateway` with its defaults (embedded SQLite in a temp
// dir) and one `portcullis proxy --gateway … --sandbox …` per sandbox,
// each in its own process group so a ^C reaches only this program.

// gateway is `portcullis gateway` and the API clients the run uses.
type gateway struct {
	*procs.Proc
	admin     *connect.Client
	operator  *connect.Client
	sandboxes portcullisv1connect.SandboxServiceClient
	proxies   portcullisv1connect.ProxyServiceClient
	calls     portcullisv1connect.CallServiceClient
}

// startGateway runs the gateway with its data in dir, with an admin token
// of our own and an operator token made through the API (an operator
// decides held calls).
func startGateway(ctx context.Context, bin, dir string, extra []string) (*gateway, error) {
	admin := "pcs_heldcalls-" + procs.RandomHex()
	p, err := procs.StartGateway(ctx, bin, dir, admin, nil, extra)
	if err != nil {
		return nil, err
	}
	transport := connecthttp.NewTransport(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, "http://"+p.Addr)
	g := &gateway{Proc: p, admin: connect.NewClient(transport, gatewaytest.Bearer(admin))}
	g.sandboxes = portcullisv1connect.NewSandboxServiceClient(g.admin)
	g.proxies = portcullisv1connect.NewProxyServiceClient(g.admin)
	tok, err := portcullisv1connect.NewTokenServiceClient(g.admin).CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "bench-operator", Role: "operator"})
	if err != nil {
		g.Stop()
		return nil, fmt.Errorf("create the operator token: %w", err)
	}
	g.operator = connect.NewClient(transport, gatewaytest.Bearer(tok.GetToken()))
	g.calls = portcullisv1connect.NewCallServiceClient(g.operator)
	return g, nil
}

// waitApplied waits until every sandbox's proxy enforces its first
// version (the gateway has its ACK).
func (g *gateway) waitApplied(ctx context.Context, n int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		list, err := g.proxies.ListProxies(ctx, &portcullisv1.ListProxiesRequest{})
		if err != nil {
			return fmt.Errorf("list proxies: %w", err)
		}
		applied := 0
		for _, p := range list.GetProxies() {
			if p.GetConnected() && p.GetAppliedVersion() >= 1 {
				applied++
			}
		}
		if applied >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d proxies enforce their policy after 2 minutes", applied, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
