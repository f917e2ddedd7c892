package gateway_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Callers of the authorization matrix.
const (
	asAdmin    = "admin"
	asOperator = "operator"
	asOwn      = "own sandbox"   // sandbox token, request names its own sandbox
	asOther    = "other sandbox" // sandbox token, request names another sandbox
	asNone     = "no token"
	asRevoked  = "revoked token"
	// asSentry: a watchdog's token. It may only write its own source's
	// events (the intake's two rows) and reads nothing.
	asSentry = "sentry"
)

// allowedCallers is the expected authorization, written out by hand from
// DESIGN.md (not derived from the gateway's table, which it checks).
var allowedCallers = map[string][]string{
	"/portcullis.v1.SandboxService/CreateSandbox":      {asAdmin},
	"/portcullis.v1.SandboxService/GetSandbox":         {asAdmin, asOperator},
	"/portcullis.v1.SandboxService/ListSandboxes":      {asAdmin, asOperator},
	"/portcullis.v1.SandboxService/DeleteSandbox":      {asAdmin},
	"/portcullis.v1.SandboxService/RotateSandboxToken": {asAdmin},
	"/portcullis.v1.TokenService/CreateToken":          {asAdmin},
	"/portcullis.v1.TokenService/ListTokens":           {asAdmin},
	"/portcullis.v1.TokenService/RevokeToken":          {asAdmin},
	"/portcullis.v1.PolicyService/SetPolicy":           {asAdmin},
	"/portcullis.v1.PolicyService/RollbackPolicy":      {asAdmin},
	"/portcullis.v1.PolicyService/GetPolicy":           {asAdmin, asOperator, asOwn},
	"/portcullis.v1.PolicyService/ListPolicyVersions":  {asAdmin, asOperator, asOwn},
	"/portcullis.v1.PolicyService/DiffPolicy":          {asAdmin, asOperator, asOwn},
	// Validation stores nothing and reads nothing: any valid token.
	"/portcullis.v1.PolicyService/ValidatePolicy": {asAdmin, asOperator, asOwn, asOther},
	"/portcullis.v1.SandboxService/GetSandboxCA":  {asAdmin, asOperator},
	// What the prover checks proposals against is the operators' to say.
	"/portcullis.v1.SandboxService/SetSandboxBoundary":   {asAdmin},
	"/portcullis.v1.SandboxService/SetCredentialedHosts": {asAdmin},
	"/portcullis.v1.SandboxService/AttachProvider":       {asAdmin},
	"/portcullis.v1.SandboxService/DetachProvider":       {asAdmin},
	// Admins keep secrets; operators see what is kept, never a value.
	"/portcullis.v1.ProviderService/CreateProvider": {asAdmin},
	"/portcullis.v1.ProviderService/RotateProvider": {asAdmin},
	"/portcullis.v1.ProviderService/DeleteProvider": {asAdmin},
	"/portcullis.v1.ProviderService/GetProvider":    {asAdmin, asOperator},
	"/portcullis.v1.ProviderService/ListProviders":  {asAdmin, asOperator},
	// The kill switch only narrows: operators may pull it.
	"/portcullis.v1.SandboxService/FreezeSandbox":   {asAdmin, asOperator},
	"/portcullis.v1.SandboxService/UnfreezeSandbox": {asAdmin},
	// The tool definitions a sandbox's proxies saw: what operators
	// review re-pins with. A proxy reports them with ShipDecisions.
	"/portcullis.v1.SandboxService/ListTools": {asAdmin, asOperator},
	// A proxy's streams serve its token's own sandbox, whatever the
	// messages name (a hello naming another sandbox is refused by the
	// handler: TestPolicyStreamRefusals), so any sandbox token passes.
	"/portcullis.v1.DistributionService/StreamPolicy":  {asOwn, asOther},
	"/portcullis.v1.DistributionService/ShipDecisions": {asOwn, asOther},
	"/portcullis.v1.DistributionService/HoldCall":      {asOwn, asOther},
	// Held calls are decided by people, never by a sandbox's token.
	"/portcullis.v1.CallService/ListCalls":    {asAdmin, asOperator},
	"/portcullis.v1.CallService/GetCall":      {asAdmin, asOperator},
	"/portcullis.v1.CallService/ApproveCall":  {asAdmin, asOperator},
	"/portcullis.v1.CallService/DenyCall":     {asAdmin, asOperator},
	"/portcullis.v1.CallService/WatchCalls":   {asAdmin, asOperator},
	"/portcullis.v1.ProxyService/ListProxies": {asAdmin, asOperator},
	// Which proxies ACKed or NACKed a version: what ListProxies shows.
	"/portcullis.v1.ProxyService/WatchEnforcement": {asAdmin, asOperator},
	"/portcullis.v1.ProxyService/ListSigningKeys":  {asAdmin, asOperator, asOwn, asOther},
	"/portcullis.v1.DecisionService/ListDecisions": {asAdmin, asOperator, asOwn},
	"/portcullis.v1.DecisionService/TailDecisions": {asAdmin, asOperator, asOwn},
	// The sandbox proposes, never approves: the advisor answers sandbox
	// tokens alone, each about its own sandbox (no request names one, so
	// "other" passes authorization and sees only its own proposals:
	// TestAdvisorScope).
	"/portcullis.v1.AdvisorService/SubmitProposal":   {asOwn, asOther},
	"/portcullis.v1.AdvisorService/GetProposal":      {asOwn, asOther},
	"/portcullis.v1.AdvisorService/ListProposals":    {asOwn, asOther},
	"/portcullis.v1.AdvisorService/WatchProposal":    {asOwn, asOther},
	"/portcullis.v1.AdvisorService/WithdrawProposal": {asOwn, asOther},
	"/portcullis.v1.AdvisorService/ListDenials":      {asOwn, asOther},
	// Proving documents the caller sends reads and stores nothing.
	"/portcullis.v1.ProverService/Prove": {asAdmin, asOperator, asOwn, asOther},
	// The audit log is for the humans who run the gateway.
	"/portcullis.v1.AuditService/ListAudit":   {asAdmin, asOperator},
	"/portcullis.v1.AuditService/VerifyAudit": {asAdmin, asOperator},
	// The sandbox may propose, never approve.
	"/portcullis.v1.ApprovalService/ListProposals":     {asAdmin, asOperator},
	"/portcullis.v1.ApprovalService/GetProposal":       {asAdmin, asOperator},
	"/portcullis.v1.ApprovalService/ApproveProposal":   {asAdmin, asOperator},
	"/portcullis.v1.ApprovalService/RejectProposal":    {asAdmin, asOperator},
	"/portcullis.v1.ApprovalService/GetApprovalPolicy": {asAdmin, asOperator},
	"/portcullis.v1.ApprovalService/SetApprovalPolicy": {asAdmin},
	// Watchdogs write events (of their own source: TestSentrySourceScope)
	// and read nothing; operators read them and decide held quarantines;
	// which key a source signs with is an admin's.
	"/portcullis.v1.SentryService/IngestEvents":    {asSentry},
	"/portcullis.v1.SentryService/PublishEvents":   {asSentry},
	"/portcullis.v1.SentryService/ListEvents":      {asAdmin, asOperator},
	"/portcullis.v1.SentryService/ListGaps":        {asAdmin, asOperator},
	"/portcullis.v1.SentryService/ListActions":     {asAdmin, asOperator},
	"/portcullis.v1.SentryService/Timeline":        {asAdmin, asOperator},
	"/portcullis.v1.SentryService/DecideAction":    {asAdmin, asOperator},
	"/portcullis.v1.SentryService/SetSourceKey":    {asAdmin},
	"/portcullis.v1.SentryService/DeleteSourceKey": {asAdmin},
}

// TestAuthorizationMatrix calls every RPC of every service as every kind
// of caller and checks that exactly the expected callers get past
// authentication and authorization.
func TestAuthorizationMatrix(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	ctx := t.Context()
	admin := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	mine := mustCreateSandbox(t, admin, "mine")
	mustCreateSandbox(t, admin, "theirs")
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
	watchdog, err := admin.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "urn:dpu:node-17", Role: "sentry"})
	if err != nil {
		t.Fatal(err)
	}

	callers := []struct {
		name, token, target string
	}{
		// Admin and operator target a sandbox that does not exist, so the
		// calls that pass authorization change nothing the matrix needs.
		{asAdmin, gatewaytest.AdminToken, "ghost"},
		{asOperator, op.GetToken(), "ghost"},
		{asOwn, mine.GetToken(), "mine"},
		{asOther, mine.GetToken(), "theirs"},
		{asNone, "", "mine"},
		{asRevoked, gone.GetToken(), "mine"},
		// A sentry token targets a real sandbox, so nothing but its role
		// can refuse it.
		{asSentry, watchdog.GetToken(), "mine"},
	}

	files := []protoreflect.FileDescriptor{
		portcullisv1.File_portcullis_v1_sandbox_proto,
		portcullisv1.File_portcullis_v1_token_proto,
		portcullisv1.File_portcullis_v1_policy_proto,
		portcullisv1.File_portcullis_v1_distribution_proto,
		portcullisv1.File_portcullis_v1_advisor_proto,
		portcullisv1.File_portcullis_v1_approval_proto,
		portcullisv1.File_portcullis_v1_proxy_proto,
		portcullisv1.File_portcullis_v1_audit_proto,
		portcullisv1.File_portcullis_v1_sentry_proto,
		portcullisv1.File_portcullis_v1_calls_proto,
		portcullisv1.File_portcullis_v1_provider_proto,
	}
	seen := map[string]bool{}
	for _, fd := range files {
		for i := range fd.Services().Len() {
			svc := fd.Services().Get(i)
			for j := range svc.Methods().Len() {
				md := svc.Methods().Get(j)
				procedure := "/" + string(svc.FullName()) + "/" + string(md.Name())
				seen[procedure] = true
				allowed, ok := allowedCallers[procedure]
				if !ok {
					t.Errorf("%s has no row in the test's expected authorization: add one", procedure)
					continue
				}
				for _, caller := range callers {
					err := callRaw(t, gw.URL, caller.token, procedure, md, caller.target)
					code := connect.CodeOf(err)
					denied := err != nil && (code == connect.CodePermissionDenied || code == connect.CodeUnauthenticated)
					if want := slices.Contains(allowed, caller.name); want == denied {
						t.Errorf("%s as %s: got %v; want allowed=%v", procedure, caller.name, err, want)
					}
					if caller.name == asNone && code != connect.CodeUnauthenticated {
						t.Errorf("%s with no token: got %v, want Unauthenticated", procedure, err)
					}
					if caller.name == asSentry && !slices.Contains(allowed, asSentry) && code != connect.CodePermissionDenied {
						t.Errorf("%s as a sentry token: got %v, want PermissionDenied", procedure, err)
					}
					// Permission errors name the action in words, never the RPC.
					if code == connect.CodePermissionDenied && strings.Contains(err.Error(), "/portcullis.") {
						t.Errorf("%s as %s: the permission error names the RPC: %v", procedure, caller.name, err)
					}
				}
			}
		}
	}
	for procedure := range allowedCallers {
		if !seen[procedure] {
			t.Errorf("expected authorization lists %s, which no service defines", procedure)
		}
	}
}

// callRaw calls any RPC with a dynamic request whose sandbox or name field
// is target. A stream counts as let through when its first answer is not an
// authentication or authorization error (a stream that is let through and
// has nothing to say ends with DeadlineExceeded).
func callRaw(t *testing.T, baseURL, token, procedure string, md protoreflect.MethodDescriptor, target string) error {
	t.Helper()
	req := dynamicpb.NewMessage(md.Input())
	for _, field := range []protoreflect.Name{"sandbox", "name"} {
		if fd := md.Input().Fields().ByName(field); fd != nil {
			req.Set(fd, protoreflect.ValueOfString(target))
		}
	}
	if fd := md.Input().Fields().ByName("document"); fd != nil {
		req.Set(fd, protoreflect.ValueOfString("version: 1\n"))
	}
	res := dynamicpb.NewMessage(md.Output())
	ctx, info := connect.NewClientContext(t.Context())
	if token != "" {
		info.RequestHeader().Set("Authorization", "Bearer "+token)
	}
	client := connect.NewClient(connecthttp.NewTransport(h2cClient(), baseURL))
	spec := connect.Spec{StreamType: connect.StreamTypeUnary, Schema: md, Procedure: procedure}
	switch {
	case !md.IsStreamingClient() && !md.IsStreamingServer():
		return client.CallUnary(ctx, spec, req, res)
	case md.IsStreamingClient():
		spec.StreamType = connect.StreamTypeClient
		if md.IsStreamingServer() {
			spec.StreamType = connect.StreamTypeBidi
		}
	default:
		spec.StreamType = connect.StreamTypeServer
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	stream, err := client.CallClientStream(ctx, spec)
	if err != nil {
		return err
	}
	defer stream.Close()
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if spec.StreamType != connect.StreamTypeBidi {
		stream.CloseSend()
	}
	return stream.Receive(res)
}

// TestHealthAndReflectionArePublic checks the standard gRPC health service
// with a stock grpc-go client, and that reflection needs no token.
func TestHealthAndReflectionArePublic(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	conn, err := grpc.NewClient(gw.URL[len("http://"):], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "portcullis.v1.PolicyService"})
	if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check = %v, %v; want SERVING", res.GetStatus(), err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "no.such.Service"}); connect.Code(codeOf(err)) != connect.CodeNotFound {
		t.Fatalf("health of an unknown service: got %v, want NotFound", err)
	}
}
