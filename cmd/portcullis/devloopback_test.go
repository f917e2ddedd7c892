package main

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// TestGatewayDevAllowLoopback: a denial of the README's demo server on
// 127.0.0.1 is proposable only from a gateway run with
// --dev-allow-loopback (Config.DevAllowLoopback), as the proxy that denied
// it reaches that server only with the flag of the same name. Without
// it, the proposal is refused as changing nothing and nothing is stored.
func TestGatewayDevAllowLoopback(t *testing.T) {
	for _, dev := range []bool{false, true} {
		g := startGateway(t, func(c *gateway.Config) { c.DevAllowLoopback = dev })
		admin := gatewaytest.AdminToken
		sb := g.json(t, admin, "sandbox", "create", "orders", "-f", "../../examples/orders-local.yaml")["token"].(string)
		d := mcpDenial("dn_00000000000000000000000a", "track_shipment")
		d.Host, d.Port = "127.0.0.1", 8081
		shipRecords(t, g.Gateway, sb, d)

		stdout, stderr, code := g.cli(t, sb, "propose", "--from-denial", d.DenialId, "--rationale", "agents track shipments", "-o", "json")
		list := g.json(t, admin, "proposals", "list")["proposals"]
		stored, _ := list.([]any)
		if !dev {
			if code != exitInvalid || !strings.Contains(stderr, "changes_nothing") || !strings.Contains(stderr, "loopback") {
				t.Errorf("without the switch: exit %d, stderr %q; want 2, changes_nothing, naming loopback", code, stderr)
			}
			if len(stored) != 0 {
				t.Errorf("without the switch a refused proposal was stored: %v", stored)
			}
			continue
		}
		if code != exitOK {
			t.Fatalf("with the switch: exit %d: %s", code, stderr)
		}
		p := decodeJSON(t, stdout)
		findings, _ := p["findings"].([]any)
		if p["status"] != "pending" || len(findings) != 1 || findings[0].(map[string]any)["kind"] != "new_mcp_tool" || len(stored) != 1 {
			t.Errorf("with the switch: %s; want one pending proposal with new_mcp_tool", stdout)
		}
	}
}
