// Package proposalclient reads proposals from a gateway as the caller's
// token may see them. An operator's or admin's token reads the approval
// queue of every sandbox (ApprovalService); a sandbox's token, which the
// approval queue refuses (PermissionDenied), reads the sandbox's own
// proposals (AdvisorService) instead: the sandbox follows its proposals,
// never decides them. The CLI's proposals list and show read through it,
// whichever token they were given.
package proposalclient

import (
	"context"
	"errors"
	"slices"

	"connectrpc.com/connect/v2"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// Reader asks the approval queue first and falls back to the sandbox's
// own view.
type Reader struct {
	Approval portcullisv1connect.ApprovalServiceClient
	Advisor  portcullisv1connect.AdvisorServiceClient
}

// Filter narrows a list; empty fields do not.
type Filter struct {
	Status, Sandbox, Finding string
}

// List lists proposals, newest first; operator tells whether the approval
// queue answered (else the sandbox's view, filtered here alike: AdvisorService
// filters by status only).
func (r Reader) List(ctx context.Context, f Filter) (res *portcullisv1.ListProposalsResponse, operator bool, err error) {
	res, err = r.Approval.ListProposals(ctx, &portcullisv1.ApprovalServiceListProposalsRequest{
		Status: f.Status, Sandbox: f.Sandbox, Finding: f.Finding,
	})
	if !refusedToSandbox(err) {
		return res, true, err
	}
	res, err = r.Advisor.ListProposals(ctx, &portcullisv1.ListProposalsRequest{Status: f.Status})
	if err == nil {
		res.Proposals = slices.DeleteFunc(res.GetProposals(), func(p *portcullisv1.Proposal) bool {
			return (f.Sandbox != "" && p.GetSandbox() != f.Sandbox) || (f.Finding != "" && !hasFinding(p, f.Finding))
		})
	}
	return res, false, err
}

// Get fetches a proposal as an approver sees it, or, for a sandbox token,
// as the sandbox sees it (without the approval rules' verdict); operator
// tells which answered.
func (r Reader) Get(ctx context.Context, id uint64) (p *portcullisv1.Proposal, operator bool, err error) {
	p, err = r.Approval.GetProposal(ctx, &portcullisv1.GetProposalRequest{Id: id})
	if refusedToSandbox(err) {
		p, err = r.Advisor.GetProposal(ctx, &portcullisv1.GetProposalRequest{Id: id})
		return p, false, err
	}
	return p, true, err
}

// refusedToSandbox reports whether err is ApprovalService refusing the
// caller (a sandbox token).
func refusedToSandbox(err error) bool {
	ce, ok := errors.AsType[*connect.Error](err)
	return ok && ce.Code() == connect.CodePermissionDenied
}

func hasFinding(p *portcullisv1.Proposal, kind string) bool {
	return slices.ContainsFunc(p.GetFindings(), func(f *portcullisv1.Finding) bool { return f.GetKind() == kind })
}
