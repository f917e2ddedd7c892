package apiclient_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/apiclient"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// A tail the caller stops is no error; one of an unknown sandbox is the
// gateway's answer. Against a real gateway.
func TestTailDecisions(t *testing.T) {
	g := gatewaytest.Start(t, "sqlite")
	u, _ := url.Parse(g.URL)
	c := apiclient.New(apiclient.Config{URL: u, Token: gatewaytest.AdminToken, Timeout: 10 * time.Second})
	defer c.CloseIdleConnections()
	if _, err := c.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "orders", Policy: "version: 1\n"}); err != nil {
		t.Fatal(err)
	}
	none := func(d *portcullisv1.StoredDecision) error {
		t.Errorf("a record of a sandbox that has none: %v", d)
		return nil
	}
	// Stopped as an interrupt stops it: a cancel (a deadline would travel
	// to the gateway, which would end the stream itself).
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(300*time.Millisecond, cancel)
	if err := c.TailDecisions(ctx, &portcullisv1.TailDecisionsRequest{Sandbox: "orders", Backlog: 10}, none); err != nil {
		t.Errorf("a tail stopped by its caller: %v, want nil", err)
	}
	err := c.TailDecisions(t.Context(), &portcullisv1.TailDecisionsRequest{Sandbox: "nope"}, none)
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("the tail of an unknown sandbox: %v, want not found", err)
	}
}
