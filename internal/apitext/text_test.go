package apitext

import (
	"strings"
	"testing"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// What an agent chose is one word or quoted: it cannot start a line of its
// own nor send an escape sequence to the terminal.
func TestFieldAndClip(t *testing.T) {
	for in, want := range map[string]string{
		"api.example.com": "api.example.com",
		"a b":             `"a b"`,
		"x\ny":            `"x\ny"`,
		"\x1b[2J":         `"\x1b[2J"`,
		`say "hi"`:        `"say \"hi\""`,
	} {
		if got := Field(in); got != want {
			t.Errorf("Field(%q) = %s, want %s", in, got, want)
		}
	}
	if got := Clip("a\n\tb   c", 10); got != "a b c" {
		t.Errorf("Clip put %q on one line, want %q", got, "a b c")
	}
	if got := Clip("abcdef", 4); got != "abc…" {
		t.Errorf("Clip cut to %q, want abc…", got)
	}
}

// A decision line names the request, and a denial's reason and id, with
// everything the proxy shipped quoted where it must be.
func TestDecisionLine(t *testing.T) {
	line := DecisionLine(&portcullisv1.StoredDecision{Record: &portcullisv1.DecisionRecord{
		Decision: "deny", Binary: "/usr/bin/curl", HttpMethod: "POST", Host: "api.example.com", Port: 443,
		Path: "/v1/refunds", Reason: "no rule allows it", PolicyVersion: "3", DenialId: "dn_1",
	}})
	want := `- deny  /usr/bin/curl POST api.example.com:443/v1/refunds reason="no rule allows it" policy=3 denial_id=dn_1`
	if line != want {
		t.Errorf("DecisionLine =\n  %s\nwant\n  %s", line, want)
	}
}

// Only approvals of the current resulting hash count toward the quorum.
func TestApprovalsCounted(t *testing.T) {
	p := &portcullisv1.Proposal{Id: 7, Status: "pending", ResultingHash: "h2", ApprovalsRequired: 2, Approvals: []*portcullisv1.Approval{
		{Approver: "a", ResultingHash: "h1"}, {Approver: "b", ResultingHash: "h2"},
	}}
	if got := ApprovalsNeeded(p); got != "1 of 2 needed" {
		t.Errorf("ApprovalsNeeded = %q", got)
	}
	if got := ApprovalsCell(p); got != "1/2" {
		t.Errorf("ApprovalsCell = %q", got)
	}
	if got := ApprovalOutcome(p, "h2"); !strings.Contains(got, "1 more approval needed") {
		t.Errorf("ApprovalOutcome = %q", got)
	}
}
