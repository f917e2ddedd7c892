package policy

import (
	"strings"
	"testing"
)

// definition pins a tools/call allow rule naming one tool; anywhere else,
// or spelled otherwise, it is refused naming the field. Diff reports a
// re-pin.
func TestDefinitionPin(t *testing.T) {
	const pinA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	const pinB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	rule := func(pin string) string {
		return "{allow: {method: tools/call, tool: lookup_order, definition: \"" + pin + "\"}}"
	}
	a, _, err := Parse([]byte(mcpEndpoint("", rule(pinA))))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.NetworkPolicies["p"].Endpoints[0].Rules[0].Allow.Definition; got != pinA {
		t.Fatalf("definition = %q", got)
	}
	for _, tc := range []struct{ name, rules, want string }{
		{"upper-case hex", rule(strings.ToUpper(pinA[7:])), "is not a definition fingerprint"},
		{"no prefix", rule(pinA[7:]), "is not a definition fingerprint"},
		{"short", rule(pinA[:40]), "is not a definition fingerprint"},
		{"a tool glob", `{allow: {method: tools/call, tool: "lookup_*", definition: "` + pinA + `"}}`, "exactly one tool"},
		{"two tools", `{allow: {method: tools/call, tool: {any: [a, b]}, definition: "` + pinA + `"}}`, "exactly one tool"},
		{"another method", `{allow: {method: tools/list, definition: "` + pinA + `"}}`, "needs method: tools/call"},
	} {
		_, _, err := Parse([]byte(mcpEndpoint("", tc.rules)))
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if ps := problemsOf(t, err); len(ps) == 0 || !strings.Contains(ps[0].Path, "definition") || !strings.Contains(ps[0].Message, tc.want) {
			t.Errorf("%s: %v; want a problem at …definition saying %q", tc.name, err, tc.want)
		}
	}
	deny := withEndpoint("{host: m.example.com, port: 443, protocol: mcp, rules: [{allow: {method: tools/list}}], deny_rules: [{method: tools/call, tool: x, definition: \"" + pinA + "\"}]}")
	if _, _, err := Parse([]byte(deny)); err == nil || !strings.Contains(err.Error(), "definition") {
		t.Errorf("a pin on a deny rule: %v", err)
	}
	b, _, err := Parse([]byte(mcpEndpoint("", rule(pinB))))
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() == b.Hash() {
		t.Error("a re-pin does not change the hash")
	}
	changes := Diff(a, b)
	if len(changes) != 1 || !strings.Contains(changes[0].Summary, pinA+" → "+pinB) {
		t.Errorf("diff of a re-pin: %+v", changes)
	}
}
