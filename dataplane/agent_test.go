package dataplane_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
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

// startAgent is newAgent, setPolicy (doc "" for none) and serveProxy.
func startAgent(t testing.TB, cfg dataplane.Config, doc, version string) (*dataplane.Agent, *url.URL) {
	t.Helper()
	a := newAgent(t, cfg)
	if doc != "" {
		setPolicy(t, a, doc, version)
	}
	return a, dataplanetest.Serve(t, a)
}

// TestServeClosesItsListeners: when Serve returns, every listener it was
// given is closed, the sandbox's DNS socket included.
func TestServeClosesItsListeners(t *testing.T) {
	a := newAgent(t, dataplane.Config{})
	var l dataplane.Listeners
	var err error
	if l.Proxy, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if l.Transparent, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if l.DNS, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, l) }()
	// It answers DNS before it is stopped: a query gets a reply.
	c, err := net.Dial("udp", l.DNS.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	query := []byte{0xbe, 0xef, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0, 0, 1, 0, 1}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(query); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 512)); err != nil || n < 12 {
		t.Fatalf("no DNS answer while serving: %d bytes, %v", n, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, _, err := l.DNS.ReadFrom(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the DNS socket after Serve: %v, want it closed", err)
	}
	for name, ln := range map[string]net.Listener{"proxy": l.Proxy, "transparent": l.Transparent} {
		if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("the %s listener after Serve: %v, want it closed", name, err)
		}
	}
}
