package main

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// The CLI pointed at a proxy's port instead of the gateway's says so, and
// how to fix it, instead of "internal".
func TestCLIAtAProxysPort(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	created := jsonOut(t, gw, gatewaytest.AdminToken, "sandbox", "create", "orders", "-f", "../../examples/orders-local.yaml")
	token, _ := created["token"].(string)
	_, addr := startTestProxy(t, gw.URL, "orders", token)

	_, stderr, code := runCLI(t, "--gateway", "http://"+addr, "--token", gatewaytest.AdminToken, "sandbox", "list")
	want := "http://" + addr + " answered as a Portcullis proxy, not a gateway: point --gateway at the gateway's address"
	if code == 0 || !strings.Contains(stderr, want) || strings.Contains(stderr, "internal") {
		t.Fatalf("exit %d, stderr %q; want it to contain %q", code, stderr, want)
	}
}
