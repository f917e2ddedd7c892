package gateway_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// routed reads how many connections the gateway gave each server.
func routed(t *testing.T, gw *gatewaytest.Gateway) (grpcConns, httpConns int) {
	t.Helper()
	_, body := get(t, gw.URL+"/metrics", gatewaytest.AdminToken)
	count := func(server string) int {
		m := regexp.MustCompile(`(?m)^portcullis_connections_total\{server="` + server + `"\} (\d+)$`).FindStringSubmatch(body)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return count("grpc"), count("http")
}

// A stock gRPC client's policy stream and decision shipping are served by
// the grpc-go server, with the authorization Connect applies; other
// first calls, Connect's protocol and HTTP/1.1 go to net/http.
func TestDistributionOnGRPCServer(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	ctx := t.Context()
	admin := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	a, err := admin.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "agent-2", Policy: pushPolicy}); err != nil {
		t.Fatal(err)
	}
	op, err := admin.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "olive", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := admin.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "gone", Role: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.token.RevokeToken(ctx, &portcullisv1.RevokeTokenRequest{Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	watchdog, err := admin.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "sentry/node-17", Role: "sentry"})
	if err != nil {
		t.Fatal(err)
	}
	grpcBefore, _ := routed(t, gw)

	// A good stream first: it is let through and gets the policy.
	st := policyStream(t, gw, a.Token)
	if err := st.Send(hello("agent-1", "p1")); err != nil {
		t.Fatal(err)
	}
	if sp := recvPolicy(t, st); sp.Sandbox != "agent-1" || sp.Version != 1 {
		t.Fatalf("got %v", sp)
	}

	refusals := []struct {
		name  string
		token string
		hello *portcullisv1.StreamPolicyRequest
		want  connect.Code
	}{
		{"no token", "", hello("agent-1", "p1"), connect.CodeUnauthenticated},
		{"bad token", "pcs_not-a-token", hello("agent-1", "p1"), connect.CodeUnauthenticated},
		{"revoked token", gone.Token, hello("agent-1", "p1"), connect.CodeUnauthenticated},
		{"operator token", op.Token, hello("agent-1", "p1"), connect.CodePermissionDenied},
		{"admin token", gatewaytest.AdminToken, hello("agent-1", "p1"), connect.CodePermissionDenied},
		{"sentry token", watchdog.Token, hello("agent-1", "p1"), connect.CodePermissionDenied},
		{"another sandbox's hello", a.Token, hello("agent-2", "p1"), connect.CodePermissionDenied},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			st := policyStream(t, gw, tc.token)
			st.Send(tc.hello)
			if _, err := st.Recv(); codeOf(err) != tc.want {
				t.Fatalf("code %v (%v), want %v", codeOf(err), err, tc.want)
			}
		})
	}

	// Decision shipping: refused to an operator, stored for the sandbox.
	for token, want := range map[string]connect.Code{op.Token: connect.CodePermissionDenied, a.Token: 0} {
		conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		ship, err := portcullisv1.NewDistributionServiceClient(conn).ShipDecisions(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token))
		if err != nil {
			t.Fatal(err)
		}
		ship.Send(&portcullisv1.ShipDecisionsRequest{ProxyId: "p1"})
		if _, err := ship.CloseAndRecv(); codeOf(err) != want {
			t.Errorf("ShipDecisions: code %v (%v), want %v", codeOf(err), err, want)
		}
		// Later calls on the connection may only be to DistributionService.
		_, err = portcullisv1.NewPolicyServiceClient(conn).GetPolicy(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), &portcullisv1.GetPolicyRequest{Sandbox: "agent-1"})
		if codeOf(err) != connect.CodeUnimplemented {
			t.Errorf("GetPolicy on a policy connection: %v, want Unimplemented", err)
		}
		conn.Close()
	}

	grpcAfter, _ := routed(t, gw)
	if want := 1 + len(refusals) + 2; grpcAfter-grpcBefore != want {
		t.Errorf("%d connections went to grpc-go, want %d", grpcAfter-grpcBefore, want)
	}

	// A gRPC client whose first call is another service's stays on
	// net/http (and Connect on it), for every service.
	grpcBefore, httpBefore := routed(t, gw)
	g := newGRPCAPI(t, gw.URL, gatewaytest.AdminToken)
	if _, err := g.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "agent-1"}); err != nil {
		t.Fatal(err)
	}
	grpcAfter, httpAfter := routed(t, gw)
	if grpcAfter != grpcBefore || httpAfter <= httpBefore {
		t.Errorf("a GetPolicy connection: grpc %d→%d, http %d→%d", grpcBefore, grpcAfter, httpBefore, httpAfter)
	}
}

// At shutdown every policy stream is told to go away, and the gateway
// stops once the proxies have ended their streams.
func TestShutdownSendsGoaway(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite", func(c *gateway.Config) { c.ShutdownTimeout = 10 * time.Second })
	admin := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	a, err := admin.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}
	st := policyStream(t, gw, a.Token)
	if err := st.Send(hello("agent-1", "p1")); err != nil {
		t.Fatal(err)
	}
	recvPolicy(t, st)
	stopped := make(chan struct{})
	go func() {
		gw.Stop()
		close(stopped)
	}()
	for {
		res, err := st.Recv()
		if err != nil {
			t.Fatalf("the stream ended without a goaway: %v", err)
		}
		if res.GetGoaway() != nil {
			break
		}
	}
	start := time.Now()
	st.CloseSend()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the gateway did not stop after the proxy went away")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stopping took %v", d)
	}
}
