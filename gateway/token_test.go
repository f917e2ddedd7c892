package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// TestCreateSentryToken: an admin creates a sentry token whose name is its
// event source; a name that cannot be a source is refused as an invalid
// `name`, and a bad role's message lists the roles that may be created.
func TestCreateSentryToken(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	ctx := t.Context()
	admin := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)

	res, err := admin.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "urn:dpu:node-17", Role: "sentry"})
	if err != nil || res.GetRole() != "sentry" || res.GetName() != "urn:dpu:node-17" || res.GetToken() == "" {
		t.Fatalf("CreateToken(sentry) = %v, %v", res, err)
	}
	list, err := admin.token.ListTokens(ctx, &portcullisv1.ListTokensRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var listed bool
	for _, tok := range list.GetTokens() {
		if tok.GetName() == "urn:dpu:node-17" {
			listed = tok.GetRole() == "sentry" && tok.GetSandbox() == ""
		}
	}
	if !listed {
		t.Errorf("ListTokens does not show the sentry token: %v", list.GetTokens())
	}

	// A watchdog's token reads nothing, metrics included.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gw.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+res.GetToken())
	mres, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	mres.Body.Close()
	if mres.StatusCode != http.StatusForbidden {
		t.Errorf("GET /metrics with a sentry token = %d, want 403", mres.StatusCode)
	}

	// Its name is not a DNS label, yet it can be revoked by name.
	if _, err := admin.token.RevokeToken(ctx, &portcullisv1.RevokeTokenRequest{Name: "urn:dpu:node-17"}); err != nil {
		t.Errorf("RevokeToken(sentry): %v", err)
	}
	_, err = newConnectAPI(t, gw.URL, res.GetToken()).sandbox.ListSandboxes(ctx, &portcullisv1.ListSandboxesRequest{})
	if codeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a revoked sentry token: got %v, want Unauthenticated", err)
	}

	for _, name := range []string{"", "node 17", "node\x0017", "nœud-17", strings.Repeat("n", 256)} {
		_, err := admin.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: name, Role: "sentry"})
		if codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "name") {
			t.Errorf("CreateToken(sentry %q) = %v, want InvalidArgument naming name", name, err)
		}
	}
	_, err = admin.token.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "x", Role: "superuser"})
	if codeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "admin, operator or sentry") {
		t.Errorf("CreateToken(role superuser) = %v, want InvalidArgument listing admin, operator or sentry", err)
	}
}
