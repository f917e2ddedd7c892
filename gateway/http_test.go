package gateway_test

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/grpcreflect/v2"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

func TestHTTPEndpoints(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	if code, _ := get(t, gw.URL+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code, _ := get(t, gw.URL+"/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz = %d, want 200", code)
	}
	if code, _ := get(t, gw.URL+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token = %d, want 401", code)
	}
	// One RPC so the counter has a sample.
	if _, err := newConnectAPI(t, gw.URL, "").sandbox.ListSandboxes(t.Context(), &portcullisv1.ListSandboxesRequest{}); codeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("list without a token: %v", err)
	}
	code, body := get(t, gw.URL+"/metrics", gatewaytest.AdminToken)
	if code != http.StatusOK || !strings.Contains(body, `portcullis_rpc_requests_total{code="unauthenticated",procedure="/portcullis.v1.SandboxService/ListSandboxes"} 1`) {
		t.Errorf("/metrics with a token = %d, missing portcullis_rpc_requests_total", code)
	}
	if code, body := get(t, gw.URL+"/", ""); code != http.StatusOK || !strings.Contains(body, "Portcullis") {
		t.Errorf("console / = %d", code)
	}

	// The store going away makes the gateway unready, and RPCs fail with
	// a generic Internal error that leaks no database detail.
	gw.Store.Close()
	if code, _ := get(t, gw.URL+"/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with a closed store = %d, want 503", code)
	}
	_, err := newConnectAPI(t, gw.URL, gatewaytest.AdminToken).sandbox.ListSandboxes(t.Context(), &portcullisv1.ListSandboxesRequest{})
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInternal || ce.Message() != "internal error" {
		t.Errorf("RPC with a closed store: got %v, want Internal with the generic message", err)
	}
}

func TestReflectionListsServices(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	client := grpcreflect.NewClient(connect.NewClient(connecthttp.NewTransport(h2cClient(), gw.URL, connecthttp.WithGRPC())))
	stream := client.NewStream(t.Context())
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		t.Fatalf("reflection without a token: %v", err)
	}
	for _, want := range []protoreflect.FullName{"portcullis.v1.PolicyService", "portcullis.v1.SandboxService", "portcullis.v1.TokenService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, missing %s", names, want)
		}
	}
}

// h2cClient speaks HTTP/2 without TLS, as gRPC tools do.
func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}
