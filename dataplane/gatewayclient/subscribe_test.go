package gatewayclient_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/dataplane/match"
	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/internal/signing"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

const subscribePolicy = `
version: 1
network_policies:
  api:
    name: api
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        access: read-only
`

// adminAPI is the test gateway's API, as its admin.
type adminAPI struct{ dataplanetest.Admin }

func newAdminAPI(url string) adminAPI { return adminAPI{dataplanetest.NewAdmin(url)} }

func (a adminAPI) status(t *testing.T, id string, ok func(*portcullisv1.ProxyStatus) bool) *portcullisv1.ProxyStatus {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var last *portcullisv1.ProxyStatus
	for time.Now().Before(deadline) {
		res, err := a.Proxies.ListProxies(t.Context(), &portcullisv1.ListProxiesRequest{Sandbox: "agent-1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range res.GetProxies() {
			if p.GetProxyId() == id {
				if last = p; ok(p) {
					return p
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("proxy %s never reached the expected status; last %v", id, last)
	return nil
}

// proxy stands for the proxy a Subscriber keeps in step: it compiles each
// version as the proxy does (a version that does not compile is refused)
// and remembers the label of the one in force.
type proxy struct {
	mu      sync.Mutex
	version string
}

func (p *proxy) SetPolicy(pol *policy.Policy, version string) error {
	if _, err := match.Compile(pol); err != nil {
		return fmt.Errorf("compile policy %s: %w", version, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.version = version
	return nil
}

func (p *proxy) SetCA(*ca.CA) {}

// PolicyVersion returns the label of the version in force ("" if none).
func (p *proxy) PolicyVersion() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version
}

// subscribe runs a Subscriber for a fresh proxy until the test ends.
func subscribe(t *testing.T, gw *gatewaytest.Gateway, token func() (string, error), pinned []byte) (*proxy, *gatewayclient.Subscriber) {
	t.Helper()
	return subscribeIn(t, gw, t.TempDir(), token, pinned)
}

// subscribeIn is subscribe with the proxy's data dir.
func subscribeIn(t *testing.T, gw *gatewaytest.Gateway, dir string, token func() (string, error), pinned []byte) (*proxy, *gatewayclient.Subscriber) {
	t.Helper()
	p := &proxy{}
	sub := startSubscriber(t, gatewayclient.SubscribeConfig{
		Gateway: gw.URL, Sandbox: "agent-1", Token: token, ProxyID: "p1", DataDir: dir,
		GatewayKey: pinned, MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	}, p)
	return p, sub
}

// startSubscriber runs a Subscriber of p with cfg until the test ends.
func startSubscriber(t *testing.T, cfg gatewayclient.SubscribeConfig, p gatewayclient.Enforcer) *gatewayclient.Subscriber {
	t.Helper()
	sub, err := gatewayclient.NewSubscriber(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	runSubscriber(t, sub, nil)
	return sub
}

// A proxy pinned to another key refuses every version (NACK, with the
// reason) and keeps denying everything.
func TestSubscriberRefusesVersionsSignedByAnotherKey(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	other, _, _, _ := signing.NewKey(nil)
	proxy, sub := subscribe(t, gw, func() (string, error) { return created.GetToken(), nil }, other)
	s := api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool { return p.GetLastNackVersion() == 1 })
	if !strings.Contains(s.GetLastNackError(), "pinned key") || s.GetAppliedVersion() != 0 {
		t.Fatalf("status %v", s)
	}
	if proxy.PolicyVersion() != "" || sub.AppliedVersion() != 0 {
		t.Fatalf("the proxy applied version %q signed by an untrusted key", proxy.PolicyVersion())
	}
}

// A rotated sandbox token ends the proxy's stream at once; the proxy
// comes back with the new token (its token file rewritten) and gets the
// versions committed meanwhile.
func TestSubscriberFollowsTokenRotation(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	var token atomic.Value
	token.Store(created.GetToken())
	proxy, _ := subscribe(t, gw, func() (string, error) { return token.Load().(string), nil }, nil)
	first := api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() && p.GetAppliedVersion() == 1 })
	if proxy.PolicyVersion() != "1" {
		t.Fatalf("proxy enforces %q", proxy.PolicyVersion())
	}

	rotated, err := api.Sandbox.RotateSandboxToken(t.Context(), &portcullisv1.RotateSandboxTokenRequest{Name: "agent-1"})
	if err != nil {
		t.Fatal(err)
	}
	api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool { return !p.GetConnected() })
	if _, err := api.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(subscribePolicy, "read-only", "read-write", 1)}); err != nil {
		t.Fatal(err)
	}
	// With the old token it stays out; the version waits for it.
	time.Sleep(500 * time.Millisecond)
	if proxy.PolicyVersion() != "1" {
		t.Fatalf("a proxy with a rotated-out token got version %q", proxy.PolicyVersion())
	}
	token.Store(rotated.GetToken())
	again := api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() && p.GetAppliedVersion() == 2 })
	if !again.GetConnectedAt().AsTime().After(first.GetConnectedAt().AsTime()) {
		t.Fatal("the proxy did not reconnect")
	}
	if proxy.PolicyVersion() != "2" {
		t.Fatalf("proxy enforces %q, want 2", proxy.PolicyVersion())
	}
}

// After a key rotation the proxy follows the endorsement to the new key
// and pins it.
func TestSubscriberFollowsKeyRotation(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	subscribeIn(t, gw, dir, func() (string, error) { return created.GetToken(), nil }, nil)
	api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool { return p.GetAppliedVersion() == 1 })
	chain, err := gateway.SigningKeyChain(t.Context(), gw.Store)
	if err != nil {
		t.Fatal(err)
	}
	if pinned := readPinned(t, dir); pinned != chain[0] {
		t.Fatalf("pinned %s on first contact, want %s", pinned, chain[0])
	}

	if _, err := gateway.RotateSigningKey(t.Context(), gw.Store, "test"); err != nil {
		t.Fatal(err)
	}
	chain, _ = gateway.SigningKeyChain(t.Context(), gw.Store)
	// The running gateway re-reads its keys at its version check.
	time.Sleep(gatewayVersionCheck + time.Second)
	if _, err := api.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(subscribePolicy, "read-only", "read-write", 1)}); err != nil {
		t.Fatal(err)
	}
	s := api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool {
		return p.GetAppliedVersion() == 2 || p.GetLastNackVersion() == 2
	})
	if s.GetAppliedVersion() != 2 {
		t.Fatalf("version 2, signed by the rotated key, was refused: %s", s.GetLastNackError())
	}
	if pinned := readPinned(t, dir); pinned != chain[1] {
		t.Fatalf("pinned %s after the rotation, want the new key %s", pinned, chain[1])
	}
}

// gatewayVersionCheck is gateway.Config.VersionCheckInterval's default.
const gatewayVersionCheck = 5 * time.Second

func readPinned(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "gateway.key"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// The shipper never blocks: past its buffer it counts drops, and the
// count reaches the gateway with the next batch; buffered records are
// stored once the gateway is reachable.
func TestShipperBoundedBufferAndDrops(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	sh := gatewayclient.NewShipper(gatewayclient.ShipperConfig{Buffer: 3, Batch: 2, Interval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	for i := range 5 {
		sh.Offer(decision.Record{Time: time.Now(), Host: "api.example.com", Port: 443, Path: fmt.Sprintf("/r%d", i), Decision: decision.Deny, DenialID: fmt.Sprintf("dn_%d", i)})
	}
	if buffered, dropped := sh.Pending(); buffered != 3 || dropped != 2 {
		t.Fatalf("buffered %d, dropped %d; want 3 and 2", buffered, dropped)
	}
	// A status to carry the drop count: a connected proxy.
	_, sub := subscribe(t, gw, func() (string, error) { return created.GetToken(), nil }, nil)
	api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sh.Run(ctx, sub); close(done) }()
	defer func() { cancel(); <-done }()

	dc := portcullisv1connect.NewDecisionServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := dc.ListDecisions(t.Context(), &portcullisv1.ListDecisionsRequest{Sandbox: "agent-1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.GetDecisions()) == 3 {
			for i, d := range res.GetDecisions() {
				if d.GetRecord().GetPath() != fmt.Sprintf("/r%d", i) || d.GetRecord().GetProxyId() != "p1" {
					t.Fatalf("record %d: %v", i, d.GetRecord())
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records stored, want the 3 buffered", len(res.GetDecisions()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool { return p.GetDecisionsDropped() == 2 })
	if buffered, dropped := sh.Pending(); buffered != 0 || dropped != 0 {
		t.Fatalf("after shipping: buffered %d, dropped %d", buffered, dropped)
	}
}

// Revoking the sandbox's token ends the proxy's stream at once; it stays
// out (Unauthenticated) and keeps enforcing what it has.
func TestSubscriberLosesStreamOnRevocation(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	proxy, _ := subscribe(t, gw, func() (string, error) { return created.GetToken(), nil }, nil)
	api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() && p.GetAppliedVersion() == 1 })
	tc := portcullisv1connect.NewTokenServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	if _, err := tc.RevokeToken(t.Context(), &portcullisv1.RevokeTokenRequest{Name: created.GetSandbox().GetName() + "-" + "x"}); err == nil {
		t.Fatal("revoking an unknown token succeeded")
	}
	list, err := tc.ListTokens(t.Context(), &portcullisv1.ListTokensRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var name string
	for _, tok := range list.GetTokens() {
		if tok.GetSandbox() == "agent-1" {
			name = tok.GetName()
		}
	}
	if _, err := tc.RevokeToken(t.Context(), &portcullisv1.RevokeTokenRequest{Name: name}); err != nil {
		t.Fatal(err)
	}
	// Well within the minute the other replicas' re-check would take.
	start := time.Now()
	api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool { return !p.GetConnected() })
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the stream outlived the revocation by %v", d)
	}
	if _, err := api.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(subscribePolicy, "read-only", "read-write", 1)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if proxy.PolicyVersion() != "1" {
		t.Fatalf("a proxy with a revoked token got version %q", proxy.PolicyVersion())
	}
}

// caProxy is proxy that remembers whether a sandbox CA was set.
type caProxy struct {
	proxy
	ca atomic.Bool
}

func (p *caProxy) SetCA(c *ca.CA) { p.ca.Store(c != nil) }

// A proxy that refuses the first version of a stream still keeps the key
// chain and sandbox CA that came with it (the gateway sends them once a
// stream): the next version is verified and applied, with the CA, instead
// of being refused for "no key chain to pin".
func TestSubscriberKeepsChainOfRefusedFirstVersion(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	p := &caProxy{}
	var refused atomic.Int32
	sub, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
		Gateway: gw.URL, Sandbox: "agent-1", Token: func() (string, error) { return created.GetToken(), nil }, ProxyID: "p1",
		DataDir: t.TempDir(), MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Refuse: func(*policy.Policy) error {
			if refused.Add(1) == 1 {
				return fmt.Errorf("refused by the test")
			}
			return nil
		},
	}, p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sub.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; sub.Close() })
	api.status(t, "p1", func(s *portcullisv1.ProxyStatus) bool { return s.GetLastNackVersion() == 1 })
	if _, err := api.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(subscribePolicy, "read-only", "read-write", 1)}); err != nil {
		t.Fatal(err)
	}
	s := api.status(t, "p1", func(s *portcullisv1.ProxyStatus) bool {
		return s.GetAppliedVersion() == 2 || s.GetLastNackVersion() == 2
	})
	if s.GetAppliedVersion() != 2 || p.PolicyVersion() != "2" || !p.ca.Load() {
		t.Fatalf("after a refused first version: status %v, proxy at %q, CA set %v; want version 2 applied with the CA", s, p.PolicyVersion(), p.ca.Load())
	}
}

// A server that lists many large definitions fills neither the proxy nor a
// message: the shipper holds at most 8 MiB of definitions, and sends them
// a megabyte at a time, so 80 definitions of 60 KiB (4.8 MB, more than a
// gRPC message may carry: one batch would be refused for ever) all reach
// the gateway.
func TestShipperDefinitionBytesBounded(t *testing.T) {
	big := func(i int) decision.ToolDefinitionChange {
		def := fmt.Sprintf(`{"name":"t%d","description":%q}`, i, strings.Repeat("x", 60<<10))
		fp, err := policy.DefinitionFingerprint([]byte(def))
		if err != nil {
			t.Fatal(err)
		}
		return decision.ToolDefinitionChange{Time: time.Now(), Host: "api.example.com", Port: 443, Path: "/mcp", Tool: fmt.Sprintf("t%d", i), After: fp, Definition: []byte(def)}
	}
	full := gatewayclient.NewShipper(gatewayclient.ShipperConfig{Interval: time.Hour, DefinitionBuffer: 1000, Logger: slog.New(slog.DiscardHandler)})
	for i := range 200 {
		full.OfferDefinition(big(i))
	}
	if n := full.PendingDefinitions(); n*(60<<10) > 8<<20 || n < 100 {
		t.Fatalf("pending = %d definitions of 60 KiB; want at most 8 MiB of them", n)
	}

	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	sh := gatewayclient.NewShipper(gatewayclient.ShipperConfig{Interval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	for i := range 80 {
		sh.OfferDefinition(big(i))
	}
	_, sub := subscribe(t, gw, func() (string, error) { return created.GetToken(), nil }, nil)
	api.status(t, "p1", func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sh.Run(ctx, sub); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(20 * time.Second)
	for sh.PendingDefinitions() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d definitions never shipped", sh.PendingDefinitions())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Shipped means the gateway took each batch: it checks every
	// definition against its fingerprint and refuses a batch whole.
}
