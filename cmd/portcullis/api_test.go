package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"connectrpc.com/connect/v2/connectproto"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// fakeGateway answers the client commands' RPCs with canned responses and
// records every request with its Authorization header.
type fakeGateway struct {
	portcullisv1connect.UnimplementedSandboxServiceHandler
	portcullisv1connect.UnimplementedTokenServiceHandler
	portcullisv1connect.UnimplementedPolicyServiceHandler

	url  string
	doc  *structpb.Struct // testdata/quickstart.yaml, canonical
	hash string

	mu    sync.Mutex
	calls []fakeCall
	errs  map[string]error // by method name: answer this error instead
}

type fakeCall struct {
	method string
	req    proto.Message
	auth   string
}

const (
	adminToken   = "admin-secret-token"
	sandboxToken = "sandbox-secret-token"
)

// newFakeGateway serves a fakeGateway on 127.0.0.1:0 for the test's life.
func newFakeGateway(t *testing.T) *fakeGateway {
	t.Helper()
	f := &fakeGateway{errs: map[string]error{}}
	f.doc, f.hash = quickstart(t)
	server := connect.NewServer()
	portcullisv1connect.RegisterSandboxServiceHandler(server, f)
	portcullisv1connect.RegisterTokenServiceHandler(server, f)
	portcullisv1connect.RegisterPolicyServiceHandler(server, f)
	mux := http.NewServeMux()
	connecthttp.Mount(mux, server)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	f.url = ts.URL
	return f
}

// cli runs the program against the fake with the admin token.
func (f *fakeGateway) cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLI(t, append([]string{"--gateway", f.url, "--token", adminToken}, args...)...)
}

func (f *fakeGateway) record(ctx context.Context, method string, req proto.Message) error {
	info, _ := connect.CallInfoForServerContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fakeCall{method: method, req: req, auth: info.RequestHeader().Get("Authorization")})
	return f.errs[method]
}

// last returns the only call the fake received.
func (f *fakeGateway) last(t *testing.T, method string) fakeCall {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) != 1 || f.calls[0].method != method {
		t.Fatalf("calls = %v, want one %s", f.calls, method)
	}
	c := f.calls[0]
	f.calls = nil
	if c.auth != "Bearer "+adminToken {
		t.Errorf("%s: Authorization %q, want the admin bearer token", method, c.auth)
	}
	return c
}

func (f *fakeGateway) fail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[method] = err
}

var created = timestamppb.New(mustTime("2026-01-02T03:04:05Z"))

func quickstart(t *testing.T) (*structpb.Struct, string) {
	doc, err := os.ReadFile("testdata/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := policy.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(p.CanonicalJSON(), &m); err != nil {
		t.Fatal(err)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s, p.Hash()
}

func (f *fakeGateway) version(sandbox string, v uint32) *portcullisv1.PolicyVersion {
	return &portcullisv1.PolicyVersion{
		Sandbox: sandbox, Version: v, Hash: f.hash, Policy: proto.CloneOf(f.doc), Author: "admin",
		CreatedAt: created, Source: "set",
	}
}

func (f *fakeGateway) CreateSandbox(ctx context.Context, req *portcullisv1.CreateSandboxRequest) (*portcullisv1.CreateSandboxResponse, error) {
	if err := f.record(ctx, "CreateSandbox", req); err != nil {
		return nil, err
	}
	res := &portcullisv1.CreateSandboxResponse{
		Name: req.GetName(), Token: sandboxToken,
		Sandbox: &portcullisv1.Sandbox{Name: req.GetName(), CreatedAt: created, CreatedBy: "admin"},
	}
	if req.GetPolicy() != "" {
		res.PolicyVersion = f.version(req.GetName(), 1)
		res.Sandbox.CurrentVersion = 1
		res.Sandbox.CurrentHash = res.PolicyVersion.GetHash()
		res.Warnings = []*portcullisv1.Problem{{Path: "network_policies.github_api.endpoints[0].host", Message: "a warning"}}
	}
	return res, nil
}

func (f *fakeGateway) ListSandboxes(ctx context.Context, req *portcullisv1.ListSandboxesRequest) (*portcullisv1.ListSandboxesResponse, error) {
	if err := f.record(ctx, "ListSandboxes", req); err != nil {
		return nil, err
	}
	return &portcullisv1.ListSandboxesResponse{Sandboxes: []*portcullisv1.Sandbox{
		{Name: "orders", CurrentVersion: 3, CurrentHash: strings.Repeat("ab", 32), CreatedAt: created, CreatedBy: "admin"},
		{Name: "empty-sandbox", CreatedAt: created, CreatedBy: "admin"},
	}}, nil
}

func (f *fakeGateway) GetSandbox(ctx context.Context, req *portcullisv1.GetSandboxRequest) (*portcullisv1.Sandbox, error) {
	if err := f.record(ctx, "GetSandbox", req); err != nil {
		return nil, err
	}
	return &portcullisv1.Sandbox{Name: req.GetName(), CurrentVersion: 3, CreatedAt: created}, nil
}

func (f *fakeGateway) DeleteSandbox(ctx context.Context, req *portcullisv1.DeleteSandboxRequest) (*portcullisv1.DeleteSandboxResponse, error) {
	if err := f.record(ctx, "DeleteSandbox", req); err != nil {
		return nil, err
	}
	return &portcullisv1.DeleteSandboxResponse{Name: req.GetName()}, nil
}

func (f *fakeGateway) RotateSandboxToken(ctx context.Context, req *portcullisv1.RotateSandboxTokenRequest) (*portcullisv1.RotateSandboxTokenResponse, error) {
	if err := f.record(ctx, "RotateSandboxToken", req); err != nil {
		return nil, err
	}
	return &portcullisv1.RotateSandboxTokenResponse{Name: req.GetName(), Token: sandboxToken}, nil
}

func (f *fakeGateway) CreateToken(ctx context.Context, req *portcullisv1.CreateTokenRequest) (*portcullisv1.CreateTokenResponse, error) {
	if err := f.record(ctx, "CreateToken", req); err != nil {
		return nil, err
	}
	return &portcullisv1.CreateTokenResponse{Name: req.GetName(), Role: req.GetRole(), Token: "new-operator-token"}, nil
}

func (f *fakeGateway) ListTokens(ctx context.Context, req *portcullisv1.ListTokensRequest) (*portcullisv1.ListTokensResponse, error) {
	if err := f.record(ctx, "ListTokens", req); err != nil {
		return nil, err
	}
	return &portcullisv1.ListTokensResponse{Tokens: []*portcullisv1.Token{
		{Name: "admin", Role: "admin", CreatedAt: created},
		{Name: "orders", Role: "sandbox", Sandbox: "orders", CreatedAt: created, RevokedAt: created},
	}}, nil
}

func (f *fakeGateway) RevokeToken(ctx context.Context, req *portcullisv1.RevokeTokenRequest) (*portcullisv1.RevokeTokenResponse, error) {
	if err := f.record(ctx, "RevokeToken", req); err != nil {
		return nil, err
	}
	return &portcullisv1.RevokeTokenResponse{Name: req.GetName()}, nil
}

func (f *fakeGateway) SetPolicy(ctx context.Context, req *portcullisv1.SetPolicyRequest) (*portcullisv1.PolicyVersion, error) {
	if err := f.record(ctx, "SetPolicy", req); err != nil {
		return nil, err
	}
	v := f.version(req.GetSandbox(), 2)
	if strings.Contains(req.GetDocument(), "# unchanged") {
		v.Version, v.Unchanged = 1, true
	}
	return v, nil
}

func (f *fakeGateway) GetPolicy(ctx context.Context, req *portcullisv1.GetPolicyRequest) (*portcullisv1.PolicyVersion, error) {
	if err := f.record(ctx, "GetPolicy", req); err != nil {
		return nil, err
	}
	return f.version(req.GetSandbox(), max(req.GetVersion(), 4)), nil
}

func (f *fakeGateway) ListPolicyVersions(ctx context.Context, req *portcullisv1.ListPolicyVersionsRequest) (*portcullisv1.ListPolicyVersionsResponse, error) {
	if err := f.record(ctx, "ListPolicyVersions", req); err != nil {
		return nil, err
	}
	v1, v2 := f.version(req.GetSandbox(), 1), f.version(req.GetSandbox(), 2)
	v1.Policy, v2.Policy = nil, nil
	v2.Source, v2.Provenance = "rollback", map[string]string{"to_version": "1"}
	return &portcullisv1.ListPolicyVersionsResponse{Versions: []*portcullisv1.PolicyVersion{v1, v2}}, nil
}

func (f *fakeGateway) DiffPolicy(ctx context.Context, req *portcullisv1.DiffPolicyRequest) (*portcullisv1.DiffPolicyResponse, error) {
	if err := f.record(ctx, "DiffPolicy", req); err != nil {
		return nil, err
	}
	return &portcullisv1.DiffPolicyResponse{
		Sandbox: req.GetSandbox(), FromVersion: req.GetFromVersion(), ToVersion: req.GetToVersion(),
		FromHash: strings.Repeat("1", 64), ToHash: strings.Repeat("2", 64),
		Changes: []*portcullisv1.PolicyChange{
			{Kind: "added", Path: "network_policies.shipping", Summary: "entry shipping"},
			{Kind: "removed", Path: "network_policies.old.binaries[0]", Before: "/usr/bin/node"},
			{Kind: "changed", Path: "network_policies.orders.endpoints[0].port", Summary: "port", Before: "443", After: "8443"},
		},
	}, nil
}

func (f *fakeGateway) RollbackPolicy(ctx context.Context, req *portcullisv1.RollbackPolicyRequest) (*portcullisv1.PolicyVersion, error) {
	if err := f.record(ctx, "RollbackPolicy", req); err != nil {
		return nil, err
	}
	v := f.version(req.GetSandbox(), 5)
	v.Source = "rollback"
	return v, nil
}

// decodeJSON parses stdout as a JSON object.
func decodeJSON(t *testing.T, stdout string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, stdout)
	}
	return m
}

// hasKeys fails unless m has every key.
func hasKeys(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON has no %q: %v", k, m)
		}
	}
}

func ok(t *testing.T, code int, stderr string) {
	t.Helper()
	if code != exitOK {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", code, stderr)
	}
}

func TestSandboxCommands(t *testing.T) {
	f := newFakeGateway(t)
	doc, err := os.ReadFile("testdata/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("create json", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "sandbox", "create", "orders", "-f", "testdata/quickstart.yaml", "-o", "json")
		ok(t, code, stderr)
		req := f.last(t, "CreateSandbox").req.(*portcullisv1.CreateSandboxRequest)
		if req.GetName() != "orders" || req.GetPolicy() != string(doc) {
			t.Errorf("request: name %q, policy sent as given: %v", req.GetName(), req.GetPolicy() == string(doc))
		}
		m := decodeJSON(t, stdout)
		hasKeys(t, m, "name", "token", "sandbox", "policy_version")
		if m["token"] != sandboxToken {
			t.Errorf("token = %v", m["token"])
		}
		if pv := m["policy_version"].(map[string]any); pv["version"] != float64(1) || pv["hash"] == nil {
			// Versions are JSON numbers.
			t.Errorf("policy_version = %v", pv)
		}
		if !strings.Contains(stderr, "warning: network_policies.github_api.endpoints[0].host: a warning") {
			t.Errorf("warnings not on stderr:\n%s", stderr)
		}
	})

	t.Run("create text from stdin", func(t *testing.T) {
		stdout, stderr, code := runCLIWith(t, cliInput{stdin: string(doc)},
			"--gateway", f.url, "--token", adminToken, "sandbox", "create", "orders", "-f", "-")
		ok(t, code, stderr)
		if req := f.last(t, "CreateSandbox").req.(*portcullisv1.CreateSandboxRequest); req.GetPolicy() != string(doc) {
			t.Errorf("stdin not sent as the policy: %q", req.GetPolicy())
		}
		for _, want := range []string{"sandbox orders created", "policy: version 1 (sha256 ", "token:  " + sandboxToken} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
	})

	t.Run("list", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "sandbox", "list")
		ok(t, code, stderr)
		f.last(t, "ListSandboxes")
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "abababababab…") ||
			!strings.Contains(lines[1], "2026-01-02T03:04:05Z") {
			t.Errorf("table:\n%s", stdout)
		}
		if strings.Index(lines[0], "VERSION") != strings.Index(lines[1], "3") {
			t.Errorf("columns not aligned:\n%s", stdout)
		}

		stdout, stderr, code = f.cli(t, "sandbox", "list", "-o", "json")
		ok(t, code, stderr)
		f.last(t, "ListSandboxes")
		m := decodeJSON(t, stdout)
		if s := m["sandboxes"].([]any); len(s) != 2 || s[0].(map[string]any)["current_version"] != float64(3) {
			t.Errorf("sandboxes = %v", m["sandboxes"])
		}
	})

	t.Run("get", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "sandbox", "get", "orders")
		ok(t, code, stderr)
		if f.last(t, "GetSandbox").req.(*portcullisv1.GetSandboxRequest).GetName() != "orders" || !strings.Contains(strings.Join(strings.Fields(stdout), " "), "version: 3 ") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("delete", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "sandbox", "delete", "orders", "-o", "json")
		ok(t, code, stderr)
		f.last(t, "DeleteSandbox")
		if m := decodeJSON(t, stdout); m["name"] != "orders" {
			t.Errorf("json = %v", m)
		}
	})

	t.Run("rotate-token", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "sandbox", "rotate-token", "orders", "-o", "json")
		ok(t, code, stderr)
		f.last(t, "RotateSandboxToken")
		if m := decodeJSON(t, stdout); m["name"] != "orders" || m["token"] != sandboxToken {
			t.Errorf("json = %v", m)
		}
	})
}

func TestTokenCommands(t *testing.T) {
	f := newFakeGateway(t)

	stdout, stderr, code := f.cli(t, "token", "create", "--role", "operator", "--name", "alice", "-o", "json")
	ok(t, code, stderr)
	req := f.last(t, "CreateToken").req.(*portcullisv1.CreateTokenRequest)
	if req.GetName() != "alice" || req.GetRole() != "operator" {
		t.Errorf("request = %v", req)
	}
	m := decodeJSON(t, stdout)
	hasKeys(t, m, "name", "token", "role")

	stdout, stderr, code = f.cli(t, "token", "list")
	ok(t, code, stderr)
	f.last(t, "ListTokens")
	if !strings.Contains(stdout, "REVOKED") || !strings.Contains(stdout, "orders") || strings.Contains(stdout, adminToken) {
		t.Errorf("table:\n%s", stdout)
	}

	stdout, stderr, code = f.cli(t, "token", "revoke", "alice")
	ok(t, code, stderr)
	if f.last(t, "RevokeToken").req.(*portcullisv1.RevokeTokenRequest).GetName() != "alice" || stdout != "token alice revoked\n" {
		t.Errorf("stdout:\n%s", stdout)
	}
}

func TestPolicySet(t *testing.T) {
	f := newFakeGateway(t)

	t.Run("json", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "policy", "set", "orders", "-f", "testdata/quickstart.yaml", "-o", "json")
		ok(t, code, stderr)
		req := f.last(t, "SetPolicy").req.(*portcullisv1.SetPolicyRequest)
		if req.GetSandbox() != "orders" || req.ExpectedVersion != nil || !strings.Contains(req.GetDocument(), "github_api") {
			t.Errorf("request = %v", req)
		}
		m := decodeJSON(t, stdout)
		hasKeys(t, m, "version", "hash", "policy", "sandbox", "created_at")
		if _, ok := m["unchanged"]; ok {
			t.Errorf("unchanged present for a stored version: %v", m)
		}
	})

	t.Run("expect-version 0 is sent", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "policy", "set", "orders", "-f", "testdata/quickstart.yaml", "--expect-version", "0")
		ok(t, code, stderr)
		req := f.last(t, "SetPolicy").req.(*portcullisv1.SetPolicyRequest)
		if req.ExpectedVersion == nil || *req.ExpectedVersion != 0 {
			t.Errorf("expected_version = %v, want 0", req.ExpectedVersion)
		}
		if !strings.HasPrefix(stdout, "orders: version 2 (sha256 ") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("unchanged", func(t *testing.T) {
		stdout, stderr, code := runCLIWith(t, cliInput{stdin: "# unchanged\nversion: 1\n"},
			"--gateway", f.url, "--token", adminToken, "policy", "set", "orders", "-f", "-", "--expect-version", "1")
		ok(t, code, stderr)
		if req := f.last(t, "SetPolicy").req.(*portcullisv1.SetPolicyRequest); req.GetExpectedVersion() != 1 {
			t.Errorf("expected_version = %d", req.GetExpectedVersion())
		}
		if stdout != "orders: unchanged, still version 1\n" {
			t.Errorf("stdout:\n%s", stdout)
		}
		stdout, stderr, code = runCLIWith(t, cliInput{stdin: "# unchanged\n"},
			"--gateway", f.url, "--token", adminToken, "policy", "set", "orders", "-f", "-", "-o", "json")
		ok(t, code, stderr)
		f.last(t, "SetPolicy")
		if m := decodeJSON(t, stdout); m["unchanged"] != true || m["version"] != float64(1) {
			t.Errorf("json = %v", m)
		}
	})

	t.Run("problems", func(t *testing.T) {
		detail, err := connectproto.NewErrorDetail(&portcullisv1.ValidationProblems{Problems: []*portcullisv1.Problem{
			{Path: "network_policies.github_api.endpoints[0].hots", Message: "unknown field"},
			{Path: "network_policies.github_api.endpoints[0].port", Message: "must be between 1 and 65535"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		f.fail("SetPolicy", connect.NewError(connect.CodeInvalidArgument, "policy has 2 problems").WithDetail(detail))
		defer f.fail("SetPolicy", nil)
		stdout, stderr, code := f.cli(t, "policy", "set", "orders", "-f", "testdata/invalid.yaml")
		f.last(t, "SetPolicy")
		if code != exitInvalid || stdout != "" {
			t.Fatalf("exit code %d, stdout %q", code, stdout)
		}
		for _, want := range []string{
			"error: policy has 2 problems\n",
			"  network_policies.github_api.endpoints[0].hots: unknown field\n",
			"  network_policies.github_api.endpoints[0].port: must be between 1 and 65535\n",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
	})
}

func TestPolicyReadCommands(t *testing.T) {
	f := newFakeGateway(t)

	t.Run("get yaml is the canonical document", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "policy", "get", "orders", "--version", "2", "-o", "yaml")
		ok(t, code, stderr)
		if v := f.last(t, "GetPolicy").req.(*portcullisv1.GetPolicyRequest).GetVersion(); v != 2 {
			t.Errorf("version = %d", v)
		}
		want, _, _ := runCLI(t, "policy", "fmt", "testdata/quickstart.yaml")
		if stdout != want {
			t.Errorf("get -o yaml:\n%s\nwant (policy fmt):\n%s", stdout, want)
		}
	})

	t.Run("get json", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "policy", "get", "orders", "-o", "json")
		ok(t, code, stderr)
		if v := f.last(t, "GetPolicy").req.(*portcullisv1.GetPolicyRequest).GetVersion(); v != 0 {
			t.Errorf("version = %d, want 0 (current)", v)
		}
		m := decodeJSON(t, stdout)
		hasKeys(t, m, "version", "hash", "policy", "source")
		if m["policy"].(map[string]any)["version"] != float64(1) {
			t.Errorf("policy = %v", m["policy"])
		}
	})

	t.Run("get text", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "policy", "get", "orders")
		ok(t, code, stderr)
		f.last(t, "GetPolicy")
		if !strings.Contains(stdout, "version: 4") || !strings.Contains(stdout, "---\nversion: 1\n") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("history", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "policy", "history", "orders", "-o", "json")
		ok(t, code, stderr)
		f.last(t, "ListPolicyVersions")
		vs, _ := decodeJSON(t, stdout)["versions"].([]any)
		if len(vs) != 2 || vs[1].(map[string]any)["source"] != "rollback" {
			t.Errorf("versions = %v", vs)
		}
		stdout, stderr, code = f.cli(t, "policy", "history", "orders")
		ok(t, code, stderr)
		f.last(t, "ListPolicyVersions")
		if !strings.Contains(stdout, "rollback (to_version=1)") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("diff", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "policy", "diff", "orders", "1", "3")
		ok(t, code, stderr)
		req := f.last(t, "DiffPolicy").req.(*portcullisv1.DiffPolicyRequest)
		if req.GetFromVersion() != 1 || req.GetToVersion() != 3 {
			t.Errorf("request = %v", req)
		}
		for _, want := range []string{
			"orders: version 1 (sha256 111111111111…) → 3 (sha256 222222222222…)\n",
			"+ network_policies.shipping: entry shipping\n",
			"- network_policies.old.binaries[0]: /usr/bin/node\n",
			"~ network_policies.orders.endpoints[0].port: port (443 → 8443)\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
	})

	t.Run("rollback", func(t *testing.T) {
		stdout, stderr, code := f.cli(t, "policy", "rollback", "orders", "--to", "2", "--expect-version", "4", "-o", "json")
		ok(t, code, stderr)
		req := f.last(t, "RollbackPolicy").req.(*portcullisv1.RollbackPolicyRequest)
		if req.GetToVersion() != 2 || req.ExpectedVersion == nil || *req.ExpectedVersion != 4 {
			t.Errorf("request = %v", req)
		}
		hasKeys(t, decodeJSON(t, stdout), "version", "hash", "policy")
	})
}

// TestErrorExitCodes checks the exit code and message of each kind of
// gateway answer, and that the token never appears in an error.
func TestErrorExitCodes(t *testing.T) {
	f := newFakeGateway(t)
	tests := []struct {
		err  *connect.Error
		want int
	}{
		{connect.NewError(connect.CodeNotFound, `sandbox "orders" not found`), exitNo},
		{connect.NewError(connect.CodePermissionDenied, "operators cannot write policies"), exitNo},
		{connect.NewError(connect.CodeUnauthenticated, "invalid token"), exitNo},
		{connect.NewError(connect.CodeInvalidArgument, "bad name"), exitInvalid},
		{connect.NewError(connect.CodeAborted, "current version is 4, not 3"), exitConflict},
		{connect.NewError(connect.CodeFailedPrecondition, "filesystem_policy is fixed"), exitConflict},
		{connect.NewError(connect.CodeAlreadyExists, "sandbox exists"), exitConflict},
		{connect.NewError(connect.CodeUnavailable, "shutting down"), exitUnavailable},
		{connect.NewError(connect.CodeInternal, "internal error"), exitNo},
	}
	for _, tt := range tests {
		t.Run(tt.err.Code().String(), func(t *testing.T) {
			f.fail("GetSandbox", tt.err)
			stdout, stderr, code := f.cli(t, "sandbox", "get", "orders")
			f.last(t, "GetSandbox")
			if code != tt.want {
				t.Errorf("exit code %d, want %d", code, tt.want)
			}
			if stdout != "" || !strings.Contains(stderr, "error: ") || !strings.Contains(stderr, tt.err.Message()) {
				t.Errorf("stdout %q, stderr %q", stdout, stderr)
			}
			if strings.Contains(stdout+stderr, adminToken) {
				t.Errorf("the token was printed:\n%s%s", stdout, stderr)
			}
		})
	}

	t.Run("no token hint", func(t *testing.T) {
		f.fail("ListSandboxes", connect.NewError(connect.CodeUnauthenticated, "missing token"))
		_, stderr, code := runCLI(t, "--gateway", f.url, "sandbox", "list")
		if code != exitNo || !strings.Contains(stderr, "no token given") {
			t.Errorf("code %d, stderr:\n%s", code, stderr)
		}
	})
}

// TestGatewayUnavailable checks exit code 4 when nothing listens.
func TestGatewayUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	for _, args := range [][]string{
		{"sandbox", "list"},
		{"policy", "set", "orders", "-f", "testdata/quickstart.yaml"},
		{"token", "list", "-o", "json"},
	} {
		stdout, stderr, code := runCLI(t, append([]string{"--gateway", url, "--token", adminToken}, args...)...)
		if code != exitUnavailable {
			t.Errorf("%v: exit code %d, want %d; stderr:\n%s", args, code, exitUnavailable, stderr)
		}
		if stdout != "" || !strings.Contains(stderr, "error: gateway "+url+" unavailable") || strings.Contains(stderr, adminToken) {
			t.Errorf("%v: stdout %q, stderr:\n%s", args, stdout, stderr)
		}
	}
}
