package match

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// The argument gate in the compiled matcher (issue 11, findings 4 and 7):
// the matcher decides exactly as policy.Decide does, and a call holding a
// number such as 1e999999 is denied at the cost of an ordinary call.

// schemaPolicy's tally tool has a schema that looks at numbers in every
// way that makes the schema library do big.Rat work; pct has the bounds of
// finding 7; email a format.
const schemaPolicy = `
version: 1
network_policies:
  m:
    binaries: [{path: /usr/bin/python3}]
    endpoints:
      - host: orders.example.net
        port: 443
        path: /mcp
        protocol: mcp
        enforcement: enforce
        rules:
          - allow:
              method: tools/call
              tool: tally
              arguments_schema:
                type: object
                properties:
                  ids: {type: array, maxItems: 10, items: {type: integer, minimum: 0, maximum: 1000000}}
                  set: {type: array, uniqueItems: true}
                  mode: {enum: [1, 2, 3]}
                  fixed: {const: 7}
                  step: {type: number, multipleOf: 0.5}
                  pct: {type: number, exclusiveMinimum: 0, exclusiveMaximum: 100}
                  email: {type: string, format: email}
`

// adversarialArguments are about 2 KB each, numbers that cost the schema
// library ~0.1 s apiece before the fix (the first also exceeds maxItems).
var adversarialArguments = map[string]string{
	"huge integers past maxItems": `{"ids":[` + strings.TrimSuffix(strings.Repeat("1e999999,", 220), ",") + `]}`,
	"tiny numbers":                `{"ids":[` + strings.TrimSuffix(strings.Repeat("-1e-999999,", 180), ",") + `]}`,
	"uniqueItems":                 `{"set":[` + strings.TrimSuffix(strings.Repeat("1e999999,2e999999,", 110), ",") + `]}`,
	"enum":                        `{"mode":1e999999}`,
	"const":                       `{"fixed":7e999999}`,
	"multipleOf":                  `{"step":1e-999999}`,
	"long mantissa":               `{"ids":[1` + strings.Repeat("0", 2000) + `]}`,
	"exponent beyond int64":       `{"ids":[0e10000000000000000000]}`, // the library panicked on it
}

const normalArguments = `{"ids":[1,2,3,4,5,6,7,8,9,10],"set":[1,2,3],"mode":2,"fixed":7,"step":1.5,"pct":42.5,"email":"ops@example.com"}`

func tallyCall(args string) policy.Request {
	return policy.Request{Binary: python, Host: "orders.example.net", Addr: pubIP, Port: 443, HTTPMethod: "POST", Path: "/mcp", Time: when,
		MCP: &policy.MCPMessage{Method: "tools/call", Tool: "tally", Arguments: json.RawMessage(args), ProtocolVersion: policy.DefaultMCPVersion}}
}

func bytesAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Each adversarial call is denied, by the matcher as by policy.Decide,
// naming the number; and it allocates no more than an ordinary call of
// twice its size whose small numbers the schema library judges one by one
// (before the fix: hundreds of megabytes).
func TestMatcherArgumentsBoundedCost(t *testing.T) {
	p := parse(t, schemaPolicy)
	m := mustCompile(t, p)
	normal := tallyCall(normalArguments)
	if d := m.Decide(&normal); !d.Allow || d != policy.Decide(p, normal) {
		t.Fatalf("normal call: matcher %+v, policy.Decide %+v", d, policy.Decide(p, normal))
	}
	ordinary := tallyCall(`{"ids":[` + strings.TrimSuffix(strings.Repeat("1,", 2000), ",") + `]}`) // 4 KB, refused by maxItems
	ordinaryCost := bytesAllocated(func() { m.Decide(&ordinary) })
	for name, args := range adversarialArguments {
		call := tallyCall(args)
		var d policy.Decision
		cost := bytesAllocated(func() { d = m.Decide(&call) })
		if d.Allow || d.Rule != "rules[0]" || !strings.Contains(d.Reason, "arguments_schema refuses the arguments: number ") {
			t.Errorf("%s: %+v; want denied by rules[0]'s number limit", name, d)
		}
		if cost > ordinaryCost {
			t.Errorf("%s: the matcher allocated %d bytes, an ordinary 4 KB call %d", name, cost, ordinaryCost)
		}
		if want := policy.Decide(p, call); d != want {
			t.Errorf("%s: matcher %+v, policy.Decide %+v", name, d, want)
		}
	}
}

// Finding 7 in the matcher, agreeing with policy.Decide on every case.
func TestMatcherArgumentsFloatReadingAndFormats(t *testing.T) {
	p := parse(t, schemaPolicy)
	m := mustCompile(t, p)
	for _, tc := range []struct {
		args   string
		allow  bool
		reason string
	}{
		{`{"pct":50}`, true, ""},
		{`{"pct":99.9999999999999}`, true, ""},
		{`{"pct":5e-324}`, true, ""},
		{`{"pct":1e-400}`, false, "too small for a float64"},
		{`{"pct":99.99999999999999999}`, false, "as a float64 reader reads the numbers"},
		{`{"pct":100}`, false, "arguments_schema refuses"},
		{`{"ids":[3.0,1e2]}`, true, ""}, // integers spelled otherwise
		{`{"email":"ops@example.com"}`, true, ""},
		{`{"email":"ops at example"}`, false, "arguments_schema refuses"},
	} {
		call := tallyCall(tc.args)
		d := m.Decide(&call)
		if d.Allow != tc.allow || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%s: %+v; want allow=%v, reason with %q", tc.args, d, tc.allow, tc.reason)
		}
		if want := policy.Decide(p, call); d != want {
			t.Errorf("%s: matcher %+v, policy.Decide %+v", tc.args, d, want)
		}
	}
}

// AnyArguments (which tools the proxy lists) judges a call as if its
// arguments passed every schema, in the matcher as in policy.Decide: a
// tool allowed for some arguments is allowed, one no rule names is not.
func TestMatcherAnyArguments(t *testing.T) {
	p := parse(t, schemaPolicy)
	m := mustCompile(t, p)
	for _, tc := range []struct {
		tool, args string
		any, want  bool
	}{
		{"tally", `{"ids":"not an array"}`, false, false},
		{"tally", `{"ids":"not an array"}`, true, true},
		{"tally", ``, true, true},
		{"other", ``, true, false},
	} {
		call := tallyCall(tc.args)
		call.MCP.Tool, call.MCP.AnyArguments = tc.tool, tc.any
		d := m.Decide(&call)
		if d.Allow != tc.want {
			t.Errorf("%s %s (any %v): matcher %+v, want allow %v", tc.tool, tc.args, tc.any, d, tc.want)
		}
		if want := policy.Decide(p, call); d != want {
			t.Errorf("%s %s (any %v): matcher %+v, policy.Decide %+v", tc.tool, tc.args, tc.any, d, want)
		}
	}
}
