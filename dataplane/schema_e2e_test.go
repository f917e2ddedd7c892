package dataplane_test

import (
	"net/http"
	"strings"
	"testing"
)

// schemaGatePolicy is the orders policy with a wider argument gate on
// lookup_order: numbers the schema library judges, finding 7's bounds and a
// format.
var schemaGatePolicy = strings.Replace(ordersPolicy, `                required: [order_id]`, `                  quantity: { type: number, exclusiveMinimum: 0, exclusiveMaximum: 100 }
                  lines: { type: array, maxItems: 10, items: { type: integer, minimum: 0 } }
                  contact: { type: string, format: email }
                required: [order_id]`, 1)

// Issue 11, findings 4 and 7, through the real proxy and the demo MCP
// server: calls the argument gate refuses — numbers beyond float64, a
// number a float64 reader reads on a bound, a malformed email — get a 403
// and never reach the upstream; a call within the gate does.
func TestMCPArgumentGateThroughProxy(t *testing.T) {
	if !strings.Contains(schemaGatePolicy, "quantity") {
		t.Fatal("schemaGatePolicy did not extend ordersPolicy")
	}
	up := startUpstream(t, ordersHandler(true))
	tp := startProxy(t, schemaGatePolicy, up)
	h := http.Header{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {"lookup_order"}}
	call := func(args string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup_order","arguments":` + args +
			`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"}}}}`
	}
	for _, tc := range []struct{ name, args, reason string }{
		{"2 KB of 1e999999 past maxItems", `{"order_id":"A-1042","lines":[` + strings.TrimSuffix(strings.Repeat("1e999999,", 220), ",") + `]}`, "too large for a float64"},
		{"an exponent beyond int64 (the schema library panicked)", `{"order_id":"A-1042","quantity":0e10000000000000000000}`, "exponent beyond"},
		{"a tiny number", `{"order_id":"A-1042","lines":[-1e-999999]}`, "too small for a float64"},
		{"1e-400 reads as 0", `{"order_id":"A-1042","quantity":1e-400}`, "too small for a float64"},
		{"99.99999999999999999 reads as 100", `{"order_id":"A-1042","quantity":99.99999999999999999}`, "as a float64 reader"},
		{"malformed email", `{"order_id":"A-1042","contact":"ops at example"}`, "arguments_schema refuses"},
	} {
		res, body := rawMCP(t, tp, up, h, call(tc.args))
		if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "-32001") {
			t.Errorf("%s: %d %s; want 403 with a JSON-RPC error", tc.name, res.StatusCode, body)
		}
		recs := tp.proxy.Decisions()
		if last := recs[len(recs)-1]; !strings.HasPrefix(last.Rule, "rules[") || !strings.Contains(last.Reason, tc.reason) {
			t.Errorf("%s: record %+v; want the lookup_order rule refusing with %q", tc.name, last, tc.reason)
		}
	}
	if n := up.count(); n != 0 {
		t.Fatalf("the upstream received %d calls the argument gate refused", n)
	}
	res, body := rawMCP(t, tp, up, h, call(`{"order_id":"A-1042","quantity":99.5,"lines":[1,2],"contact":"ops@example.com"}`))
	if res.StatusCode != http.StatusOK || !up.saw(`"quantity":99.5`) {
		t.Fatalf("a call within the gate: %d %s; want forwarded", res.StatusCode, body)
	}
}
