package gateway_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/signing"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

const pushPolicy = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        access: read-only
`

// policyStream opens a StreamPolicy stream with token over stock grpc-go,
// as the proxy does.
func policyStream(t *testing.T, gw *gatewaytest.Gateway, token string) portcullisv1.DistributionService_StreamPolicyClient {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token))
	t.Cleanup(cancel)
	st, err := portcullisv1.NewDistributionServiceClient(conn).StreamPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func hello(sandbox, id string) *portcullisv1.StreamPolicyRequest {
	return &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{Hello: &portcullisv1.ProxyHello{Sandbox: sandbox, ProxyId: id, Build: "test"}}}
}

func ack(sp *portcullisv1.SignedPolicy) *portcullisv1.StreamPolicyRequest {
	return &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Ack{Ack: &portcullisv1.PolicyAck{Nonce: sp.Nonce, Version: sp.Version, Hash: sp.Hash}}}
}

func recvPolicy(t *testing.T, st portcullisv1.DistributionService_StreamPolicyClient) *portcullisv1.SignedPolicy {
	t.Helper()
	for {
		res, err := st.Recv()
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if sp := res.GetPolicy(); sp != nil {
			return sp
		}
	}
}

// waitProxy polls ListProxies until ok accepts the proxy's status.
func waitProxy(t *testing.T, c api, gw *gatewaytest.Gateway, sandbox, id string, ok func(*portcullisv1.ProxyStatus) bool) *portcullisv1.ProxyStatus {
	t.Helper()
	pc := newProxyClient(gw.URL, gatewaytest.AdminToken)
	deadline := time.Now().Add(10 * time.Second)
	var last *portcullisv1.ProxyStatus
	for time.Now().Before(deadline) {
		res, err := pc.ListProxies(context.Background(), &portcullisv1.ListProxiesRequest{Sandbox: sandbox})
		if err != nil {
			t.Fatalf("ListProxies: %v", err)
		}
		for _, p := range res.Proxies {
			if p.ProxyId == id {
				last = p
				if ok(p) {
					return p
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("proxy %s/%s never reached the expected status; last: %v", sandbox, id, last)
	return nil
}

func TestPolicyPush(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			gw := gatewaytest.Start(t, engine)
			c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
			ctx := context.Background()
			created, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy})
			if err != nil {
				t.Fatal(err)
			}

			st := policyStream(t, gw, created.Token)
			if err := st.Send(hello("agent-1", "p1")); err != nil {
				t.Fatal(err)
			}
			v1 := recvPolicy(t, st)
			if v1.Version != 1 || v1.Sandbox != "agent-1" || v1.Hash != created.PolicyVersion.Hash {
				t.Fatalf("first version %d %q %s, want 1 agent-1 %s", v1.Version, v1.Sandbox, v1.Hash, created.PolicyVersion.Hash)
			}
			if len(v1.Keys) == 0 || v1.Ca == nil || len(v1.Ca.CertPem) == 0 || len(v1.Ca.KeyPem) == 0 {
				t.Fatal("the first version came without the key chain or the sandbox CA")
			}
			key := ed25519.PublicKey(v1.Keys[len(v1.Keys)-1].PublicKey)
			if err := signing.VerifyPolicy(v1, key); err != nil {
				t.Fatalf("signature: %v", err)
			}
			if err := st.Send(ack(v1)); err != nil {
				t.Fatal(err)
			}
			waitProxy(t, c, gw, "agent-1", "p1", func(p *portcullisv1.ProxyStatus) bool { return p.Connected && p.AppliedVersion == 1 })

			set, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(pushPolicy, "read-only", "read-write", 1)})
			if err != nil {
				t.Fatal(err)
			}
			v2 := recvPolicy(t, st)
			if v2.Version != 2 || v2.Hash != set.Hash {
				t.Fatalf("pushed version %d %s, want 2 %s", v2.Version, v2.Hash, set.Hash)
			}
			if v2.Ca != nil || len(v2.Keys) != 0 {
				t.Fatal("the CA or the unchanged key chain was sent again")
			}
			if err := signing.VerifyPolicy(v2, key); err != nil {
				t.Fatalf("signature: %v", err)
			}
			if err := st.Send(ack(v2)); err != nil {
				t.Fatal(err)
			}
			got := waitProxy(t, c, gw, "agent-1", "p1", func(p *portcullisv1.ProxyStatus) bool { return p.AppliedVersion == 2 })
			if got.AppliedHash != set.Hash || got.CurrentVersion != 2 || got.LagMs > 60_000 || got.Build != "test" {
				t.Fatalf("status %v", got)
			}

			// The push is visible in /metrics.
			_, metrics := get(t, gw.URL+"/metrics", gatewaytest.AdminToken)
			for _, want := range []string{"portcullis_push_ack_seconds_count 2", "portcullis_proxies_connected 1"} {
				if !strings.Contains(metrics, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}

			// A NACK shows with its error; the applied version stays.
			if _, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(pushPolicy, "443", "8443", 1)}); err != nil {
				t.Fatal(err)
			}
			v3 := recvPolicy(t, st)
			nack := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Nack{Nack: &portcullisv1.PolicyNack{Nonce: v3.Nonce, Version: v3.Version, Hash: v3.Hash, Error: "cannot compile: too new"}}}
			if err := st.Send(nack); err != nil {
				t.Fatal(err)
			}
			got = waitProxy(t, c, gw, "agent-1", "p1", func(p *portcullisv1.ProxyStatus) bool { return p.LastNackVersion == 3 })
			if _, metrics := get(t, gw.URL+"/metrics", gatewaytest.AdminToken); !strings.Contains(metrics, "portcullis_push_nacks_total 1") {
				t.Error("/metrics does not count the NACK")
			}
			if got.LastNackError != "cannot compile: too new" || got.AppliedVersion != 2 || got.CurrentVersion != 3 {
				t.Fatalf("status after NACK %v", got)
			}

			// Closing the stream marks the proxy disconnected.
			st.CloseSend()
			waitProxy(t, c, gw, "agent-1", "p1", func(p *portcullisv1.ProxyStatus) bool { return !p.Connected })
		})
	}
}

// A slow proxy gets the newest version, not every one in between, and
// holds up neither the commits nor the other proxies.
func TestPolicyPushLatestWins(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	ctx := context.Background()
	// Versions large enough (~40 KB) that a few fill the flow-control
	// windows of a proxy that does not read.
	var big strings.Builder
	big.WriteString(pushPolicy)
	for i := range 400 {
		fmt.Fprintf(&big, "      - host: h%d.example.com\n        port: 443\n        protocol: rest\n        access: read-only\n", i)
	}
	bigPolicy := big.String()
	created, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: bigPolicy})
	if err != nil {
		t.Fatal(err)
	}
	slow := policyStream(t, gw, created.Token)
	slow.Send(hello("agent-1", "slow"))
	fast := policyStream(t, gw, created.Token)
	fast.Send(hello("agent-1", "fast"))
	if v := recvPolicy(t, fast); v.Version != 1 {
		t.Fatalf("fast got %d", v.Version)
	}
	const commits = 20
	for i := range commits {
		doc := strings.Replace(bigPolicy, "443", fmt.Sprint(1000+i), 1)
		if _, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: doc}); err != nil {
			t.Fatal(err)
		}
		// The fast proxy keeps up with every commit.
		if v := recvPolicy(t, fast); v.Version != uint32(i+2) {
			t.Fatalf("fast proxy got version %d, want %d", v.Version, i+2)
		}
	}
	// The slow one now reads: what it gets ends at the newest version,
	// having skipped most in between.
	var got []uint32
	for {
		v := recvPolicy(t, slow)
		got = append(got, v.Version)
		if v.Version == commits+1 {
			break
		}
	}
	if len(got) >= commits {
		t.Fatalf("the slow proxy was sent %d versions (%v); latest-wins should skip most", len(got), got)
	}
}

func TestPolicyStreamRefusals(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	ctx := context.Background()
	a, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "agent-2", Policy: pushPolicy}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		token string
		first *portcullisv1.StreamPolicyRequest
		want  connect.Code
	}{
		{"another sandbox", a.Token, hello("agent-2", "p1"), connect.CodePermissionDenied},
		{"admin token", gatewaytest.AdminToken, hello("agent-1", "p1"), connect.CodePermissionDenied},
		{"no token", "", hello("agent-1", "p1"), connect.CodeUnauthenticated},
		{"ack first", a.Token, &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Ack{Ack: &portcullisv1.PolicyAck{Nonce: "x"}}}, connect.CodeInvalidArgument},
		{"bad proxy id", a.Token, hello("agent-1", "p 1/.."), connect.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := policyStream(t, gw, tc.token)
			st.Send(tc.first)
			_, err := st.Recv()
			if got := codeOf(err); got != tc.want {
				t.Fatalf("code %v (%v), want %v", got, err, tc.want)
			}
		})
	}
	// None of them left a proxy status behind.
	res, err := newProxyClient(gw.URL, gatewaytest.AdminToken).ListProxies(ctx, &portcullisv1.ListProxiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Proxies) != 0 {
		t.Fatalf("refused streams left statuses: %v", res.Proxies)
	}
}

// Shipped decisions are stored for the token's sandbox whatever the
// records say; a tail resumes after a given id; listing proxies of an
// unknown sandbox is NotFound.
func TestDecisionShippingAndTail(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	ctx := context.Background()
	created, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+created.Token)
	ship, err := portcullisv1.NewDistributionServiceClient(conn).ShipDecisions(sctx)
	if err != nil {
		t.Fatal(err)
	}
	var records []*portcullisv1.DecisionRecord
	for i, path := range []string{"/a", "/b", "/c"} {
		records = append(records, &portcullisv1.DecisionRecord{
			Time: timestamppb.Now(), Sandbox: "someone-else", Decision: "deny", Host: "api.example.com", Port: 443,
			HttpMethod: "GET", Path: path, DenialId: fmt.Sprintf("dn_%d", i), PolicyVersion: "1",
		})
	}
	if err := ship.Send(&portcullisv1.ShipDecisionsRequest{ProxyId: "p1", Records: records}); err != nil {
		t.Fatal(err)
	}
	res, err := ship.CloseAndRecv()
	if err != nil || res.Stored != 3 {
		t.Fatalf("shipped: %v, %v", res, err)
	}

	dc := portcullisv1connect.NewDecisionServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	list, err := dc.ListDecisions(ctx, &portcullisv1.ListDecisionsRequest{Sandbox: "agent-1"})
	if err != nil || len(list.Decisions) != 3 {
		t.Fatalf("list: %v, %v", list, err)
	}
	for _, d := range list.Decisions {
		if d.Record.Sandbox != "agent-1" || d.Record.ProxyId != "p1" {
			t.Fatalf("stored record %v: the sandbox and proxy must be the token's", d.Record)
		}
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tail, err := dc.TailDecisions(tctx, &portcullisv1.TailDecisionsRequest{Sandbox: "agent-1", AfterId: list.Decisions[0].Id})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/b", "/c"} {
		d, err := tail.Receive()
		if err != nil || d.Record.Path != want {
			t.Fatalf("tail after the first record: %v, %v; want %s", d, err, want)
		}
	}
	tail.Close()

	pc := newProxyClient(gw.URL, gatewaytest.AdminToken)
	if _, err := pc.ListProxies(ctx, &portcullisv1.ListProxiesRequest{Sandbox: "nope"}); codeOf(err) != connect.CodeNotFound {
		t.Fatalf("proxies of an unknown sandbox: %v", err)
	}
	// A bad record is refused with its field, and nothing of its batch stored.
	ship, _ = portcullisv1.NewDistributionServiceClient(conn).ShipDecisions(sctx)
	ship.Send(&portcullisv1.ShipDecisionsRequest{ProxyId: "p1", Records: []*portcullisv1.DecisionRecord{
		{Time: timestamppb.Now(), Decision: "allow", Host: "x"},
		{Time: timestamppb.Now(), Decision: "maybe", Host: "x"},
	}})
	if _, err := ship.CloseAndRecv(); codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "records[1].decision") {
		t.Fatalf("bad record: %v", err)
	}
	list, _ = dc.ListDecisions(ctx, &portcullisv1.ListDecisionsRequest{Sandbox: "agent-1"})
	if len(list.Decisions) != 3 {
		t.Fatalf("%d records after a refused batch, want 3", len(list.Decisions))
	}
}

// A proxy that says hello and then nothing (no heartbeats) loses its
// stream after the idle timeout, though its connection stays up.
func TestSilentProxyStreamEnds(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite", func(c *gateway.Config) { c.StreamIdleTimeout = 300 * time.Millisecond })
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	created, err := c.sandbox.CreateSandbox(context.Background(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}
	st := policyStream(t, gw, created.Token)
	if err := st.Send(hello("agent-1", "quiet")); err != nil {
		t.Fatal(err)
	}
	recvPolicy(t, st)
	start := time.Now()
	for {
		_, err := st.Recv()
		if err == nil {
			continue
		}
		if codeOf(err) != connect.CodeDeadlineExceeded {
			t.Fatalf("a silent stream ended with %v, want DeadlineExceeded", err)
		}
		break
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the silent stream lasted %v", d)
	}
	waitProxy(t, c, gw, "agent-1", "quiet", func(p *portcullisv1.ProxyStatus) bool { return !p.Connected })
}
