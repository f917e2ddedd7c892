package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/lifecycle"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/prover"
)

// calls is a held-calls test's world: a gateway, a sandbox "orders" and
// its token, an operator's CallService and a proxy's gRPC client.
type calls struct {
	gw       *gatewaytest.Gateway
	admin    api
	sandbox  string // the sandbox token
	operator portcullisv1connect.CallServiceClient
	proxy    portcullisv1.DistributionServiceClient
}

func newCalls(t *testing.T, engine string, configure ...func(*gateway.Config)) *calls {
	t.Helper()
	gw := gatewaytest.Start(t, engine, configure...)
	admin := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	sb := mustCreateSandbox(t, admin, "orders")
	op, err := admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: "olive", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	return &calls{gw: gw, admin: admin, sandbox: sb.GetToken(), operator: callClient(gw.URL, op.GetToken()), proxy: proxyClient(t, gw.URL, sb.GetToken())}
}

func callClient(baseURL, token string) portcullisv1connect.CallServiceClient {
	return portcullisv1connect.NewCallServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, baseURL), gatewaytest.Bearer(token)))
}

// proxyClient is DistributionService as a proxy calls it: grpc-go, with
// the sandbox token on every stream.
func proxyClient(t *testing.T, baseURL, token string) portcullisv1.DistributionServiceClient {
	t.Helper()
	bearer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), desc, cc, method, opts...)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(baseURL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStreamInterceptor(bearer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return portcullisv1.NewDistributionServiceClient(conn)
}

// toHold is the call a proxy of orders files for tools/call refund with
// args, under key.
func toHold(key, args string) *portcullisv1.CallToHold {
	digest, err := lifecycle.CallArgumentsDigest("tools/call", args)
	if err != nil {
		panic(err)
	}
	return &portcullisv1.CallToHold{
		Sandbox: "orders", ProxyId: "proxy-1", Instance: "run-1", Key: key, Binary: "/usr/bin/python3",
		Host: "orders.example.com", Port: 443, Method: "POST", Path: "/mcp", McpMethod: "tools/call", Tool: "refund_order",
		ArgumentsJson: args, ArgumentsDigest: digest, PolicyVersion: 1, Entry: "orders", Rule: "rules[1]",
		Timeout: durationpb.New(2 * time.Minute),
	}
}

type holdStream = grpc.BidiStreamingClient[portcullisv1.HoldCallRequest, portcullisv1.HoldCallResponse]

// hold files call and returns its stream and what filed it.
func (c *calls) hold(t *testing.T, call *portcullisv1.CallToHold) (holdStream, *portcullisv1.CallFiled) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	st, err := c.proxy.HoldCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&portcullisv1.HoldCallRequest{Message: &portcullisv1.HoldCallRequest_Call{Call: call}}); err != nil {
		t.Fatal(err)
	}
	// The gateway says it has the call before it files it (the proxy's
	// two seconds without an answer are not spent behind slow writes).
	res, err := st.Recv()
	if err == nil && res.GetHeartbeat() == nil {
		t.Fatalf("hold %s: first answer %v, want a heartbeat", call.GetKey(), res)
	}
	if err == nil {
		res, err = st.Recv()
	}
	if err != nil {
		t.Fatalf("hold %s: %v", call.GetKey(), err)
	}
	if res.GetFiled() == nil || res.GetFiled().GetId() == 0 {
		t.Fatalf("hold %s: first answer %v, want filed", call.GetKey(), res)
	}
	return st, res.GetFiled()
}

// decision waits for the stream's decision (heartbeats skipped).
func awaitDecision(t *testing.T, st holdStream) *portcullisv1.CallDecision {
	t.Helper()
	for {
		res, err := st.Recv()
		if err != nil {
			t.Fatalf("waiting for a decision: %v", err)
		}
		if d := res.GetDecision(); d != nil {
			return d
		}
	}
}

func (c *calls) get(t *testing.T, id uint64) *portcullisv1.HeldCall {
	t.Helper()
	got, err := c.operator.GetCall(t.Context(), &portcullisv1.GetCallRequest{Id: id})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestHeldCallApproved: a proxy files a call on its own stream; an
// operator sees it with its arguments and approves it with the digest it
// was shown; the stream gets approved with the call's own id, digest and
// version; another held call stays held; deciding the call again is
// refused. On both engines.
func TestHeldCallApproved(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) {
			c := newCalls(t, engine)
			call := toHold("k1", `{"order": 1234, "amount": 90.5}`)
			st, filed := c.hold(t, call)
			_, other := c.hold(t, toHold("k2", `{"order": 99}`))

			list, err := c.operator.ListCalls(t.Context(), &portcullisv1.ListCallsRequest{Sandbox: "orders"})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.GetCalls()) != 2 || list.GetHeld() != 2 || list.GetCalls()[1].GetId() != filed.GetId() {
				t.Fatalf("listed %v (held %d), want both calls, newest first", list.GetCalls(), list.GetHeld())
			}
			shown := list.GetCalls()[1]
			if shown.GetArgumentsJson() != call.GetArgumentsJson() || shown.GetArguments().GetFields()["order"].GetNumberValue() != 1234 ||
				shown.GetStatus() != "held" || shown.GetEndpoint() != "orders.example.com:443/mcp" || shown.GetTool() != "refund_order" {
				t.Fatalf("listed call %v, want the call with its arguments", shown)
			}

			got, err := c.operator.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "refund agreed", ArgumentsDigest: shown.GetArgumentsDigest()})
			if err != nil {
				t.Fatal(err)
			}
			if got.GetStatus() != "approved" || got.GetDecidedBy() != "olive" || got.GetReason() != "refund agreed" {
				t.Errorf("approved call %v", got)
			}
			d := awaitDecision(t, st)
			if d.GetId() != filed.GetId() || d.GetStatus() != "approved" || d.GetArgumentsDigest() != call.GetArgumentsDigest() ||
				d.GetPolicyVersion() != call.GetPolicyVersion() || d.GetDecidedBy() != "olive" {
				t.Errorf("the stream's decision %v, want approved for call %d with its digest and version", d, filed.GetId())
			}
			if s := c.get(t, other.GetId()).GetStatus(); s != "held" {
				t.Errorf("the other call is %s after approving the first, want held", s)
			}
			for name, err := range map[string]error{
				"approve again": errOf(c.operator.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "again"})),
				"deny after":    errOf(c.operator.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: filed.GetId(), Reason: "changed my mind"})),
			} {
				if connect.CodeOf(err) != connect.CodeFailedPrecondition {
					t.Errorf("%s: %v, want FailedPrecondition", name, err)
				}
			}
			audit, err := newAuditClient(c.gw.URL, gatewaytest.AdminToken).ListAudit(t.Context(), &portcullisv1.ListAuditRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if !hasAudit(audit.GetEntries(), "call.approve", "olive") {
				t.Error("no call.approve audit entry by olive")
			}
		})
	}
}

func errOf[T any](_ T, err error) error { return err }

func hasAudit(entries []*portcullisv1.AuditEntry, action, actor string) bool {
	for _, e := range entries {
		if e.GetAction() == action && e.GetActor() == actor {
			return true
		}
	}
	return false
}

// TestHeldCallDecisions: a denial reaches the stream; a digest other
// than the call's is Aborted and decides nothing; a call past its
// deadline ends expired (review_timeout) on its stream and in the list;
// a CallEnded ends it failed with its reason; a sandbox's token cannot
// decide.
func TestHeldCallDecisions(t *testing.T) {
	c := newCalls(t, "sqlite")

	st, filed := c.hold(t, toHold("deny", `{"order": 1}`))
	_, err := c.operator.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "ok", ArgumentsDigest: "sha256:" + strings.Repeat("0", 64)})
	if connect.CodeOf(err) != connect.CodeAborted {
		t.Errorf("approve with another digest: %v, want Aborted", err)
	}
	_, err = callClient(c.gw.URL, c.sandbox).ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "mine"})
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("approve with the sandbox's token: %v, want PermissionDenied", err)
	}
	if _, err := c.operator.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: filed.GetId()}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("deny without a reason: %v, want InvalidArgument", err)
	}
	if _, err := c.operator.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: filed.GetId(), Reason: "no refunds today"}); err != nil {
		t.Fatal(err)
	}
	if d := awaitDecision(t, st); d.GetStatus() != "denied" || d.GetReason() != "no refunds today" {
		t.Errorf("denied call's decision %v", d)
	}

	short := toHold("expires", `{"order": 2}`)
	short.Timeout = durationpb.New(time.Second)
	st, filed = c.hold(t, short)
	if d := awaitDecision(t, st); d.GetStatus() != "expired" || d.GetReason() != lifecycle.ReasonReviewTimeout || d.GetId() != filed.GetId() {
		t.Errorf("unanswered call's decision %v, want expired (review_timeout)", d)
	}
	if got := c.get(t, filed.GetId()); got.GetStatus() != "expired" {
		t.Errorf("unanswered call listed %s, want expired", got.GetStatus())
	}
	if _, err := c.operator.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "late"}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("approve an expired call: %v, want FailedPrecondition", err)
	}

	st, filed = c.hold(t, toHold("ended", `{"order": 3}`))
	if err := st.Send(&portcullisv1.HoldCallRequest{Message: &portcullisv1.HoldCallRequest_Ended{Ended: &portcullisv1.CallEnded{Reason: "review_stale: the rule is gone"}}}); err != nil {
		t.Fatal(err)
	}
	if d := awaitDecision(t, st); d.GetStatus() != "failed" || d.GetReason() != "review_stale: the rule is gone" || d.GetDecidedBy() != "proxy" {
		t.Errorf("ended call's decision %v, want failed with the proxy's reason", d)
	}
	if got := c.get(t, filed.GetId()); got.GetStatus() != "failed" || got.GetDecidedBy() != "proxy" {
		t.Errorf("ended call listed %s by %q, want failed by proxy", got.GetStatus(), got.GetDecidedBy())
	}
}

// TestHeldCallRefusals: a call the proxy cannot file is refused with the
// field named, and nothing is stored.
func TestHeldCallRefusals(t *testing.T) {
	c := newCalls(t, "sqlite")
	mustCreateSandbox(t, c.admin, "other")
	for name, tc := range map[string]struct {
		edit  func(*portcullisv1.CallToHold)
		code  codes.Code
		field string
	}{
		"another sandbox":    {func(m *portcullisv1.CallToHold) { m.Sandbox = "other" }, codes.PermissionDenied, "call.sandbox"},
		"digest mismatch":    {func(m *portcullisv1.CallToHold) { m.ArgumentsJson = `{"order": 2}` }, codes.InvalidArgument, "call.arguments_digest"},
		"arguments too big":  {func(m *portcullisv1.CallToHold) { m.ArgumentsJson = `{"x":"` + strings.Repeat("a", 64<<10) + `"}` }, codes.InvalidArgument, "call.arguments_json"},
		"not an object":      {func(m *portcullisv1.CallToHold) { m.ArgumentsJson = `[1]` }, codes.InvalidArgument, "call.arguments_json"},
		"timeout over 15m":   {func(m *portcullisv1.CallToHold) { m.Timeout = durationpb.New(16 * time.Minute) }, codes.InvalidArgument, "call.timeout"},
		"no timeout":         {func(m *portcullisv1.CallToHold) { m.Timeout = nil }, codes.InvalidArgument, "call.timeout"},
		"no key":             {func(m *portcullisv1.CallToHold) { m.Key = "" }, codes.InvalidArgument, "call.key"},
		"bad proxy id":       {func(m *portcullisv1.CallToHold) { m.ProxyId = "a/b" }, codes.InvalidArgument, "call.proxy_id"},
		"no port":            {func(m *portcullisv1.CallToHold) { m.Port = 0 }, codes.InvalidArgument, "call.port"},
		"no policy version":  {func(m *portcullisv1.CallToHold) { m.PolicyVersion = 0 }, codes.InvalidArgument, "call.policy_version"},
		"invalid UTF-8 tool": {func(m *portcullisv1.CallToHold) { m.Tool = "\xff" }, codes.Internal, ""}, // proto refuses it on the wire
	} {
		t.Run(name, func(t *testing.T) {
			call := toHold("bad", `{"order": 1}`)
			tc.edit(call)
			err := holdErr(t, c.proxy, &portcullisv1.HoldCallRequest{Message: &portcullisv1.HoldCallRequest_Call{Call: call}})
			if tc.field == "" {
				if err == nil {
					t.Fatal("filed")
				}
				return
			}
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("got %v, want %v naming %s", err, tc.code, tc.field)
			}
		})
	}
	err := holdErr(t, c.proxy, &portcullisv1.HoldCallRequest{Message: &portcullisv1.HoldCallRequest_Ended{Ended: &portcullisv1.CallEnded{Reason: "x"}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "call") {
		t.Errorf("a stream starting with ended: %v, want InvalidArgument naming the call", err)
	}
	list, err := c.operator.ListCalls(t.Context(), &portcullisv1.ListCallsRequest{})
	if err != nil || len(list.GetCalls()) != 0 {
		t.Errorf("after refusals the gateway lists %v, %v; want nothing", list.GetCalls(), err)
	}
}

// holdErr opens a HoldCall stream, sends first, and returns how it ended.
func holdErr(t *testing.T, proxy portcullisv1.DistributionServiceClient, first *portcullisv1.HoldCallRequest) error {
	t.Helper()
	st, err := proxy.HoldCall(t.Context())
	if err != nil {
		return err
	}
	if err := st.Send(first); err != nil {
		_, err = st.Recv()
		return err
	}
	res, err := st.Recv()
	if err == nil && res.GetHeartbeat() != nil {
		res, err = st.Recv() // refused while filing, after it said it had the call
	}
	if err == nil {
		return fmt.Errorf("answered %v", res)
	}
	return err
}

// TestHeldCallProxyRuns: a stream opened again with the same key
// re-attaches to its call; a new run of the proxy (another instance, on
// a HoldCall or a policy stream's hello) fails the earlier run's held
// calls, and their streams are told. On both engines.
func TestHeldCallProxyRuns(t *testing.T) {
	for _, engine := range []string{"sqlite", "postgres"} {
		t.Run(engine, func(t *testing.T) { testHeldCallProxyRuns(t, newCalls(t, engine)) })
	}
}

func testHeldCallProxyRuns(t *testing.T, c *calls) {
	st, filed := c.hold(t, toHold("k1", `{"order": 1}`))
	_, again := c.hold(t, toHold("k1", `{"order": 1}`))
	if again.GetId() != filed.GetId() {
		t.Errorf("re-attached to call %d, want %d", again.GetId(), filed.GetId())
	}
	next := toHold("k2", `{"order": 2}`)
	next.Instance = "run-2"
	_, second := c.hold(t, next)
	if d := awaitDecision(t, st); d.GetStatus() != "failed" || d.GetReason() != lifecycle.ReasonProxyRestarted {
		t.Errorf("the earlier run's call: %v, want failed (proxy restarted)", d)
	}
	// A policy stream's hello from a third run fails the second's, and
	// its stream is told.
	secondStream, _ := c.hold(t, next) // re-attached
	ps, err := c.proxy.StreamPolicy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{Hello: &portcullisv1.ProxyHello{
		Sandbox: "orders", ProxyId: "proxy-1", Instance: "run-3",
	}}}); err != nil {
		t.Fatal(err)
	}
	if d := awaitDecision(t, secondStream); d.GetId() != second.GetId() || d.GetStatus() != "failed" || d.GetReason() != lifecycle.ReasonProxyRestarted {
		t.Errorf("the second run's call after a third run's hello: %v, want failed (proxy restarted)", d)
	}
}

// TestHeldCallBusy: past --max-held-calls a call is refused at once,
// review_busy, and not stored; a decision makes room.
func TestHeldCallBusy(t *testing.T) {
	c := newCalls(t, "sqlite", func(cfg *gateway.Config) { cfg.MaxHeldCalls = 2 })
	_, first := c.hold(t, toHold("k1", `{"order": 1}`))
	c.hold(t, toHold("k2", `{"order": 2}`))
	err := holdErr(t, c.proxy, &portcullisv1.HoldCallRequest{Message: &portcullisv1.HoldCallRequest_Call{Call: toHold("k3", `{"order": 3}`)}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "review_busy") {
		t.Fatalf("third call: %v, want ResourceExhausted review_busy", err)
	}
	list, _ := c.operator.ListCalls(t.Context(), &portcullisv1.ListCallsRequest{})
	if len(list.GetCalls()) != 2 {
		t.Errorf("listed %d calls, want 2", len(list.GetCalls()))
	}
	if _, err := c.operator.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: first.GetId(), Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	c.hold(t, toHold("k3", `{"order": 3}`))
}

// rememberPolicy holds every refund_order call for review.
const rememberPolicy = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
          - allow: { method: tools/call, tool: refund_order, review: { required: true } }
    binaries: [ { path: /usr/bin/python3 } ]
`

// TestHeldCallRemember: approve --remember files a pending proposal for
// a rule that allows exactly the call's arguments, and the call names
// it.
func TestHeldCallRemember(t *testing.T) {
	c := newCalls(t, "sqlite")
	if _, err := c.admin.policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "orders", Document: rememberPolicy}); err != nil {
		t.Fatal(err)
	}
	st, filed := c.hold(t, toHold("k1", `{"order": 1234}`))
	got, err := c.operator.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "regular refund", Remember: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStatus() != "approved" || got.GetProposalId() == 0 {
		t.Fatalf("approved with remember: %v, want approved naming a proposal", got)
	}
	if d := awaitDecision(t, st); d.GetStatus() != "approved" {
		t.Errorf("decision %v", d)
	}
	approvals := portcullisv1connect.NewApprovalServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, c.gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	p, err := approvals.GetProposal(t.Context(), &portcullisv1.GetProposalRequest{Id: got.GetProposalId()})
	if err != nil {
		t.Fatal(err)
	}
	doc := protojson.Format(p.GetProposal())
	if p.GetStatus() != "pending" || !strings.Contains(doc, `"const"`) || !strings.Contains(doc, "1234") || strings.Contains(doc, `"review":`) {
		t.Errorf("remembered proposal %s: %s; want pending, exactly the arguments, no review", p.GetStatus(), doc)
	}
	// The prover shows what an approval would let through without a
	// person: exactly this call's arguments.
	var shown []string
	for _, f := range p.GetFindings() {
		if f.GetKind() != prover.ReviewRemoved {
			continue
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(f.GetCounterexample().GetArguments()), &args); err != nil {
			t.Fatalf("review_removed's arguments %q: %v", f.GetCounterexample().GetArguments(), err)
		}
		shown = append(shown, fmt.Sprint(args))
	}
	if len(shown) == 0 || slices.ContainsFunc(shown, func(a string) bool { return a != "map[order:1234]" }) {
		t.Errorf("review_removed findings show arguments %q, want exactly map[order:1234]; findings: %v", shown, p.GetFindings())
	}
}

// TestWatchCalls: the watch sends the list, then each call filed and
// decided.
func TestWatchCalls(t *testing.T) {
	c := newCalls(t, "sqlite")
	_, first := c.hold(t, toHold("k1", `{"order": 1}`))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := c.operator.WatchCalls(ctx, &portcullisv1.ListCallsRequest{Sandbox: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	next := func() *portcullisv1.HeldCall {
		t.Helper()
		m, err := w.Receive()
		if err != nil {
			t.Fatalf("watch ended: %v", err)
		}
		return m
	}
	if m := next(); m.GetId() != first.GetId() || m.GetStatus() != "held" {
		t.Fatalf("first message %v, want the held call", m)
	}
	_, second := c.hold(t, toHold("k2", `{"order": 2}`))
	if m := next(); m.GetId() != second.GetId() {
		t.Fatalf("after a filing %v, want call %d", m, second.GetId())
	}
	if _, err := c.operator.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: first.GetId(), Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	if m := next(); m.GetId() != first.GetId() || m.GetStatus() != "denied" {
		t.Fatalf("after a denial %v, want call %d denied", m, first.GetId())
	}
	cancel()
	for {
		if _, err := w.Receive(); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, context.Canceled) && connect.CodeOf(err) != connect.CodeCanceled {
				t.Errorf("watch ended with %v", err)
			}
			break
		}
	}
}

// TestHeldCallQuorum: rules that ask two approvers for a held call keep
// it held after the first approval (recorded, not given twice) and
// release it on the second.
func TestHeldCallQuorum(t *testing.T) {
	c := newCalls(t, "sqlite")
	module := "package portcullis.approval\n\ndefault approvals_required := 1\n\napprovals_required := 2 if input.kind == \"call\"\n\ndefault auto_approve := false\n"
	approvals := portcullisv1connect.NewApprovalServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, c.gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken)))
	if _, err := approvals.SetApprovalPolicy(t.Context(), &portcullisv1.SetApprovalPolicyRequest{Module: module}); err != nil {
		t.Fatal(err)
	}
	st, filed := c.hold(t, toHold("k1", `{"order": 1}`))
	got, err := c.operator.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "first"})
	if err != nil || got.GetStatus() != "held" {
		t.Fatalf("first approval: %v, %v; want still held", got, err)
	}
	if _, err := c.operator.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "again"}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("the same approver again: %v, want FailedPrecondition", err)
	}
	admin := callClient(c.gw.URL, gatewaytest.AdminToken)
	if got, err = admin.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "second"}); err != nil || got.GetStatus() != "approved" {
		t.Fatalf("second approval: %v, %v; want approved", got, err)
	}
	if d := awaitDecision(t, st); d.GetStatus() != "approved" {
		t.Errorf("decision %v", d)
	}
}

// TestHeldCallAcrossReplicas: a call held on one replica is decided on
// another, and the stream on the first learns it.
func TestHeldCallAcrossReplicas(t *testing.T) {
	c := newCalls(t, "postgres")
	other := c.gw.Replica()
	op, err := c.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: "oscar", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	st, filed := c.hold(t, toHold("k1", `{"order": 1}`))
	if _, err := callClient(other.URL, op.GetToken()).ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "from b"}); err != nil {
		t.Fatal(err)
	}
	if d := awaitDecision(t, st); d.GetStatus() != "approved" || d.GetDecidedBy() != "oscar" {
		t.Errorf("decision on the first replica %v, want approved by oscar", d)
	}
}

// TestHeldCallOnConnect: HoldCall is served on Connect's protocol too
// (a proxy behind a proxy that speaks it): filed, then the decision.
func TestHeldCallOnConnect(t *testing.T) {
	c := newCalls(t, "sqlite")
	client := portcullisv1connect.NewDistributionServiceClient(connect.NewClient(connecthttp.NewTransport(h2cClient(), c.gw.URL), gatewaytest.Bearer(c.sandbox)))
	st, err := client.HoldCall(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Send(&portcullisv1.HoldCallRequest{Message: &portcullisv1.HoldCallRequest_Call{Call: toHold("k1", `{"order": 1}`)}}); err != nil {
		t.Fatal(err)
	}
	res, err := st.Receive()
	if err == nil && res.GetHeartbeat() != nil {
		res, err = st.Receive()
	}
	if err != nil || res.GetFiled() == nil {
		t.Fatalf("answer %v, %v; want filed", res, err)
	}
	if _, err := c.operator.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: res.GetFiled().GetId(), Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	for {
		res, err = st.Receive()
		if err != nil {
			t.Fatalf("waiting for the decision: %v", err)
		}
		if d := res.GetDecision(); d != nil {
			if d.GetStatus() != "denied" || d.GetReason() != "no" {
				t.Errorf("decision %v", d)
			}
			return
		}
	}
}
