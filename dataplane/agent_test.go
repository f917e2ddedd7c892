package dataplane_test

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/policy"
)

// newAgent builds an Agent from cfg, logging nowhere unless cfg says.
func newAgent(t testing.TB, cfg dataplane.Config) *dataplane.Agent {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a, err := dataplane.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// setPolicy parses doc and makes it the agent's policy, labelled version.
func setPolicy(t testing.TB, a *dataplane.Agent, doc, version string) {
	t.Helper()
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	if err := a.SetPolicy(pol, version); err != nil {
		t.Fatal(err)
	}
}

// serveProxy runs a on 127.0.0.1:0 until the test ends, and waits for
// every goroutine it started.
func serveProxy(t testing.TB, a *dataplane.Agent) *url.URL {
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

// startAgent is newAgent, setPolicy (doc "" for none) and serveProxy.
func startAgent(t testing.TB, cfg dataplane.Config, doc, version string) (*dataplane.Agent, *url.URL) {
	t.Helper()
	a := newAgent(t, cfg)
	if doc != "" {
		setPolicy(t, a, doc, version)
	}
	return a, serveProxy(t, a)
}
