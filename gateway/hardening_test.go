package gateway_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Shutdown ends open health Watch streams cleanly instead of waiting out
// the grace period and cutting them off.
func TestShutdownEndsWatchStreams(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watch, err := healthpb.NewHealthClient(conn).Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := watch.Recv(); err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch message = %v, %v", res, err)
	}
	gw.Stop()
	if _, err := watch.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("watch after shutdown: got %v, want a clean end (EOF), not a cut connection", err)
	}
}

func TestMetricsListenMustBeLoopback(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	srv, err := gateway.New(gateway.Config{Listen: "127.0.0.1:0", MetricsListen: "0.0.0.0:0", Logger: slog.New(slog.DiscardHandler)}, gw.Store)
	if err != nil {
		t.Fatal(err)
	}
	if ln, err := srv.Listen(); err == nil || !strings.Contains(err.Error(), "metrics") {
		if ln != nil {
			ln.Close()
		}
		t.Fatalf("non-loopback metrics without --insecure: got %v, want refused", err)
	}
}

// Malformed names are InvalidArgument with their field on every engine,
// before the store sees them.
func TestNamesValidatedOnEveryRequest(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			gw := gatewaytest.Start(t, engine)
			c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
			ctx := t.Context()
			for _, name := range []string{"a\x00b", strings.Repeat("a", 64), "", "Upper", "-lead"} {
				_, err := c.sandbox.GetSandbox(ctx, &portcullisv1.GetSandboxRequest{Name: name})
				if codeOf(err) != connect.CodeInvalidArgument || !contains(problemPaths(t, err), "name") {
					t.Errorf("GetSandbox(%q): got %v, want InvalidArgument on name", name, err)
				}
				_, err = c.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: name})
				if codeOf(err) != connect.CodeInvalidArgument || !contains(problemPaths(t, err), "sandbox") {
					t.Errorf("GetPolicy(%q): got %v, want InvalidArgument on sandbox", name, err)
				}
			}
			// A revoke does not say the role, so its name is refused when no
			// token of any role could have it: longer than a sentry token's
			// source (255 bytes; other tokens' names stop at 100), or
			// holding a space or a control character.
			for _, name := range []string{strings.Repeat("x", 256), "a b", "a\x00b", ""} {
				_, err := c.token.RevokeToken(ctx, &portcullisv1.RevokeTokenRequest{Name: name})
				if codeOf(err) != connect.CodeInvalidArgument || !contains(problemPaths(t, err), "name") {
					t.Errorf("RevokeToken(%q): got %v, want InvalidArgument on name", name, err)
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// A document with very many problems still gets a bounded answer that
// every client can read, on gRPC too.
func TestManyProblemsBounded(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	var doc strings.Builder
	doc.WriteString("version: 1\n")
	for i := range 150 {
		fmt.Fprintf(&doc, "unknown_%d_%s: 1\n", i, strings.Repeat("k", 2000))
	}
	for kind, newAPI := range clientKinds {
		c := newAPI(t, gw.URL, gatewaytest.AdminToken)
		_, err := c.policy.ValidatePolicy(t.Context(), &portcullisv1.ValidatePolicyRequest{Document: doc.String()})
		if err != nil {
			t.Fatalf("%s: validate: %v", kind, err)
		}
		_, err = c.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "many-" + strings.ReplaceAll(kind, "-", ""), Policy: doc.String()})
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("%s: create with 150 problems: got %v, want InvalidArgument", kind, err)
		}
		if paths := problemPaths(t, err); len(paths) == 0 || len(paths) > 101 {
			t.Fatalf("%s: %d problems in the detail, want 1..101", kind, len(paths))
		}
	}
}

func TestConsoleHeadersAndUnknownService(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	res, err := http.Get(gw.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	for _, h := range []string{"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options"} {
		if res.Header.Get(h) == "" {
			t.Errorf("console lacks %s", h)
		}
	}
	// The CSP allows no inline script, so the page must load its code.
	if code, body := get(t, gw.URL+"/", ""); code != http.StatusOK || strings.Contains(body, "<script>") || !strings.Contains(body, `src="app.js"`) {
		t.Errorf("console page has inline script or no app.js (status %d)", code)
	}
	if code, body := get(t, gw.URL+"/app.js", ""); code != http.StatusOK || !strings.Contains(body, "ListSandboxes") {
		t.Errorf("/app.js = %d", code)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Invoke(t.Context(), "/no.such.Service/Method", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{})
	if codeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("unknown service over gRPC: got %v, want Unimplemented", err)
	}
}
