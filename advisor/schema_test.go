package advisor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
)

// ordersPolicy is examples/orders.yaml: lookup_order admits order ids
// matching ^[A-Z]-\d{4}$ only.
func ordersPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	data, err := os.ReadFile("../examples/orders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return mustParsePolicy(t, string(data))
}

func lookup(args string) policy.Request {
	return policy.Request{Binary: "/usr/bin/python3", Host: "demo-mcp", Port: 8081, HTTPMethod: "POST", Path: "/mcp", Time: now,
		MCP: &policy.MCPMessage{Method: "tools/call", Tool: "lookup_order", Arguments: json.RawMessage(args)}}
}

func schemaDenial(args string) DenialRecord {
	return DenialRecord{Binary: "/usr/bin/python3", Host: "demo-mcp", Port: 8081, HTTPMethod: "POST", Path: "/mcp",
		MCPMethod: "tools/call", Tool: "lookup_order", Entry: "orders", Arguments: json.RawMessage(args)}
}

// A call denied by the arguments_schema becomes a proposal admitting
// exactly its arguments: a rule with {"const": arguments}. Evaluate takes
// it (no "changes nothing"), the prover reports arguments_widened with
// that call as counterexample, and the result allows exactly that call:
// another value, an extra key or the old bare call stay as they were.
func TestFromDenialArgumentsSchema(t *testing.T) {
	base := ordersPolicy(t)
	denied := `{ "order_id" : "x" }`
	if policy.Decide(base, lookup(denied)).Allow {
		t.Fatal("the example policy allows order_id x")
	}
	p, err := FromDenial(base, schemaDenial(denied))
	if err != nil {
		t.Fatalf("FromDenial: %v", err)
	}
	if len(p.Operations) != 1 || p.Operations[0].AddAllowRules == nil {
		t.Fatalf("operations = %+v, want one add_allow_rules", p.Operations)
	}
	op := p.Operations[0].AddAllowRules
	rule := op.Rules[0].Allow
	if op.Policy != "orders" || rule.Method != "tools/call" || rule.Tool == nil || rule.Tool.Any[0] != "lookup_order" {
		t.Fatalf("operation = %+v, rule %+v", op, rule)
	}
	schema, _ := json.Marshal(rule.ArgumentsSchema)
	if string(schema) != `{"const":{"order_id":"x"}}` {
		t.Fatalf("arguments_schema = %s, want the const of the denied arguments", schema)
	}
	if !strings.Contains(p.Rationale, "exactly the denied arguments") {
		t.Errorf("rationale = %q", p.Rationale)
	}
	// Through the wire form, as the gateway stores it.
	doc, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	p, err = ParseProposal(doc)
	if err != nil {
		t.Fatalf("ParseProposal(%s): %v", doc, err)
	}
	result, rep, err := Evaluate(context.Background(), base, p, prover.Options{Now: now})
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	var widened *prover.Finding
	for i, f := range rep.Findings {
		if f.Kind == prover.ArgumentsWidened {
			widened = &rep.Findings[i]
		} else {
			t.Errorf("unexpected finding %s: %s", f.Kind, f.Detail)
		}
	}
	if widened == nil {
		t.Fatalf("no arguments_widened finding: %+v", rep.Findings)
	}
	if c := widened.Counterexample; c == nil || c.MCP == nil || c.MCP.Tool != "lookup_order" || string(c.MCP.Arguments) != `{"order_id":"x"}` {
		t.Fatalf("arguments_widened counterexample = %+v", widened.Counterexample)
	}
	if !strings.Contains(widened.Detail, `{"const":{"order_id":"x"}}`) {
		t.Errorf("detail does not show the schema: %s", widened.Detail)
	}
	for _, c := range []struct {
		args string
		want bool
	}{
		{`{"order_id":"x"}`, true},
		{`{"order_id": "x"}`, true},
		{`{"order_id":"A-1234"}`, true}, // the schema still admits what it did
		{`{"order_id":"y"}`, false},
		{`{"order_id":"x","all":true}`, false},
		{`{}`, false},
		{``, false},
	} {
		if got := policy.Decide(result, lookup(c.args)).Allow; got != c.want {
			t.Errorf("after the proposal, lookup_order %s allowed = %v, want %v", c.args, got, c.want)
		}
	}
}

// Without the denied arguments the advisor cannot build the narrowest
// proposal, and refuses rather than widen: the error names the field.
func TestFromDenialArgumentsSchemaNeedsArguments(t *testing.T) {
	base := ordersPolicy(t)
	for _, c := range []struct{ args, want string }{
		{"", "needs them"},
		{`["x"]`, "must be a JSON object"},
		{`{"a":1,"a":2}`, "appears twice"},
		{`{"a":1} {}`, "more data follows"},
		{"{\"a\":\"\xff\"}", "not valid UTF-8"},
	} {
		_, err := FromDenial(base, schemaDenial(c.args))
		r, ok := AsRefusal(err)
		if !ok || r.Rule != RuleArguments || r.Field != "arguments" || !strings.Contains(r.Reason, c.want) {
			t.Errorf("arguments %q: err = %v, want a refusal of arguments saying %q", c.args, err, c.want)
		}
	}
	// Arguments the schema already admits: nothing to propose.
	_, err := FromDenial(base, schemaDenial(`{"order_id":"A-1234"}`))
	if r, ok := AsRefusal(err); !ok || r.Rule != RuleNotOffered {
		t.Errorf("admitted arguments: err = %v, want not_offered", err)
	}
}

// A tool that no rule names is still proposed as a tool (its arguments
// do not matter then), with or without arguments.
func TestFromDenialUnguardedToolIgnoresArguments(t *testing.T) {
	base := ordersPolicy(t)
	rec := schemaDenial(`{"id":"7"}`)
	rec.Tool = "track_shipment"
	p, err := FromDenial(base, rec)
	if err != nil {
		t.Fatal(err)
	}
	if s := p.Operations[0].AddAllowRules.Rules[0].Allow.ArgumentsSchema; s != nil {
		t.Fatalf("a new tool got arguments_schema %v", s)
	}
}

// Proposal files may change what a tool admits by adding a rule with
// another schema; the narrowness rules refuse schemas that admit any
// arguments, and a rule that drops the guard, naming the field.
func TestProposalSchemaNarrowness(t *testing.T) {
	base := ordersPolicy(t)
	const head = `{"rationale":"r","operations":[{"add_allow_rules":{"policy":"orders","host":"demo-mcp","port":8081,"path":"/mcp","rules":[{"allow":{"method":"tools/call","tool":"lookup_order"`
	const field = "operations[0].add_allow_rules.rules[0].allow.arguments_schema"
	refused := map[string]string{
		"empty":            `,"arguments_schema":{}`,
		"annotations only": `,"arguments_schema":{"title":"any","description":"anything"}`,
		"type object":      `,"arguments_schema":{"type":"object"}`,
		"object, no rules": `,"arguments_schema":{"type":"object","properties":{"a":{}},"additionalProperties":true,"required":[]}`,
		"anyOf with {}":    `,"arguments_schema":{"anyOf":[{"const":{"order_id":"x"}},{}]}`,
		"anyOf with true":  `,"arguments_schema":{"anyOf":[{"const":{"order_id":"x"}},true]}`,
		"not false":        `,"arguments_schema":{"not":false}`,
		"no schema":        ``,
	}
	for name, extra := range refused {
		p, err := ParseProposal([]byte(head + extra + `}}]}}]}`))
		if err != nil {
			t.Fatalf("%s: ParseProposal: %v", name, err)
		}
		_, _, err = Evaluate(context.Background(), base, p, prover.Options{Now: now})
		r, ok := AsRefusal(err)
		if !ok || r.Rule != RuleArgumentsSchema || r.Field != field {
			t.Errorf("%s: err = %v, want %s at %s", name, err, RuleArgumentsSchema, field)
		}
	}
	// true is not a mapping: the parser refuses it at the field.
	_, err := ParseProposal([]byte(head + `,"arguments_schema":true}}]}}]}`))
	var pe *ParseError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "arguments_schema") {
		t.Errorf("arguments_schema true: err = %v, want a parse error naming arguments_schema", err)
	}

	// A wider schema that still constrains: accepted, arguments_widened.
	p, err := ParseProposal([]byte(head + `,"arguments_schema":{"type":"object","properties":{"order_id":{"type":"string","pattern":"^[a-z]$"}},"required":["order_id"],"additionalProperties":false}}}]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	result, rep, err := Evaluate(context.Background(), base, p, prover.Options{Now: now})
	if err != nil {
		t.Fatalf("a constraining schema: %v", err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != prover.ArgumentsWidened {
		t.Fatalf("findings = %+v, want arguments_widened only", rep.Findings)
	}
	if !policy.Decide(result, lookup(`{"order_id":"x"}`)).Allow || policy.Decide(result, lookup(`{"order_id":"xy"}`)).Allow {
		t.Error("the added schema is not what the result admits")
	}

	// The very schema the tool has already: changes nothing.
	p, err = ParseProposal([]byte(head + `,"arguments_schema":{"type":"object","properties":{"order_id":{"type":"string","pattern":"^[A-Z]-\\d{4}$"}},"required":["order_id"],"additionalProperties":false}}}]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = Evaluate(context.Background(), base, p, prover.Options{Now: now})
	if r, ok := AsRefusal(err); !ok || r.Rule != RuleChangesNothing {
		t.Errorf("identical schema: err = %v, want changes_nothing", err)
	}
}

func TestAdmitsEverything(t *testing.T) {
	for _, c := range []struct {
		schema string
		want   bool
	}{
		{`true`, true},
		{`false`, false},
		{`{}`, true},
		{`{"$comment":"x","examples":[1]}`, true},
		{`{"type":["object","string"]}`, true},
		{`{"allOf":[{},{"type":"object"}]}`, true},
		{`{"type":"object","minProperties":0,"propertyNames":{}}`, true},
		{`{"type":"string"}`, false},
		{`{"const":{}}`, false},
		{`{"type":"object","required":["a"]}`, false},
		{`{"type":"object","properties":{"a":{"type":"string"}}}`, false},
		{`{"anyOf":[{"const":1},{"type":"object","additionalProperties":false}]}`, false},
		{`{"not":{"type":"object"}}`, false},
		// Keywords that constrain nothing a call can send, found by
		// probing: every probe object passes.
		{`{"oneOf":[true]}`, true},
		{`{"not":{"type":"string"}}`, true},
		{`{"not":{"not":{}}}`, true},
		{`{"if":true,"then":true}`, true},
		{`{"type":"object","maxProperties":100000}`, true},
		{`{"type":"object","propertyNames":{"maxLength":100000}}`, true},
		{`{"type":"object","additionalProperties":{"type":["object","array","string","number","boolean","null"]}}`, true},
		{`{"type":"object","properties":{"limit":{"type":"integer"}},"additionalProperties":false}`, false},
		{`{"type":"object","properties":{"q":{"not":{"type":"object"}}}}`, false},
	} {
		var v any
		if err := json.Unmarshal([]byte(c.schema), &v); err != nil {
			t.Fatal(err)
		}
		if got := admitsEverything(v); got != c.want {
			t.Errorf("admitsEverything(%s) = %v, want %v", c.schema, got, c.want)
		}
	}
}
