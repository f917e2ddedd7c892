package gateway_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connectproto"
	"google.golang.org/grpc/status"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// TestAPI runs the same API suite against a gateway on each store engine,
// through each kind of client (Connect, and a stock grpc-go client).
func TestAPI(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		for kind, newAPI := range clientKinds {
			t.Run(engine+"/"+kind, func(t *testing.T) {
				t.Parallel()
				gw := gatewaytest.Start(t, engine)
				admin := func() api { return newAPI(t, gw.URL, gatewaytest.AdminToken) }
				t.Run("policy lifecycle", func(t *testing.T) { testPolicyLifecycle(t, gw, admin, newAPI) })
				t.Run("authorization", func(t *testing.T) { testAuthorization(t, gw, admin(), newAPI) })
				t.Run("concurrent set", func(t *testing.T) { testConcurrentSet(t, admin()) })
				t.Run("create with a policy", func(t *testing.T) { testCreateWithPolicy(t, admin()) })
				t.Run("not found", func(t *testing.T) { testNotFound(t, admin()) })
			})
		}
	}
}

func readFile(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustCreateSandbox(t *testing.T, c api, name string) *portcullisv1.CreateSandboxResponse {
	t.Helper()
	res, err := c.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: name})
	if err != nil {
		t.Fatalf("create sandbox %s: %v", name, err)
	}
	if !strings.HasPrefix(res.GetToken(), "pcs_") {
		t.Fatalf("sandbox token %q lacks the pcs_ prefix", res.GetToken())
	}
	return res
}

func historyLen(t *testing.T, c api, sandbox string) int {
	t.Helper()
	h, err := c.policy.ListPolicyVersions(t.Context(), &portcullisv1.ListPolicyVersionsRequest{Sandbox: sandbox})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	return len(h.GetVersions())
}

func testPolicyLifecycle(t *testing.T, gw *gatewaytest.Gateway, admin func() api, newAPI func(testing.TB, string, string) api) {
	ctx := t.Context()
	c := admin()
	mustCreateSandbox(t, c, "orders")

	v1, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "orders", Document: readFile(t, "testdata/orders-v1.json")})
	if err != nil {
		t.Fatalf("set v1: %v", err)
	}
	if v1.GetVersion() != 1 || v1.GetUnchanged() || len(v1.GetHash()) != 64 {
		t.Fatalf("set v1 = version %d unchanged %v hash %q; want version 1, changed, a sha256", v1.GetVersion(), v1.GetUnchanged(), v1.GetHash())
	}
	if got := v1.GetPolicy().GetFields()["network_policies"].GetStructValue().GetFields()["orders"]; got == nil {
		t.Fatalf("set v1 answered a policy without network_policies.orders: %v", v1.GetPolicy())
	}

	v2, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "orders", Document: readFile(t, "testdata/orders-v2.yaml"), ExpectedVersion: ptr(uint32(1))})
	if err != nil {
		t.Fatalf("set v2: %v", err)
	}
	if v2.GetVersion() != 2 || v2.GetHash() == v1.GetHash() {
		t.Fatalf("set v2 = version %d hash %s; want version 2 with a new hash", v2.GetVersion(), v2.GetHash())
	}

	diff, err := c.policy.DiffPolicy(ctx, &portcullisv1.DiffPolicyRequest{Sandbox: "orders", FromVersion: 1, ToVersion: 2})
	if err != nil {
		t.Fatalf("diff: %v", err)
	}
	var named bool
	for _, ch := range diff.GetChanges() {
		if ch.GetKind() == "added" && strings.Contains(ch.GetSummary()+ch.GetPath(), "track_shipment") {
			named = true
		}
		if strings.Contains(ch.GetSummary(), "lookup_order") {
			t.Errorf("diff mentions the unchanged tool lookup_order: %v", ch)
		}
	}
	if !named {
		t.Fatalf("diff 1 2 does not name the added tool track_shipment: %v", diff.GetChanges())
	}

	// A stale expected version is a conflict and stores nothing.
	_, err = c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "orders", Document: readFile(t, "testdata/orders-v1.json"), ExpectedVersion: ptr(uint32(1))})
	if codeOf(err) != connect.CodeAborted {
		t.Fatalf("stale expected version: got %v, want Aborted", err)
	}
	if n := historyLen(t, c, "orders"); n != 2 {
		t.Fatalf("after a stale set the history has %d versions, want 2", n)
	}

	v3, err := c.policy.RollbackPolicy(ctx, &portcullisv1.RollbackPolicyRequest{Sandbox: "orders", ToVersion: 1})
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if v3.GetVersion() != 3 || v3.GetHash() != v1.GetHash() || v3.GetSource() != "rollback" {
		t.Fatalf("rollback = version %d hash %s source %q; want version 3, hash of v1 %s, source rollback", v3.GetVersion(), v3.GetHash(), v3.GetSource(), v1.GetHash())
	}

	// Content identical to the current version stores nothing.
	same, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "orders", Document: readFile(t, "testdata/orders-v1.json")})
	if err != nil {
		t.Fatalf("set identical: %v", err)
	}
	if !same.GetUnchanged() || same.GetVersion() != 3 {
		t.Fatalf("set identical = version %d unchanged %v; want version 3, unchanged", same.GetVersion(), same.GetUnchanged())
	}

	// An unknown field and a bad value: InvalidArgument naming both paths,
	// and nothing stored.
	_, err = c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "orders", Document: readFile(t, "testdata/invalid.yaml")})
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("invalid policy: got %v, want InvalidArgument", err)
	}
	paths := strings.Join(problemPaths(t, err), " ")
	for _, want := range []string{"network_policies.orders.endpoints[0].colour", "network_policies.orders.endpoints[0].mcp.max_body_bytes"} {
		if !strings.Contains(paths, want) {
			t.Errorf("invalid policy problems %q do not name %s", paths, want)
		}
	}
	if n := historyLen(t, c, "orders"); n != 3 {
		t.Fatalf("after an invalid set the history has %d versions, want 3", n)
	}

	// Static sections are fixed by the first version.
	withFS := strings.Replace(readFile(t, "testdata/orders-v2.yaml"), "version: 1\n", "version: 1\nfilesystem_policy: {read_only: [/usr]}\n", 1)
	_, err = c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "orders", Document: withFS})
	if codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(strings.Join(problemPaths(t, err), " "), "filesystem_policy") {
		t.Fatalf("changing filesystem_policy: got %v, want InvalidArgument naming filesystem_policy", err)
	}

	// Everything is still there after a restart.
	gw.Restart()
	c = admin()
	got, err := c.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "orders"})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if got.GetVersion() != 3 || got.GetHash() != v1.GetHash() {
		t.Fatalf("after restart current = version %d hash %s; want 3 and %s", got.GetVersion(), got.GetHash(), v1.GetHash())
	}
	old, err := c.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "orders", Version: 2})
	if err != nil || old.GetHash() != v2.GetHash() {
		t.Fatalf("version 2 after restart = %v, %v; want hash %s", old.GetHash(), err, v2.GetHash())
	}
	if n := historyLen(t, c, "orders"); n != 3 {
		t.Fatalf("history after restart has %d versions, want 3", n)
	}
}

// problemPaths returns the field paths of the ValidationProblems detail of
// an error from either kind of client.
func problemPaths(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			m, derr := connectproto.UnmarshalErrorDetail(d)
			if vp, ok := m.(*portcullisv1.ValidationProblems); derr == nil && ok {
				for _, p := range vp.GetProblems() {
					out = append(out, p.GetPath())
				}
			}
		}
		return out
	}
	if s, ok := status.FromError(err); ok {
		for _, d := range s.Details() {
			if vp, ok := d.(*portcullisv1.ValidationProblems); ok {
				for _, p := range vp.GetProblems() {
					out = append(out, p.GetPath())
				}
			}
		}
	}
	return out
}

func testAuthorization(t *testing.T, gw *gatewaytest.Gateway, c api, newAPI func(testing.TB, string, string) api) {
	ctx := t.Context()
	mine := mustCreateSandbox(t, c, "mine")
	mustCreateSandbox(t, c, "theirs")
	for _, sb := range []string{"mine", "theirs"} {
		if _, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: sb, Document: readFile(t, "testdata/orders-v1.json")}); err != nil {
			t.Fatalf("set %s: %v", sb, err)
		}
	}
	sb := newAPI(t, gw.URL, mine.GetToken())
	if _, err := sb.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "mine"}); err != nil {
		t.Fatalf("sandbox token reading its own policy: %v", err)
	}
	if _, err := sb.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "theirs"}); codeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("sandbox token reading another sandbox: got %v, want PermissionDenied", err)
	}
	_, err := sb.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "mine", Document: readFile(t, "testdata/orders-v2.yaml")})
	if codeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("sandbox token setting its own policy: got %v, want PermissionDenied", err)
	}
	if n := historyLen(t, c, "mine"); n != 1 {
		t.Fatalf("a refused set stored something: %d versions", n)
	}

	op, err := c.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "olive", Role: "operator"})
	if err != nil {
		t.Fatalf("create operator token: %v", err)
	}
	opc := newAPI(t, gw.URL, op.GetToken())
	if _, err := opc.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "theirs"}); err != nil {
		t.Fatalf("operator reading a policy: %v", err)
	}
	if _, err := opc.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "mallory", Role: "admin"}); codeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("operator creating a token: got %v, want PermissionDenied", err)
	}

	if _, err := c.token.RevokeToken(ctx, &portcullisv1.RevokeTokenRequest{Name: "olive"}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := opc.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "theirs"}); codeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("revoked token: got %v, want Unauthenticated", err)
	}
	if _, err := newAPI(t, gw.URL, "").sandbox.ListSandboxes(ctx, &portcullisv1.ListSandboxesRequest{}); codeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("no token: got %v, want Unauthenticated", err)
	}
	if _, err := newAPI(t, gw.URL, "pcs_forged").sandbox.ListSandboxes(ctx, &portcullisv1.ListSandboxesRequest{}); codeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("unknown token: got %v, want Unauthenticated", err)
	}

	// Rotation: the old sandbox token stops working, the new one works.
	rot, err := c.sandbox.RotateSandboxToken(ctx, &portcullisv1.RotateSandboxTokenRequest{Name: "mine"})
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	if _, err := sb.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "mine"}); codeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("rotated-out token: got %v, want Unauthenticated", err)
	}
	if _, err := newAPI(t, gw.URL, rot.GetToken()).policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "mine"}); err != nil {
		t.Fatalf("new sandbox token: %v", err)
	}

	// The last admin token cannot be revoked: nobody could manage the
	// gateway afterwards.
	if _, err := c.token.RevokeToken(ctx, &portcullisv1.RevokeTokenRequest{Name: "admin"}); codeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("revoking the last admin token: got %v, want FailedPrecondition", err)
	}
	if _, err := c.sandbox.ListSandboxes(ctx, &portcullisv1.ListSandboxesRequest{}); err != nil {
		t.Fatalf("the admin token stopped working after a refused revoke: %v", err)
	}
}

func testConcurrentSet(t *testing.T, c api) {
	ctx := t.Context()
	mustCreateSandbox(t, c, "race")
	base, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "race", Document: readFile(t, "testdata/orders-v1.json")})
	if err != nil {
		t.Fatal(err)
	}
	const writers = 100
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won      int
		conflict int
		other    []error
	)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each writer sends different content so none is a no-op.
			doc := strings.Replace(readFile(t, "testdata/orders-v2.yaml"), "tool: track_shipment", fmt.Sprintf("tool: tool_%d", i), 1)
			_, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "race", Document: doc, ExpectedVersion: ptr(base.GetVersion())})
			mu.Lock()
			defer mu.Unlock()
			switch codeOf(err) {
			case 0:
				won++
			case connect.CodeAborted:
				conflict++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || conflict != writers-1 || len(other) > 0 {
		t.Fatalf("%d concurrent sets: %d won, %d conflicts, other errors %v; want exactly 1 winner", writers, won, conflict, other)
	}
	if n := historyLen(t, c, "race"); n != 2 {
		t.Fatalf("history has %d versions, want 2", n)
	}

	// Without an expected version a writer asks for "on top of whatever is
	// current": a lost race is retried, so every writer gets through.
	const free = 5
	errs := make(chan error, free)
	for i := range free {
		go func() {
			doc := strings.Replace(readFile(t, "testdata/orders-v2.yaml"), "tool: track_shipment", fmt.Sprintf("tool: free_%d", i), 1)
			_, err := c.policy.SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: "race", Document: doc})
			errs <- err
		}()
	}
	for range free {
		if err := <-errs; err != nil {
			t.Errorf("set without an expected version: %v", err)
		}
	}
	if n := historyLen(t, c, "race"); n != 2+free {
		t.Fatalf("history has %d versions, want %d", n, 2+free)
	}
}

func ptr[T any](v T) *T { return &v }

func testCreateWithPolicy(t *testing.T, c api) {
	ctx := t.Context()
	res, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "born-with-policy", Policy: readFile(t, "testdata/orders-v1.json")})
	if err != nil {
		t.Fatalf("create with policy: %v", err)
	}
	pv := res.GetPolicyVersion()
	if pv.GetVersion() != 1 || pv.GetSource() != "create" || res.GetSandbox().GetCurrentHash() != pv.GetHash() {
		t.Fatalf("create with policy = version %d source %q hash %s (sandbox hash %s); want version 1 from create", pv.GetVersion(), pv.GetSource(), pv.GetHash(), res.GetSandbox().GetCurrentHash())
	}
	// An invalid first policy creates nothing.
	_, err = c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "born-invalid", Policy: readFile(t, "testdata/invalid.yaml")})
	if codeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("create with an invalid policy: got %v, want InvalidArgument", err)
	}
	if _, err := c.sandbox.GetSandbox(ctx, &portcullisv1.GetSandboxRequest{Name: "born-invalid"}); codeOf(err) != connect.CodeNotFound {
		t.Fatalf("the refused sandbox exists: %v", err)
	}
	// A bad name is refused with its field.
	_, err = c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "Bad_Name"})
	if codeOf(err) != connect.CodeInvalidArgument || !slices.Contains(problemPaths(t, err), "name") {
		t.Fatalf("create with a bad name: got %v, want InvalidArgument naming the name field", err)
	}
	// A duplicate is AlreadyExists.
	if _, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "born-with-policy"}); codeOf(err) != connect.CodeAlreadyExists {
		t.Fatalf("duplicate create: got %v, want AlreadyExists", err)
	}
}

// testNotFound checks that NotFound names exactly what is missing, in
// words of the API, never the database's.
func testNotFound(t *testing.T, c api) {
	ctx := t.Context()
	mustCreateSandbox(t, c, "empty")
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"no such sandbox", func() error {
			_, err := c.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "nowhere"})
			return err
		}, `sandbox "nowhere" not found`},
		{"no policy yet", func() error {
			_, err := c.policy.GetPolicy(ctx, &portcullisv1.GetPolicyRequest{Sandbox: "empty"})
			return err
		}, `sandbox "empty" has no policy yet`},
		{"no such version", func() error {
			_, err := c.policy.RollbackPolicy(ctx, &portcullisv1.RollbackPolicyRequest{Sandbox: "empty", ToVersion: 9})
			return err
		}, `sandbox "empty" has no policy yet`},
		{"history of no sandbox", func() error {
			_, err := c.policy.ListPolicyVersions(ctx, &portcullisv1.ListPolicyVersionsRequest{Sandbox: "nowhere"})
			return err
		}, `sandbox "nowhere" not found`},
		{"delete no sandbox", func() error {
			_, err := c.sandbox.DeleteSandbox(ctx, &portcullisv1.DeleteSandboxRequest{Name: "nowhere"})
			return err
		}, `sandbox "nowhere" not found`},
		{"revoke no token", func() error {
			_, err := c.token.RevokeToken(ctx, &portcullisv1.RevokeTokenRequest{Name: "nobody"})
			return err
		}, `no live token named "nobody"`},
	}
	for _, tc := range cases {
		err := tc.call()
		if codeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want NotFound %q", tc.name, err, tc.want)
		}
	}
}
