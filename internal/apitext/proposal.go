package apitext

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// ApprovalOutcome says what an approval of hash did.
func ApprovalOutcome(p *portcullisv1.Proposal, hash string) string {
	id := p.GetId()
	switch p.GetStatus() {
	case "applied":
		s := fmt.Sprintf("proposal %d applied: sandbox %s is at version %d", id, Dash(p.GetSandbox()), p.GetAppliedVersion())
		if g := p.GetGrantExpiresAt(); g != nil {
			s += " (the grant ends " + When(g) + ")"
		}
		return s
	case "pending", "approved":
		if p.GetResultingHash() != hash {
			// Re-based while it was being applied: approvals of the
			// old hash no longer count.
			return fmt.Sprintf("proposal %d was re-based onto version %d while it was being applied: review it again (portcullis proposals show %d)",
				id, p.GetBaseVersion(), id)
		}
		more := int(p.GetApprovalsRequired()) - CountedApprovals(p)
		if more < 1 {
			// Quorum reached but not applied: the rules hold it.
			return fmt.Sprintf("proposal %d approved by you; not applied yet (%s)", id, Dash(strings.Join(p.GetApprovalNotes(), "; ")))
		}
		return fmt.Sprintf("proposal %d approved by you; %d more %s needed", id, more, Plural(more, "approval", "approvals"))
	default:
		return fmt.Sprintf("proposal %d is %s", id, Dash(p.GetStatus()))
	}
}

// Decision writes to w, after the proposal itself, where it stands with
// its approvers; quorum says whether the answer carries the approval
// rules' verdict (ApprovalService's does, the sandbox's view does not).
func Decision(w io.Writer, p *portcullisv1.Proposal, quorum bool) {
	if quorum {
		fmt.Fprintf(w, "approvals: %s\n", ApprovalsNeeded(p))
	} else {
		fmt.Fprintf(w, "approvals: %d\n", len(p.GetApprovals()))
	}
	for _, a := range p.GetApprovals() {
		line := fmt.Sprintf("  %s  %s  %s", Dash(a.GetApprover()), When(a.GetTime()), Dash(OneLine(a.GetReason())))
		if a.GetResultingHash() != p.GetResultingHash() {
			line += "  (of an earlier resulting hash " + ShortHash(a.GetResultingHash()) + ": does not count)"
		}
		fmt.Fprintln(w, line)
	}
	var kv []string
	if quorum {
		kv = append(kv, "auto-approvable", YesNo(p.GetAutoApprovable()))
	}
	if p.GetExpiresAt() != nil && (p.GetStatus() == "pending" || p.GetStatus() == "approved" || p.GetStatus() == "expired") {
		kv = append(kv, "expires", When(p.GetExpiresAt()))
	}
	grant := "never"
	if g := p.GetGrantExpiresAt(); g != nil {
		grant = When(g)
	}
	kv = append(kv, "grant ends", grant)
	if v := p.GetAppliedVersion(); v != 0 {
		kv = append(kv, "applied version", strconv.FormatUint(uint64(v), 10))
	}
	if p.GetDecidedBy() != "" || p.GetDecidedAt() != nil {
		kv = append(kv, "decided by", Dash(p.GetDecidedBy()), "decided at", When(p.GetDecidedAt()))
	}
	_ = Fields(w, kv...)
	if notes := p.GetApprovalNotes(); len(notes) > 0 {
		fmt.Fprintln(w, "approval notes:")
		for _, n := range notes {
			fmt.Fprintf(w, "  %s\n", OneLine(n))
		}
	}
}

// CountedApprovals is how many approvals count toward the quorum: those of
// the current resulting hash (the gateway counts the same way).
func CountedApprovals(p *portcullisv1.Proposal) int {
	n := 0
	for _, a := range p.GetApprovals() {
		if a.GetResultingHash() == p.GetResultingHash() {
			n++
		}
	}
	return n
}

// ApprovalsNeeded is "1 of 2 needed", or "0 (none needed)" when the rules
// need no human.
func ApprovalsNeeded(p *portcullisv1.Proposal) string {
	if p.GetApprovalsRequired() == 0 {
		return fmt.Sprintf("%d (none needed)", CountedApprovals(p))
	}
	return fmt.Sprintf("%d of %d needed", CountedApprovals(p), p.GetApprovalsRequired())
}

// ApprovalsCell is a list's "1/2", "-" for a proposal that needs none.
func ApprovalsCell(p *portcullisv1.Proposal) string {
	if p.GetApprovalsRequired() == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", CountedApprovals(p), p.GetApprovalsRequired())
}

// FindingsCell is "0", or the count and the distinct kinds: "2 (new_mcp_tool, new_reach)".
func FindingsCell(findings []*portcullisv1.Finding) string {
	if len(findings) == 0 {
		return "0"
	}
	var kinds []string
	seen := map[string]bool{}
	for _, f := range findings {
		if k := f.GetKind(); !seen[k] {
			seen[k] = true
			kinds = append(kinds, k)
		}
	}
	return fmt.Sprintf("%d (%s)", len(findings), strings.Join(kinds, ", "))
}
