package gateway_test

import (
	"context"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// TestMetricsKeepFailures: an ACK that says the proxy could not keep the
// version in its data dir counts it applied (it is enforced) and counts
// it in portcullis_proxy_keep_failures_total.
func TestMetricsKeepFailures(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	ctx := context.Background()
	created, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "orders", Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}
	st := policyStream(t, gw, created.Token)
	if err := st.Send(hello("orders", "p1")); err != nil {
		t.Fatal(err)
	}
	v1 := recvPolicy(t, st)
	a := ack(v1)
	a.GetAck().KeepError = "write policy.signed: no space left on device"
	if err := st.Send(a); err != nil {
		t.Fatal(err)
	}
	waitProxy(t, c, gw, "orders", "p1", func(p *portcullisv1.ProxyStatus) bool { return p.AppliedVersion == 1 })
	wantSamples(t, scrape(t, gw), map[string]float64{
		"portcullis_proxy_keep_failures_total": 1,
		"portcullis_push_nacks_total":          0,
		"portcullis_proxies_behind":            0,
	})
}
