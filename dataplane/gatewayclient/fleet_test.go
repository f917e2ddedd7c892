package gatewayclient_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// logRecords keeps the messages a subscriber logs, with their
// attributes, so a test can count its reconnections.
type logRecords struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, m)
	return nil
}

// with returns the records logged with msg.
func (l *logRecords) with(msg string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.recs {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// runSubscriber runs sub (and a shipper on it) until the test ends or
// stop is called.
func runSubscriber(t *testing.T, sub *gatewayclient.Subscriber, sh *gatewayclient.Shipper) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { sub.Run(ctx) })
	if sh != nil {
		wg.Go(func() { sh.Run(ctx, sub) })
	}
	stop = sync.OnceFunc(func() { cancel(); wg.Wait(); sub.Close() })
	t.Cleanup(stop)
	return stop
}

// waitApplied waits until sub applied version v, and returns how long
// that took.
func waitApplied(t *testing.T, sub *gatewayclient.Subscriber, v uint32, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for sub.AppliedVersion() != v {
		if time.Since(start) > within {
			t.Fatalf("version %d not applied within %v; holding %d", v, within, sub.AppliedVersion())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// A proxy given two replicas follows the fleet: the replica it streams
// from shuts down (goaway), and it moves to the other at once — one
// reconnection, no failed attempt — and receives a version committed
// through the survivor; its decision records and the advisor relay go
// to the survivor too.
func TestSubscriberFollowsTheFleet(t *testing.T) {
	a := gatewaytest.Start(t, "postgres", func(c *gateway.Config) { c.Replica = "a" })
	b := a.Replica(func(c *gateway.Config) { c.Replica = "b" })
	gws := map[string]*gatewaytest.Gateway{"a": a, "b": b}
	api := newAdminAPI(a.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logRecords{}
	p := &proxy{}
	sub, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
		Gateways: []string{a.URL, b.URL}, Sandbox: "agent-1", Token: func() (string, error) { return created.GetToken(), nil },
		ProxyID: "p1", DataDir: t.TempDir(), MaxBackoff: 30 * time.Second, Logger: slog.New(logs),
	}, p)
	if err != nil {
		t.Fatal(err)
	}
	sh := gatewayclient.NewShipper(gatewayclient.ShipperConfig{Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	runSubscriber(t, sub, sh)
	s := api.status(t, "p1", func(s *portcullisv1.ProxyStatus) bool { return s.GetConnected() && s.GetAppliedVersion() == 1 })
	on := s.GetReplica()
	survivor := map[string]string{"a": "b", "b": "a"}[on]
	if survivor == "" {
		t.Fatalf("connected to replica %q", on)
	}

	// The replica shuts down in order: it sends its streams away first.
	gws[on].Stop()
	api = newAdminAPI(gws[survivor].URL)
	set, err := api.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(subscribePolicy, "read-only", "read-write", 1)})
	if err != nil {
		t.Fatal(err)
	}
	took := waitApplied(t, sub, set.GetVersion(), 5*time.Second)
	t.Logf("version %d, committed through replica %s after replica %s stopped, applied in %v", set.GetVersion(), survivor, on, took)
	api.status(t, "p1", func(s *portcullisv1.ProxyStatus) bool {
		return s.GetConnected() && s.GetReplica() == survivor && s.GetAppliedVersion() == set.GetVersion()
	})
	ended := logs.with("policy stream ended; reconnecting")
	if len(ended) != 1 || ended[0]["goaway"] != "true" || ended[0]["in"] != "0s" {
		t.Fatalf("the stream ended %d times (%v); want once, by goaway, reconnecting at once", len(ended), ended)
	}
	if opened := logs.with("policy stream open"); len(opened) != 2 {
		t.Fatalf("%d streams opened; want 2 (one per replica): %v", len(opened), opened)
	}

	// Shipping and the relay find the survivor, whichever replica they
	// tried first.
	sh.Offer(decision.Record{Time: time.Now(), Sandbox: "agent-1", Decision: decision.Deny, Host: "api.example.com", Port: 443, DenialID: "dn_fleet1", Reason: "test"})
	fctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := sh.Flush(fctx); err != nil {
		t.Fatalf("flush after the failover: %v", err)
	}
	dc := portcullisv1connect.NewDecisionServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, gws[survivor].URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	res, err := dc.ListDecisions(t.Context(), &portcullisv1.ListDecisionsRequest{Sandbox: "agent-1", DenialId: "dn_fleet1"})
	if err != nil || len(res.GetDecisions()) != 1 {
		t.Fatalf("the shipped denial: %v, %v", res, err)
	}
	if _, err := sub.AdvisorClient().ListProposals(t.Context(), &portcullisv1.ListProposalsRequest{}); err != nil {
		t.Fatalf("the advisor relay after the failover: %v", err)
	}
}

// A replica whose view is behind (here a copy of the store restored from
// before the latest version) cannot make a proxy regress: the proxy
// refuses the older version it offers (NACK, saying why) and keeps
// enforcing the newer one, whichever replica it started on.
func TestSubscriberNeverRegressesOnAnOlderReplica(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	old := gw.Copy() // holds version 1 only
	set, err := api.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(subscribePolicy, "read-only", "read-write", 1)})
	if err != nil {
		t.Fatal(err)
	}
	token := func() (string, error) { return created.GetToken(), nil }
	dir := t.TempDir()

	// The proxy applies version 2 from the current replica…
	first, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
		Gateway: gw.URL, Sandbox: "agent-1", Token: token, ProxyID: "p1", DataDir: dir, Logger: slog.New(slog.DiscardHandler),
	}, &proxy{})
	if err != nil {
		t.Fatal(err)
	}
	stop := runSubscriber(t, first, nil)
	waitApplied(t, first, set.GetVersion(), 10*time.Second)
	stop()

	// …then follows both, and the current one goes away: it ends on the
	// older replica either way.
	p := &proxy{}
	sub, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
		Gateways: []string{gw.URL, old.URL}, Sandbox: "agent-1", Token: token,
		ProxyID: "p1", DataDir: dir, MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	}, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Restore(); err != nil {
		t.Fatal(err)
	}
	runSubscriber(t, sub, nil)
	gw.Stop()
	s := newAdminAPI(old.URL).status(t, "p1", func(s *portcullisv1.ProxyStatus) bool { return s.GetLastNackVersion() == 1 })
	if !strings.Contains(s.GetLastNackError(), "older than the version held, 2") {
		t.Fatalf("status on the older replica: %v", s)
	}
	if sub.AppliedVersion() != set.GetVersion() || p.PolicyVersion() != fmt.Sprint(set.GetVersion()) {
		t.Fatalf("the proxy regressed: holds %d, enforces %q", sub.AppliedVersion(), p.PolicyVersion())
	}
}

// A gateway named by a host name is reached through the name's
// addresses (here localhost's), the TLS name and authority staying the
// name's.
func TestSubscriberResolvesAName(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logRecords{}
	sub, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
		Gateway: strings.Replace(gw.URL, "127.0.0.1", "localhost", 1), Sandbox: "agent-1", Token: func() (string, error) { return created.GetToken(), nil },
		ProxyID: "p1", DataDir: t.TempDir(), Logger: slog.New(logs),
	}, &proxy{})
	if err != nil {
		t.Fatal(err)
	}
	runSubscriber(t, sub, nil)
	waitApplied(t, sub, 1, 10*time.Second)
	open := logs.with("policy stream open")
	if len(open) == 0 || !strings.Contains(open[len(open)-1]["gateway"], "(127.0.0.1:") {
		t.Fatalf("streams opened: %v; want one to localhost's address", open)
	}
}
