package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/store"
)

// Guarding grants. A document written from an older copy of a sandbox's
// policy silently takes away what proposals approved since then granted:
// the agent is denied again and nobody decided it. A guarded change
// (Change.Grants, policy set) that would take away a grant still in force
// is refused, naming the proposals, unless the caller takes them away on
// purpose.

// GrantGuard keeps a change from taking away, unnoticed, what applied
// proposals granted (their grants not yet expired).
type GrantGuard struct {
	// Force commits the change anyway.
	Force bool
	// Confirmed are the proposals whose grants the caller saw the change
	// take away and confirms; honoured only with Change.Expected (the
	// caller saw what that version holds), and only when they are all of
	// the grants taken away.
	Confirmed []int64
}

// RemovedGrant is an applied proposal whose grant a document takes away.
type RemovedGrant struct {
	Proposal  int64
	Rationale string
	// Granted is a request the proposal allowed, the current version still
	// allows and the document denies.
	Granted policy.Request
}

// GrantsRemovedError refuses a guarded change that takes away grants; it
// stored nothing.
type GrantsRemovedError struct {
	Sandbox string
	Grants  []RemovedGrant
}

func (e *GrantsRemovedError) Error() string {
	names := make([]string, 0, len(e.Grants))
	for _, g := range e.Grants {
		names = append(names, fmt.Sprintf("proposal %d (%s)", g.Proposal, GrantLine(g.Granted)))
	}
	return fmt.Sprintf("the document takes away what approved proposals granted to %q: %s; nothing was stored. "+
		"Start from the current version (portcullis policy get %s -o yaml), or take them away on purpose "+
		"(--force, or --expect-version with the current version and confirm)", e.Sandbox, strings.Join(names, ", "), e.Sandbox)
}

// GrantLine is a request as one line: "GET api.example.com:443/orders/1",
// an MCP message by its method and name, the calling binary after "by".
func GrantLine(r policy.Request) string {
	dest := r.Host + ":" + strconv.Itoa(r.Port)
	line := dest
	switch {
	case r.MCP != nil:
		line = dest + " " + policy.DescribeMCP(r.MCP)
	case r.HTTPMethod != "":
		line = r.HTTPMethod + " " + dest + r.Path
	}
	if r.Binary != "" {
		line += " by " + r.Binary
	}
	return line
}

// removedGrants returns the applied proposals of sandbox whose grant next
// takes away from cur, at now: what the proposal added (the prover's
// findings between the version before it and the version it became) that
// cur allows and next denies. Only when next denies something cur allows
// are proposals looked at. opts proves as the gateway proves proposals
// (its time, --dev-allow-loopback); its budget is shared by all the
// proofs, which run inside the commit's transaction: past it the answer
// is prover.ErrTooComplex, whatever the number of grants.
func removedGrants(ctx context.Context, tx store.ReadTx, sandbox string, cur, next *policy.Policy, opts prover.Options) ([]RemovedGrant, error) {
	now := opts.Now
	var live []store.Proposal
	applied, err := tx.ListProposals(ctx, store.ProposalFilter{Sandbox: sandbox, Status: store.ProposalApplied})
	if err != nil {
		return nil, err
	}
	for _, p := range applied {
		if p.AppliedVersion >= 2 && (p.GrantExpiresAt.IsZero() || now.Before(p.GrantExpiresAt)) {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return nil, nil
	}
	opts.Budget = cmp.Or(opts.Budget, prover.DefaultBudget) / int64(1+len(live))
	lost, err := prover.Prove(ctx, next, cur, opts)
	if err != nil {
		return nil, fmt.Errorf("prove what the document takes away: %w", err)
	}
	if !hasRequests(lost) {
		return nil, nil
	}
	var out []RemovedGrant
	for _, p := range live {
		before, err := parsedVersion(ctx, tx, sandbox, p.AppliedVersion-1)
		if err != nil {
			return nil, err
		}
		after, err := parsedVersion(ctx, tx, sandbox, p.AppliedVersion)
		if err != nil {
			return nil, err
		}
		granted, err := prover.Prove(ctx, before, after, opts)
		if err != nil {
			return nil, fmt.Errorf("prove what proposal %d granted: %w", p.ID, err)
		}
		if r, ok := takenAway(granted, lost, cur, next, now); ok {
			out = append(out, RemovedGrant{Proposal: p.ID, Rationale: p.Rationale, Granted: r})
		}
	}
	slices.Reverse(out) // oldest first
	return out, nil
}

// hasRequests reports whether rep has a finding with a request.
func hasRequests(rep *prover.Report) bool {
	for _, f := range rep.Findings {
		if f.Counterexample != nil {
			return true
		}
	}
	return false
}

// takenAway returns a request of what granted added that cur allows and
// next denies: one of the grant's own requests, or one of what next takes
// away (lost) that falls in a class the grant added.
func takenAway(granted, lost *prover.Report, cur, next *policy.Policy, now time.Time) (policy.Request, bool) {
	for _, g := range granted.Findings {
		if g.Counterexample == nil {
			continue
		}
		r := *g.Counterexample
		r.Time = now
		if policy.Decide(cur, r).Allow && !policy.Decide(next, r).Allow {
			return r, true
		}
		for _, l := range lost.Findings {
			if l.Counterexample != nil && g.Covers(*l.Counterexample) {
				return *l.Counterexample, true
			}
		}
	}
	return policy.Request{}, false
}

// parsedVersion reads and parses one stored version.
func parsedVersion(ctx context.Context, tx store.ReadTx, sandbox string, version int64) (*policy.Policy, error) {
	v, err := tx.GetPolicyVersion(ctx, sandbox, version)
	if err != nil {
		return nil, fmt.Errorf("read version %d of %q: %w", version, sandbox, err)
	}
	p, _, err := policy.Parse(v.Document)
	if err != nil {
		return nil, fmt.Errorf("stored version %d of %q no longer parses: %v", version, sandbox, err)
	}
	return p, nil
}

// guardGrants applies c.Grants to c, a change from cur: nil when nothing
// granted is taken away; when the caller takes grants away on purpose,
// what the version's provenance and audit entry say of it (the
// proposals' ids, "unproven" when a proof was beyond the prover's budget,
// and whether it was forced); a *GrantsRemovedError otherwise (a
// *PreconditionError when it could not be proven: fail closed).
func guardGrants(ctx context.Context, tx store.ReadTx, c Change, cur *policy.Policy, opts prover.Options) (map[string]string, error) {
	removed, err := removedGrants(ctx, tx, c.Sandbox, cur, c.Policy, opts)
	switch {
	case err != nil && c.Grants.Force && ctx.Err() == nil:
		// Forced: what could not be proven (beyond the budget, an old
		// version that no longer parses) does not hold the change up.
		return map[string]string{ProvenanceForced: "true", ProvenanceRemovedGrants: "unproven"}, nil
	case errors.Is(err, prover.ErrTooComplex):
		return nil, &PreconditionError{fmt.Sprintf("cannot tell whether the document takes away what approved proposals granted to %q (%v): nothing was stored; store it with --force", c.Sandbox, err)}
	case err != nil || len(removed) == 0:
		return nil, err
	}
	confirmed := c.Expected != nil
	ids := make([]string, 0, len(removed))
	for _, r := range removed {
		confirmed = confirmed && slices.Contains(c.Grants.Confirmed, r.Proposal)
		ids = append(ids, strconv.FormatInt(r.Proposal, 10))
	}
	if !c.Grants.Force && !confirmed {
		return nil, &GrantsRemovedError{Sandbox: c.Sandbox, Grants: removed}
	}
	detail := map[string]string{ProvenanceRemovedGrants: strings.Join(ids, ",")}
	if c.Grants.Force {
		detail[ProvenanceForced] = "true"
	}
	return detail, nil
}

// The provenance keys (also in the version's audit entry) of a change
// that took grants away on purpose.
const (
	ProvenanceRemovedGrants = "removed_grants"
	ProvenanceForced        = "forced"
)
