package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

const watchdog = "sentry://node-3"

// ordersPolicy allows one read-only REST endpoint: the sandbox the
// simulated quarantine freezes.
const ordersPolicy = `version: 1
network_policies:
  github_api:
    name: github-api-readonly
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: read-only
    binaries:
      - { path: /usr/bin/curl }
`

// TestSimulate: the simulator's streams — duplicates, shuffled batches,
// events held back and sent later — end with every sequence stored and
// no gap, and its quarantine freezes the sandbox.
func TestSimulate(t *testing.T) {
	g := gatewaytest.Start(t, "sqlite")
	ctx := context.Background()
	client := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, g.URL), gatewaytest.Bearer(gatewaytest.AdminToken))
	sandboxes := portcullisv1connect.NewSandboxServiceClient(client)
	if _, err := sandboxes.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "orders", Policy: ordersPolicy}); err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	tok, err := portcullisv1connect.NewTokenServiceClient(client).CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: watchdog, Role: "sentry"})
	if err != nil {
		t.Fatalf("create sentry token: %v", err)
	}
	tokenFile := filepath.Join(t.TempDir(), "node.token")
	if err := os.WriteFile(tokenFile, []byte(tok.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noEnv := func(string) string { return "" }
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"-gateway", g.URL, "-token-file", tokenFile, "-o", "json",
		"-source", watchdog, "-rate", "400", "-duration", "3s", "-quarantine", "orders", "-sandboxes", "orders,other"}, noEnv, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	var sum struct {
		Sources []struct {
			Source                            string
			Sent, Stored, Duplicates, Refused int
			AckedSequence                     uint64 `json:"acked_sequence"`
			Gaps                              [][2]uint64
			Quarantines                       int
			Failures                          int `json:"failed_requests"`
		}
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil || len(sum.Sources) != 1 {
		t.Fatalf("summary %s: %v", stdout.String(), err)
	}
	s := sum.Sources[0]
	if s.Source != watchdog || s.Sent < 600 || s.Refused != 0 || s.Failures != 0 || s.Quarantines != 1 {
		t.Fatalf("summary %+v", s)
	}
	if s.Stored+s.Duplicates != s.Sent || s.Duplicates == 0 {
		t.Errorf("stored %d + duplicates %d != sent %d (or no duplicates were sent)", s.Stored, s.Duplicates, s.Sent)
	}
	if len(s.Gaps) != 0 || s.AckedSequence != uint64(s.Stored) {
		t.Errorf("after the held-back events came: acked %d of %d stored, gaps %v; want all acked, none", s.AckedSequence, s.Stored, s.Gaps)
	}
	if !strings.Contains(stderr.String(), "sent ") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
	sb, err := sandboxes.GetSandbox(ctx, &portcullisv1.GetSandboxRequest{Name: "orders"})
	if err != nil || !sb.GetFrozen() || sb.GetQuarantineSource() != watchdog {
		t.Errorf("after the simulated quarantine: %v, %v", sb, err)
	}
	// The gateway holds what the simulator says it stored.
	ev, err := portcullisv1connect.NewSentryServiceClient(client).ListEvents(ctx, &portcullisv1.ListSentryEventsRequest{Limit: 1000})
	if err != nil || len(ev.GetEvents()) != min(s.Stored, 1000) {
		t.Errorf("the gateway lists %d events (%v), the simulator stored %d", len(ev.GetEvents()), err, s.Stored)
	}
	// Usage.
	for _, bad := range [][]string{
		{"-rate", "400"},                          // no -source
		{"-source", watchdog, "-rate", "0"},       // rate
		{"-source", watchdog, "-duration", "-1s"}, // duration
		{"-source", watchdog, "-sources", "2"},    // one token
	} {
		var usage *benchcli.UsageError
		if err := run(ctx, append([]string{"-gateway", g.URL, "-token-file", tokenFile}, bad...), noEnv, &stdout, &stderr); !errors.As(err, &usage) {
			t.Errorf("%v: %v; want a usage error", bad, err)
		}
	}
}
