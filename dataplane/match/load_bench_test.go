package match

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// loadPolicy is dataplane's BenchmarkMCPRequest policy (bench/proxyload's
// shape): an MCP endpoint on a loopback IP literal with a deny rule and a
// rate-limited, schema-gated allow rule, and no binaries.
var loadPolicy = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: 127.0.0.1
        port: 8931
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          versions: ["2025-11-25"]
          filter_tools_list: true
        rules:
          - allow: { method: initialize }
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema:
                type: object
                properties:
                  order_id: { type: string, pattern: "^[A-Z]-\\d{4}$" }
                required: [order_id]
                additionalProperties: false
              rate_limit: { requests_per_minute: ` + strconv.Itoa(policy.MaxRateLimit) + ` }
        deny_rules:
          - { method: tools/call, tool: refund_order }
    binaries: []
`

// loadRequest is the request the proxy judges for BenchmarkMCPRequest's
// tools/call: host and address the loopback literal, loopback allowed.
func loadRequest() policy.Request {
	return policy.Request{Host: "127.0.0.1", Addr: netip.MustParseAddr("127.0.0.1"), Port: 8931,
		HTTPMethod: "POST", Path: "/mcp", Time: time.Now(), DevAllowLoopback: true,
		MCP: &policy.MCPMessage{Method: "tools/call", Tool: "lookup_order", ProtocolVersion: "2025-11-25",
			Arguments: json.RawMessage(`{"order_id":"A-1042"}`), ArgumentsRead: true}}
}

// BenchmarkLoadRequest measures what the proxy asks the matcher for each
// of BenchmarkMCPRequest's calls: MCPLimits, Decide and RateLimit.
//
// Run: go test ./dataplane/match/ -run '^$' -bench LoadRequest -benchmem
func BenchmarkLoadRequest(b *testing.B) {
	m := mustCompile(b, parse(b, loadPolicy))
	req := loadRequest()
	if d := m.Decide(&req); !d.Allow || m.RateLimit(&d) == nil {
		b.Fatalf("%+v", d)
	}
	if d, want := m.Decide(&req), policy.Decide(m.Policy(), req); d != want {
		b.Fatalf("matcher %+v, policy.Decide %+v", d, want)
	}
	b.Run("Decide", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.Decide(&req)
		}
	})
	b.Run("All", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := m.MCPLimits(req.Host, req.Port, req.HTTPMethod, req.Path); !ok {
				b.Fatal("not an MCP endpoint")
			}
			d := m.Decide(&req)
			m.RateLimit(&d)
		}
	})
}
