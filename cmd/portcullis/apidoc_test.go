package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// docBlock returns the fenced block of a Markdown file marked
// `<!-- MARK -->` on the line before it.
func docBlock(t *testing.T, path, mark string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(mark) + " -->\n```[a-z]*\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s has no block marked <!-- %s -->", path, mark)
	}
	return string(m[1])
}

// TestAPIDocExamples runs docs/api.md's examples against a real gateway:
// the curl (Connect) block as written, with the gateway's address for the
// default one; the grpcurl block when grpcurl is installed; and, always,
// what that block does with a stock grpc-go client — list the services by
// server reflection, then GetPolicy with the token in the authorization
// metadata.
func TestAPIDocExamples(t *testing.T) {
	const doc = "../../docs/api.md"
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	g.must(t, admin, "sandbox", "create", "orders", "-f", "../../examples/orders-local.yaml")
	support := g.json(t, admin, "sandbox", "create", "support", "-f", "../../examples/support.yaml")["token"].(string)
	// The reader's directory: examples/ and the sandbox's token file.
	dir := t.TempDir()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "examples"), filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "support.token"), []byte(support+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hostport := strings.TrimPrefix(g.Gateway.URL, "http://")
	bash := func(block string) string {
		t.Helper()
		cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", strings.ReplaceAll(block, "127.0.0.1:7070", hostport))
		cmd.Env = append(os.Environ(), "PORTCULLIS_TOKEN="+admin)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v:\n%s\n%s", err, block, out)
		}
		return string(out)
	}

	t.Run("connect", func(t *testing.T) {
		out := bash(docBlock(t, doc, "api: connect"))
		var v struct {
			Sandbox string `json:"sandbox"`
			Version int    `json:"version"`
			Hash    string `json:"hash"`
			Source  string `json:"source"`
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.Sandbox != "orders" || v.Version != 1 || len(v.Hash) != 64 || v.Source != "create" {
			t.Fatalf("the curl example printed %s (%v)", out, err)
		}
	})

	t.Run("submit", func(t *testing.T) {
		out := bash(docBlock(t, doc, "api: submit"))
		var p struct {
			Status   string `json:"status"`
			Sandbox  string `json:"sandbox"`
			Findings []struct {
				Kind string `json:"kind"`
			} `json:"findings"`
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil || p.Status != "pending" || p.Sandbox != "support" || len(p.Findings) != 1 || p.Findings[0].Kind != "new_mcp_tool" {
			t.Fatalf("the SubmitProposal example printed %s (%v)", out, err)
		}
	})

	t.Run("grpc-go", func(t *testing.T) {
		conn, err := grpc.NewClient(hostport, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		res, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var services []string
		for _, s := range res.GetListServicesResponse().GetService() {
			services = append(services, s.GetName())
		}
		if !strings.Contains(strings.Join(services, " "), "portcullis.v1.PolicyService") {
			t.Fatalf("reflection lists %v", services)
		}
		stream.CloseSend()
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+admin)
		var v portcullisv1.PolicyVersion
		if err := conn.Invoke(ctx, "/portcullis.v1.PolicyService/GetPolicy", &portcullisv1.GetPolicyRequest{Sandbox: "orders"}, &v); err != nil {
			t.Fatal(err)
		}
		if v.GetSandbox() != "orders" || v.GetVersion() != 1 {
			t.Fatalf("GetPolicy over gRPC: %v", &v)
		}
	})

	t.Run("grpcurl", func(t *testing.T) {
		if _, err := exec.LookPath("grpcurl"); err != nil {
			t.Log("grpcurl is not installed: the grpc-go subtest checked the same calls")
			return
		}
		out := bash(docBlock(t, doc, "api: grpc"))
		if !strings.Contains(out, "portcullis.v1.PolicyService") || !strings.Contains(out, `"version": 1`) {
			t.Fatalf("the grpcurl example printed:\n%s", out)
		}
	})
}
