package match

import (
	"fmt"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

const (
	pinA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	pinB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// A pinned definition allows a call only while the tool's verified
// definition is the pinned one, in the matcher as in policy.Decide; a
// refusal names the rule, says tool_definition_changed and sets
// DefinitionRefused; AnyDefinition (the prover's probes) passes any pin;
// an unpinned rule later in the list still allows.
func TestMatcherPinnedDefinition(t *testing.T) {
	doc := strings.Replace(schemaPolicy, "              tool: tally\n", "              tool: tally\n              definition: "+pinA+"\n", 1)
	unpinned := doc + "          - allow: {method: tools/call, tool: other}\n"
	p := parse(t, unpinned)
	m := mustCompile(t, p)
	pinned := "" // the canonical form orders rules: find the pinned one
	for i, r := range p.NetworkPolicies["m"].Endpoints[0].Rules {
		if r.Allow.Definition != "" {
			pinned = fmt.Sprintf("rules[%d]", i)
		}
	}
	for _, tc := range []struct {
		name, tool, seen string
		any              bool
		allow, refused   bool
		reason           string
	}{
		{"the pinned definition", "tally", pinA, false, true, false, ""},
		{"another definition", "tally", pinB, false, false, true, "now lists " + pinB + " (tool_definition_changed)"},
		{"none verified", "tally", "", false, false, true, "could not verify the tool's definition (tool_definition_changed)"},
		{"any definition", "tally", "", true, true, false, ""},
		{"an unpinned rule", "other", "", false, true, false, ""},
	} {
		call := tallyCall(`{"ids":[1]}`)
		call.MCP.Tool, call.MCP.ToolDefinition, call.MCP.AnyDefinition = tc.tool, tc.seen, tc.any
		d := m.Decide(&call)
		if d.Allow != tc.allow || d.DefinitionRefused != tc.refused || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%s: %+v; want allow %v, refused %v, reason with %q", tc.name, d, tc.allow, tc.refused, tc.reason)
		}
		if tc.refused && d.Rule != pinned {
			t.Errorf("%s: rule %q, want the pinned %s", tc.name, d.Rule, pinned)
		}
		if want := policy.Decide(p, call); d != want {
			t.Errorf("%s: matcher %+v, policy.Decide %+v", tc.name, d, want)
		}
	}
}
