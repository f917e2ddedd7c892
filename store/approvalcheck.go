package store

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
)

// Checks and derived values of the approval workflow that both engines
// use, so they refuse the same inputs and commit the same versions (as
// check.go does for the rest).

// CheckApproval reports whether a can be stored: an approver and the hash
// they confirmed.
func CheckApproval(id int64, a Approval) error {
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
func (in ApplyProposal) Check() error {
	switch {
	case in.ResultingHash == "":
		return fmt.Errorf("invalid apply of proposal %d: empty resulting hash", in.ID)
	case in.Hash == "" || len(in.Document) == 0:
		return fmt.Errorf("invalid apply of proposal %d: empty hash or document", in.ID)
	}
	return nil
}

// CheckApplicable returns ErrConflict (wrapped, saying why) unless a
// proposal with status, resultingHash and base can be applied as in asks
// to a sandbox at version current: pending or approved, the hash in
// expects, based on the current version. A frozen sandbox takes nothing
// (ErrConflict and ErrFrozen).
func CheckApplicable(status, resultingHash string, base, current int64, frozen bool, in ApplyProposal) error {
	switch {
	case status != ProposalPending && status != ProposalApproved:
		return fmt.Errorf("%w: proposal is %s, not pending or approved", ErrConflict, status)
	case resultingHash != in.ResultingHash:
		return fmt.Errorf("%w: the proposal's resulting policy is now %s, not %s", ErrConflict, resultingHash, in.ResultingHash)
	case frozen:
		return fmt.Errorf("%w: %w", ErrConflict, ErrFrozen)
	case base != current:
		return fmt.Errorf("%w: proposal is based on version %d, current is %d", ErrConflict, base, current)
	}
	return nil
}

// Append returns the version that applying the proposal of sandbox (based
// on version base, with approvals oldest first) commits: source
// "proposal", in.Provenance plus "proposal" and "approvers".
func (in ApplyProposal) Append(sandbox string, base int64, approvals []Approval) AppendPolicy {
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
	return AppendPolicy{
		Sandbox: sandbox, ExpectedVersion: base, Hash: in.Hash, Document: in.Document,
		Author: in.Actor, Source: SourceProposal, Provenance: prov,
	}
}

// CheckFreeze reports whether a freeze can be stored: a sandbox and a
// deny-all document with its hash.
func CheckFreeze(sandbox string, doc []byte, hash string) error {
	switch {
	case sandbox == "":
		return errors.New("invalid freeze: empty sandbox")
	case hash == "" || len(doc) == 0:
		return fmt.Errorf("invalid freeze of sandbox %q: empty hash or document", sandbox)
	}
	return nil
}

// CheckFreezable returns ErrConflict (wrapped) unless a sandbox that is
// frozen or not, at version current, can be frozen: it must not be frozen
// already, and it must have a policy to come back to when it is unfrozen
// (a sandbox without one has nothing to unfreeze to).
func CheckFreezable(frozen bool, current int64) error {
	switch {
	case frozen:
		return fmt.Errorf("%w: sandbox is already frozen", ErrConflict)
	case current == 0:
		return fmt.Errorf("%w: sandbox has no policy to freeze", ErrConflict)
	}
	return nil
}

// FreezeAppend returns the version freezing sandbox at version current
// commits: doc, source "freeze".
func FreezeAppend(sandbox string, current int64, doc []byte, hash, reason, actor string) AppendPolicy {
	return AppendPolicy{
		Sandbox: sandbox, ExpectedVersion: current, Hash: hash, Document: doc, Author: actor, Source: SourceFreeze,
		Provenance: map[string]string{"reason": reason, "frozen_from": strconv.FormatInt(current, 10)},
	}
}

// UnfreezeAppend returns the version unfreezing sandbox at version current
// commits: the document and hash of version from, source "unfreeze".
func UnfreezeAppend(sandbox string, current int64, doc []byte, hash string, from int64, reason, actor string) AppendPolicy {
	return AppendPolicy{
		Sandbox: sandbox, ExpectedVersion: current, Hash: hash, Document: doc, Author: actor, Source: SourceUnfreeze,
		Provenance: map[string]string{"reason": reason, "restored_from": strconv.FormatInt(from, 10)},
	}
}

// CheckApprovalPolicy reports whether approval rules can be stored: a
// module and its hash.
func CheckApprovalPolicy(module, hash string) error {
	if module == "" || hash == "" {
		return errors.New("invalid approval policy: empty module or hash")
	}
	return nil
}

// ExpiredReason is the StatusReason of a proposal ExpireProposals expired.
const ExpiredReason = "expired"
