package lifecycle

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// The inputs of the proposal records and their checks: what the
// transactions in records.go refuse before they touch the store.

var (
	// errRateLimited: the sandbox submitted too many proposals in the
	// window; nothing was stored.
	errRateLimited = errors.New("rate limited")
	// errFrozen: the sandbox is frozen (kill switch); it takes no
	// proposals until it is unfrozen.
	errFrozen = errors.New("sandbox frozen")
)

// proposalIn is the input of createProposal.
type proposalIn struct {
	// Proposal is stored as pending; ID, Status, SupersededBy and the
	// times are set by the store.
	Proposal store.Proposal
	// RateMax, if > 0, caps how many proposals the sandbox may have
	// created in the RateWindow before now (errRateLimited otherwise).
	RateMax    int
	RateWindow time.Duration
}

// rebaseIn is the input of rebaseProposal: the proposal applied to a
// newer current version.
type rebaseIn struct {
	ID int64
	// FromVersion must still be the proposal's base version, and the
	// proposal still pending; otherwise store.ErrConflict and nothing changes.
	FromVersion   int64
	BaseVersion   int64
	BaseHash      string
	Resulting     []byte
	ResultingHash string
	Findings      []byte
	RebaseError   string
	Actor         string
}

// applyIn is the input of applyProposal.
type applyIn struct {
	ID int64
	// ResultingHash must still be the proposal's resulting hash, and its
	// BaseVersion still the sandbox's current version.
	ResultingHash string
	// Document and Hash are what is committed: the resulting policy, with
	// expires_at added to the granted rules when the grant has an end.
	Document []byte
	Hash     string
	// GrantExpiresAt is recorded on the proposal (zero: none).
	GrantExpiresAt time.Time
	Actor          string
	// Provenance of the new version; the store adds "proposal" (the id)
	// and "approvers" (comma-separated, in approval order).
	Provenance map[string]string
	// Approval, when set, is the approval that completes the quorum: it
	// is recorded (and audited) in the transaction that applies, so that
	// no crash and no concurrent commit can leave it stored and the
	// proposal unapplied. Its approver must not have approved before
	// (store.ErrAlreadyExists).
	Approval *store.Approval
}

// checkApproval reports whether a can be stored: an approver and the hash
// they confirmed.
func checkApproval(id int64, a store.Approval) error {
	switch {
	case a.Approver == "":
		return fmt.Errorf("invalid approval of proposal %d: empty approver", id)
	case a.ResultingHash == "":
		return fmt.Errorf("invalid approval of proposal %d: empty resulting hash", id)
	}
	return nil
}

// Check reports whether in can be applied: the hash it expects and a
// document with its hash to commit.
func (in applyIn) Check() error {
	switch {
	case in.ResultingHash == "":
		return fmt.Errorf("invalid apply of proposal %d: empty resulting hash", in.ID)
	case in.Hash == "" || len(in.Document) == 0:
		return fmt.Errorf("invalid apply of proposal %d: empty hash or document", in.ID)
	case in.Approval != nil:
		return checkApproval(in.ID, *in.Approval)
	}
	return nil
}

// checkApplicable returns store.ErrConflict (wrapped, saying why) unless a
// proposal with status, resultingHash and base can be applied as in asks
// to a sandbox at version current: pending or approved, the hash in
// expects, based on the current version. A frozen sandbox takes nothing
// (store.ErrConflict and errFrozen).
func checkApplicable(status, resultingHash string, base, current int64, frozen bool, in applyIn) error {
	switch {
	case status != store.ProposalPending && status != store.ProposalApproved:
		return fmt.Errorf("%w: proposal is %s, not pending or approved", store.ErrConflict, status)
	case resultingHash != in.ResultingHash:
		return fmt.Errorf("%w: the proposal's resulting policy is now %s, not %s", store.ErrConflict, resultingHash, in.ResultingHash)
	case frozen:
		return fmt.Errorf("%w: %w", store.ErrConflict, errFrozen)
	case base != current:
		return fmt.Errorf("%w: proposal is based on version %d, current is %d", store.ErrConflict, base, current)
	}
	return nil
}

// Append returns the version that applying the proposal of sandbox (based
// on version base, with approvals oldest first) commits: source
// "proposal", in.Provenance plus "proposal" and "approvers".
func (in applyIn) Append(sandbox string, base int64, approvals []store.Approval) store.AppendPolicy {
	prov := maps.Clone(in.Provenance)
	if prov == nil {
		prov = make(map[string]string, 2)
	}
	names := make([]string, len(approvals))
	for i, a := range approvals {
		names[i] = a.Approver
	}
	prov["proposal"] = strconv.FormatInt(in.ID, 10)
	prov["approvers"] = strings.Join(names, ",")
	return store.AppendPolicy{
		Sandbox: sandbox, ExpectedVersion: base, Hash: in.Hash, Document: in.Document,
		Author: in.Actor, Source: store.SourceProposal, Provenance: prov,
	}
}

// checkFreeze reports whether a freeze can be stored: a sandbox and a
// deny-all document with its hash.
func checkFreeze(sandbox string, doc []byte, hash string) error {
	switch {
	case sandbox == "":
		return errors.New("invalid freeze: empty sandbox")
	case hash == "" || len(doc) == 0:
		return fmt.Errorf("invalid freeze of sandbox %q: empty hash or document", sandbox)
	}
	return nil
}

// checkFreezable returns store.ErrConflict (wrapped) unless a sandbox that is
// frozen or not, at version current, can be frozen: it must not be frozen
// already, and it must have a policy to come back to when it is unfrozen
// (a sandbox without one has nothing to unfreeze to).
func checkFreezable(frozen bool, current int64) error {
	switch {
	case frozen:
		return fmt.Errorf("%w: sandbox is already frozen", store.ErrConflict)
	case current == 0:
		return fmt.Errorf("%w: sandbox has no policy to freeze", store.ErrConflict)
	}
	return nil
}

// freezeAppend returns the version freezing sandbox at version current
// commits: doc, source "freeze".
func freezeAppend(sandbox string, current int64, doc []byte, hash, reason, actor string) store.AppendPolicy {
	return store.AppendPolicy{
		Sandbox: sandbox, ExpectedVersion: current, Hash: hash, Document: doc, Author: actor, Source: store.SourceFreeze,
		Provenance: map[string]string{"reason": reason, "frozen_from": strconv.FormatInt(current, 10)},
	}
}

// unfreezeAppend returns the version unfreezing sandbox at version current
// commits: the document and hash of version from, source "unfreeze".
func unfreezeAppend(sandbox string, current int64, doc []byte, hash string, from int64, reason, actor string) store.AppendPolicy {
	return store.AppendPolicy{
		Sandbox: sandbox, ExpectedVersion: current, Hash: hash, Document: doc, Author: actor, Source: store.SourceUnfreeze,
		Provenance: map[string]string{"reason": reason, "restored_from": strconv.FormatInt(from, 10)},
	}
}

// expiredReason is the StatusReason of a proposal ExpireProposals expired.
const expiredReason = "expired"

// proposalStatuses are the statuses a proposal may have.
var proposalStatuses = []string{
	store.ProposalPending, store.ProposalApproved, store.ProposalApplied, store.ProposalRejected,
	store.ProposalExpired, store.ProposalSuperseded, store.ProposalWithdrawn,
}

// Prepare checks in and normalises what the store keeps of it: the
// supersede keys sorted and without duplicates (nil when none), Findings
// nil when empty. The caller's slices are never changed.
//
// An empty DedupeKey or IdempotencyKey means none: it matches nothing.
func (in *proposalIn) Prepare() error {
	p := &in.Proposal
	switch {
	case p.Sandbox == "":
		return errors.New("invalid proposal: empty sandbox")
	case len(p.Document) == 0:
		return fmt.Errorf("invalid proposal of sandbox %q: empty document", p.Sandbox)
	case len(p.Resulting) == 0 || p.ResultingHash == "":
		return fmt.Errorf("invalid proposal of sandbox %q: empty resulting policy or hash", p.Sandbox)
	case p.BaseVersion < 0:
		return fmt.Errorf("invalid proposal of sandbox %q: base version %d", p.Sandbox, p.BaseVersion)
	case in.RateMax < 0:
		return fmt.Errorf("invalid proposal of sandbox %q: rate max %d", p.Sandbox, in.RateMax)
	case in.RateMax > 0 && in.RateWindow <= 0:
		return fmt.Errorf("invalid proposal of sandbox %q: rate max without a window", p.Sandbox)
	}
	if slices.Contains(p.SupersedeKeys, "") {
		return fmt.Errorf("invalid proposal of sandbox %q: empty supersede key", p.Sandbox)
	}
	keys := slices.Compact(slices.Sorted(slices.Values(p.SupersedeKeys)))
	if len(keys) == 0 {
		keys = nil
	}
	p.SupersedeKeys = keys
	if len(p.Findings) == 0 {
		p.Findings = nil
	}
	p.Status, p.SupersededBy = store.ProposalPending, 0
	return nil
}

// checkProposalStatus reports whether status and every status in from are
// known, and from names at least one.
func checkProposalStatus(status string, from []string) error {
	if !slices.Contains(proposalStatuses, status) {
		return fmt.Errorf("invalid proposal status %q", status)
	}
	if len(from) == 0 {
		return errors.New("invalid proposal status change: no status to move from")
	}
	for _, f := range from {
		if !slices.Contains(proposalStatuses, f) {
			return fmt.Errorf("invalid proposal status %q", f)
		}
	}
	return nil
}

// Check reports whether r can be stored: versions not negative, and a
// resulting policy with its hash unless RebaseError says there is none
// (then both may be empty).
func (r rebaseIn) Check() error {
	switch {
	case r.FromVersion < 0 || r.BaseVersion < 0:
		return fmt.Errorf("invalid rebase of proposal %d: versions %d to %d", r.ID, r.FromVersion, r.BaseVersion)
	case (len(r.Resulting) == 0) != (r.ResultingHash == ""):
		return fmt.Errorf("invalid rebase of proposal %d: resulting policy and hash must be both set or both empty", r.ID)
	case len(r.Resulting) == 0 && r.RebaseError == "":
		return fmt.Errorf("invalid rebase of proposal %d: no resulting policy and no rebase error", r.ID)
	}
	return nil
}
