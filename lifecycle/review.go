package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/approval"
	"github.com/portcullis-dev/portcullis/internal/telemetry"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/store"
)

// The decision side: operators approve or reject proposals; the Rego
// approval rules say how many distinct approvers a proposal needs and
// whether it may apply without a human. An approval names the resulting
// hash the approver was shown, so a proposal re-based since then cannot
// be approved blind; only approvals of the current resulting hash count
// toward the quorum. Applying is one compare-and-swap transaction in the
// store (the base version must still be current).

// rules holds the Rego rules in force on this replica, prepared once per
// stored version and swapped when another version is stored (through any
// replica: reload runs in Check).
type rules struct {
	mu      sync.Mutex
	version int64 // 0: the built-in default
	rules   *approval.Rules
}

func newRules() *rules { return &rules{rules: approval.Default()} }

func (r *rules) current() (*approval.Rules, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rules, r.version
}

// reload prepares the newest stored rules if they are not in force yet.
func (r *rules) reload(ctx context.Context, st *store.Store) error {
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
	compiled, err := approval.Compile(ap.Module)
	if err != nil {
		// Stored rules were validated when they were set; a newer binary
		// that no longer accepts them keeps the rules in force.
		return fmt.Errorf("stored approval rules version %d no longer compile: %w", ap.Version, err)
	}
	r.set(compiled, ap.Version)
	return nil
}

func (r *rules) set(compiled *approval.Rules, version int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if version >= r.version {
		r.rules, r.version = compiled, version
	}
}

// maxApprovalModule bounds a Rego module.
const maxApprovalModule = 256 << 10

// ApprovalRules returns the stored rules in force (Version 0 and Author
// "built-in" for the default).
func (l *Lifecycle) ApprovalRules(ctx context.Context) (store.ApprovalPolicy, error) {
	ap, err := l.st.GetApprovalPolicy(ctx)
	if errors.Is(err, store.ErrNotFound) {
		def := approval.Default()
		return store.ApprovalPolicy{Module: def.Module(), Hash: def.Hash(), Author: "built-in"}, nil
	}
	return ap, err
}

// SetApprovalRules stores module as the next version of the rules and
// puts it in force on this replica.
func (l *Lifecycle) SetApprovalRules(ctx context.Context, module, actor string) (store.ApprovalPolicy, error) {
	switch {
	case strings.TrimSpace(module) == "":
		return store.ApprovalPolicy{}, Field("module", "is empty")
	case len(module) > maxApprovalModule:
		return store.ApprovalPolicy{}, Field("module", "larger than %d bytes", maxApprovalModule)
	}
	compiled, err := approval.Compile(module)
	if err != nil {
		return store.ApprovalPolicy{}, Field("module", "%v", err)
	}
	ap, err := l.st.SetApprovalPolicy(ctx, module, compiled.Hash(), actor)
	if err != nil {
		return ap, err
	}
	l.rules.set(compiled, ap.Version)
	l.log.InfoContext(ctx, "approval rules set", "version", ap.Version, "hash", ap.Hash, "actor", actor)
	return ap, nil
}

// Review is a proposal as its approvers see it: re-based first if its
// base moved, with its findings, its sandbox as the rules saw it, and the
// rules' decision on it.
type Review struct {
	Proposal store.Proposal
	Findings []Finding
	Sandbox  store.Sandbox
	Decision approval.Decision
}

// Approved: the rules' quorum is reached by the approvals of the current
// resulting hash (or the rules auto-approve it), and nothing is refused.
func (r Review) Approved() bool { return r.Decision.Approved(countingApprovers(r.Proposal)) }

// Review returns p as its approvers see it.
func (l *Lifecycle) Review(ctx context.Context, p store.Proposal) (Review, error) {
	return l.review(ctx, p)
}

func (l *Lifecycle) review(ctx context.Context, p store.Proposal) (Review, error) {
	p, err := l.fresh(ctx, p)
	if err != nil {
		return Review{}, err
	}
	return l.judge(ctx, p)
}

// judge runs the approval rules on p as given (review re-bases it first).
func (l *Lifecycle) judge(ctx context.Context, p store.Proposal) (Review, error) {
	findings, err := DecodeFindings(p.Findings)
	if err != nil {
		return Review{}, fmt.Errorf("proposal %d: stored findings: %w", p.ID, err)
	}
	sb, err := l.st.GetSandbox(ctx, p.Sandbox)
	if err != nil {
		return Review{}, Missing(err, "sandbox %q not found", p.Sandbox)
	}
	in, err := approvalInput(p, findings, sb)
	if err != nil {
		return Review{}, err
	}
	compiled, version := l.rules.current()
	d := compiled.Decide(ctx, in)
	if d.Fallback {
		l.log.WarnContext(ctx, "approval rules failed; a human must approve", "proposal", p.ID, "rules_version", version, "notes", d.Notes)
	}
	return Review{Proposal: p, Findings: findings, Sandbox: sb, Decision: d}, nil
}

// approvalInput builds the rules' input from a stored proposal and its
// sandbox. Approvers are the proposal's approvals, each name once.
func approvalInput(p store.Proposal, findings []Finding, sb store.Sandbox) (approval.Input, error) {
	in := approval.Input{
		Kind: approval.KindProposal,
		Proposal: approval.ProposalInput{
			ID: uint64(p.ID), Sandbox: p.Sandbox, Rationale: p.Rationale, Proposer: p.Proposer,
			BaseVersion: uint32(p.BaseVersion), ResultingHash: p.ResultingHash, DenialID: p.DenialID,
			Operations: []any{},
		},
		Findings: make([]approval.FindingInput, 0, len(findings)),
		Sandbox: approval.SandboxInput{
			Name: sb.Name, CurrentVersion: uint32(sb.CurrentVersion),
			CredentialedHosts: append([]string{}, sb.CredentialedHosts...), Providers: sb.Providers,
			HasBoundary: len(sb.Boundary) > 0,
		},
		Approvers: []string{},
	}
	var doc map[string]any
	if err := json.Unmarshal(p.Document, &doc); err != nil {
		return in, fmt.Errorf("proposal %d: stored document: %w", p.ID, err)
	}
	if ops, ok := doc["operations"].([]any); ok {
		in.Proposal.Operations = ops
	}
	for _, f := range findings {
		fi := approval.FindingInput{
			Kind: f.Kind, Blocking: approval.Blocking(f.Kind), Credentialed: f.Credentialed,
			Entry: f.Entry, Endpoint: f.Endpoint, Rule: f.Rule, Detail: f.Detail,
		}
		if c := f.Counterexample; c != nil {
			fi.Counterexample = approval.RequestInput{
				Binary: c.Binary, Host: c.Host, Port: c.Port, HTTPMethod: c.HTTPMethod, Path: c.Path, MCPMethod: c.MCPMethod, Tool: c.Tool,
			}
		}
		in.Findings = append(in.Findings, fi)
	}
	for _, a := range p.Approvals {
		if a.Approver != "" && !slices.Contains(in.Approvers, a.Approver) {
			in.Approvers = append(in.Approvers, a.Approver)
		}
	}
	return in, nil
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

// Changes is the structural diff from the proposal's base version to its
// resulting policy (nil when the sandbox is gone).
func (l *Lifecycle) Changes(ctx context.Context, p store.Proposal) ([]policy.Change, error) {
	base, err := l.st.GetPolicyVersion(ctx, p.Sandbox, p.BaseVersion)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // the sandbox is gone; the proposal went with it
	}
	if err != nil {
		return nil, err
	}
	from, _, err := policy.Parse(base.Document)
	if err != nil {
		return nil, fmt.Errorf("stored version %d of %q no longer parses: %v", base.Version, p.Sandbox, err)
	}
	to, _, err := policy.Parse(p.Resulting)
	if err != nil {
		return nil, fmt.Errorf("proposal %d: stored resulting policy no longer parses: %v", p.ID, err)
	}
	return policy.Diff(from, to), nil
}

// Approval is one approver's approval of a proposal.
type Approval struct {
	ID int64
	// Approver names the approving token; Sandbox is set when the caller
	// holds a sandbox token (which can never approve).
	Approver string
	Sandbox  string
	Reason   string
	// ResultingHash is the hash of the resulting policy the approver
	// reviewed.
	ResultingHash string
	// GrantEnd, if set, ends the grant: the allow rules the proposal adds
	// get it as expires_at.
	GrantEnd time.Time
}

// Approve records a's approval and applies the proposal once the rules
// say it is approved, returning it as its approvers now see it.
//
// When ctx is traced (the RPC's span, see internal/telemetry), the
// approval is a span, and the commit it makes, if it applies, its child.
func (l *Lifecycle) Approve(ctx context.Context, a Approval) (Review, error) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return l.approve(ctx, a)
	}
	ctx, span := parent.TracerProvider().Tracer(telemetry.Scope).Start(ctx, "proposal.approve", trace.WithAttributes(
		attribute.Int64("portcullis.proposal.id", a.ID),
		attribute.String("portcullis.approver", a.Approver),
	))
	defer span.End()
	r, err := l.approve(ctx, a)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return r, err
	}
	span.SetAttributes(attribute.String("portcullis.sandbox", r.Proposal.Sandbox), attribute.String("portcullis.proposal.status", r.Proposal.Status))
	return r, nil
}

func (l *Lifecycle) approve(ctx context.Context, a Approval) (Review, error) {
	if !a.GrantEnd.IsZero() && !a.GrantEnd.After(l.cfg.Now()) {
		return Review{}, Field("grant_expires_at", "is in the past")
	}
	p, err := l.Proposal(ctx, a.ID, "")
	if err != nil {
		return Review{}, err
	}
	if err := l.approvable(ctx, p, a); err != nil {
		return Review{}, err
	}
	if p.ResultingHash != a.ResultingHash {
		return Review{}, &ConflictError{fmt.Sprintf("proposal %d changed since it was shown (it is now based on version %d, resulting hash %s): review the new diff and approve that hash",
			p.ID, p.BaseVersion, p.ResultingHash)}
	}
	// The rules may refuse outright (extra reasons), before anything is
	// recorded.
	r, err := l.review(ctx, p)
	if err != nil {
		return Review{}, err
	}
	if refusals := r.Decision.Refusals; len(refusals) > 0 {
		return Review{}, &PreconditionError{fmt.Sprintf("the approval rules refuse proposal %d: %s", p.ID, strings.Join(refusals, "; "))}
	}
	if r.Proposal.ResultingHash != a.ResultingHash {
		return Review{}, l.whyNotPending(ctx, a.ID) // re-based just now
	}
	approval := store.Approval{Approver: a.Approver, Reason: a.Reason, ResultingHash: a.ResultingHash}
	if slices.ContainsFunc(r.Proposal.Approvals, func(o store.Approval) bool { return o.Approver == a.Approver }) {
		return Review{}, alreadyApproved(a)
	}
	// The rules judge the proposal with this approval, as it stands: a
	// base that moves from here on is apply's to handle. An approval that
	// completes the quorum is recorded by the transaction that applies,
	// never alone: a replica that dies in between, or a commit that moves
	// the base in between, must not leave the proposal approved and
	// unapplied, with an approval its approver cannot give again.
	with := r.Proposal
	with.Approvals = append(slices.Clone(with.Approvals), approval)
	if r, err = l.judge(ctx, with); err != nil {
		return Review{}, err
	}
	if !r.Approved() {
		p, err = addApproval(ctx, l.st, p.ID, approval)
		switch {
		case errors.Is(err, store.ErrAlreadyExists):
			return Review{}, alreadyApproved(a)
		case errors.Is(err, store.ErrConflict):
			return Review{}, l.whyNotPending(ctx, a.ID)
		case err != nil:
			return Review{}, err
		}
		l.log.InfoContext(ctx, "proposal approved", "sandbox", p.Sandbox, "proposal", p.ID, "approver", a.Approver, "resulting_hash", p.ResultingHash)
		l.changed(p.Sandbox)
		return l.review(ctx, p)
	}
	applied, err := l.apply(ctx, r.Proposal, a.Approver, countingApprovers(with), a.GrantEnd, &approval)
	switch {
	case errors.Is(err, store.ErrAlreadyExists):
		return Review{}, alreadyApproved(a)
	case err != nil:
		return Review{}, err
	case applied.Status != store.ProposalApplied:
		// Re-based while being approved, and what it adds changed: the
		// approval was not recorded.
		return Review{}, &ConflictError{fmt.Sprintf("proposal %d was re-based onto version %d while it was being approved and its findings changed (resulting hash %s): review it again; your approval was not recorded",
			applied.ID, applied.BaseVersion, applied.ResultingHash)}
	}
	l.log.InfoContext(ctx, "proposal approved", "sandbox", applied.Sandbox, "proposal", applied.ID, "approver", a.Approver, "resulting_hash", a.ResultingHash)
	// Decided as reviewed: the rules' answer on what was applied stands
	// (its findings and approvers did not change).
	r.Proposal = applied
	return r, nil
}

func alreadyApproved(a Approval) error {
	return &PreconditionError{fmt.Sprintf("%s already approved proposal %d: another approver is needed", a.Approver, a.ID)}
}

// approvable checks what makes an approval impossible whatever the hash.
func (l *Lifecycle) approvable(ctx context.Context, p store.Proposal, a Approval) error {
	if p.Status != store.ProposalPending {
		return &ConflictError{fmt.Sprintf("proposal %d is %s: only a pending proposal can be approved", p.ID, p.Status)}
	}
	if a.Sandbox != "" || a.Approver == p.Proposer {
		return &PermissionError{"the proposer can never approve its own proposal"}
	}
	sb, err := l.st.GetSandbox(ctx, p.Sandbox)
	if err != nil {
		return Missing(err, "sandbox %q not found", p.Sandbox)
	}
	if sb.Frozen {
		return frozenError(sb, "first")
	}
	if p.RebaseError != "" {
		return &PreconditionError{fmt.Sprintf("proposal %d no longer applies: %s", p.ID, p.RebaseError)}
	}
	return nil
}

// whyNotPending explains a lost race on a proposal.
func (l *Lifecycle) whyNotPending(ctx context.Context, id int64) error {
	cur, err := l.st.GetProposal(ctx, id)
	if err != nil {
		return err
	}
	if cur.Status != store.ProposalPending {
		return &ConflictError{fmt.Sprintf("proposal %d is %s", id, cur.Status)}
	}
	return &ConflictError{fmt.Sprintf("proposal %d changed since it was shown (resulting hash %s): review it again", id, cur.ResultingHash)}
}

// Reject rejects a pending (or approved, not yet applied) proposal.
func (l *Lifecycle) Reject(ctx context.Context, id int64, reason, actor string) (Review, error) {
	p, err := l.Proposal(ctx, id, "")
	if err != nil {
		return Review{}, err
	}
	out, err := setProposalStatus(ctx, l.st, p.ID, []string{store.ProposalPending, store.ProposalApproved}, store.ProposalRejected, reason, actor)
	if errors.Is(err, store.ErrConflict) {
		return Review{}, l.whyNotPending(ctx, id)
	}
	if err != nil {
		return Review{}, err
	}
	l.log.InfoContext(ctx, "proposal rejected", "sandbox", p.Sandbox, "proposal", p.ID, "actor", actor)
	l.decided(out)
	l.changed(p.Sandbox)
	return l.review(ctx, out)
}

// apply commits p's resulting policy (with the grant's end on the rules
// it adds) as the sandbox's next version, in one transaction that checks
// the base is still current. A base that moved is re-based and re-proved;
// if the findings changed, the proposal stays pending for a new look,
// otherwise it is applied on the new base.
func (l *Lifecycle) apply(ctx context.Context, p store.Proposal, actor string, approvers []string, grantEnd time.Time, approval *store.Approval) (store.Proposal, error) {
	for attempt := 1; ; attempt++ {
		doc, hash, err := l.grantDocument(ctx, p, grantEnd)
		if err != nil {
			return p, err
		}
		prov := map[string]string{}
		if !grantEnd.IsZero() {
			prov["grant_expires_at"] = grantEnd.Format(time.RFC3339)
		}
		applied, v, err := applyProposal(ctx, l.st, applyIn{
			ID: p.ID, ResultingHash: p.ResultingHash, Document: doc, Hash: hash,
			GrantExpiresAt: grantEnd, Actor: actor, Provenance: prov, Approval: approval,
		})
		if err == nil {
			l.log.InfoContext(ctx, "proposal applied", "sandbox", p.Sandbox, "proposal", p.ID, "version", v.Version, "hash", v.Hash, "approvers", approvers)
			l.changed(p.Sandbox)
			l.decided(applied)
			return applied, nil
		}
		if errors.Is(err, errFrozen) {
			return p, &PreconditionError{fmt.Sprintf("sandbox %q was frozen: unfreeze it first", p.Sandbox)}
		}
		if !errors.Is(err, store.ErrConflict) {
			return p, err
		}
		cur, gerr := l.st.GetProposal(ctx, p.ID)
		if gerr != nil {
			return p, gerr
		}
		if cur.Status == store.ProposalApplied {
			return cur, nil // another approver's apply won: applied once
		}
		if cur.Status != store.ProposalPending || attempt == commitAttempts {
			return p, l.whyNotPending(ctx, p.ID)
		}
		// The base moved: re-base and re-prove. Approvals of the old
		// hash no longer count, so the quorum is checked again by the
		// caller's next approval; if nothing but the base moved (same
		// findings), apply on the new base now.
		rebased, rerr := l.fresh(ctx, cur)
		if rerr != nil {
			return p, rerr
		}
		if rebased.RebaseError != "" || !sameFindings(rebased.Findings, p.Findings) {
			l.log.InfoContext(ctx, "proposal back to review after a re-base", "proposal", p.ID, "rebase_error", rebased.RebaseError)
			return rebased, nil
		}
		p = rebased
	}
}

// grantDocument is the document an approval commits: the resulting policy
// as proved, or with grantEnd as expires_at on every allow rule the
// proposal adds.
func (l *Lifecycle) grantDocument(ctx context.Context, p store.Proposal, grantEnd time.Time) ([]byte, string, error) {
	if grantEnd.IsZero() {
		return p.Resulting, p.ResultingHash, nil
	}
	prop, err := advisor.ParseProposal(p.Document)
	if err != nil {
		return nil, "", fmt.Errorf("stored proposal %d no longer parses: %v", p.ID, err)
	}
	end := grantEnd
	for i, op := range prop.Operations {
		switch {
		case op.AddBinary != nil:
			return nil, "", Field("grant_expires_at", "operation %d adds a binary to an entry: such a grant cannot end on its own yet; approve without an end", i)
		case op.AddRule != nil && op.AddRule.Rule != nil:
			for _, ep := range op.AddRule.Rule.Endpoints {
				if len(ep.Rules) == 0 {
					return nil, "", Field("grant_expires_at", "operation %d adds an endpoint without rules (L4): such a grant cannot end on its own yet", i)
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
	base, err := l.st.GetPolicyVersion(ctx, p.Sandbox, p.BaseVersion)
	if err != nil {
		return nil, "", err
	}
	bp, _, err := policy.Parse(base.Document)
	if err != nil {
		return nil, "", fmt.Errorf("stored version %d of %q no longer parses: %v", base.Version, p.Sandbox, err)
	}
	result, err := advisor.Apply(bp, prop)
	if err != nil {
		return nil, "", err
	}
	return result.CanonicalJSON(), result.Hash(), nil
}

// autoApprove applies a just-submitted proposal the rules let through
// without a human (never one with a blocking finding: approval.Decide
// enforces it).
func (l *Lifecycle) autoApprove(ctx context.Context, p store.Proposal) (store.Proposal, error) {
	_, version := l.rules.current()
	actor := "auto-approval (rules version " + strconv.FormatInt(version, 10) + ")"
	applied, err := l.apply(ctx, p, actor, nil, time.Time{}, nil)
	if err != nil {
		return p, err
	}
	l.log.InfoContext(ctx, "proposal auto-approved", "sandbox", p.Sandbox, "proposal", p.ID, "rules_version", version)
	return applied, nil
}
