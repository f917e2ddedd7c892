package apiclient_test

import (
	"net/url"
	"testing"
	"time"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/apiclient"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// A version no proxy of the sandbox enforces yet (none is connected) is
// answered at once, with nothing pending; against a real gateway.
func TestAwaitEnforcementNoProxy(t *testing.T) {
	g := gatewaytest.Start(t, "sqlite")
	u, _ := url.Parse(g.URL)
	c := apiclient.New(apiclient.Config{URL: u, Token: gatewaytest.AdminToken, Timeout: 10 * time.Second})
	defer c.CloseIdleConnections()
	sb, err := c.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "orders", Policy: "version: 1\n"})
	if err != nil {
		t.Fatal(err)
	}
	e, timedOut, err := c.AwaitEnforcement(t.Context(), "orders", sb.GetPolicyVersion().GetVersion(), 10*time.Second)
	if err != nil || timedOut || e.GetTotal() != 0 || e.GetPending() != 0 {
		t.Errorf("AwaitEnforcement = %v, %v, %v; want no proxy, at once", e, timedOut, err)
	}
	if _, _, err := c.AwaitEnforcement(t.Context(), "nope", 1, 10*time.Second); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("an unknown sandbox: %v, want not found", err)
	}
}
