package dataplane_test

import (
	"log/slog"
	"net/url"
	"testing"

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
