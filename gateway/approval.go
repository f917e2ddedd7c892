package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/lifecycle"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// ApprovalService: the approval queue, translated to and from the
// lifecycle's review, approval and rules (quorum, separation of duties and
// applying live there).

// maxReasonBytes bounds a reason given with a decision.
const maxReasonBytes = advisor.MaxRationaleBytes

// reviewed is a proposal as its approvers see it, as an API message.
func (s *Server) reviewed(ctx context.Context, sp store.Proposal) (*portcullisv1.Proposal, error) {
	r, err := s.life.Review(ctx, sp)
	if err != nil {
		return nil, err
	}
	return s.reviewToProto(ctx, r)
}

func (s *Server) reviewToProto(ctx context.Context, r lifecycle.Review) (*portcullisv1.Proposal, error) {
	out, err := s.proposalToProto(ctx, r.Proposal)
	if err != nil {
		return nil, err
	}
	out.ApprovalsRequired = uint32(r.Decision.Required)
	out.AutoApprovable = r.Decision.AutoApprove
	out.ApprovalNotes = slices.Concat(r.Decision.Notes, r.Decision.Refusals)
	return out, nil
}

type approvalService struct{ *Server }

func (s approvalService) ListProposals(ctx context.Context, req *portcullisv1.ApprovalServiceListProposalsRequest) (*portcullisv1.ListProposalsResponse, error) {
	if err := checkProposalStatus(req.GetStatus()); err != nil {
		return nil, err
	}
	if req.GetSandbox() != "" {
		if err := checkName("sandbox", req.GetSandbox()); err != nil {
			return nil, err
		}
	}
	limit, err := listLimit("limit", req.GetLimit(), defaultListLimit, maxListLimit)
	if err != nil {
		return nil, err
	}
	f := store.ProposalFilter{Sandbox: req.GetSandbox(), Status: req.GetStatus(), Limit: limit}
	if req.GetFinding() != "" {
		f.Limit = maxListLimit // filtered below, then capped
	}
	list, err := s.store.ListProposals(ctx, f)
	if err != nil {
		return nil, err
	}
	res := &portcullisv1.ListProposalsResponse{Proposals: []*portcullisv1.Proposal{}}
	for _, sp := range list {
		out, err := s.reviewed(ctx, sp)
		if err != nil {
			return nil, err
		}
		if k := req.GetFinding(); k != "" && !slices.ContainsFunc(out.GetFindings(), func(f *portcullisv1.Finding) bool { return f.GetKind() == k }) {
			continue
		}
		res.Proposals = append(res.Proposals, out)
		if len(res.Proposals) == limit {
			break
		}
	}
	return res, nil
}

func (s approvalService) proposal(ctx context.Context, id uint64) (store.Proposal, error) {
	if id == 0 {
		return store.Proposal{}, invalidField("id", "is required")
	}
	return s.life.Proposal(ctx, clampID(id), "")
}

func (s approvalService) GetProposal(ctx context.Context, req *portcullisv1.GetProposalRequest) (*portcullisv1.Proposal, error) {
	sp, err := s.proposal(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	out, err := s.reviewed(ctx, sp)
	if err != nil {
		return nil, err
	}
	if len(sp.Resulting) > 0 {
		if out.ResultingPolicyYaml, err = documentYAML(sp.Resulting); err != nil {
			return nil, fmt.Errorf("proposal %d: resulting policy: %w", sp.ID, err)
		}
	}
	return out, nil
}

func checkReason(reason string) error {
	switch {
	case strings.TrimSpace(reason) == "":
		return invalidField("reason", "is required: say why")
	case len(reason) > maxReasonBytes:
		return invalidField("reason", "longer than %d bytes", maxReasonBytes)
	}
	return nil
}

func (s approvalService) ApproveProposal(ctx context.Context, req *portcullisv1.ApproveProposalRequest) (*portcullisv1.Proposal, error) {
	p := mustPrincipal(ctx)
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	if req.GetResultingHash() == "" {
		return nil, invalidField("resulting_hash", "is required: the hash of the resulting policy you reviewed")
	}
	if req.GetId() == 0 {
		return nil, invalidField("id", "is required")
	}
	a := lifecycle.Approval{ID: clampID(req.GetId()), Approver: p.Name, Reason: req.GetReason(), ResultingHash: req.GetResultingHash()}
	if p.Role == store.RoleSandbox {
		a.Sandbox = p.Sandbox
	}
	if req.GetGrantExpiresAt() != nil {
		if err := req.GetGrantExpiresAt().CheckValid(); err != nil {
			return nil, invalidField("grant_expires_at", "%v", err)
		}
		a.GrantEnd = req.GetGrantExpiresAt().AsTime().UTC().Truncate(time.Second)
	}
	r, err := s.life.Approve(ctx, a)
	if err != nil {
		return nil, err
	}
	return s.reviewToProto(ctx, r)
}

func (s approvalService) RejectProposal(ctx context.Context, req *portcullisv1.RejectProposalRequest) (*portcullisv1.Proposal, error) {
	p := mustPrincipal(ctx)
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	if req.GetId() == 0 {
		return nil, invalidField("id", "is required")
	}
	r, err := s.life.Reject(ctx, clampID(req.GetId()), req.GetReason(), p.Name)
	if err != nil {
		return nil, err
	}
	return s.reviewToProto(ctx, r)
}

func (s approvalService) GetApprovalPolicy(ctx context.Context, _ *portcullisv1.GetApprovalPolicyRequest) (*portcullisv1.ApprovalPolicy, error) {
	ap, err := s.life.ApprovalRules(ctx)
	if err != nil {
		return nil, err
	}
	return approvalPolicyToProto(ap), nil
}

func (s approvalService) SetApprovalPolicy(ctx context.Context, req *portcullisv1.SetApprovalPolicyRequest) (*portcullisv1.ApprovalPolicy, error) {
	ap, err := s.life.SetApprovalRules(ctx, req.GetModule(), mustPrincipal(ctx).Actor())
	if err != nil {
		return nil, err
	}
	return approvalPolicyToProto(ap), nil
}

func approvalPolicyToProto(ap store.ApprovalPolicy) *portcullisv1.ApprovalPolicy {
	out := &portcullisv1.ApprovalPolicy{Version: uint32(ap.Version), Module: ap.Module, Hash: ap.Hash, Author: ap.Author}
	if !ap.CreatedAt.IsZero() {
		out.CreatedAt = timestamppb.New(ap.CreatedAt)
	}
	return out
}
