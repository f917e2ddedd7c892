package apiclient

import (
	"testing"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// TestRefusalMessage covers the refusal lines the gateway's details can
// carry, including a field without its operation's prefix (the gateway
// sends the prefix today).
func TestRefusalMessage(t *testing.T) {
	for _, tt := range []struct {
		refusal *portcullisv1.ProposalRefusal
		want    string
	}{
		{&portcullisv1.ProposalRefusal{Operation: 0, Field: "add_rule.rule.endpoints[0].host", Rule: "public_suffix", Reason: "*.github.io is below a public suffix"},
			"refused: operations[0].add_rule.rule.endpoints[0].host: *.github.io is below a public suffix (rule public_suffix)"},
		{&portcullisv1.ProposalRefusal{Operation: 1, Field: "operations[1].add_allow_rules.rules[0]", Rule: "changes_nothing", Reason: "already allowed"},
			"refused: operations[1].add_allow_rules.rules[0]: already allowed (rule changes_nothing)"},
		{&portcullisv1.ProposalRefusal{Operation: 2, Rule: "binary", Reason: "one binary"},
			"refused: operations[2]: one binary (rule binary)"},
		{&portcullisv1.ProposalRefusal{Operation: -1, Field: "operations", Rule: "too_many", Reason: "at most 32 operations"},
			"refused: operations: at most 32 operations (rule too_many)"},
	} {
		if got := (&RefusalError{Refusals: []*portcullisv1.ProposalRefusal{tt.refusal}}).Error(); got != tt.want {
			t.Errorf("%v: %q, want %q", tt.refusal, got, tt.want)
		}
	}
}

// Several refusals (the gateway names every violation at once) are
// printed one a line.
func TestRefusalMessageSeveral(t *testing.T) {
	err := &RefusalError{Refusals: []*portcullisv1.ProposalRefusal{
		{Operation: 0, Field: "operations[0].add_rule.rule.endpoints[0].host", Rule: "public_suffix_wildcard", Reason: "a public suffix"},
		{Operation: 1, Field: "operations[1].add_allow_rules.rules[0].allow.path", Rule: "path", Reason: "every path"},
	}}
	want := "refused (2 problems):\n" +
		"  operations[0].add_rule.rule.endpoints[0].host: a public suffix (rule public_suffix_wildcard)\n" +
		"  operations[1].add_allow_rules.rules[0].allow.path: every path (rule path)"
	if got := err.Error(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
