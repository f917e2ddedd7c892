package gateway

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
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/store"
)

// The advisor side of the gateway: a sandbox submits proposals, the
// gateway checks their narrowness (advisor.Evaluate), proves what they add
// against the sandbox's boundary and credentialed hosts, and stores them
// pending with the exact resulting policy and its hash. When the current
// version, the boundary or the credentialed hosts move, pending proposals
// are re-based and re-proved, so what an approver is shown is always what
// an approval would commit.

const (
	defaultProposalRateMax    = 20
	defaultProposalRateWindow = 10 * time.Minute
	// watchPollInterval bounds how late a watcher hears of a change made
	// through another replica.
	watchPollInterval = time.Second
	defaultDenials    = 20
	maxDenials        = 200
)

// rateLimitError is a sandbox over its proposal rate; retry after.
type rateLimitError struct{ after time.Duration }

func (e *rateLimitError) Error() string {
	return fmt.Sprintf("too many proposals from this sandbox; retry in %d s", retrySeconds(e.after))
}

func retrySeconds(d time.Duration) uint32 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return uint32(s)
}

// advisorHub re-proves and re-bases a sandbox's pending proposals when
// what they were proved against changes, and wakes their watchers.
type advisorHub struct {
	s *Server

	mu sync.Mutex
	// wake holds one channel per sandbox, closed (and replaced) whenever
	// one of its proposals changes through this replica.
	wake map[string]chan struct{}
	// busy coalesces re-base runs: a sandbox being re-based gets one more
	// run after the current one, however many moves arrive meanwhile.
	busy  map[string]bool
	again map[string]bool
	// running counts re-base goroutines; Serve waits for them.
	running sync.WaitGroup
}

func newAdvisorHub(s *Server) *advisorHub {
	return &advisorHub{s: s, wake: map[string]chan struct{}{}, busy: map[string]bool{}, again: map[string]bool{}}
}

// changed wakes the watchers of sandbox's proposals.
func (a *advisorHub) changed(sandbox string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.wake[sandbox]; ok {
		close(c)
		delete(a.wake, sandbox)
	}
}

// waiter returns a channel closed at the next change of sandbox's
// proposals through this replica.
func (a *advisorHub) waiter(sandbox string) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.wake[sandbox]
	if !ok {
		c = make(chan struct{})
		a.wake[sandbox] = c
	}
	return c
}

// contextChanged: the sandbox's boundary or credentialed hosts changed.
func (a *advisorHub) contextChanged(sandbox string) { a.refresh(sandbox) }

// versionMoved: a new version of sandbox was committed (here or, heard
// through the store, on another replica).
func (a *advisorHub) versionMoved(sandbox string) { a.refresh(sandbox) }

// refresh re-proves sandbox's pending proposals in the background.
func (a *advisorHub) refresh(sandbox string) {
	a.mu.Lock()
	if a.busy[sandbox] {
		a.again[sandbox] = true
		a.mu.Unlock()
		return
	}
	a.busy[sandbox] = true
	a.mu.Unlock()
	a.running.Go(func() {
		for {
			// Ends with the server's streams: shutdown does not wait on a
			// re-base, the next start's check repeats it.
			ctx, cancel := context.WithTimeout(a.s.streams, time.Minute)
			if err := a.refreshNow(ctx, sandbox); err != nil && ctx.Err() == nil {
				a.s.log.Warn("could not re-prove pending proposals; the next check will retry", "sandbox", sandbox, "err", err)
			}
			cancel()
			a.mu.Lock()
			if !a.again[sandbox] {
				delete(a.busy, sandbox)
				a.mu.Unlock()
				return
			}
			delete(a.again, sandbox)
			a.mu.Unlock()
		}
	})
}

// check re-bases the pending proposals whose base is behind their
// sandbox's current version (a missed notification, a replica that was
// down).
func (a *advisorHub) check(ctx context.Context) error {
	pending, err := a.s.store.ListProposals(ctx, store.ProposalFilter{Status: store.ProposalPending})
	if err != nil {
		return err
	}
	current := map[string]int64{}
	for _, p := range pending {
		if _, ok := current[p.Sandbox]; !ok {
			sb, err := a.s.store.GetSandbox(ctx, p.Sandbox)
			if err != nil {
				continue
			}
			current[p.Sandbox] = sb.CurrentVersion
		}
		if p.BaseVersion < current[p.Sandbox] {
			a.refresh(p.Sandbox)
			current[p.Sandbox] = -1 // once per sandbox
		}
	}
	return nil
}

// proofContext is what a sandbox's proposals are proved against.
type proofContext struct {
	sandbox store.Sandbox
	current store.PolicyVersion
	policy  *policy.Policy
	opts    prover.Options
}

func (a *advisorHub) proofContext(ctx context.Context, sandbox string) (*proofContext, error) {
	sb, err := a.s.store.GetSandbox(ctx, sandbox)
	if err != nil {
		return nil, missing(err, "sandbox %q not found", sandbox)
	}
	if sb.CurrentVersion == 0 {
		return nil, &preconditionError{fmt.Sprintf("sandbox %q has no policy yet: an operator sets the first one", sandbox)}
	}
	v, err := a.s.store.GetPolicyVersion(ctx, sandbox, sb.CurrentVersion)
	if err != nil {
		return nil, err
	}
	pc := &proofContext{sandbox: sb, current: v}
	if pc.policy, _, err = policy.Parse(v.Document); err != nil {
		return nil, fmt.Errorf("stored version %d of %q no longer parses: %v", v.Version, sandbox, err)
	}
	if pc.opts, err = proverOptions(sb); err != nil {
		return nil, err
	}
	return pc, nil
}

// proverOptions turns the sandbox's stored context into prover options.
func proverOptions(sb store.Sandbox) (prover.Options, error) {
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
	return opts, nil
}

// refreshNow re-bases every pending proposal of sandbox onto the current
// version and re-proves it against the sandbox's boundary and
// credentialed hosts; a proposal for which nothing moved is left alone.
func (a *advisorHub) refreshNow(ctx context.Context, sandbox string) error {
	pc, err := a.proofContext(ctx, sandbox)
	if err != nil {
		var nf *notFoundError
		var pe *preconditionError
		if errors.As(err, &nf) || errors.As(err, &pe) {
			return nil // deleted, or nothing to re-base onto
		}
		return err
	}
	pending, err := a.s.store.ListProposals(ctx, store.ProposalFilter{Sandbox: sandbox, Status: store.ProposalPending})
	if err != nil {
		return err
	}
	for _, p := range pending {
		if _, err := a.rebase(ctx, pc, p); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	if len(pending) > 0 {
		a.changed(sandbox)
	}
	return nil
}

// rebase applies p to the current version and re-proves it. A proposal
// that no longer applies keeps its last resulting policy and records why
// (rebase_error); it cannot be approved until an operator looks at it.
func (a *advisorHub) rebase(ctx context.Context, pc *proofContext, p store.Proposal) (store.Proposal, error) {
	in := store.Rebase{ID: p.ID, FromVersion: p.BaseVersion, BaseVersion: pc.current.Version, BaseHash: pc.current.Hash, Actor: "gateway"}
	prop, err := advisor.ParseProposal(p.Document)
	if err != nil {
		return p, fmt.Errorf("stored proposal %d no longer parses: %v", p.ID, err)
	}
	result, rep, err := advisor.Evaluate(ctx, pc.policy, prop, pc.opts)
	switch {
	case err == nil:
		findings, ferr := findingsJSON(rep)
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
	if in.BaseVersion == p.BaseVersion && in.ResultingHash == p.ResultingHash && in.RebaseError == p.RebaseError && string(in.Findings) == string(p.Findings) {
		return p, nil // nothing moved
	}
	out, err := a.s.store.RebaseProposal(ctx, in)
	if err == nil {
		a.s.log.Info("proposal re-based", "sandbox", p.Sandbox, "proposal", p.ID, "from_version", p.BaseVersion,
			"to_version", in.BaseVersion, "resulting_hash", in.ResultingHash, "rebase_error", in.RebaseError)
	}
	return out, err
}

func isRefusal(err error) bool {
	_, ok := advisor.AsRefusal(err)
	var verr *policy.ValidationError
	return ok || errors.As(err, &verr)
}

// current returns p re-based first if its base is behind the current
// version: reads never show a resulting policy that is already stale.
func (a *advisorHub) current(ctx context.Context, p store.Proposal) (store.Proposal, error) {
	if p.Status != store.ProposalPending {
		return p, nil
	}
	sb, err := a.s.store.GetSandbox(ctx, p.Sandbox)
	if err != nil || sb.CurrentVersion <= p.BaseVersion {
		return p, nil
	}
	pc, err := a.proofContext(ctx, p.Sandbox)
	if err != nil {
		return p, nil
	}
	out, err := a.rebase(ctx, pc, p)
	switch {
	case err == nil:
		a.changed(p.Sandbox)
		return out, nil
	case errors.Is(err, store.ErrConflict):
		// Someone else re-based or decided it first: read theirs.
		return a.s.store.GetProposal(ctx, p.ID)
	}
	return p, err
}

// preconditionError: the request cannot be served in the present state.
type preconditionError struct{ msg string }

func (e *preconditionError) Error() string { return e.msg }

// ---------------------------------------------------------------------------
// AdvisorService

type advisorService struct{ *Server }

var _ portcullisv1connect.AdvisorServiceHandler = advisorService{}

func (s advisorService) SubmitProposal(ctx context.Context, req *portcullisv1.SubmitProposalRequest) (*portcullisv1.Proposal, error) {
	p := mustPrincipal(ctx)
	pc, err := s.advisor.proofContext(ctx, p.Sandbox)
	if err != nil {
		return nil, err
	}
	if pc.sandbox.Frozen {
		return nil, &preconditionError{fmt.Sprintf("sandbox %q is frozen: it takes no proposals until an admin unfreezes it", p.Sandbox)}
	}
	prop, denialID, err := s.readProposal(ctx, p.Sandbox, pc, req)
	if err != nil {
		return nil, err
	}
	base := pc.current
	basePolicy := pc.policy
	if prop.BaseVersion != nil && int64(*prop.BaseVersion) != pc.current.Version {
		// Checked against the version the proposer saw, then re-based
		// below like any proposal whose base moved.
		if base, err = policyService(s).version(ctx, p.Sandbox, int64(*prop.BaseVersion)); err != nil {
			return nil, err
		}
		if basePolicy, _, err = policy.Parse(base.Document); err != nil {
			return nil, fmt.Errorf("stored version %d of %q no longer parses: %v", base.Version, p.Sandbox, err)
		}
	}
	result, rep, err := advisor.Evaluate(ctx, basePolicy, prop, pc.opts)
	if err != nil {
		return nil, err
	}
	findings, err := findingsJSON(rep)
	if err != nil {
		return nil, err
	}
	doc, err := prop.Encode()
	if err != nil {
		return nil, err
	}
	dedupe, supersede, err := proposalKeys(basePolicy, prop)
	if err != nil {
		return nil, err
	}
	window := s.cfg.ProposalRateWindow
	stored, created, err := s.store.CreateProposal(ctx, store.NewProposal{
		Proposal: store.Proposal{
			Sandbox:        p.Sandbox,
			Rationale:      prop.Rationale,
			Proposer:       p.Name,
			IdempotencyKey: prop.IdempotencyKey,
			DenialID:       denialID,
			Document:       doc,
			DedupeKey:      dedupe,
			SupersedeKeys:  supersede,
			BaseVersion:    base.Version,
			BaseHash:       base.Hash,
			Resulting:      result.CanonicalJSON(),
			ResultingHash:  result.Hash(),
			Findings:       findings,
			ExpiresAt:      s.cfg.Now().Add(s.cfg.ProposalTTL),
		},
		RateMax:    s.cfg.ProposalRateMax,
		RateWindow: window,
	}, p.Actor())
	if errors.Is(err, store.ErrRateLimited) {
		return nil, &rateLimitError{after: s.retryAfter(ctx, p.Sandbox)}
	}
	if errors.Is(err, store.ErrFrozen) {
		return nil, &preconditionError{fmt.Sprintf("sandbox %q is frozen: it takes no proposals until an admin unfreezes it", p.Sandbox)}
	}
	if err != nil {
		return nil, err
	}
	if created {
		s.log.InfoContext(ctx, "proposal submitted", "sandbox", p.Sandbox, "proposal", stored.ID, "base_version", stored.BaseVersion,
			"resulting_hash", stored.ResultingHash, "findings", len(rep.Findings), "actor", p.Actor())
		s.advisor.changed(p.Sandbox) // superseded ones moved too
		s.notifySuperseded(ctx, stored)
		if stored, err = s.advisor.current(ctx, stored); err != nil {
			return nil, err
		}
		if stored, err = s.autoApprove(ctx, stored); err != nil {
			return nil, err
		}
	}
	out, err := s.proposalToProto(ctx, stored)
	if err != nil {
		return nil, err
	}
	out.Deduplicated = !created
	if created && stored.Status == store.ProposalPending {
		if reviewed, err := s.reviewed(ctx, stored); err == nil {
			s.notifyNeedsHuman(reviewed)
		}
	}
	return out, nil
}

// retryAfter is when the oldest proposal in the sandbox's rate window
// leaves it.
func (s advisorService) retryAfter(ctx context.Context, sandbox string) time.Duration {
	window := s.cfg.ProposalRateWindow
	recent, err := s.store.ListProposals(ctx, store.ProposalFilter{Sandbox: sandbox, Limit: s.cfg.ProposalRateMax})
	if err != nil || len(recent) == 0 {
		return window
	}
	oldest := recent[len(recent)-1].CreatedAt
	if d := time.Until(oldest.Add(window)); d > 0 {
		return d
	}
	return time.Second
}

// readProposal turns the request into a proposal: a proposal file, or the
// narrowest proposal for a stored denial of the sandbox.
func (s advisorService) readProposal(ctx context.Context, sandbox string, pc *proofContext, req *portcullisv1.SubmitProposalRequest) (*advisor.Proposal, string, error) {
	switch {
	case req.GetDocument() != "" && req.GetDenialId() != "":
		return nil, "", invalidField("denial_id", "give either a document or a denial_id, not both")
	case req.GetDocument() != "":
		if req.GetRationale() != "" || req.GetIdempotencyKey() != "" {
			return nil, "", invalidField("rationale", "a document carries its own rationale and idempotency_key")
		}
		if len(req.GetDocument()) > advisor.MaxProposalBytes {
			return nil, "", invalidField("document", "larger than %d bytes", advisor.MaxProposalBytes)
		}
		prop, err := advisor.ParseProposal([]byte(req.GetDocument()))
		return prop, "", err
	case req.GetDenialId() == "":
		return nil, "", invalidField("document", "give a proposal document or a denial_id")
	}
	id := req.GetDenialId()
	if len(id) > 64 || strings.ContainsFunc(id, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return nil, "", invalidField("denial_id", "is not a denial id")
	}
	list, err := s.store.ListDecisions(ctx, store.DecisionFilter{Sandbox: sandbox, Decision: "deny", DenialID: id, Limit: 1})
	if err != nil {
		return nil, "", err
	}
	if len(list) == 0 {
		return nil, "", &notFoundError{fmt.Sprintf("no denial %q of sandbox %q (denials reach the gateway within seconds of the request; "+
			"old ones are deleted, and those over the sandbox's decision record rate limit are dropped)", id, sandbox)}
	}
	prop, err := advisor.FromDenial(pc.policy, denialRecord(list[0]))
	if err != nil {
		return nil, "", err
	}
	if r := req.GetRationale(); r != "" {
		prop.Rationale = r
	}
	prop.IdempotencyKey = req.GetIdempotencyKey()
	// Through the same strict reader as a document: the same bounds hold.
	doc, err := prop.Encode()
	if err != nil {
		return nil, "", err
	}
	prop, err = advisor.ParseProposal(doc)
	return prop, id, err
}

func denialRecord(d store.Decision) advisor.DenialRecord {
	return advisor.DenialRecord{
		Binary: d.Binary, Host: d.Host, Port: d.Port, HTTPMethod: d.HTTPMethod, Path: d.Path,
		MCPMethod: d.MCPMethod, Tool: d.Tool, Entry: d.Entry, VersionProbe: d.VersionProbe,
	}
}

// ownProposal reads a proposal of the caller's sandbox; another sandbox's
// is not found (its existence is not the caller's business).
func (s advisorService) ownProposal(ctx context.Context, id uint64) (store.Proposal, error) {
	p := mustPrincipal(ctx)
	if id == 0 {
		return store.Proposal{}, invalidField("id", "is required")
	}
	notFound := &notFoundError{fmt.Sprintf("proposal %d not found", id)}
	if id > 1<<62 {
		return store.Proposal{}, notFound
	}
	sp, err := s.store.GetProposal(ctx, int64(id))
	if errors.Is(err, store.ErrNotFound) || (err == nil && sp.Sandbox != p.Sandbox) {
		return store.Proposal{}, notFound
	}
	if err != nil {
		return store.Proposal{}, err
	}
	return s.advisor.current(ctx, sp)
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
	if st := req.GetStatus(); st != "" && !slices.Contains(proposalStatuses, st) {
		return nil, invalidField("status", "must be one of %s", strings.Join(proposalStatuses, ", "))
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = defaultListLimit
	case limit > maxListLimit:
		return nil, invalidField("limit", "must be at most %d", maxListLimit)
	}
	list, err := s.store.ListProposals(ctx, store.ProposalFilter{Sandbox: p.Sandbox, Status: req.GetStatus(), Limit: limit})
	if err != nil {
		return nil, err
	}
	res := &portcullisv1.ListProposalsResponse{Proposals: make([]*portcullisv1.Proposal, 0, len(list))}
	for _, sp := range list {
		if sp, err = s.advisor.current(ctx, sp); err != nil {
			return nil, err
		}
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
		wake := s.advisor.waiter(sandbox) // before the read: no change is missed
		sp, err := offStack(func() (store.Proposal, error) { return s.ownProposal(ctx, req.GetId()) })
		if err != nil {
			return err
		}
		out, err := s.proposalToProto(ctx, sp)
		if err != nil {
			return err
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
	sp, err := s.ownProposal(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	reason := req.GetReason()
	if reason == "" {
		reason = "withdrawn by the sandbox"
	}
	out, err := s.store.SetProposalStatus(ctx, sp.ID, []string{store.ProposalPending}, store.ProposalWithdrawn, reason, p.Actor())
	if errors.Is(err, store.ErrConflict) {
		cur, gerr := s.store.GetProposal(ctx, sp.ID)
		if gerr != nil {
			return nil, gerr
		}
		return nil, &conflictError{fmt.Sprintf("proposal %d is %s: only a pending proposal can be withdrawn", sp.ID, cur.Status)}
	}
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "proposal withdrawn", "sandbox", p.Sandbox, "proposal", sp.ID, "actor", p.Actor())
	s.notifyDecided(out)
	s.advisor.changed(p.Sandbox)
	return s.proposalToProto(ctx, out)
}

func (s advisorService) ListDenials(ctx context.Context, req *portcullisv1.ListDenialsRequest) (*portcullisv1.ListDenialsResponse, error) {
	p := mustPrincipal(ctx)
	last := int(req.GetLast())
	switch {
	case last == 0:
		last = defaultDenials
	case last > maxDenials:
		return nil, invalidField("last", "must be at most %d", maxDenials)
	}
	list, err := s.store.ListDecisions(ctx, store.DecisionFilter{Sandbox: p.Sandbox, Decision: "deny", Limit: last})
	if err != nil {
		return nil, err
	}
	var base *policy.Policy
	if pc, err := s.advisor.proofContext(ctx, p.Sandbox); err == nil {
		base = pc.policy
	}
	res := &portcullisv1.ListDenialsResponse{}
	for i := len(list) - 1; i >= 0; i-- { // newest first
		d := list[i]
		out := &portcullisv1.Denial{
			DenialId: d.DenialID, Time: timestamppb.New(d.Time), Binary: d.Binary, Host: d.Host, Port: uint32(d.Port),
			HttpMethod: d.HTTPMethod, Path: d.Path, McpMethod: d.MCPMethod, Tool: d.Tool, Reason: d.Reason,
		}
		if out.NotOffered, out.Suggestion = suggest(base, d); out.NotOffered == "" && out.Suggestion == nil {
			out.NotOffered = "no suggestion could be built"
		}
		res.Denials = append(res.Denials, out)
	}
	return res, nil
}

// suggest builds the narrowest proposal for a denial, or says why none is
// offered.
func suggest(base *policy.Policy, d store.Decision) (string, *structpb.Struct) {
	if d.DenialID == "" {
		return "the denial has no id", nil
	}
	if base == nil {
		return "the sandbox has no policy yet", nil
	}
	prop, err := advisor.FromDenial(base, denialRecord(d))
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
		dest, err := prover.ParseHostPort(hp)
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
	return &portcullisv1.ProveResponse{Findings: findingsToProto(rep)}, nil
}

func joinPath(prefix, path string) string {
	if path == "" {
		return prefix
	}
	return prefix + "." + path
}

// ---------------------------------------------------------------------------
// Conversions and keys

// findingsJSON is how findings are stored: the API's own message, so what
// is read back is exactly what was proved.
func findingsJSON(rep *prover.Report) ([]byte, error) {
	return protojson.Marshal(&portcullisv1.ProveResponse{Findings: findingsToProto(rep)})
}

func findingsToProto(rep *prover.Report) []*portcullisv1.Finding {
	out := make([]*portcullisv1.Finding, 0, len(rep.Findings))
	for _, f := range rep.Findings {
		pf := &portcullisv1.Finding{Kind: f.Kind, Entry: f.Entry, Endpoint: f.Endpoint, Rule: f.Rule, Detail: f.Detail, Credentialed: f.Credentialed}
		if r := f.Counterexample; r != nil {
			pr := &portcullisv1.ProvedRequest{Binary: r.Binary, Host: r.Host, Port: uint32(r.Port), HttpMethod: r.HTTPMethod, Path: r.Path, Query: r.Query}
			if r.Addr.IsValid() {
				pr.Addr = r.Addr.String()
			}
			if m := r.MCP; m != nil {
				pr.McpMethod, pr.Tool, pr.McpProtocolVersion = m.Method, m.Tool, m.ProtocolVersion
				if len(m.Arguments) > 0 {
					pr.Arguments = string(m.Arguments)
				}
			}
			pf.Counterexample = pr
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
	var rep portcullisv1.ProveResponse
	if err := protojson.Unmarshal(p.Findings, &rep); err != nil {
		return nil, fmt.Errorf("proposal %d: stored findings: %w", p.ID, err)
	}
	out.Findings = rep.GetFindings()
	if out.Changes, err = s.proposalChanges(ctx, p); err != nil {
		return nil, err
	}
	return out, nil
}

// proposalChanges is the structural diff from the proposal's base
// version to its resulting policy.
func (s *Server) proposalChanges(ctx context.Context, p store.Proposal) ([]*portcullisv1.PolicyChange, error) {
	base, err := s.store.GetPolicyVersion(ctx, p.Sandbox, p.BaseVersion)
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
	var out []*portcullisv1.PolicyChange
	for _, c := range policy.Diff(from, to) {
		out = append(out, &portcullisv1.PolicyChange{Kind: c.Kind, Path: c.Path, Summary: c.Summary, Before: c.Before, After: c.After})
	}
	return out, nil
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
		}
	}
	slices.Sort(keys)
	return hex.EncodeToString(sum[:]), slices.Compact(keys), nil
}
