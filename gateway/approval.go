package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/approval"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// The decision side: operators approve or reject proposals; the Rego
// approval rules say how many distinct approvers a proposal needs and
// whether it may apply without a human. An approval names the resulting
// hash the approver was shown, so a proposal re-based since then cannot
// be approved blind; only approvals of the current resulting hash count
// toward the quorum. Applying is one compare-and-swap transaction in the
// store (the base version must still be current), then a push.

const (
	defaultProposalTTL = 24 * time.Hour
	maxReasonBytes     = advisor.MaxRationaleBytes
	// maxApprovalModule bounds a Rego module.
	maxApprovalModule = 256 << 10
)

// approvalRules holds the Rego rules in force on this replica, prepared
// once per stored version and swapped when another version is stored
// (through any replica: reload is called by the periodic check).
type approvalRules struct {
	mu      sync.Mutex
	version int64 // 0: the built-in default
	rules   *approval.Rules
}

func newApprovalRules() *approvalRules {
	return &approvalRules{rules: approval.Default()}
}

func (r *approvalRules) current() (*approval.Rules, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rules, r.version
}

// reload prepares the newest stored rules if they are not in force yet.
func (r *approvalRules) reload(ctx context.Context, st *store.Store) error {
	ap, err := st.GetApprovalPolicy(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, v := r.current(); v == ap.Version {
		return nil
	}
	rules, err := approval.Compile(ap.Module)
	if err != nil {
		// Stored rules were validated when they were set; a newer binary
		// that no longer accepts them keeps the rules in force.
		return fmt.Errorf("stored approval rules version %d no longer compile: %w", ap.Version, err)
	}
	r.set(rules, ap.Version)
	return nil
}

func (r *approvalRules) set(rules *approval.Rules, version int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if version >= r.version {
		r.rules, r.version = rules, version
	}
}

// review is a proposal as its approvers see it: re-based first if its
// base moved, with the approval rules' decision on it.
type review struct {
	sp  store.Proposal // as stored, after any re-base
	out *portcullisv1.Proposal
	d   approval.Decision
}

// approved: the rules' quorum is reached by the approvals of the current
// resulting hash (or the rules auto-approve it), and nothing is refused.
func (r review) approved() bool { return r.d.Approved(countingApprovers(r.sp)) }

func (s *Server) review(ctx context.Context, sp store.Proposal) (review, error) {
	sp, err := s.advisor.current(ctx, sp)
	if err != nil {
		return review{}, err
	}
	out, err := s.proposalToProto(ctx, sp)
	if err != nil {
		return review{}, err
	}
	sb, err := s.store.GetSandbox(ctx, sp.Sandbox)
	if err != nil {
		return review{}, missing(err, "sandbox %q not found", sp.Sandbox)
	}
	sbp, err := sandboxToProto(sb)
	if err != nil {
		return review{}, err
	}
	d := s.decide(ctx, out, sbp)
	out.ApprovalsRequired = uint32(d.Required)
	out.AutoApprovable = d.AutoApprove
	out.ApprovalNotes = slices.Concat(d.Notes, d.Refusals)
	return review{sp: sp, out: out, d: d}, nil
}

// reviewed is review's message alone.
func (s *Server) reviewed(ctx context.Context, sp store.Proposal) (*portcullisv1.Proposal, error) {
	r, err := s.review(ctx, sp)
	return r.out, err
}

// decide runs the approval rules on a proposal; a fallback (a failing
// rule set) is logged.
func (s *Server) decide(ctx context.Context, p *portcullisv1.Proposal, sb *portcullisv1.Sandbox) approval.Decision {
	rules, version := s.rules.current()
	d := rules.Decide(ctx, approval.InputFrom(p, sb))
	if d.Fallback {
		s.log.WarnContext(ctx, "approval rules failed; a human must approve", "proposal", p.GetId(), "rules_version", version, "notes", d.Notes)
	}
	return d
}

// countingApprovers are the approvers of p's current resulting hash.
func countingApprovers(p store.Proposal) []string {
	var out []string
	for _, a := range p.Approvals {
		if a.ResultingHash == p.ResultingHash {
			out = append(out, a.Approver)
		}
	}
	return out
}

type approvalService struct{ *Server }

func (s approvalService) ListProposals(ctx context.Context, req *portcullisv1.ApprovalServiceListProposalsRequest) (*portcullisv1.ListProposalsResponse, error) {
	if st := req.GetStatus(); st != "" && !slices.Contains(proposalStatuses, st) {
		return nil, invalidField("status", "must be one of %s", strings.Join(proposalStatuses, ", "))
	}
	if req.GetSandbox() != "" {
		if err := checkName("sandbox", req.GetSandbox()); err != nil {
			return nil, err
		}
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = defaultListLimit
	case limit > maxListLimit:
		return nil, invalidField("limit", "must be at most %d", maxListLimit)
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
	if id > 1<<62 {
		return store.Proposal{}, &notFoundError{fmt.Sprintf("proposal %d not found", id)}
	}
	sp, err := s.store.GetProposal(ctx, int64(id))
	if err != nil {
		return sp, missing(err, "proposal %d not found", id)
	}
	return s.advisor.current(ctx, sp)
}

func (s approvalService) GetProposal(ctx context.Context, req *portcullisv1.GetProposalRequest) (*portcullisv1.Proposal, error) {
	sp, err := s.proposal(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return s.reviewed(ctx, sp)
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
	var grantEnd time.Time
	if req.GetGrantExpiresAt() != nil {
		if err := req.GetGrantExpiresAt().CheckValid(); err != nil {
			return nil, invalidField("grant_expires_at", "%v", err)
		}
		grantEnd = req.GetGrantExpiresAt().AsTime().UTC().Truncate(time.Second)
		if !grantEnd.After(s.cfg.Now()) {
			return nil, invalidField("grant_expires_at", "is in the past")
		}
	}
	sp, err := s.proposal(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if err := s.approvable(ctx, sp, p); err != nil {
		return nil, err
	}
	if sp.ResultingHash != req.GetResultingHash() {
		return nil, &conflictError{fmt.Sprintf("proposal %d changed since it was shown (it is now based on version %d, resulting hash %s): review the new diff and approve that hash",
			sp.ID, sp.BaseVersion, sp.ResultingHash)}
	}
	// The rules may refuse outright (extra reasons), before anything is
	// recorded.
	r, err := s.review(ctx, sp)
	if err != nil {
		return nil, err
	}
	if refusals := r.d.Refusals; len(refusals) > 0 {
		return nil, &preconditionError{fmt.Sprintf("the approval rules refuse proposal %d: %s", sp.ID, strings.Join(refusals, "; "))}
	}
	sp, err = s.store.AddApproval(ctx, sp.ID, store.Approval{Approver: p.Name, Reason: req.GetReason(), ResultingHash: req.GetResultingHash()})
	switch {
	case errors.Is(err, store.ErrAlreadyExists):
		return nil, &preconditionError{fmt.Sprintf("%s already approved proposal %d: another approver is needed", p.Name, req.GetId())}
	case errors.Is(err, store.ErrConflict):
		return nil, s.whyNotPending(ctx, req.GetId())
	case err != nil:
		return nil, err
	}
	s.log.InfoContext(ctx, "proposal approved", "sandbox", sp.Sandbox, "proposal", sp.ID, "approver", p.Name, "resulting_hash", sp.ResultingHash)
	s.advisor.changed(sp.Sandbox)
	return s.applyIfReady(ctx, sp, p.Name, grantEnd)
}

// approvable checks what makes an approval impossible whatever the hash.
func (s approvalService) approvable(ctx context.Context, sp store.Proposal, p Principal) error {
	if sp.Status != store.ProposalPending {
		return &conflictError{fmt.Sprintf("proposal %d is %s: only a pending proposal can be approved", sp.ID, sp.Status)}
	}
	if p.Role == store.RoleSandbox || p.Name == sp.Proposer {
		return connect.NewError(connect.CodePermissionDenied, "the proposer can never approve its own proposal")
	}
	sb, err := s.store.GetSandbox(ctx, sp.Sandbox)
	if err != nil {
		return missing(err, "sandbox %q not found", sp.Sandbox)
	}
	if sb.Frozen {
		return &preconditionError{fmt.Sprintf("sandbox %q is frozen (%s): unfreeze it first", sb.Name, sb.FrozenReason)}
	}
	if sp.RebaseError != "" {
		return &preconditionError{fmt.Sprintf("proposal %d no longer applies: %s", sp.ID, sp.RebaseError)}
	}
	return nil
}

// whyNotPending explains a lost race on a proposal.
func (s *Server) whyNotPending(ctx context.Context, id uint64) error {
	cur, err := s.store.GetProposal(ctx, int64(id))
	if err != nil {
		return err
	}
	if cur.Status != store.ProposalPending {
		return &conflictError{fmt.Sprintf("proposal %d is %s", id, cur.Status)}
	}
	return &conflictError{fmt.Sprintf("proposal %d changed since it was shown (resulting hash %s): review it again", id, cur.ResultingHash)}
}

// applyIfReady applies sp if the approval rules say it is approved, and
// returns it as an approver sees it.
func (s *Server) applyIfReady(ctx context.Context, sp store.Proposal, actor string, grantEnd time.Time) (*portcullisv1.Proposal, error) {
	r, err := s.review(ctx, sp)
	if err != nil || !r.approved() {
		return r.out, err
	}
	applied, err := s.apply(ctx, r.sp, actor, countingApprovers(r.sp), grantEnd)
	if err != nil {
		return nil, err
	}
	return s.reviewed(ctx, applied)
}

// apply commits sp's resulting policy (with the grant's end on the rules
// it adds) as the sandbox's next version, in one transaction that checks
// the base is still current, and pushes it. A base that moved is
// re-based and re-proved; if the findings changed, the proposal stays
// pending for a new look, otherwise it is applied on the new base.
func (s *Server) apply(ctx context.Context, sp store.Proposal, actor string, approvers []string, grantEnd time.Time) (store.Proposal, error) {
	for attempt := 1; ; attempt++ {
		doc, hash, err := s.grantDocument(ctx, sp, grantEnd)
		if err != nil {
			return sp, err
		}
		prov := map[string]string{}
		if !grantEnd.IsZero() {
			prov["grant_expires_at"] = grantEnd.Format(time.RFC3339)
		}
		applied, v, err := s.store.ApplyProposal(ctx, store.ApplyProposal{
			ID: sp.ID, ResultingHash: sp.ResultingHash, Document: doc, Hash: hash,
			GrantExpiresAt: grantEnd, Actor: actor, Provenance: prov,
		})
		if err == nil {
			s.log.InfoContext(ctx, "proposal applied", "sandbox", sp.Sandbox, "proposal", sp.ID, "version", v.Version, "hash", v.Hash, "approvers", approvers)
			s.hub.publish(context.WithoutCancel(ctx), v)
			s.advisor.versionMoved(sp.Sandbox)
			s.advisor.changed(sp.Sandbox)
			s.notifyDecided(applied)
			return applied, nil
		}
		if errors.Is(err, store.ErrFrozen) {
			return sp, &preconditionError{fmt.Sprintf("sandbox %q was frozen: unfreeze it first", sp.Sandbox)}
		}
		if !errors.Is(err, store.ErrConflict) {
			return sp, err
		}
		cur, gerr := s.store.GetProposal(ctx, sp.ID)
		if gerr != nil {
			return sp, gerr
		}
		if cur.Status == store.ProposalApplied {
			return cur, nil // another approver's apply won: applied once
		}
		if cur.Status != store.ProposalPending || attempt == commitAttempts {
			return sp, s.whyNotPending(ctx, uint64(sp.ID))
		}
		// The base moved: re-base and re-prove. Approvals of the old
		// hash no longer count, so the quorum is checked again by the
		// caller's next approval; if nothing but the base moved (same
		// findings), apply on the new base now.
		rebased, rerr := s.advisor.current(ctx, cur)
		if rerr != nil {
			return sp, rerr
		}
		if rebased.RebaseError != "" || string(rebased.Findings) != string(sp.Findings) {
			s.log.InfoContext(ctx, "proposal back to review after a re-base", "proposal", sp.ID, "rebase_error", rebased.RebaseError)
			return rebased, nil
		}
		sp = rebased
	}
}

// grantDocument is the document an approval commits: the resulting policy
// as proved, or with grantEnd as expires_at on every allow rule the
// proposal adds.
func (s *Server) grantDocument(ctx context.Context, sp store.Proposal, grantEnd time.Time) ([]byte, string, error) {
	if grantEnd.IsZero() {
		return sp.Resulting, sp.ResultingHash, nil
	}
	prop, err := advisor.ParseProposal(sp.Document)
	if err != nil {
		return nil, "", fmt.Errorf("stored proposal %d no longer parses: %v", sp.ID, err)
	}
	end := grantEnd
	for i, op := range prop.Operations {
		switch {
		case op.AddBinary != nil:
			return nil, "", invalidField("grant_expires_at", "operation %d adds a binary to an entry: such a grant cannot end on its own yet; approve without an end", i)
		case op.AddRule != nil && op.AddRule.Rule != nil:
			for _, ep := range op.AddRule.Rule.Endpoints {
				if len(ep.Rules) == 0 {
					return nil, "", invalidField("grant_expires_at", "operation %d adds an endpoint without rules (L4): such a grant cannot end on its own yet", i)
				}
				for _, r := range ep.Rules {
					if r.Allow != nil {
						r.Allow.ExpiresAt = &end
					}
				}
			}
		case op.AddAllowRules != nil:
			for _, r := range op.AddAllowRules.Rules {
				if r.Allow != nil {
					r.Allow.ExpiresAt = &end
				}
			}
		}
	}
	base, err := s.store.GetPolicyVersion(ctx, sp.Sandbox, sp.BaseVersion)
	if err != nil {
		return nil, "", err
	}
	bp, _, err := policy.Parse(base.Document)
	if err != nil {
		return nil, "", fmt.Errorf("stored version %d of %q no longer parses: %v", base.Version, sp.Sandbox, err)
	}
	result, err := advisor.Apply(bp, prop)
	if err != nil {
		return nil, "", err
	}
	return result.CanonicalJSON(), result.Hash(), nil
}

func (s approvalService) RejectProposal(ctx context.Context, req *portcullisv1.RejectProposalRequest) (*portcullisv1.Proposal, error) {
	p := mustPrincipal(ctx)
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	sp, err := s.proposal(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	out, err := s.store.SetProposalStatus(ctx, sp.ID, []string{store.ProposalPending, store.ProposalApproved}, store.ProposalRejected, req.GetReason(), p.Name)
	if errors.Is(err, store.ErrConflict) {
		return nil, s.whyNotPending(ctx, req.GetId())
	}
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "proposal rejected", "sandbox", sp.Sandbox, "proposal", sp.ID, "actor", p.Name)
	s.notifyDecided(out)
	s.advisor.changed(sp.Sandbox)
	return s.reviewed(ctx, out)
}

func (s approvalService) GetApprovalPolicy(ctx context.Context, _ *portcullisv1.GetApprovalPolicyRequest) (*portcullisv1.ApprovalPolicy, error) {
	ap, err := s.store.GetApprovalPolicy(ctx)
	if errors.Is(err, store.ErrNotFound) {
		def := approval.Default()
		return &portcullisv1.ApprovalPolicy{Version: 0, Module: def.Module(), Hash: def.Hash(), Author: "built-in"}, nil
	}
	if err != nil {
		return nil, err
	}
	return approvalPolicyToProto(ap), nil
}

func (s approvalService) SetApprovalPolicy(ctx context.Context, req *portcullisv1.SetApprovalPolicyRequest) (*portcullisv1.ApprovalPolicy, error) {
	p := mustPrincipal(ctx)
	module := req.GetModule()
	switch {
	case strings.TrimSpace(module) == "":
		return nil, invalidField("module", "is empty")
	case len(module) > maxApprovalModule:
		return nil, invalidField("module", "larger than %d bytes", maxApprovalModule)
	}
	rules, err := approval.Compile(module)
	if err != nil {
		return nil, invalidField("module", "%v", err)
	}
	ap, err := s.store.SetApprovalPolicy(ctx, module, rules.Hash(), p.Actor())
	if err != nil {
		return nil, err
	}
	s.rules.set(rules, ap.Version)
	s.log.InfoContext(ctx, "approval rules set", "version", ap.Version, "hash", ap.Hash, "actor", p.Actor())
	return approvalPolicyToProto(ap), nil
}

func approvalPolicyToProto(ap store.ApprovalPolicy) *portcullisv1.ApprovalPolicy {
	return &portcullisv1.ApprovalPolicy{Version: uint32(ap.Version), Module: ap.Module, Hash: ap.Hash, Author: ap.Author, CreatedAt: timestamppb.New(ap.CreatedAt)}
}

// autoApprove applies a just-submitted proposal the rules let through
// without a human (never one with a blocking finding: approval.Decide
// enforces it).
func (s *Server) autoApprove(ctx context.Context, sp store.Proposal) (store.Proposal, error) {
	r, err := s.review(ctx, sp)
	if err != nil || !r.d.AutoApprove || !r.approved() {
		return sp, err
	}
	sp = r.sp
	_, version := s.rules.current()
	actor := "auto-approval (rules version " + strconv.FormatInt(version, 10) + ")"
	applied, err := s.apply(ctx, sp, actor, nil, time.Time{})
	if err != nil {
		return sp, err
	}
	s.log.InfoContext(ctx, "proposal auto-approved", "sandbox", sp.Sandbox, "proposal", sp.ID, "rules_version", version)
	return applied, nil
}
