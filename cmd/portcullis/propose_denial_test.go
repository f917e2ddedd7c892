package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
)

// TestProposeFromProxyDenial: a request a real proxy denied, shipped to
// the gateway, found with `logs --decision deny`, becomes with `propose
// --from-denial` a proposal whose resulting policy allows exactly that
// request, and nothing the prover calls wider.
func TestProposeFromProxyDenial(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	port := upstream.Listener.Addr().(*net.TCPAddr).Port

	gw := gatewaytest.Start(t, "sqlite")
	admin := gatewaytest.AdminToken
	doc := fmt.Sprintf(`version: 1
network_policies:
  releases:
    name: releases
    endpoints:
      - host: releases.example.com
        port: %d
        protocol: rest
        rules:
          - allow: { method: GET, path: "/v1/**" }
    binaries: [ { path: /usr/bin/curl } ]
`, port)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	created := jsonOut(t, gw, admin, "sandbox", "create", "agent-1", "-f", policyFile)
	token, _ := created["token"].(string)
	proxy, addr := startTestProxy(t, gw.URL, "agent-1", token)
	waitUntil(t, "the proxy to apply version 1", func() bool { return proxy.PolicyVersion() == "1" })

	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}}
	defer client.CloseIdleConnections()
	get := func(path string) int {
		res, err := client.Get(fmt.Sprintf("http://releases.example.com:%d%s", port, path))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := get("/v1/a"); code != http.StatusOK {
		t.Fatalf("allowed request: %d", code)
	}
	if code := get("/v2/releases/latest"); code != http.StatusForbidden {
		t.Fatalf("denied request: %d", code)
	}

	// The operator finds the denial; the sandbox proposes from it.
	var denialID string
	waitUntil(t, "the denial to be shipped", func() bool {
		js := jsonOut(t, gw, admin, "logs", "agent-1", "--decision", "deny")
		list, _ := js["decisions"].([]any)
		for _, d := range list {
			rec, _ := d.(map[string]any)["record"].(map[string]any)
			if rec["path"] == "/v2/releases/latest" {
				denialID, _ = rec["denial_id"].(string)
			}
		}
		return denialID != ""
	})
	p := jsonOut(t, gw, token, "propose", "--from-denial", denialID)
	if p["status"] != "pending" || p["denial_id"] != denialID {
		t.Fatalf("propose --from-denial: %v", p)
	}
	resulting, err := json.Marshal(p["resulting_policy"])
	if err != nil {
		t.Fatal(err)
	}
	result, _, err := policy.Parse(resulting)
	if err != nil {
		t.Fatalf("resulting policy: %v", err)
	}
	denied := policy.Request{Binary: "/usr/bin/curl", Host: "releases.example.com", Port: port, HTTPMethod: "GET", Path: "/v2/releases/latest"}
	if d := policy.Decide(result, denied); !d.Allow {
		t.Fatalf("the resulting policy denies the request it was proposed for: %s", d.Reason)
	}
	// Exactly that request: its neighbours stay denied, and every finding
	// is that request.
	for _, r := range []policy.Request{
		{Binary: "/usr/bin/curl", Host: "releases.example.com", Port: port, HTTPMethod: "GET", Path: "/v2/releases/other"},
		{Binary: "/usr/bin/curl", Host: "releases.example.com", Port: port, HTTPMethod: "POST", Path: "/v2/releases/latest"},
		{Binary: "/usr/bin/python3", Host: "releases.example.com", Port: port, HTTPMethod: "GET", Path: "/v2/releases/latest"},
	} {
		if policy.Decide(result, r).Allow {
			t.Errorf("the resulting policy also allows %s %s from %s", r.HTTPMethod, r.Path, r.Binary)
		}
	}
	findings, _ := p["findings"].([]any)
	if len(findings) == 0 {
		t.Fatal("no findings for a proposal that adds a request")
	}
	for _, f := range findings {
		ce, _ := f.(map[string]any)["counterexample"].(map[string]any)
		if ce["binary"] != "/usr/bin/curl" || ce["host"] != "releases.example.com" || ce["http_method"] != "GET" || ce["path"] != "/v2/releases/latest" {
			t.Errorf("finding wider than the denial: %v", f)
		}
	}
	// The proxy enforces nothing new until an approval: still denied.
	if code := get("/v2/releases/latest"); code != http.StatusForbidden {
		t.Fatalf("a pending proposal changed enforcement: %d", code)
	}
}

// waitUntil polls cond for up to 15 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startTestProxy runs a proxy as `portcullis proxy --sandbox` wires it,
// in process, resolving every name to loopback and naming the caller
// /usr/bin/curl. It returns the proxy's address.
func startTestProxy(t *testing.T, gatewayURL, sandbox, token string) (*dataplane.Agent, string) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	agent, err := dataplane.New(dataplane.Config{
		DevAllowLoopback: true,
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		CallerBinary: func(net.Conn) (string, error) { return "/usr/bin/curl", nil },
		Logger:       log,
		Gateway: &gatewayclient.SubscribeConfig{
			Gateway: gatewayURL, Sandbox: sandbox, Token: func() (string, error) { return token, nil },
			ProxyID: "p1", DataDir: t.TempDir(), MaxBackoff: 200 * time.Millisecond,
		},
		Shipper: gatewayclient.ShipperConfig{Interval: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	return agent, dataplanetest.Serve(t, agent).Host
}
