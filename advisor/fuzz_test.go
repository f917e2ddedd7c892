package advisor

import (
	"bytes"
	"testing"
)

func FuzzParseProposal(f *testing.F) {
	seeds := []string{
		baseProposalYAML,
		`{"rationale": "x", "base_version": 3, "idempotency_key": "k-1", "operations": [{"add_binary": {"policy": "p", "path": "/usr/bin/node", "endpoints": ["a.example.com:443/mcp"]}}]}`,
		`{"rationale": "x", "operations": [{"add_deny_rules": {"policy": "p", "host": "h", "port": 443, "rules": [{"method": "tools/call", "tool": {"any": ["a", "b"]}}]}}]}`,
		`{"rationale": "x", "operations": [{"add_allow_rules": {"policy": "p", "host": "h", "port": 443, "rules": [{"allow": {"method": "tools/call", "tool": "t", "arguments_schema": {"type": "object", "maxProperties": 1.5}, "expires_at": "2026-01-02T15:04:05+02:00"}}]}}]}`,
		"rationale: &a x\noperations: [ { add_binary: { policy: *a, path: /x, endpoints: [ *a ] } } ]\n",
		`{"rationale": "x", "operations": [{}]}`,
		"- 1\n- 2\n",
		"",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProposal(data)
		if err != nil {
			return
		}
		enc, err := p.Encode()
		if err != nil {
			t.Fatalf("accepted proposal does not encode: %v", err)
		}
		q, err := ParseProposal(enc)
		if err != nil {
			t.Fatalf("re-encoded proposal does not parse: %v\n%s", err, enc)
		}
		enc2, err := q.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("re-parse differs:\n%s\n%s", enc, enc2)
		}
	})
}

const baseProposalYAML = `
rationale: support agents must track shipments for open orders
base_version: 3
idempotency_key: ticket-8812
operations:
  - add_allow_rules:
      policy: orders
      host: orders.example.com
      port: 443
      rules:
        - allow: { method: tools/call, tool: track_shipment }
  - add_rule:
      name: shipping
      rule: { endpoints: [ { host: ship.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: "/v1/shipments/*" } } ] } ], binaries: [ { path: /usr/bin/python3 } ] }
  - add_binary: { policy: orders, path: /usr/bin/node, endpoints: [ "orders.example.com:443/mcp" ] }
  - add_deny_rules: { policy: orders, host: orders.example.com, port: 443, rules: [ { method: tools/call, tool: cancel_order } ] }
`
