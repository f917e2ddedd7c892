package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/gateway/transport"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/store"
)

// AdvisorService and ProverService: requests translated into calls of the
// lifecycle (intake, re-basing and proving live there), results into API
// messages.

const (
	// watchPollInterval bounds how late a watcher hears of a change made
	// through another replica.
	watchPollInterval = time.Second
	defaultDenials    = 20
	maxDenials        = 200
)

// ---------------------------------------------------------------------------
// AdvisorService

type advisorService struct{ *Server }

var _ portcullisv1connect.AdvisorServiceHandler = advisorService{}

func (s advisorService) SubmitProposal(ctx context.Context, req *portcullisv1.SubmitProposalRequest) (*portcullisv1.Proposal, error) {
	p := mustPrincipal(ctx)
	sub := lifecycle.Submission{Sandbox: p.Sandbox, Proposer: p.Name, Actor: p.Actor()}
	switch {
	case req.GetDocument() != "" && req.GetDenialId() != "":
		return nil, invalidField("denial_id", "give either a document or a denial_id, not both")
	case req.GetDocument() != "":
		if req.GetRationale() != "" || req.GetIdempotencyKey() != "" {
			return nil, invalidField("rationale", "a document carries its own rationale and idempotency_key")
		}
		if req.GetArguments() != "" {
			return nil, invalidField("arguments", "go with a denial_id; a document names its schemas itself")
		}
		if len(req.GetDocument()) > advisor.MaxProposalBytes {
			return nil, invalidField("document", "larger than %d bytes", advisor.MaxProposalBytes)
		}
		prop, err := advisor.ParseProposal([]byte(req.GetDocument()))
		if err != nil {
			return nil, err
		}
		sub.Proposal = prop
	case req.GetDenialId() == "":
		return nil, invalidField("document", "give a proposal document or a denial_id")
	default:
		id := req.GetDenialId()
		if len(id) > 64 || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return nil, invalidField("denial_id", "is not a denial id")
		}
		if len(req.GetArguments()) > advisor.MaxProposalBytes/2 {
			return nil, invalidField("arguments", "larger than %d bytes", advisor.MaxProposalBytes/2)
		}
		sub.DenialID, sub.Rationale, sub.IdempotencyKey = id, req.GetRationale(), req.GetIdempotencyKey()
		sub.Arguments = req.GetArguments()
	}
	res, err := s.life.Submit(ctx, sub)
	if err != nil {
		return nil, err
	}
	out, err := s.proposalToProto(ctx, res.Proposal)
	if err != nil {
		return nil, err
	}
	out.Deduplicated = !res.Created
	for _, id := range res.Superseded {
		out.Supersedes = append(out.Supersedes, uint64(id))
	}
	return out, nil
}

// ownProposal reads a proposal of the caller's sandbox; another sandbox's
// is not found (its existence is not the caller's business).
func (s advisorService) ownProposal(ctx context.Context, id uint64) (store.Proposal, error) {
	if id == 0 {
		return store.Proposal{}, invalidField("id", "is required")
	}
	return s.life.Proposal(ctx, clampID(id), mustPrincipal(ctx).Sandbox)
}

// clampID maps ids beyond any stored one to one the lifecycle reports as
// not found.
func clampID(id uint64) int64 {
	if id > 1<<62 {
		return -1
	}
	return int64(id)
}

func (s advisorService) GetProposal(ctx context.Context, req *portcullisv1.GetProposalRequest) (*portcullisv1.Proposal, error) {
	sp, err := s.ownProposal(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return s.proposalToProto(ctx, sp)
}

func (s advisorService) ListProposals(ctx context.Context, req *portcullisv1.ListProposalsRequest) (*portcullisv1.ListProposalsResponse, error) {
	p := mustPrincipal(ctx)
	if err := checkProposalStatus(req.GetStatus()); err != nil {
		return nil, err
	}
	limit, err := listLimit("limit", req.GetLimit(), defaultListLimit, maxListLimit)
	if err != nil {
		return nil, err
	}
	list, err := s.life.Proposals(ctx, store.ProposalFilter{Sandbox: p.Sandbox, Status: req.GetStatus(), Limit: limit})
	if err != nil {
		return nil, err
	}
	res := &portcullisv1.ListProposalsResponse{Proposals: make([]*portcullisv1.Proposal, 0, len(list))}
	for _, sp := range list {
		out, err := s.proposalToProto(ctx, sp)
		if err != nil {
			return nil, err
		}
		res.Proposals = append(res.Proposals, out)
	}
	return res, nil
}

var proposalStatuses = []string{
	store.ProposalPending, store.ProposalApproved, store.ProposalApplied, store.ProposalRejected,
	store.ProposalExpired, store.ProposalSuperseded, store.ProposalWithdrawn,
}

// checkProposalStatus checks a list filter's status ("" is any).
func checkProposalStatus(status string) error {
	if status != "" && !slices.Contains(proposalStatuses, status) {
		return invalidField("status", "must be one of %s", strings.Join(proposalStatuses, ", "))
	}
	return nil
}

// decided: the proposal will not change again (approved is on its way to
// applied, so a watcher waits for that).
func decided(status string) bool {
	return status != store.ProposalPending && status != store.ProposalApproved
}

func (s advisorService) WatchProposal(ctx context.Context, req *portcullisv1.WatchProposalRequest, stream portcullisv1connect.AdvisorServiceWatchProposalServerStream) error {
	sandbox := mustPrincipal(ctx).Sandbox
	tick := time.NewTicker(watchPollInterval)
	defer tick.Stop()
	var last *portcullisv1.Proposal
	for {
		wake := s.life.Changed(sandbox) // before the read: no change is missed
		sp, err := transport.OffStack(func() (store.Proposal, error) { return s.ownProposal(ctx, req.GetId()) })
		if err != nil {
			return err
		}
		out, err := s.proposalToProto(ctx, sp)
		if err != nil {
			return err
		}
		if sp.Status == store.ProposalApplied && out.GetAppliedVersion() > 0 {
			// Followed on to the proxies that enforce it: every message
			// from now on carries its enforcement.
			return s.watchEnforcement(ctx, out, stream.Send)
		}
		if last == nil || !sameProposal(last, out) {
			if err := stream.Send(out); err != nil {
				return err
			}
			last = out
		}
		if decided(sp.Status) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.streams.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

func sameProposal(a, b *portcullisv1.Proposal) bool {
	return a.GetStatus() == b.GetStatus() && a.GetUpdatedAt().AsTime().Equal(b.GetUpdatedAt().AsTime()) &&
		a.GetResultingHash() == b.GetResultingHash() && a.GetBaseVersion() == b.GetBaseVersion()
}

func (s advisorService) WithdrawProposal(ctx context.Context, req *portcullisv1.WithdrawProposalRequest) (*portcullisv1.Proposal, error) {
	p := mustPrincipal(ctx)
	if len(req.GetReason()) > advisor.MaxRationaleBytes {
		return nil, invalidField("reason", "longer than %d bytes", advisor.MaxRationaleBytes)
	}
	if req.GetId() == 0 {
		return nil, invalidField("id", "is required")
	}
	out, err := s.life.Withdraw(ctx, clampID(req.GetId()), p.Sandbox, req.GetReason(), p.Actor())
	if err != nil {
		return nil, err
	}
	return s.proposalToProto(ctx, out)
}

func (s advisorService) ListDenials(ctx context.Context, req *portcullisv1.ListDenialsRequest) (*portcullisv1.ListDenialsResponse, error) {
	p := mustPrincipal(ctx)
	last, err := listLimit("last", req.GetLast(), defaultDenials, maxDenials)
	if err != nil {
		return nil, err
	}
	list, err := s.store.ListDecisions(ctx, store.DecisionFilter{Sandbox: p.Sandbox, Decision: "deny", Limit: last})
	if err != nil {
		return nil, err
	}
	base, _ := s.life.CurrentPolicy(ctx, p.Sandbox)
	res := &portcullisv1.ListDenialsResponse{}
	for i := len(list) - 1; i >= 0; i-- { // newest first
		d := list[i]
		if d.Summary != nil {
			continue // a flood's summary names no one denial to propose from
		}
		out := &portcullisv1.Denial{
			DenialId: d.DenialID, Time: timestamppb.New(d.Time), Binary: d.Binary, Host: d.Host, Port: uint32(d.Port),
			HttpMethod: d.HTTPMethod, Path: d.Path, McpMethod: d.MCPMethod, Tool: d.Tool, Reason: d.Reason,
			ReasonCode: d.ReasonCode, ToolDefinition: d.ToolDefinition,
		}
		if out.NotOffered, out.Suggestion = suggest(base, d, s.cfg.DevAllowLoopback); out.NotOffered == "" && out.Suggestion == nil {
			out.NotOffered = "no suggestion could be built"
		}
		res.Denials = append(res.Denials, out)
	}
	return res, nil
}

// suggest builds the narrowest proposal for a denial, or says why none is
// offered.
func suggest(base *policy.Policy, d store.Decision, devAllowLoopback bool) (string, *structpb.Struct) {
	if d.DenialID == "" {
		return "the denial has no id", nil
	}
	if base == nil {
		return "the sandbox has no policy yet", nil
	}
	rec := advisor.DenialOf(&d.Record)
	rec.DevAllowLoopback = devAllowLoopback
	prop, err := advisor.FromDenial(base, rec)
	if err != nil {
		if r, ok := advisor.AsRefusal(err); ok {
			return r.Reason, nil
		}
		return err.Error(), nil
	}
	doc, err := prop.Encode()
	if err != nil {
		return err.Error(), nil
	}
	st, err := documentStruct(doc)
	if err != nil {
		return err.Error(), nil
	}
	return "", st
}

// ---------------------------------------------------------------------------
// ProverService

type proverService struct{ *Server }

func (s proverService) Prove(ctx context.Context, req *portcullisv1.ProveRequest) (*portcullisv1.ProveResponse, error) {
	read := func(field, text string, required bool) (*policy.Policy, error) {
		if text == "" {
			if required {
				return nil, invalidField(field, "is empty")
			}
			return nil, nil
		}
		doc, err := parseDocument(text)
		if err != nil {
			var verr *policy.ValidationError
			if errors.As(err, &verr) {
				for i := range verr.Problems {
					verr.Problems[i].Path = joinPath(field, verr.Problems[i].Path)
				}
			}
			var ferr *fieldError
			if errors.As(err, &ferr) {
				return nil, invalidField(field, "%s", ferr.Message)
			}
			return nil, err
		}
		return doc.policy, nil
	}
	current, err := read("current", req.GetCurrent(), false)
	if err != nil {
		return nil, err
	}
	proposed, err := read("proposed", req.GetProposed(), true)
	if err != nil {
		return nil, err
	}
	var opts prover.Options
	if opts.Boundary, err = read("boundary", req.GetBoundary(), false); err != nil {
		return nil, err
	}
	if len(req.GetCredentialed()) > 1000 {
		return nil, invalidField("credentialed", "at most 1000 destinations")
	}
	for i, hp := range req.GetCredentialed() {
		dest, err := prover.ParseHostPattern(hp)
		if err != nil {
			return nil, invalidField(fmt.Sprintf("credentialed[%d]", i), "%v", err)
		}
		opts.Credentialed = append(opts.Credentialed, dest)
	}
	if current == nil {
		current = &policy.Policy{}
	}
	rep, err := prover.Prove(ctx, current, proposed, opts)
	if err != nil {
		return nil, err
	}
	return &portcullisv1.ProveResponse{Findings: findingsToProto(lifecycle.FindingsOf(rep))}, nil
}

func joinPath(prefix, path string) string {
	if path == "" {
		return prefix
	}
	return prefix + "." + path
}

// ---------------------------------------------------------------------------
// Conversions and keys

func findingsToProto(findings []lifecycle.Finding) []*portcullisv1.Finding {
	out := make([]*portcullisv1.Finding, 0, len(findings))
	for _, f := range findings {
		pf := &portcullisv1.Finding{Kind: f.Kind, Entry: f.Entry, Endpoint: f.Endpoint, Rule: f.Rule, Detail: f.Detail, Credentialed: f.Credentialed}
		if r := f.Counterexample; r != nil {
			pf.Counterexample = &portcullisv1.ProvedRequest{
				Binary: r.Binary, Host: r.Host, Port: r.Port, Addr: r.Addr, HttpMethod: r.HTTPMethod, Path: r.Path, Query: r.Query,
				McpMethod: r.MCPMethod, Tool: r.Tool, McpProtocolVersion: r.MCPProtocolVersion, Arguments: r.Arguments,
			}
		}
		out = append(out, pf)
	}
	return out
}

func (s *Server) proposalToProto(ctx context.Context, p store.Proposal) (*portcullisv1.Proposal, error) {
	out := &portcullisv1.Proposal{
		Id:             uint64(p.ID),
		Sandbox:        p.Sandbox,
		Status:         p.Status,
		Rationale:      p.Rationale,
		Proposer:       p.Proposer,
		IdempotencyKey: p.IdempotencyKey,
		DenialId:       p.DenialID,
		BaseVersion:    uint32(p.BaseVersion),
		BaseHash:       p.BaseHash,
		ResultingHash:  p.ResultingHash,
		RebaseError:    p.RebaseError,
		SupersededBy:   uint64(p.SupersededBy),
		StatusReason:   p.StatusReason,
		CreatedAt:      timestamppb.New(p.CreatedAt),
		UpdatedAt:      timestamppb.New(p.UpdatedAt),
		AppliedVersion: uint32(p.AppliedVersion),
		DecidedBy:      p.DecidedBy,
	}
	if !p.ExpiresAt.IsZero() {
		out.ExpiresAt = timestamppb.New(p.ExpiresAt)
	}
	if !p.GrantExpiresAt.IsZero() {
		out.GrantExpiresAt = timestamppb.New(p.GrantExpiresAt)
	}
	if p.DecidedAt != nil {
		out.DecidedAt = timestamppb.New(*p.DecidedAt)
	}
	for _, a := range p.Approvals {
		out.Approvals = append(out.Approvals, &portcullisv1.Approval{Approver: a.Approver, Reason: a.Reason, ResultingHash: a.ResultingHash, Time: timestamppb.New(a.CreatedAt)})
	}
	var err error
	if out.Proposal, err = documentStruct(p.Document); err != nil {
		return nil, fmt.Errorf("proposal %d: %w", p.ID, err)
	}
	if out.ResultingPolicy, err = documentStruct(p.Resulting); err != nil {
		return nil, fmt.Errorf("proposal %d: %w", p.ID, err)
	}
	findings, err := lifecycle.DecodeFindings(p.Findings)
	if err != nil {
		return nil, fmt.Errorf("proposal %d: stored findings: %w", p.ID, err)
	}
	out.Findings = findingsToProto(findings)
	changes, err := s.life.Changes(ctx, p)
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		out.Changes = append(out.Changes, &portcullisv1.PolicyChange{Kind: c.Kind, Path: c.Path, Summary: c.Summary, Before: c.Before, After: c.After})
	}
	if out.DefinitionChanges, err = s.definitionChanges(ctx, p); err != nil {
		return nil, err
	}
	return out, nil
}
