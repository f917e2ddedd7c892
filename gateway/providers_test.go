package gateway_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/secretbox"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

// The distinctive secrets of the test: no answer, log line or audit
// entry may ever hold them.
const (
	leakSecret   = "SECRET-a7f3e9c1-never-shown"
	leakRotated  = "SECRET-rotated-5b2d8f04-never-shown"
	leakRejected = "SECRET-rejected-0c9e4a17-never-shown"
)

// lockedBuffer is a log sink safe for the gateway's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startWithKey runs a gateway with a secrets key, its logs (at debug)
// captured.
func startWithKey(t *testing.T) (*gatewaytest.Gateway, *lockedBuffer) {
	t.Helper()
	key, err := secretbox.Generate(filepath.Join(t.TempDir(), "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	gw := gatewaytest.Start(t, "sqlite", func(c *gateway.Config) {
		c.SecretsKey = key
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	return gw, logs
}

func providerClient(baseURL, token string, opts ...connecthttp.Option) portcullisv1connect.ProviderServiceClient {
	return portcullisv1connect.NewProviderServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL, opts...), gatewaytest.Bearer(token)))
}

// noSecret fails when msg, as protojson or as bytes, holds a secret.
func noSecret(t *testing.T, what string, msg proto.Message) {
	t.Helper()
	j, err := protojson.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{leakSecret, leakRotated, leakRejected} {
		if bytes.Contains(j, []byte(s)) || bytes.Contains(b, []byte(s)) {
			t.Errorf("%s holds a secret: %s", what, j)
		}
	}
}

// TestProviderSecretsNeverLeave: every answer about providers, the
// gateway's logs and the audit log hold no secret's value.
func TestProviderSecretsNeverLeave(t *testing.T) {
	gw, logs := startWithKey(t)
	ctx := t.Context()
	admin := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	mustCreateSandbox(t, admin, "box")
	op, err := admin.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "olive", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	provAdmin, provOp := providerClient(gw.URL, gatewaytest.AdminToken), providerClient(gw.URL, op.GetToken())
	opSandbox := newConnectAPI(t, gw.URL, op.GetToken()).sandbox

	// Refused: the problems name fields, never the value.
	_, err = provAdmin.CreateProvider(ctx, &portcullisv1.CreateProviderRequest{
		Name: "gh", Type: "bearer", Hosts: []string{"api.github.com"},
		Secret: map[string][]byte{leakRejected: []byte("x"), "token": []byte(leakRejected + "\n")},
	})
	if codeOf(err) != connect.CodeInvalidArgument || !slices.Equal(problemPaths(t, err), []string{"secret", "secret.token"}) ||
		!strings.Contains(err.Error(), "it takes: token") || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("CreateProvider(invalid) = %v (problems at %q)", err, problemPaths(t, err))
	}
	created, err := provAdmin.CreateProvider(ctx, &portcullisv1.CreateProviderRequest{
		Name: "gh", Type: "bearer", Hosts: []string{"api.github.com"}, Secret: map[string][]byte{"token": []byte(leakSecret)},
	})
	if err != nil || created.GetRevision() != 1 || !slices.Equal(created.GetSecretFields(), []string{"token"}) {
		t.Fatalf("CreateProvider = %v, %v", created, err)
	}
	if _, err := provAdmin.CreateProvider(ctx, &portcullisv1.CreateProviderRequest{
		Name: "gh", Type: "bearer", Hosts: []string{"api.github.com"}, Secret: map[string][]byte{"token": []byte(leakSecret)},
	}); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("CreateProvider of a taken name = %v", err)
	}
	attached, err := admin.sandbox.AttachProvider(ctx, &portcullisv1.AttachProviderRequest{Sandbox: "box", Provider: "gh"})
	if err != nil || !slices.Equal(attached.GetProviders(), []string{"gh"}) || attached.GetCredentialsGeneration() != 1 {
		t.Fatalf("AttachProvider = %v, %v", attached, err)
	}
	if _, err := provAdmin.RotateProvider(ctx, &portcullisv1.RotateProviderRequest{
		Name: "gh", Secret: map[string][]byte{"token": []byte(leakRotated)}, ExpectRevision: 5,
	}); codeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("RotateProvider at a stale revision = %v", err)
	}
	// A secret read as a field's name (FIELD=VALUE split at base64
	// padding) is counted, never echoed.
	if _, err := provAdmin.RotateProvider(ctx, &portcullisv1.RotateProviderRequest{
		Name: "gh", Secret: map[string][]byte{"token": []byte("t0ken-value"), leakRejected: []byte("==")},
	}); codeOf(err) != connect.CodeInvalidArgument || !slices.Equal(problemPaths(t, err), []string{"secret"}) || strings.Contains(err.Error(), "SECRET") {
		t.Errorf("RotateProvider(a field named by a secret) = %v (problems at %q)", err, problemPaths(t, err))
	}
	rotated, err := provAdmin.RotateProvider(ctx, &portcullisv1.RotateProviderRequest{
		Name: "gh", Secret: map[string][]byte{"token": []byte(leakRotated)}, ExpectRevision: 1,
	})
	if err != nil || rotated.GetRevision() != 2 || !slices.Equal(rotated.GetSandboxes(), []string{"box"}) || rotated.GetRotatedAt() == nil {
		t.Fatalf("RotateProvider = %v, %v", rotated, err)
	}
	if _, err := provAdmin.DeleteProvider(ctx, &portcullisv1.DeleteProviderRequest{Name: "gh"}); codeOf(err) != connect.CodeFailedPrecondition ||
		!strings.Contains(err.Error(), "box") {
		t.Errorf("DeleteProvider of an attached provider = %v", err)
	}
	answers := map[string]proto.Message{"create": created, "attach": attached, "rotate": rotated}
	for _, who := range []struct {
		name string
		prov portcullisv1connect.ProviderServiceClient
		sb   portcullisv1connect.SandboxServiceClient
	}{{"admin", provAdmin, admin.sandbox}, {"operator", provOp, opSandbox}} {
		got, err := who.prov.GetProvider(ctx, &portcullisv1.GetProviderRequest{Name: "gh"})
		if err != nil || got.GetRevision() != 2 || got.GetType() != "bearer" {
			t.Fatalf("GetProvider as %s = %v, %v", who.name, got, err)
		}
		list, err := who.prov.ListProviders(ctx, &portcullisv1.ListProvidersRequest{})
		if err != nil || len(list.GetProviders()) != 1 {
			t.Fatalf("ListProviders as %s = %v, %v", who.name, list, err)
		}
		sb, err := who.sb.GetSandbox(ctx, &portcullisv1.GetSandboxRequest{Name: "box"})
		if err != nil || !slices.Equal(sb.GetProviders(), []string{"gh"}) || sb.GetCredentialsGeneration() != 2 {
			t.Fatalf("GetSandbox as %s = %v, %v", who.name, sb, err)
		}
		sbs, err := who.sb.ListSandboxes(ctx, &portcullisv1.ListSandboxesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		answers["get as "+who.name], answers["list as "+who.name] = got, list
		answers["sandbox as "+who.name], answers["sandboxes as "+who.name] = sb, sbs
	}
	if _, err := provOp.CreateProvider(ctx, &portcullisv1.CreateProviderRequest{Name: "x"}); codeOf(err) != connect.CodePermissionDenied {
		t.Errorf("CreateProvider as an operator = %v", err)
	}
	if _, err := provAdmin.GetProvider(ctx, &portcullisv1.GetProviderRequest{Name: "nope"}); codeOf(err) != connect.CodeNotFound {
		t.Errorf("GetProvider(nope) = %v", err)
	}
	detached, err := admin.sandbox.DetachProvider(ctx, &portcullisv1.DetachProviderRequest{Sandbox: "box", Provider: "gh"})
	if err != nil || len(detached.GetProviders()) != 0 || detached.GetCredentialsGeneration() != 3 {
		t.Fatalf("DetachProvider = %v, %v", detached, err)
	}
	if _, err := admin.sandbox.DetachProvider(ctx, &portcullisv1.DetachProviderRequest{Sandbox: "box", Provider: "gh"}); codeOf(err) != connect.CodeNotFound {
		t.Errorf("DetachProvider again = %v", err)
	}
	deleted, err := provAdmin.DeleteProvider(ctx, &portcullisv1.DeleteProviderRequest{Name: "gh"})
	if err != nil {
		t.Fatalf("DeleteProvider = %v", err)
	}
	answers["detach"], answers["delete"] = detached, deleted
	audit, err := newAuditClient(gw.URL, gatewaytest.AdminToken).ListAudit(ctx, &portcullisv1.ListAuditRequest{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	answers["audit"] = audit
	for what, msg := range answers {
		noSecret(t, what, msg)
	}
	var actions []string
	for _, e := range audit.GetEntries() {
		if strings.Contains(e.GetAction(), "provider") {
			actions = append(actions, e.GetAction())
		}
	}
	slices.Reverse(actions)
	want := []string{store.ActionProviderCreate, store.ActionProviderAttach, store.ActionProviderRotate, store.ActionProviderDetach, store.ActionProviderDelete}
	if !slices.Equal(actions, want) {
		t.Errorf("audited %q, want %q", actions, want)
	}
	entries, err := gw.Store.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		for _, s := range []string{leakSecret, leakRotated, leakRejected} {
			if strings.Contains(e.Target+e.BeforeHash+e.AfterHash+strings.Join(slices.Sorted(mapValues(e.Detail)), " "), s) {
				t.Errorf("audit entry %d holds a secret", e.Seq)
			}
		}
	}
	out := logs.String()
	if !strings.Contains(out, "provider created") {
		t.Errorf("the captured logs miss the gateway's lines:\n%s", out)
	}
	for _, s := range []string{leakSecret, leakRotated, leakRejected} {
		if strings.Contains(out, s) {
			t.Errorf("the gateway logged a secret:\n%s", out)
		}
	}
}

func mapValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// TestProviderServiceProtocols: ProviderService answers Connect, gRPC-Web
// and a stock grpc-go client alike.
func TestProviderServiceProtocols(t *testing.T) {
	gw, _ := startWithKey(t)
	ctx := t.Context()
	create := func(c portcullisv1connect.ProviderServiceClient, name string) {
		t.Helper()
		if _, err := c.CreateProvider(ctx, &portcullisv1.CreateProviderRequest{
			Name: name, Type: "header", Hosts: []string{"*.example.com"}, Settings: map[string]string{"header": "X-Key"},
			Secret: map[string][]byte{"value": []byte(leakSecret)},
		}); err != nil {
			t.Fatalf("CreateProvider(%s): %v", name, err)
		}
	}
	create(providerClient(gw.URL, gatewaytest.AdminToken), "over_connect")
	create(providerClient(gw.URL, gatewaytest.AdminToken, connecthttp.WithGRPCWeb()), "over-grpc-web")
	bearer := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+gatewaytest.AdminToken), method, req, reply, cc, opts...)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUnaryInterceptor(bearer))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	g := portcullisv1.NewProviderServiceClient(conn)
	if _, err := g.CreateProvider(ctx, &portcullisv1.CreateProviderRequest{
		Name: "over-grpc", Type: "basic", Hosts: []string{"db.example.com:8443"}, Settings: map[string]string{"username": "svc"},
		Secret: map[string][]byte{"password": []byte(leakSecret)},
	}); err != nil {
		t.Fatalf("CreateProvider over grpc-go: %v", err)
	}
	list, err := g.ListProviders(ctx, &portcullisv1.ListProvidersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.GetProviders() {
		names = append(names, p.GetName())
	}
	if !slices.Equal(names, []string{"over-grpc", "over-grpc-web", "over_connect"}) {
		t.Errorf("ListProviders over grpc-go = %q", names)
	}
	noSecret(t, "ListProviders over grpc-go", list)
	got, err := providerClient(gw.URL, gatewaytest.AdminToken, connecthttp.WithGRPCWeb()).GetProvider(ctx, &portcullisv1.GetProviderRequest{Name: "over-grpc"})
	if err != nil || got.GetSettings()["username"] != "svc" || got.GetHosts()[0] != "db.example.com:8443" {
		t.Errorf("GetProvider over gRPC-Web = %v, %v", got, err)
	}
}

// TestProvidersWithoutKey: a gateway without a secrets key serves, and
// says which flag its provider writes need.
func TestProvidersWithoutKey(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite", func(c *gateway.Config) { c.SecretsKey = nil })
	_, err := providerClient(gw.URL, gatewaytest.AdminToken).CreateProvider(t.Context(), &portcullisv1.CreateProviderRequest{
		Name: "gh", Type: "bearer", Hosts: []string{"api.github.com"}, Secret: map[string][]byte{"token": []byte(leakSecret)},
	})
	if codeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Errorf("CreateProvider without a key = %v", err)
	}
}
