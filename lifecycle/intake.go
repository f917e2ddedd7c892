package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/provider"
	"github.com/portcullis-dev/portcullis/store"
)

// Proposal intake: a sandbox submits a proposal; its narrowness is checked
// (advisor.Evaluate), what it adds is proved against the sandbox's
// boundary and credentialed hosts, and it is stored pending with the exact
// resulting policy and its hash (the store dedupes, supersedes, rate
// limits and refuses a frozen sandbox in the same transaction). When the
// current version, the boundary or the credentialed hosts move, pending
// proposals are re-based and re-proved, so what an approver is shown is
// always what an approval would commit.

// Submission is a proposal a sandbox submits: a parsed proposal file, or
// a stored denial to build the narrowest proposal for.
type Submission struct {
	Sandbox string
	// Proposer is the name of the submitting token; Actor how the audit
	// log names it.
	Proposer string
	Actor    string
	// Proposal, or DenialID (with an optional Rationale and
	// IdempotencyKey): exactly one.
	Proposal       *advisor.Proposal
	DenialID       string
	Rationale      string
	IdempotencyKey string
	// Arguments (JSON) go with DenialID for a tools/call denied by an
	// arguments_schema: the proposal admits exactly them, so they must
	// match the denial's arguments digest.
	Arguments string
}

// Submitted is the outcome of Submit.
type Submitted struct {
	Proposal store.Proposal
	// Created is false when an equivalent proposal was there already
	// (same idempotency key, or the same operations pending).
	Created bool
	// Superseded are the pending proposals the new one replaced.
	Superseded []int64
}

// proofContext is what a sandbox's proposals are proved against.
type proofContext struct {
	sandbox store.Sandbox
	current store.PolicyVersion
	policy  *policy.Policy
	opts    prover.Options
}

func (l *Lifecycle) proofContext(ctx context.Context, sandbox string) (*proofContext, error) {
	sb, err := l.st.GetSandbox(ctx, sandbox)
	if err != nil {
		return nil, Missing(err, "sandbox %q not found", sandbox)
	}
	if sb.CurrentVersion == 0 {
		return nil, &PreconditionError{fmt.Sprintf("sandbox %q has no policy yet: an operator sets the first one", sandbox)}
	}
	v, err := l.st.GetPolicyVersion(ctx, sandbox, sb.CurrentVersion)
	if err != nil {
		return nil, err
	}
	pc := &proofContext{sandbox: sb, current: v}
	if pc.policy, _, err = policy.Parse(v.Document); err != nil {
		return nil, fmt.Errorf("stored version %d of %q no longer parses: %v", v.Version, sandbox, err)
	}
	_, provs, err := l.st.SandboxCredentials(ctx, sandbox)
	if err != nil {
		return nil, Missing(err, "sandbox %q not found", sandbox)
	}
	if pc.opts, err = proverOptions(sb, provs); err != nil {
		return nil, err
	}
	pc.opts.DevAllowLoopback = l.cfg.DevAllowLoopback
	return pc, nil
}

// CurrentPolicy returns the sandbox's current policy, parsed (nil when it
// has none yet).
func (l *Lifecycle) CurrentPolicy(ctx context.Context, sandbox string) (*policy.Policy, error) {
	pc, err := l.proofContext(ctx, sandbox)
	var pe *PreconditionError
	if errors.As(err, &pe) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return pc.policy, nil
}

// proverOptions turns the sandbox's stored context into prover options:
// its boundary, and as credentialed destinations its credentialed hosts
// and the hosts of the providers attached to it.
func proverOptions(sb store.Sandbox, providers []store.Provider) (prover.Options, error) {
	var opts prover.Options
	if len(sb.Boundary) > 0 {
		b, _, err := policy.Parse(sb.Boundary)
		if err != nil {
			return opts, fmt.Errorf("stored boundary of %q no longer parses: %v", sb.Name, err)
		}
		opts.Boundary = b
	}
	for _, hp := range sb.CredentialedHosts {
		dest, err := prover.ParseHostPort(hp)
		if err != nil {
			return opts, fmt.Errorf("stored credentialed host of %q: %v", sb.Name, err)
		}
		opts.Credentialed = append(opts.Credentialed, dest)
	}
	for _, p := range providers {
		for _, h := range p.Hosts {
			host, err := provider.ParseHost(h)
			if err != nil {
				return opts, fmt.Errorf("stored host of provider %q: %v", p.Name, err)
			}
			opts.Credentialed = append(opts.Credentialed, prover.HostPort{Host: host.Pattern, Port: host.Port})
		}
	}
	return opts, nil
}

// Submit takes a proposal of s.Sandbox: checked, proved, stored pending
// (or the equivalent one returned), then applied at once if the approval
// rules let it through without a human.
func (l *Lifecycle) Submit(ctx context.Context, s Submission) (Submitted, error) {
	pc, err := l.proofContext(ctx, s.Sandbox)
	if err != nil {
		return Submitted{}, err
	}
	if pc.sandbox.Frozen {
		return Submitted{}, frozenProposals(s.Sandbox)
	}
	prop, err := l.proposalOf(ctx, pc, s)
	if err != nil {
		return Submitted{}, err
	}
	base, basePolicy := pc.current, pc.policy
	if prop.BaseVersion != nil && int64(*prop.BaseVersion) != pc.current.Version {
		// Checked against the version the proposer saw, then re-based
		// below like any proposal whose base moved.
		if base, err = l.Version(ctx, s.Sandbox, int64(*prop.BaseVersion)); err != nil {
			return Submitted{}, err
		}
		if basePolicy, _, err = policy.Parse(base.Document); err != nil {
			return Submitted{}, fmt.Errorf("stored version %d of %q no longer parses: %v", base.Version, s.Sandbox, err)
		}
	}
	result, rep, err := advisor.Evaluate(ctx, basePolicy, prop, pc.opts)
	if err != nil {
		return Submitted{}, err
	}
	findings, err := encodeFindings(rep)
	if err != nil {
		return Submitted{}, err
	}
	doc, err := prop.Encode()
	if err != nil {
		return Submitted{}, err
	}
	dedupe, supersede, err := proposalKeys(basePolicy, prop)
	if err != nil {
		return Submitted{}, err
	}
	stored, created, err := createProposal(ctx, l.st, proposalIn{
		Proposal: store.Proposal{
			Sandbox: s.Sandbox, Rationale: prop.Rationale, Proposer: s.Proposer, IdempotencyKey: prop.IdempotencyKey,
			DenialID: s.DenialID, Document: doc, DedupeKey: dedupe, SupersedeKeys: supersede,
			BaseVersion: base.Version, BaseHash: base.Hash,
			Resulting: result.CanonicalJSON(), ResultingHash: result.Hash(), Findings: findings,
			ExpiresAt: l.cfg.Now().Add(l.cfg.ProposalTTL),
		},
		RateMax:    l.cfg.ProposalRateMax,
		RateWindow: l.cfg.ProposalRateWindow,
	}, s.Actor)
	switch {
	case errors.Is(err, errRateLimited):
		return Submitted{}, &RateLimitError{After: l.retryAfter(ctx, s.Sandbox)}
	case errors.Is(err, errFrozen):
		return Submitted{}, frozenProposals(s.Sandbox)
	case err != nil:
		return Submitted{}, err
	}
	if !created {
		return Submitted{Proposal: stored}, nil
	}
	l.log.InfoContext(ctx, "proposal submitted", "sandbox", s.Sandbox, "proposal", stored.ID, "base_version", stored.BaseVersion,
		"resulting_hash", stored.ResultingHash, "findings", len(rep.Findings), "actor", s.Actor)
	l.changed(s.Sandbox) // superseded ones moved too
	superseded := l.superseded(ctx, stored)
	r, err := l.review(ctx, stored)
	if err != nil {
		return Submitted{}, err
	}
	if r.Decision.AutoApprove && r.Approved() {
		if r.Proposal, err = l.autoApprove(ctx, r.Proposal); err != nil {
			return Submitted{}, err
		}
		if r, err = l.review(ctx, r.Proposal); err != nil {
			return Submitted{}, err
		}
	}
	if r.Proposal.Status == store.ProposalPending {
		l.cfg.Stream.Publish(events.ProposalPending{Proposal: r.Proposal, Findings: r.Findings, Required: r.Decision.Required})
	}
	return Submitted{Proposal: r.Proposal, Created: true, Superseded: superseded}, nil
}

func frozenProposals(sandbox string) error {
	return &PreconditionError{fmt.Sprintf("sandbox %q is frozen: it takes no proposals until an admin unfreezes it", sandbox)}
}

// proposalOf returns the submission's proposal: as given, or the narrowest
// one for its stored denial.
func (l *Lifecycle) proposalOf(ctx context.Context, pc *proofContext, s Submission) (*advisor.Proposal, error) {
	if s.Proposal != nil {
		return s.Proposal, nil
	}
	// By id alone: a rate_limited record carries one too, and is refused
	// by name (advisor.FromDenial) rather than as not found.
	list, err := l.st.ListDecisions(ctx, store.DecisionFilter{Sandbox: s.Sandbox, DenialID: s.DenialID, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(list) == 0 || list[0].Decision != "deny" && list[0].Decision != "rate_limited" {
		return nil, &NotFoundError{fmt.Sprintf("no denial %q of sandbox %q (denials reach the gateway within seconds of the request; "+
			"old ones are deleted, and those over the sandbox's decision record rate limit are dropped)", s.DenialID, s.Sandbox)}
	}
	rec := advisor.DenialOf(&list[0].Record)
	rec.DevAllowLoopback = l.cfg.DevAllowLoopback
	if s.Arguments != "" {
		if err := checkDeniedArguments(list[0], s.Arguments); err != nil {
			return nil, err
		}
		rec.Arguments = json.RawMessage(s.Arguments)
	}
	prop, err := advisor.FromDenial(pc.policy, rec)
	if err != nil {
		return nil, err
	}
	if s.Rationale != "" {
		prop.Rationale = s.Rationale
	}
	prop.IdempotencyKey = s.IdempotencyKey
	// Through the same strict reader as a document: the same bounds hold.
	doc, err := prop.Encode()
	if err != nil {
		return nil, err
	}
	return advisor.ParseProposal(doc)
}

// checkDeniedArguments refuses arguments that are not the denied call's:
// the record carries their digest (and only that), so a proposal "from
// this denial" admits exactly what was denied.
func checkDeniedArguments(d store.Decision, args string) error {
	refuse := func(format string, a ...any) error {
		return &advisor.RefusalError{Op: -1, Field: "arguments", Rule: advisor.RuleArguments, Reason: fmt.Sprintf(format, a...)}
	}
	if d.ArgumentsDigest == "" {
		return refuse("denial %s records no tools/call arguments, so none can be given for it", d.DenialID)
	}
	digest, err := policy.ArgumentsDigest([]byte(args))
	if err != nil {
		return refuse("%v", err)
	}
	if digest != d.ArgumentsDigest {
		return refuse("are not the arguments denial %s denied (their digest is %s, the denied call's %s)", d.DenialID, digest, d.ArgumentsDigest)
	}
	return nil
}

// retryAfter is when the oldest proposal in the sandbox's rate window
// leaves it.
func (l *Lifecycle) retryAfter(ctx context.Context, sandbox string) time.Duration {
	window := l.cfg.ProposalRateWindow
	recent, err := l.st.ListProposals(ctx, store.ProposalFilter{Sandbox: sandbox, Limit: l.cfg.ProposalRateMax})
	if err != nil || len(recent) == 0 {
		return window
	}
	oldest := recent[len(recent)-1].CreatedAt
	if d := time.Until(oldest.Add(window)); d > 0 {
		return d
	}
	return time.Second
}

// superseded returns the ids of the proposals newer superseded, each
// told on the stream as decided.
func (l *Lifecycle) superseded(ctx context.Context, newer store.Proposal) []int64 {
	list, err := l.st.ListProposals(ctx, store.ProposalFilter{Sandbox: newer.Sandbox, Status: store.ProposalSuperseded, Limit: 1000})
	if err != nil {
		l.log.WarnContext(ctx, "could not list superseded proposals", "err", err)
		return nil
	}
	var ids []int64
	for _, p := range list {
		if p.SupersededBy == newer.ID {
			ids = append(ids, p.ID)
			if l.cfg.Stream != nil {
				l.decided(p)
			}
		}
	}
	slices.Sort(ids)
	return ids
}

// Proposal reads a proposal, re-based first if its base is behind the
// current version: reads never show a resulting policy that is already
// stale. sandbox, if set, must be the proposal's (another sandbox's
// proposal is not found: its existence is not the caller's business).
func (l *Lifecycle) Proposal(ctx context.Context, id int64, sandbox string) (store.Proposal, error) {
	notFound := &NotFoundError{fmt.Sprintf("proposal %d not found", id)}
	if id < 1 || id > 1<<62 {
		return store.Proposal{}, notFound
	}
	p, err := l.st.GetProposal(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sandbox != "" && p.Sandbox != sandbox) {
		return store.Proposal{}, notFound
	}
	if err != nil {
		return store.Proposal{}, err
	}
	return l.fresh(ctx, p)
}

// Proposals lists proposals f matches, each re-based first if stale.
func (l *Lifecycle) Proposals(ctx context.Context, f store.ProposalFilter) ([]store.Proposal, error) {
	list, err := l.st.ListProposals(ctx, f)
	if err != nil {
		return nil, err
	}
	for i := range list {
		if list[i], err = l.fresh(ctx, list[i]); err != nil {
			return nil, err
		}
	}
	return list, nil
}

// Withdraw withdraws a pending proposal of sandbox.
func (l *Lifecycle) Withdraw(ctx context.Context, id int64, sandbox, reason, actor string) (store.Proposal, error) {
	p, err := l.Proposal(ctx, id, sandbox)
	if err != nil {
		return p, err
	}
	if reason == "" {
		reason = "withdrawn by the sandbox"
	}
	out, err := setProposalStatus(ctx, l.st, p.ID, []string{store.ProposalPending}, store.ProposalWithdrawn, reason, actor)
	if errors.Is(err, store.ErrConflict) {
		cur, gerr := l.st.GetProposal(ctx, p.ID)
		if gerr != nil {
			return p, gerr
		}
		return p, &ConflictError{fmt.Sprintf("proposal %d is %s: only a pending proposal can be withdrawn", p.ID, cur.Status)}
	}
	if err != nil {
		return p, err
	}
	l.log.InfoContext(ctx, "proposal withdrawn", "sandbox", p.Sandbox, "proposal", p.ID, "actor", actor)
	l.decided(out)
	l.changed(p.Sandbox)
	return out, nil
}

// refresh re-proves sandbox's pending proposals in the background: its
// version moved, or its boundary or credentialed hosts changed
// (sandboxes.go).
func (l *Lifecycle) refresh(sandbox string) {
	l.mu.Lock()
	if l.busy[sandbox] {
		l.again[sandbox] = true
		l.mu.Unlock()
		return
	}
	l.busy[sandbox] = true
	bg := l.bg
	l.mu.Unlock()
	l.running.Go(func() {
		for {
			// Ends with Run: shutdown does not wait on a re-base, the
			// next start's check repeats it.
			ctx, cancel := context.WithTimeout(bg, time.Minute)
			if err := l.refreshNow(ctx, sandbox); err != nil && ctx.Err() == nil {
				l.log.Warn("could not re-prove pending proposals; the next check will retry", "sandbox", sandbox, "err", err)
			}
			cancel()
			l.mu.Lock()
			if !l.again[sandbox] {
				delete(l.busy, sandbox)
				l.mu.Unlock()
				return
			}
			delete(l.again, sandbox)
			l.mu.Unlock()
		}
	})
}

// checkBases re-bases the pending proposals whose base is behind their
// sandbox's current version (a missed notification, a replica that was
// down).
func (l *Lifecycle) checkBases(ctx context.Context) error {
	pending, err := l.st.ListProposals(ctx, store.ProposalFilter{Status: store.ProposalPending})
	if err != nil {
		return err
	}
	current := map[string]int64{}
	for _, p := range pending {
		if _, ok := current[p.Sandbox]; !ok {
			sb, err := l.st.GetSandbox(ctx, p.Sandbox)
			if err != nil {
				continue
			}
			current[p.Sandbox] = sb.CurrentVersion
		}
		if p.BaseVersion < current[p.Sandbox] {
			l.refresh(p.Sandbox)
			current[p.Sandbox] = -1 // once per sandbox
		}
	}
	return nil
}

// refreshNow re-bases every pending proposal of sandbox onto the current
// version and re-proves it against the sandbox's boundary and
// credentialed hosts; a proposal for which nothing moved is left alone.
func (l *Lifecycle) refreshNow(ctx context.Context, sandbox string) error {
	pc, err := l.proofContext(ctx, sandbox)
	if err != nil {
		var nf *NotFoundError
		var pe *PreconditionError
		if errors.As(err, &nf) || errors.As(err, &pe) {
			return nil // deleted, or nothing to re-base onto
		}
		return err
	}
	pending, err := l.st.ListProposals(ctx, store.ProposalFilter{Sandbox: sandbox, Status: store.ProposalPending})
	if err != nil {
		return err
	}
	for _, p := range pending {
		if _, err := l.rebase(ctx, pc, p); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	if len(pending) > 0 {
		l.changed(sandbox)
	}
	return nil
}

// rebase applies p to the current version and re-proves it. A proposal
// that no longer applies keeps its last resulting policy and records why
// (rebase_error); it cannot be approved until an operator looks at it.
func (l *Lifecycle) rebase(ctx context.Context, pc *proofContext, p store.Proposal) (store.Proposal, error) {
	in := rebaseIn{ID: p.ID, FromVersion: p.BaseVersion, BaseVersion: pc.current.Version, BaseHash: pc.current.Hash, Actor: systemActor}
	prop, err := advisor.ParseProposal(p.Document)
	if err != nil {
		return p, fmt.Errorf("stored proposal %d no longer parses: %v", p.ID, err)
	}
	result, rep, err := advisor.Evaluate(ctx, pc.policy, prop, pc.opts)
	switch {
	case err == nil:
		findings, ferr := encodeFindings(rep)
		if ferr != nil {
			return p, ferr
		}
		in.Resulting, in.ResultingHash, in.Findings = result.CanonicalJSON(), result.Hash(), findings
	case isRefusal(err):
		in.Resulting, in.ResultingHash, in.Findings = p.Resulting, p.ResultingHash, p.Findings
		in.RebaseError = fmt.Sprintf("no longer applies to version %d: %v", pc.current.Version, err)
	default:
		return p, err
	}
	if in.BaseVersion == p.BaseVersion && in.ResultingHash == p.ResultingHash && in.RebaseError == p.RebaseError && sameFindings(in.Findings, p.Findings) {
		return p, nil // nothing moved
	}
	out, err := rebaseProposal(ctx, l.st, in)
	if err == nil {
		l.log.Info("proposal re-based", "sandbox", p.Sandbox, "proposal", p.ID, "from_version", p.BaseVersion,
			"to_version", in.BaseVersion, "resulting_hash", in.ResultingHash, "rebase_error", in.RebaseError)
	}
	return out, err
}

// sameFindings compares stored findings by content, whatever JSON
// spelling stored them.
func sameFindings(a, b []byte) bool {
	fa, erra := DecodeFindings(a)
	fb, errb := DecodeFindings(b)
	if erra != nil || errb != nil {
		return string(a) == string(b)
	}
	return slices.EqualFunc(fa, fb, func(x, y Finding) bool {
		if (x.Counterexample == nil) != (y.Counterexample == nil) {
			return false
		}
		if x.Counterexample != nil && *x.Counterexample != *y.Counterexample {
			return false
		}
		x.Counterexample, y.Counterexample = nil, nil
		return x == y
	})
}

func isRefusal(err error) bool {
	_, ok := advisor.AsRefusal(err)
	var verr *policy.ValidationError
	return ok || errors.As(err, &verr)
}

// fresh returns p re-based first if its base is behind the current
// version.
func (l *Lifecycle) fresh(ctx context.Context, p store.Proposal) (store.Proposal, error) {
	if p.Status != store.ProposalPending {
		return p, nil
	}
	sb, err := l.st.GetSandbox(ctx, p.Sandbox)
	if err != nil || sb.CurrentVersion <= p.BaseVersion {
		return p, nil
	}
	pc, err := l.proofContext(ctx, p.Sandbox)
	if err != nil {
		return p, nil
	}
	out, err := l.rebase(ctx, pc, p)
	switch {
	case err == nil:
		l.changed(p.Sandbox)
		return out, nil
	case errors.Is(err, store.ErrConflict):
		// Someone else re-based or decided it first: read theirs.
		return l.st.GetProposal(ctx, p.ID)
	}
	return p, err
}

// proposalKeys derives the store's dedupe key (the operations, whatever
// the rationale) and supersede keys (each endpoint + binary the proposal
// grants to) of a proposal applied to base.
func proposalKeys(base *policy.Policy, p *advisor.Proposal) (string, []string, error) {
	ops, err := json.Marshal(p.Operations)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(ops)
	var keys []string
	key := func(host string, port int, path, binary string) {
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		keys = append(keys, net.JoinHostPort(host, strconv.Itoa(port))+path+" "+binary)
	}
	entryBinaries := func(name string) []string {
		var out []string
		if e := base.NetworkPolicies[name]; e != nil {
			for _, b := range e.Binaries {
				out = append(out, b.Path)
			}
		}
		if len(out) == 0 {
			out = append(out, "(any binary)")
		}
		return out
	}
	for _, op := range p.Operations {
		switch {
		case op.AddRule != nil && op.AddRule.Rule != nil:
			for _, ep := range op.AddRule.Rule.Endpoints {
				for _, port := range policy.EndpointPorts(ep) {
					for _, b := range op.AddRule.Rule.Binaries {
						key(ep.Host, port, ep.Path, b.Path)
					}
				}
			}
		case op.AddAllowRules != nil:
			o := op.AddAllowRules
			for _, b := range entryBinaries(o.Policy) {
				key(o.Host, o.Port, o.Path, b)
			}
		case op.AddBinary != nil:
			for _, label := range op.AddBinary.Endpoints {
				keys = append(keys, strings.ToLower(label)+" "+op.AddBinary.Path)
			}
		case op.AddDenyRules != nil:
			o := op.AddDenyRules
			for _, b := range entryBinaries(o.Policy) {
				key(o.Host, o.Port, o.Path, b)
			}
		case op.Repin != nil:
			o := op.Repin
			for _, b := range entryBinaries(o.Policy) {
				key(o.Host, o.Port, o.Path, b)
			}
		}
	}
	slices.Sort(keys)
	return hex.EncodeToString(sum[:]), slices.Compact(keys), nil
}
