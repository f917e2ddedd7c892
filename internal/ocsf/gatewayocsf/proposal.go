package gatewayocsf

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/store"
)

// findingSeverity ranks a prover finding's kind: what widens access to
// credentialed hosts or past the boundary is high.
func findingSeverity(f store.Finding) int {
	switch {
	case f.Kind == "exceeds_boundary", f.Credentialed:
		return ocsf.SeverityHigh
	case strings.Contains(f.Kind, "bypass"), strings.Contains(f.Kind, "wildcard"):
		return ocsf.SeverityMedium
	default:
		return ocsf.SeverityLow
	}
}

// FromProposal maps a proposal and its prover findings: one Detection
// Finding (2004) per proposal, activity Create when it is new and Update
// when its status changed; severity is the highest of its findings'
// (Informational with none); finding_info.types are the findings' kinds
// and unmapped.findings the findings themselves.
func FromProposal(pr store.Proposal, findings []store.Finding, p ocsf.Product) ocsf.Event {
	var e ocsf.Event
	activity, name := 1, "Create"
	if pr.Status != store.ProposalPending {
		activity, name = 2, "Update"
	}
	e.SetClass(ocsf.ClassDetectionFinding, activity, name)
	t := pr.UpdatedAt
	if t.IsZero() {
		t = pr.CreatedAt
	}
	e.Time = t.UnixMilli()
	sev := ocsf.SeverityInformational
	kinds := []string{}
	for _, f := range findings {
		sev = max(sev, findingSeverity(f))
		if !slices.Contains(kinds, f.Kind) {
			kinds = append(kinds, f.Kind)
		}
	}
	e.SetSeverity(sev)
	e.Metadata = ocsf.Metadata{Version: ocsf.Version, Product: p, UID: "proposal-" + strconv.FormatInt(pr.ID, 10)}
	title := fmt.Sprintf("Proposal %d for sandbox %s", pr.ID, pr.Sandbox)
	if len(findings) > 0 {
		title += fmt.Sprintf(": %d prover finding(s)", len(findings))
	}
	e.FindingInfo = &ocsf.FindingInfo{
		UID: strconv.FormatInt(pr.ID, 10), Title: title, Desc: pr.Rationale, Types: kinds,
		CreatedTime: pr.CreatedAt.UnixMilli(),
	}
	alert := sev >= ocsf.SeverityHigh
	e.IsAlert = &alert
	e.Message = title
	u := map[string]any{
		"sandbox": pr.Sandbox, "status": pr.Status, "proposer": pr.Proposer,
		"base_version": pr.BaseVersion, "base_hash": pr.BaseHash, "resulting_hash": pr.ResultingHash,
	}
	if pr.DenialID != "" {
		u["denial_id"] = pr.DenialID
	}
	if len(findings) > 0 {
		u["findings"] = findings
	}
	e.Unmapped = u
	e.Finish()
	return e
}
