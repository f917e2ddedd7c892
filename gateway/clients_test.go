package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// api is what the suite calls: the Connect client interfaces. A stock
// grpc-go client is adapted to the same interfaces below, so one suite
// proves both kinds of client.
type api struct {
	sandbox portcullisv1connect.SandboxServiceClient
	token   portcullisv1connect.TokenServiceClient
	policy  portcullisv1connect.PolicyServiceClient
}

// clientKinds builds an api for a gateway URL and bearer token.
var clientKinds = map[string]func(t testing.TB, baseURL, token string) api{
	"connect":  newConnectAPI,
	"grpc-web": newGRPCWebAPI,
	"grpc":     newGRPCAPI,
}

func newConnectAPI(t testing.TB, baseURL, token string) api {
	return newConnectTransportAPI(baseURL, token)
}

// newGRPCWebAPI speaks gRPC-Web over HTTP/1.1, as a browser would.
func newGRPCWebAPI(t testing.TB, baseURL, token string) api {
	return newConnectTransportAPI(baseURL, token, connecthttp.WithGRPCWeb())
}

func newConnectTransportAPI(baseURL, token string, opts ...connecthttp.Option) api {
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL, opts...), gatewaytest.Bearer(token))
	return api{
		sandbox: portcullisv1connect.NewSandboxServiceClient(c),
		token:   portcullisv1connect.NewTokenServiceClient(c),
		policy:  portcullisv1connect.NewPolicyServiceClient(c),
	}
}

func newGRPCAPI(t testing.TB, baseURL, token string) api {
	t.Helper()
	bearer := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(baseURL, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(bearer))
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return api{
		sandbox: grpcSandbox{portcullisv1.NewSandboxServiceClient(conn)},
		token:   grpcToken{portcullisv1.NewTokenServiceClient(conn)},
		policy:  grpcPolicy{portcullisv1.NewPolicyServiceClient(conn)},
	}
}

// codeOf reads the status code of an error from either kind of client.
// Connect and gRPC share the numbering.
func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	if s, ok := status.FromError(err); ok {
		return connect.Code(s.Code())
	}
	return connect.CodeUnknown
}

type grpcSandbox struct {
	c portcullisv1.SandboxServiceClient
}

func (g grpcSandbox) CreateSandbox(ctx context.Context, r *portcullisv1.CreateSandboxRequest) (*portcullisv1.CreateSandboxResponse, error) {
	return g.c.CreateSandbox(ctx, r)
}
func (g grpcSandbox) GetSandbox(ctx context.Context, r *portcullisv1.GetSandboxRequest) (*portcullisv1.Sandbox, error) {
	return g.c.GetSandbox(ctx, r)
}
func (g grpcSandbox) ListSandboxes(ctx context.Context, r *portcullisv1.ListSandboxesRequest) (*portcullisv1.ListSandboxesResponse, error) {
	return g.c.ListSandboxes(ctx, r)
}
func (g grpcSandbox) DeleteSandbox(ctx context.Context, r *portcullisv1.DeleteSandboxRequest) (*portcullisv1.DeleteSandboxResponse, error) {
	return g.c.DeleteSandbox(ctx, r)
}
func (g grpcSandbox) RotateSandboxToken(ctx context.Context, r *portcullisv1.RotateSandboxTokenRequest) (*portcullisv1.RotateSandboxTokenResponse, error) {
	return g.c.RotateSandboxToken(ctx, r)
}
func (g grpcSandbox) GetSandboxCA(ctx context.Context, r *portcullisv1.GetSandboxCARequest) (*portcullisv1.GetSandboxCAResponse, error) {
	return g.c.GetSandboxCA(ctx, r)
}
func (g grpcSandbox) SetSandboxBoundary(ctx context.Context, r *portcullisv1.SetSandboxBoundaryRequest) (*portcullisv1.Sandbox, error) {
	return g.c.SetSandboxBoundary(ctx, r)
}
func (g grpcSandbox) AttachProvider(ctx context.Context, r *portcullisv1.AttachProviderRequest) (*portcullisv1.Sandbox, error) {
	return g.c.AttachProvider(ctx, r)
}
func (g grpcSandbox) DetachProvider(ctx context.Context, r *portcullisv1.DetachProviderRequest) (*portcullisv1.Sandbox, error) {
	return g.c.DetachProvider(ctx, r)
}
func (g grpcSandbox) SetCredentialedHosts(ctx context.Context, r *portcullisv1.SetCredentialedHostsRequest) (*portcullisv1.Sandbox, error) {
	return g.c.SetCredentialedHosts(ctx, r)
}
func (g grpcSandbox) FreezeSandbox(ctx context.Context, r *portcullisv1.FreezeSandboxRequest) (*portcullisv1.Sandbox, error) {
	return g.c.FreezeSandbox(ctx, r)
}
func (g grpcSandbox) UnfreezeSandbox(ctx context.Context, r *portcullisv1.UnfreezeSandboxRequest) (*portcullisv1.Sandbox, error) {
	return g.c.UnfreezeSandbox(ctx, r)
}
func (g grpcSandbox) ListTools(ctx context.Context, r *portcullisv1.ListToolsRequest) (*portcullisv1.ListToolsResponse, error) {
	return g.c.ListTools(ctx, r)
}

type grpcToken struct {
	c portcullisv1.TokenServiceClient
}

func (g grpcToken) CreateToken(ctx context.Context, r *portcullisv1.CreateTokenRequest) (*portcullisv1.CreateTokenResponse, error) {
	return g.c.CreateToken(ctx, r)
}
func (g grpcToken) ListTokens(ctx context.Context, r *portcullisv1.ListTokensRequest) (*portcullisv1.ListTokensResponse, error) {
	return g.c.ListTokens(ctx, r)
}
func (g grpcToken) RevokeToken(ctx context.Context, r *portcullisv1.RevokeTokenRequest) (*portcullisv1.RevokeTokenResponse, error) {
	return g.c.RevokeToken(ctx, r)
}

type grpcPolicy struct {
	c portcullisv1.PolicyServiceClient
}

func (g grpcPolicy) SetPolicy(ctx context.Context, r *portcullisv1.SetPolicyRequest) (*portcullisv1.PolicyVersion, error) {
	return g.c.SetPolicy(ctx, r)
}
func (g grpcPolicy) GetPolicy(ctx context.Context, r *portcullisv1.GetPolicyRequest) (*portcullisv1.PolicyVersion, error) {
	return g.c.GetPolicy(ctx, r)
}
func (g grpcPolicy) ListPolicyVersions(ctx context.Context, r *portcullisv1.ListPolicyVersionsRequest) (*portcullisv1.ListPolicyVersionsResponse, error) {
	return g.c.ListPolicyVersions(ctx, r)
}
func (g grpcPolicy) DiffPolicy(ctx context.Context, r *portcullisv1.DiffPolicyRequest) (*portcullisv1.DiffPolicyResponse, error) {
	return g.c.DiffPolicy(ctx, r)
}
func (g grpcPolicy) RollbackPolicy(ctx context.Context, r *portcullisv1.RollbackPolicyRequest) (*portcullisv1.PolicyVersion, error) {
	return g.c.RollbackPolicy(ctx, r)
}
func (g grpcPolicy) ValidatePolicy(ctx context.Context, r *portcullisv1.ValidatePolicyRequest) (*portcullisv1.ValidatePolicyResponse, error) {
	return g.c.ValidatePolicy(ctx, r)
}

func newProxyClient(baseURL, token string) portcullisv1connect.ProxyServiceClient {
	return portcullisv1connect.NewProxyServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL), gatewaytest.Bearer(token)))
}
