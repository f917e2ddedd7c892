package advisor

import (
	"context"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/prover"
)

// A new entry on the destination of a schema-guarded tool may not allow
// the tool without a schema: that drops the guard (and, sorting first,
// the guard rule's rate limit) as add_allow_rules on the endpoint would,
// and is refused the same way. A new entry elsewhere is not.
func TestAddRuleKeepsSchemaGuard(t *testing.T) {
	base := mustParsePolicy(t, `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow:
              method: tools/call
              tool: lookup_order
              rate_limit: { requests_per_minute: 6, burst: 3 }
              arguments_schema:
                type: object
                properties:
                  order_id: { type: string, pattern: "^[A-Z]-\\d{4}$" }
                required: [order_id]
                additionalProperties: false
    binaries: []
`)
	eval := func(op string) error {
		p, err := ParseProposal([]byte("rationale: t\noperations:\n  - " + op + "\n"))
		if err != nil {
			t.Fatalf("ParseProposal: %v", err)
		}
		_, _, err = Evaluate(context.Background(), base, p, prover.Options{Now: now})
		return err
	}
	for _, op := range []string{
		`add_allow_rules: { policy: orders, host: orders.example.com, port: 443, path: /mcp, rules: [ { allow: { method: tools/call, tool: lookup_order } } ] }`,
		`add_rule: { name: more, rule: { endpoints: [ { host: orders.example.com, port: 443, path: /mcp, protocol: mcp, rules: [ { allow: { method: tools/call, tool: lookup_order } } ] } ], binaries: [ { path: /usr/bin/python3 } ] } }`,
		`add_rule: { name: more, rule: { endpoints: [ { host: ORDERS.example.com., port: 443, protocol: mcp, rules: [ { allow: { method: tools/call, tool: lookup_order } } ] } ], binaries: [ { path: /usr/bin/python3 } ] } }`,
	} {
		err := eval(op)
		r, ok := AsRefusal(err)
		if !ok || r.Rule != RuleArgumentsSchema || !strings.Contains(r.Reason, "guarded by the arguments_schema") {
			t.Errorf("%s: err = %v, want a %s refusal (the guard is dropped)", op, err, RuleArgumentsSchema)
		}
	}
	for _, op := range []string{
		`add_rule: { name: other, rule: { endpoints: [ { host: tickets.example.com, port: 443, path: /mcp, protocol: mcp, rules: [ { allow: { method: tools/call, tool: lookup_order } } ] } ], binaries: [ { path: /usr/bin/python3 } ] } }`,
		`add_rule: { name: more, rule: { endpoints: [ { host: orders.example.com, port: 443, path: /mcp, protocol: mcp, rules: [ { allow: { method: tools/call, tool: lookup_order, arguments_schema: { const: { order_id: x } } } } ] } ], binaries: [ { path: /usr/bin/python3 } ] } }`,
	} {
		if err := eval(op); err != nil {
			t.Errorf("%s: refused: %v", op, err)
		}
	}
}
