package policy

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func ordersPolicy() *Policy {
	return pol(map[string]*NetworkPolicy{
		"orders": entry([]string{python}, &Endpoint{Host: "orders.example.com", Port: 443, Path: "/mcp", Protocol: ProtocolMCP,
			Rules: []Rule{
				allow(L7Rule{Method: "initialize"}),
				allow(L7Rule{Method: "tools/call", Tool: anyOf("get_order", "list_orders")}),
			},
			DenyRules: []*L7Rule{{Method: "tools/call", Tool: anyOf("cancel_order")}},
		}),
		"github": entry([]string{curl}, &Endpoint{Host: "api.github.com", Port: 443, Protocol: ProtocolREST, Access: AccessReadOnly}),
	})
}

// summaries renders changes as "kind path: summary" lines.
func summaries(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Kind+" "+c.Path+": "+c.Summary)
	}
	return out
}

func TestDiffIdentical(t *testing.T) {
	if cs := Diff(ordersPolicy(), ordersPolicy()); len(cs) != 0 {
		t.Errorf("Diff of equal policies = %q", summaries(cs))
	}
	if cs := Diff(nil, nil); len(cs) != 0 {
		t.Errorf("Diff(nil, nil) = %q", summaries(cs))
	}
}

func TestDiffRulesAndTools(t *testing.T) {
	a, b := ordersPolicy(), ordersPolicy()
	ep := b.NetworkPolicies["orders"].Endpoints[0]
	until := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	ep.Rules = []Rule{
		allow(L7Rule{Method: "initialize"}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("get_order")}),                                                      // list_orders removed
		allow(L7Rule{Method: "tools/call", Tool: anyOf("lookup_order")}),                                                   // added
		allow(L7Rule{Method: "tools/call", Tool: anyOf("track_shipment"), ExpiresAt: &until}),                              // added with expiry
		allow(L7Rule{Method: "tools/list"}),                                                                                // added method
		allow(L7Rule{Method: "tools/call", Tool: anyOf("get_invoice"), ArgumentsSchema: map[string]any{"type": "object"}}), // added with schema
	}
	ep.DenyRules = append(ep.DenyRules, &L7Rule{Method: "tools/call", Tool: anyOf("refund")})
	got := summaries(Diff(a, b))
	want := []string{
		"added network_policies.orders.endpoints[orders.example.com:443/mcp].rules: added tool get_invoice (tools/call) with arguments_schema {\"type\":\"object\"}",
		"added network_policies.orders.endpoints[orders.example.com:443/mcp].rules: added tool lookup_order (tools/call)",
		"added network_policies.orders.endpoints[orders.example.com:443/mcp].rules: added tool track_shipment (tools/call) until 2026-06-01T00:00:00Z",
		"added network_policies.orders.endpoints[orders.example.com:443/mcp].rules: added rule tools/list",
		"removed network_policies.orders.endpoints[orders.example.com:443/mcp].rules: removed tool list_orders (tools/call)",
		"added network_policies.orders.endpoints[orders.example.com:443/mcp].deny_rules: added deny tool refund (tools/call)",
	}
	if !sameSet(got, want) {
		t.Errorf("Diff =\n%s\nwant (any order)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestDiffChangedRule(t *testing.T) {
	a, b := ordersPolicy(), ordersPolicy()
	until := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	b.NetworkPolicies["orders"].Endpoints[0].Rules[1] = allow(L7Rule{Method: "tools/call", Tool: anyOf("get_order", "list_orders"), ExpiresAt: &until})
	cs := Diff(a, b)
	if len(cs) != 2 {
		t.Fatalf("Diff = %q, want two changed tools", summaries(cs))
	}
	for _, c := range cs {
		if c.Kind != ChangeChanged || !strings.HasPrefix(c.Summary, "changed tool ") || c.Before == "" || !strings.Contains(c.After, "expires_at") {
			t.Errorf("change = %+v, want a changed tool with expires_at after", c)
		}
	}
}

func TestDiffEntriesEndpointsBinaries(t *testing.T) {
	a, b := ordersPolicy(), ordersPolicy()
	delete(b.NetworkPolicies, "github")
	b.NetworkPolicies["shipping"] = entry([]string{python}, &Endpoint{Host: "ship.example.com", Port: 443, Protocol: ProtocolREST,
		Rules: []Rule{allow(L7Rule{Method: "GET", Path: "/v1/shipments/*"})}})
	o := b.NetworkPolicies["orders"]
	o.Binaries = append(o.Binaries, Binary{Path: "/usr/bin/node"})
	o.Endpoints[0].Enforcement = EnforcementAudit
	o.Endpoints[0].MCP = &MCPOptions{AllowAllKnownMCPMethods: true}
	o.Endpoints = append(o.Endpoints, &Endpoint{Host: "orders.example.com", Ports: []int{8443, 9443}, Path: "/admin", Protocol: ProtocolREST, Access: AccessFull})
	got := summaries(Diff(a, b))
	want := []string{
		"removed network_policies.github: removed network policy github: endpoints api.github.com:443 (rest); binaries /usr/bin/curl",
		"added network_policies.orders.binaries: added binary /usr/bin/node",
		"added network_policies.orders.endpoints[orders.example.com:8443,9443/admin]: added endpoint orders.example.com:8443,9443/admin (rest)",
		`changed network_policies.orders.endpoints[orders.example.com:443/mcp].enforcement: enforcement changed from "enforce" to "audit"`,
		"changed network_policies.orders.endpoints[orders.example.com:443/mcp].mcp: mcp changed",
		"added network_policies.shipping: added network policy shipping: endpoints ship.example.com:443 (rest); binaries /usr/bin/python3",
	}
	if !sameSet(got, want) {
		t.Errorf("Diff =\n%s\nwant (any order)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Endpoints are matched by identity, not index: reordering is no change.
	c := ordersPolicy()
	c.NetworkPolicies["orders"].Endpoints = []*Endpoint{
		{Host: "orders.example.com", Port: 8080, Protocol: ProtocolREST, Access: AccessReadOnly},
		c.NetworkPolicies["orders"].Endpoints[0],
	}
	d := ordersPolicy()
	d.NetworkPolicies["orders"].Endpoints = []*Endpoint{c.NetworkPolicies["orders"].Endpoints[1], c.NetworkPolicies["orders"].Endpoints[0]}
	if cs := Diff(c, d); len(cs) != 0 {
		t.Errorf("reordered endpoints: Diff = %q", summaries(cs))
	}
}

func TestDiffStaticAndMiddlewares(t *testing.T) {
	a, b := ordersPolicy(), ordersPolicy()
	a.FilesystemPolicy = &FilesystemPolicy{ReadOnly: []string{"/usr"}}
	b.FilesystemPolicy = &FilesystemPolicy{ReadOnly: []string{"/usr"}, ReadWrite: []string{"/tmp"}}
	b.Process = &Process{RunAsUser: "sandbox"}
	b.NetworkMiddlewares = map[string]*Middleware{"redact": {Middleware: "openshell/regex", Order: 10, Endpoints: MiddlewareSelector{Include: []string{"*.example.com"}}}}
	cs := Diff(a, b)
	byPath := map[string]Change{}
	for _, c := range cs {
		byPath[c.Path] = c
	}
	fs := byPath["filesystem_policy"]
	if fs.Kind != ChangeChanged || !strings.Contains(fs.After, "/tmp") || strings.Contains(fs.Before, "/tmp") {
		t.Errorf("filesystem_policy change = %+v", fs)
	}
	if p := byPath["process"]; p.Kind != ChangeChanged || p.Before != "" || !strings.Contains(p.After, "sandbox") {
		t.Errorf("process change = %+v", p)
	}
	if m := byPath["network_middlewares.redact"]; m.Kind != ChangeAdded || !strings.Contains(m.Summary, "openshell/regex") {
		t.Errorf("middleware change = %+v", m)
	}
	if len(cs) != 3 {
		t.Errorf("Diff = %q, want 3 changes", summaries(cs))
	}
	// Order: static sections before network policies before middlewares.
	if cs[0].Path != "filesystem_policy" || cs[1].Path != "process" || cs[2].Path != "network_middlewares.redact" {
		t.Errorf("order = %q", summaries(cs))
	}
}

func TestDiffDeterministic(t *testing.T) {
	a, b := ordersPolicy(), pol(nil)
	b.NetworkPolicies = map[string]*NetworkPolicy{}
	for _, k := range []string{"z", "m", "a", "q"} {
		b.NetworkPolicies[k] = entry(nil, l4(k+".example.com", 443))
	}
	first := Diff(a, b)
	for range 20 {
		if again := Diff(a, b); !reflect.DeepEqual(first, again) {
			t.Fatalf("Diff is not deterministic:\n%q\n%q", summaries(first), summaries(again))
		}
	}
	for i := 1; i < len(first); i++ {
		if first[i-1].Path > first[i].Path {
			t.Errorf("entries out of order: %q before %q", first[i-1].Path, first[i].Path)
		}
	}
}

func TestDiffBinariesAnyBinary(t *testing.T) {
	a, b := ordersPolicy(), ordersPolicy()
	b.NetworkPolicies["github"].Binaries = nil
	got := summaries(Diff(a, b))
	want := []string{
		"removed network_policies.github.binaries: removed binary /usr/bin/curl",
		"changed network_policies.github.binaries: binaries widened to any binary",
	}
	if !sameSet(got, want) {
		t.Errorf("Diff = %q, want %q", got, want)
	}
}

func TestDiffFromYAML(t *testing.T) {
	const before = `
version: 1
network_policies:
  orders:
    endpoints:
      - {host: orders.example.com, port: 443, path: /mcp, protocol: mcp, rules: [{allow: {method: initialize}}]}
    binaries: [{path: /usr/bin/python3}]
`
	const after = `
version: 1
network_policies:
  orders:
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        enforcement: enforce
        rules:
          - allow: {method: initialize}
          - allow: {method: tools/call, tool: lookup_order}
    binaries: [{path: /usr/bin/python3}]
`
	a, _, err := Parse([]byte(before))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	b, _, err := Parse([]byte(after))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	got := summaries(Diff(a, b))
	want := []string{"added network_policies.orders.endpoints[orders.example.com:443/mcp].rules: added tool lookup_order (tools/call)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Diff = %q, want %q (an explicit default is no change)", got, want)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

func TestDiffPromptsAndResources(t *testing.T) {
	a, b := ordersPolicy(), ordersPolicy()
	ep := b.NetworkPolicies["orders"].Endpoints[0]
	ep.Rules = append(ep.Rules,
		allow(L7Rule{Method: "prompts/get", Prompt: anyOf("summarize", "report_*")}),
		allow(L7Rule{Method: "resources/read", Resource: anyOf("file:///docs/**")}),
	)
	ep.DenyRules = append(ep.DenyRules, &L7Rule{Method: "resources/read", Resource: anyOf("file:///docs/private/**")})
	got := summaries(Diff(a, b))
	want := []string{
		"added network_policies.orders.endpoints[orders.example.com:443/mcp].rules: added prompt report_* (prompts/get)",
		"added network_policies.orders.endpoints[orders.example.com:443/mcp].rules: added prompt summarize (prompts/get)",
		"added network_policies.orders.endpoints[orders.example.com:443/mcp].rules: added resource file:///docs/** (resources/read)",
		"added network_policies.orders.endpoints[orders.example.com:443/mcp].deny_rules: added deny resource file:///docs/private/** (resources/read)",
	}
	if !sameSet(got, want) {
		t.Errorf("Diff =\n%s\nwant (any order)\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// One prompt of a rule removed is one item removed.
	c := b.Clone()
	c.NetworkPolicies["orders"].Endpoints[0].Rules[2].Allow.Prompt = anyOf("summarize")
	got = summaries(Diff(b, c))
	want = []string{"removed network_policies.orders.endpoints[orders.example.com:443/mcp].rules: removed prompt report_* (prompts/get)"}
	if !sameSet(got, want) {
		t.Errorf("Diff =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
