package prover

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// The argument gate asserts formats: schemaInstance gives, for every
// format a schema may name, a string of that format.
func TestSchemaInstanceFormats(t *testing.T) {
	for _, f := range policy.KnownFormats() {
		schema := map[string]any{"type": "object", "required": []any{"x"},
			"properties": map[string]any{"x": map[string]any{"type": "string", "format": f}}}
		compiled, err := policy.CompileArgumentsSchema(schema)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := formatInstances[f]; !ok {
			t.Errorf("format %q has no instance", f)
		}
		args := schemaInstance(schema, 0)
		if err := compiled.Validate(args); err != nil {
			t.Errorf("format %q: instance %v refused: %v", f, args, err)
		}
	}
}

// A rule that adds a const schema for a guarded tool is arguments_widened
// (a rule-level kind that always needs a human), with the const call as
// counterexample: the proposed policy allows it, the current one denies it.
// With a binary glob there is no exact request to show, and the finding
// has none.
func TestArgumentsWidenedCounterexample(t *testing.T) {
	const doc = `version: 1
network_policies:
  orders:
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema: {type: object, properties: {order_id: {type: string, pattern: "^[A-Z]$"}}, required: [order_id], additionalProperties: false}
%s
    binaries: [{path: %s}]
`
	const added = `          - allow: {method: tools/call, tool: lookup_order, arguments_schema: {const: {order_id: "x1"}}}`
	for _, c := range []struct {
		binary  string
		witness bool
	}{{"/usr/bin/python3", true}, {"/usr/bin/*", false}} {
		cur := parse(t, fmt.Sprintf(doc, "", c.binary))
		prop := parse(t, fmt.Sprintf(doc, added, c.binary))
		rep, err := Prove(context.Background(), cur, prop, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Findings) != 1 || rep.Findings[0].Kind != ArgumentsWidened {
			t.Fatalf("%s: findings = %+v, want arguments_widened", c.binary, rep.Findings)
		}
		f := rep.Findings[0]
		if !strings.Contains(f.Detail, `{"const":{"order_id":"x1"}}`) || f.Rule != "rules[1]" {
			t.Errorf("%s: finding %+v does not show the rule and its schema", c.binary, f)
		}
		if !c.witness {
			if f.Counterexample != nil {
				t.Errorf("%s: counterexample %+v from a binary glob", c.binary, f.Counterexample)
			}
			continue
		}
		r := f.Counterexample
		if r == nil || r.MCP == nil || string(r.MCP.Arguments) != `{"order_id":"x1"}` || r.Binary != c.binary || r.Path != "/mcp" {
			t.Fatalf("counterexample = %+v", r)
		}
		if !policy.Decide(prop, *r).Allow || policy.Decide(cur, *r).Allow {
			t.Errorf("the counterexample is not allowed by proposed and denied by current")
		}
	}
}

// On a loopback upstream, proved as a proxy with --dev-allow-loopback
// judges it, the widened arguments still have their counterexample (it
// carries the option, so policy.Decide allows it under the proposed
// policy); without the option loopback is always denied and there is none.
func TestArgumentsWidenedCounterexampleLoopback(t *testing.T) {
	const doc = `version: 1
network_policies:
  orders:
    endpoints:
      - host: 127.0.0.1
        port: 8081
        path: /mcp
        protocol: mcp
        rules:
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema: {type: object, properties: {order_id: {type: string, pattern: "^[A-Z]$"}}, required: [order_id], additionalProperties: false}
%s
`
	cur := parse(t, fmt.Sprintf(doc, ""))
	prop := parse(t, fmt.Sprintf(doc, `          - allow: {method: tools/call, tool: lookup_order, arguments_schema: {const: {order_id: "x1"}}}`))
	for _, dev := range []bool{true, false} {
		rep, err := Prove(context.Background(), cur, prop, Options{DevAllowLoopback: dev})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Findings) != 1 || rep.Findings[0].Kind != ArgumentsWidened {
			t.Fatalf("dev %v: findings = %+v, want arguments_widened", dev, rep.Findings)
		}
		r := rep.Findings[0].Counterexample
		if !dev {
			if r != nil {
				t.Errorf("a counterexample %+v to an always-denied loopback upstream", r)
			}
			continue
		}
		if r == nil || !r.DevAllowLoopback || !policy.Decide(prop, *r).Allow || policy.Decide(cur, *r).Allow {
			t.Errorf("dev-allow-loopback: counterexample %+v, want the const call, allowed by proposed only", r)
		}
	}
}
