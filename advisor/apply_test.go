package advisor

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

const baseDoc = `
version: 1
network_policies:
  orders:
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
          - allow: { method: tools/list }
          - allow: { method: tools/call, tool: lookup_order }
        deny_rules:
          - { method: tools/call, tool: refund_order }
    binaries: [ { path: /usr/bin/python3 } ]
  shop:
    endpoints:
      - host: shop.example.com
        port: 443
        path: /api/**
        protocol: rest
        rules:
          - allow: { method: GET, path: "/api/orders/*" }
      - host: shop.example.com
        port: 443
        path: /admin/**
        protocol: rest
        rules:
          - allow: { method: GET, path: "/admin/status" }
    binaries: [ { path: /usr/bin/python3 } ]
  github:
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        rules:
          - allow: { method: GET, path: "/repos/**" }
    binaries: [ { path: /usr/bin/gh } ]
  anyone:
    endpoints:
      - { host: pypi.org, port: 443 }
    binaries: []
`

func mustParsePolicy(t testing.TB, doc string) *policy.Policy {
	t.Helper()
	p, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustParse(t testing.TB, doc string) *Proposal {
	t.Helper()
	p, err := ParseProposal([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func opts() prover.Options { return prover.Options{Now: now} }

func TestTrackShipmentBesideLookupOrder(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	p := mustParse(t, `
rationale: support agents must track shipments for open orders
operations:
  - add_allow_rules:
      policy: orders
      host: Orders.Example.com.
      port: 443
      path: /mcp
      rules:
        - allow: { method: tools/call, tool: track_shipment }
`)
	result, rep, err := Evaluate(context.Background(), base, p, opts())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != prover.NewMCPTool {
		t.Fatalf("want one new_mcp_tool, got %+v", rep.Findings)
	}
	ce := rep.Findings[0].Counterexample
	if ce == nil || ce.MCP == nil || ce.MCP.Tool != "track_shipment" {
		t.Fatalf("counterexample: %+v", ce)
	}
	if !policy.Decide(result, *ce).Allow || policy.Decide(base, *ce).Allow {
		t.Fatal("counterexample is not an added request")
	}
	// The result is canonical and round-trips.
	again, _, err := policy.Parse(result.CanonicalJSON())
	if err != nil || again.Hash() != result.Hash() {
		t.Fatalf("round trip: %v", err)
	}
}

func TestChangesNothing(t *testing.T) {
	base := mustParsePolicy(t, baseDoc)
	cases := map[string]string{
		"denied by deny_rules": `
rationale: refunds
operations:
  - add_allow_rules:
      policy: orders
      host: orders.example.com
      port: 443
      path: /mcp
      rules: [ { allow: { method: tools/call, tool: refund_order } } ]
`,
		"already allowed": `
rationale: lookups
operations:
  - add_allow_rules:
      policy: orders
      host: orders.example.com
      port: 443
      path: /mcp
      rules: [ { allow: { method: tools/call, tool: lookup_order } } ]
`,
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := Evaluate(context.Background(), base, mustParse(t, doc), opts())
			r, ok := AsRefusal(err)
			if !ok || r.Rule != RuleChangesNothing || r.Op != 0 || r.Field != "operations[0].add_allow_rules" {
				t.Fatalf("want changes_nothing, got %v", err)
			}
			if name == "denied by deny_rules" && !strings.Contains(r.Reason, "deny_rules") {
				t.Fatalf("reason does not name the deny rule: %s", r.Reason)
			}
			t.Log(r)
		})
	}
}

func TestExamplesOrders(t *testing.T) {
	data, err := os.ReadFile("../examples/orders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base := mustParsePolicy(t, string(data))
	p := mustParse(t, `{"rationale": "track", "operations": [{"add_allow_rules": {"policy": "orders", "host": "demo-mcp", "port": 8081,
	  "rules": [{"allow": {"method": "tools/call", "tool": "track_shipment"}}]}}]}`)
	_, rep, err := Evaluate(context.Background(), base, p, opts())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != prover.NewMCPTool {
		t.Fatalf("findings: %+v", rep.Findings)
	}
}
