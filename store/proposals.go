package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The proposal workflows and the freeze: intake (idempotency, dedupe,
// frozen check, rate limit, supersede), status changes, rebase, approval,
// apply, expiry, freeze and unfreeze. Each is one transaction over Tx that
// locks the sandbox first, so the workflows of one sandbox run one after
// the other on every replica and a check made in one cannot go stale
// before its writes. They depend only on Tx, Audit and AppendVersion.

// lockProposal returns proposal id and its sandbox, holding the sandbox:
// the proposal is read again once the lock is held, so it is what the
// transaction before committed.
func lockProposal(ctx context.Context, tx Tx, id int64) (Proposal, Sandbox, error) {
	p, err := tx.GetProposal(ctx, id)
	if err != nil {
		return Proposal{}, Sandbox{}, err
	}
	sb, err := tx.LockSandbox(ctx, p.Sandbox)
	if err != nil {
		return Proposal{}, Sandbox{}, err
	}
	p, err = tx.GetProposal(ctx, id)
	return p, sb, err
}

// saveProposal writes p's mutable fields and returns the proposal as
// stored, with its approvals.
func saveProposal(ctx context.Context, tx Tx, p Proposal) (Proposal, error) {
	if err := tx.UpdateProposal(ctx, p); err != nil {
		return Proposal{}, err
	}
	return tx.GetProposal(ctx, p.ID)
}

// orNil returns a copy of b, nil when b is empty (as a read gives it).
func orNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// CreateProposal stores a pending proposal in one transaction, in this
// order: a proposal of the sandbox with the same IdempotencyKey (any
// status) is returned with created false; so is a pending one with the
// same DedupeKey; then the rate limit (ErrRateLimited); then the proposal
// is inserted and every older pending proposal of the sandbox sharing a
// SupersedeKey becomes superseded (SupersededBy set). Audited. ErrNotFound
// for an unknown sandbox; ErrFrozen (nothing stored) for a frozen one,
// checked after the idempotency key and dedupe.
func (s *Store) CreateProposal(ctx context.Context, in NewProposal, actor string) (p Proposal, created bool, err error) {
	if err := in.Prepare(); err != nil {
		return Proposal{}, false, err
	}
	np := in.Proposal
	err = s.InTx(ctx, func(tx Tx) error {
		created = false
		sb, err := tx.LockSandbox(ctx, np.Sandbox)
		if err != nil {
			return err
		}
		// The same submission again: its proposal, whatever became of it.
		// Then the same operations as a pending proposal: that one.
		for _, f := range []ProposalFilter{
			{Sandbox: np.Sandbox, IdempotencyKey: np.IdempotencyKey, Limit: 1},
			{Sandbox: np.Sandbox, Status: ProposalPending, DedupeKey: np.DedupeKey, Limit: 1},
		} {
			if f.IdempotencyKey == "" && f.DedupeKey == "" {
				continue // no key: matches nothing
			}
			got, err := tx.ListProposals(ctx, f)
			if err != nil {
				return err
			}
			if len(got) > 0 {
				p = got[0]
				return nil
			}
		}
		if sb.Frozen {
			return ErrFrozen
		}
		now := tx.Now()
		if in.RateMax > 0 {
			n, err := tx.CountProposals(ctx, np.Sandbox, now.Add(-in.RateWindow))
			if err != nil {
				return err
			}
			if n >= in.RateMax {
				return fmt.Errorf("%w: %d proposals in the last %v (at most %d)", ErrRateLimited, n, in.RateWindow, in.RateMax)
			}
		}
		np.CreatedAt, np.UpdatedAt = now, now
		if p, err = tx.InsertProposal(ctx, np); err != nil {
			return fmt.Errorf("insert proposal: %w", err)
		}
		created = true
		if err := Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionProposalNew, Sandbox: np.Sandbox, Target: strconv.FormatInt(p.ID, 10),
			AfterHash: np.ResultingHash,
			Detail:    map[string]string{"status": ProposalPending, "base_version": strconv.FormatInt(np.BaseVersion, 10)},
		}); err != nil {
			return err
		}
		return supersede(ctx, tx, p, actor)
	})
	if err != nil {
		return Proposal{}, false, fmt.Errorf("create proposal of sandbox %q: %w", np.Sandbox, err)
	}
	return p, created, nil
}

// supersede marks every older pending proposal of p's sandbox that shares
// a supersede key with p superseded by p, and audits each, oldest first.
func supersede(ctx context.Context, tx Tx, p Proposal, actor string) error {
	if len(p.SupersedeKeys) == 0 {
		return nil
	}
	pending, err := tx.ListProposals(ctx, ProposalFilter{Sandbox: p.Sandbox, Status: ProposalPending})
	if err != nil {
		return fmt.Errorf("supersede: %w", err)
	}
	slices.SortFunc(pending, func(a, b Proposal) int { return cmp.Compare(a.ID, b.ID) })
	reason := fmt.Sprintf("superseded by proposal %d", p.ID)
	for _, old := range pending {
		if old.ID >= p.ID || !slices.ContainsFunc(old.SupersedeKeys, func(k string) bool { return slices.Contains(p.SupersedeKeys, k) }) {
			continue
		}
		old.Status, old.StatusReason, old.SupersededBy, old.UpdatedAt = ProposalSuperseded, reason, p.ID, tx.Now()
		if err := tx.UpdateProposal(ctx, old); err != nil {
			return fmt.Errorf("supersede: %w", err)
		}
		if err := Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionProposalState, Sandbox: p.Sandbox, Target: strconv.FormatInt(old.ID, 10),
			Detail: map[string]string{
				"from": ProposalPending, "to": ProposalSuperseded, "reason": reason,
				"superseded_by": strconv.FormatInt(p.ID, 10),
			},
		}); err != nil {
			return err
		}
	}
	return nil
}

// SetProposalStatus moves a proposal from one of the statuses in from to
// status, with a reason; ErrConflict (nothing changes) if its status is
// not in from. Leaving pending sets DecidedAt and DecidedBy (actor).
// Audited.
func (s *Store) SetProposalStatus(ctx context.Context, id int64, from []string, status, reason, actor string) (Proposal, error) {
	if err := CheckProposalStatus(status, from); err != nil {
		return Proposal{}, err
	}
	out, err := inTx(ctx, s.Driver, func(tx Tx) (Proposal, error) {
		p, _, err := lockProposal(ctx, tx, id)
		if err != nil {
			return Proposal{}, err
		}
		current := p.Status
		if !slices.Contains(from, current) {
			return Proposal{}, fmt.Errorf("%w: proposal is %s, not %s", ErrConflict, current, strings.Join(from, " or "))
		}
		now := tx.Now()
		p.Status, p.StatusReason, p.UpdatedAt = status, reason, now
		if current == ProposalPending && status != ProposalPending { // leaving pending is the decision
			p.DecidedAt, p.DecidedBy = &now, actor
		}
		if p, err = saveProposal(ctx, tx, p); err != nil {
			return Proposal{}, err
		}
		return p, Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionProposalState, Sandbox: p.Sandbox, Target: strconv.FormatInt(id, 10),
			Detail: map[string]string{"from": current, "to": status, "reason": reason},
		})
	})
	if err != nil {
		return Proposal{}, fmt.Errorf("set status of proposal %d: %w", id, err)
	}
	return out, nil
}

// RebaseProposal records the proposal applied to a newer version (see
// Rebase). Audited with the resulting hash before and after.
func (s *Store) RebaseProposal(ctx context.Context, in Rebase) (Proposal, error) {
	if err := in.Check(); err != nil {
		return Proposal{}, err
	}
	out, err := inTx(ctx, s.Driver, func(tx Tx) (Proposal, error) {
		p, _, err := lockProposal(ctx, tx, in.ID)
		if err != nil {
			return Proposal{}, err
		}
		switch {
		case p.Status != ProposalPending:
			return Proposal{}, fmt.Errorf("%w: proposal is %s, not pending", ErrConflict, p.Status)
		case p.BaseVersion != in.FromVersion:
			return Proposal{}, fmt.Errorf("%w: proposal is based on version %d, not %d", ErrConflict, p.BaseVersion, in.FromVersion)
		}
		before := p.ResultingHash
		p.BaseVersion, p.BaseHash = in.BaseVersion, in.BaseHash
		p.Resulting, p.ResultingHash = orNil(in.Resulting), in.ResultingHash
		p.Findings, p.RebaseError, p.UpdatedAt = orNil(in.Findings), in.RebaseError, tx.Now()
		if p, err = saveProposal(ctx, tx, p); err != nil {
			return Proposal{}, err
		}
		detail := map[string]string{
			"from_version": strconv.FormatInt(in.FromVersion, 10),
			"to_version":   strconv.FormatInt(in.BaseVersion, 10),
		}
		if in.RebaseError != "" {
			detail["rebase_error"] = in.RebaseError
		}
		return p, Audit(ctx, tx, AuditEntry{
			Actor: in.Actor, Action: ActionProposalBase, Sandbox: p.Sandbox, Target: strconv.FormatInt(in.ID, 10),
			BeforeHash: before, AfterHash: in.ResultingHash, Detail: detail,
		})
	})
	if err != nil {
		return Proposal{}, fmt.Errorf("rebase proposal %d: %w", in.ID, err)
	}
	return out, nil
}

// AddApproval records approver's approval of a pending proposal whose
// resulting hash is still a.ResultingHash, in one transaction: ErrConflict
// if it is no longer pending or its hash moved (nothing stored),
// ErrAlreadyExists if approver approved it before. Audited. Returns the
// proposal with every approval.
func (s *Store) AddApproval(ctx context.Context, id int64, a Approval) (Proposal, error) {
	if err := CheckApproval(id, a); err != nil {
		return Proposal{}, err
	}
	out, err := inTx(ctx, s.Driver, func(tx Tx) (Proposal, error) {
		p, _, err := lockProposal(ctx, tx, id)
		if err != nil {
			return Proposal{}, err
		}
		switch {
		case p.Status != ProposalPending:
			return Proposal{}, fmt.Errorf("%w: proposal is %s, not pending", ErrConflict, p.Status)
		case p.ResultingHash != a.ResultingHash:
			return Proposal{}, fmt.Errorf("%w: the proposal's resulting policy is now %s, not %s", ErrConflict, p.ResultingHash, a.ResultingHash)
		case slices.ContainsFunc(p.Approvals, func(o Approval) bool { return o.Approver == a.Approver }):
			return Proposal{}, fmt.Errorf("%w: %s approved it before", ErrAlreadyExists, a.Approver)
		}
		a.CreatedAt = tx.Now()
		if err := tx.InsertApproval(ctx, id, a); err != nil {
			return Proposal{}, fmt.Errorf("insert approval: %w", err)
		}
		if err := Audit(ctx, tx, AuditEntry{
			Actor: a.Approver, Action: ActionProposalOK, Sandbox: p.Sandbox, Target: strconv.FormatInt(id, 10),
			AfterHash: a.ResultingHash,
			Detail:    map[string]string{"approver": a.Approver, "reason": a.Reason},
		}); err != nil {
			return Proposal{}, err
		}
		return tx.GetProposal(ctx, id)
	})
	if err != nil {
		return Proposal{}, fmt.Errorf("approve proposal %d: %w", id, err)
	}
	return out, nil
}

// ApplyProposal commits the proposal as the sandbox's next policy version
// (source "proposal", through AppendVersion as every commit) and marks it
// applied, in one transaction, only if it is still pending (or approved)
// with in.ResultingHash and its base version is still the sandbox's
// current version; otherwise ErrConflict and nothing changes. Two appliers
// racing: exactly one wins (the second finds it applied). Audited.
func (s *Store) ApplyProposal(ctx context.Context, in ApplyProposal) (Proposal, PolicyVersion, error) {
	if err := in.Check(); err != nil {
		return Proposal{}, PolicyVersion{}, err
	}
	var pv PolicyVersion
	out, err := inTx(ctx, s.Driver, func(tx Tx) (Proposal, error) {
		p, sb, err := lockProposal(ctx, tx, in.ID)
		if err != nil {
			return Proposal{}, err
		}
		if err := CheckApplicable(p.Status, p.ResultingHash, p.BaseVersion, sb.CurrentVersion, sb.Frozen, in); err != nil {
			return Proposal{}, err
		}
		ap := in.Append(p.Sandbox, p.BaseVersion, p.Approvals)
		if pv, err = AppendVersion(ctx, tx, ap); err != nil {
			return Proposal{}, err
		}
		from, now := p.Status, tx.Now()
		p.Status, p.AppliedVersion, p.GrantExpiresAt = ProposalApplied, pv.Version, in.GrantExpiresAt
		p.DecidedAt, p.DecidedBy, p.UpdatedAt = &now, in.Actor, now
		if p, err = saveProposal(ctx, tx, p); err != nil {
			return Proposal{}, err
		}
		detail := map[string]string{
			"from": from, "version": strconv.FormatInt(pv.Version, 10), "approvers": ap.Provenance["approvers"],
		}
		if !in.GrantExpiresAt.IsZero() {
			detail["grant_expires_at"] = in.GrantExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		return p, Audit(ctx, tx, AuditEntry{
			Actor: in.Actor, Action: ActionProposalApply, Sandbox: p.Sandbox, Target: strconv.FormatInt(in.ID, 10),
			BeforeHash: sb.CurrentHash, AfterHash: in.Hash, Detail: detail,
		})
	})
	if err != nil {
		return Proposal{}, PolicyVersion{}, fmt.Errorf("apply proposal %d: %w", in.ID, err)
	}
	return out, pv, nil
}

// ExpireProposals marks every pending proposal whose ExpiresAt is before
// cutoff as expired (DecidedAt cutoff, audited) and returns them, oldest
// first. It locks their sandboxes in name order, so sweeps running at once
// queue rather than deadlock; a proposal that became due meanwhile in
// another sandbox is left for the next sweep.
func (s *Store) ExpireProposals(ctx context.Context, cutoff time.Time, actor string) ([]Proposal, error) {
	if cutoff.IsZero() {
		return nil, fmt.Errorf("invalid expiry time %v", cutoff)
	}
	due := ProposalFilter{Status: ProposalPending, ExpiresBefore: cutoff}
	out, err := inTx(ctx, s.Driver, func(tx Tx) ([]Proposal, error) {
		ps, err := tx.ListProposals(ctx, due)
		if err != nil {
			return nil, err
		}
		locked := make(map[string]bool)
		for _, p := range ps {
			locked[p.Sandbox] = false
		}
		for _, name := range slices.Sorted(maps.Keys(locked)) {
			_, err := tx.LockSandbox(ctx, name)
			if errors.Is(err, ErrNotFound) {
				continue // deleted meanwhile, with its proposals
			} else if err != nil {
				return nil, err
			}
			locked[name] = true
		}
		if ps, err = tx.ListProposals(ctx, due); err != nil {
			return nil, err
		}
		slices.SortFunc(ps, func(a, b Proposal) int { return cmp.Compare(a.ID, b.ID) })
		var out []Proposal
		for _, p := range ps {
			if !locked[p.Sandbox] {
				continue
			}
			p.Status, p.StatusReason, p.DecidedAt, p.DecidedBy, p.UpdatedAt = ProposalExpired, ExpiredReason, &cutoff, actor, tx.Now()
			if p, err = saveProposal(ctx, tx, p); err != nil {
				return nil, err
			}
			if err := Audit(ctx, tx, AuditEntry{
				Actor: actor, Action: ActionProposalState, Sandbox: p.Sandbox, Target: strconv.FormatInt(p.ID, 10),
				Detail: map[string]string{"from": ProposalPending, "to": ProposalExpired, "reason": ExpiredReason},
			}); err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		return out, nil
	})
	if err != nil {
		return nil, fmt.Errorf("expire proposals: %w", err)
	}
	return out, nil
}

// FreezeSandbox commits doc (a deny-all policy) as the next version
// (source "freeze") and marks the sandbox frozen with the reason,
// remembering the version that was current, in one transaction.
// ErrConflict if it is already frozen. Audited.
func (s *Store) FreezeSandbox(ctx context.Context, sandbox, reason, actor string, doc []byte, hash string) (Sandbox, PolicyVersion, error) {
	if err := CheckFreeze(sandbox, doc, hash); err != nil {
		return Sandbox{}, PolicyVersion{}, err
	}
	var pv PolicyVersion
	sb, err := inTx(ctx, s.Driver, func(tx Tx) (Sandbox, error) {
		sb, err := tx.LockSandbox(ctx, sandbox)
		if err != nil {
			return Sandbox{}, err
		}
		if err := CheckFreezable(sb.Frozen, sb.CurrentVersion); err != nil {
			return Sandbox{}, err
		}
		current, before, now := sb.CurrentVersion, sb.CurrentHash, tx.Now()
		if pv, err = AppendVersion(ctx, tx, FreezeAppend(sandbox, current, doc, hash, reason, actor)); err != nil {
			return Sandbox{}, err
		}
		sb.CurrentVersion, sb.CurrentHash = pv.Version, pv.Hash
		sb.Frozen, sb.FrozenReason, sb.FrozenBy, sb.FrozenAt, sb.FrozenFrom = true, reason, actor, &now, current
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return Sandbox{}, err
		}
		return sb, Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionFreeze, Sandbox: sandbox, Target: sandbox, BeforeHash: before, AfterHash: hash,
			Detail: map[string]string{
				"reason": reason, "version": strconv.FormatInt(pv.Version, 10), "frozen_from": strconv.FormatInt(current, 10),
			},
		})
	})
	if err != nil {
		return Sandbox{}, PolicyVersion{}, fmt.Errorf("freeze sandbox %q: %w", sandbox, err)
	}
	return sb, pv, nil
}

// UnfreezeSandbox commits the content of the version that was current
// before the freeze as the next version (source "unfreeze") and clears the
// freeze, in one transaction. ErrConflict if it is not frozen. Audited.
func (s *Store) UnfreezeSandbox(ctx context.Context, sandbox, reason, actor string) (Sandbox, PolicyVersion, error) {
	if sandbox == "" {
		return Sandbox{}, PolicyVersion{}, errors.New("invalid unfreeze: empty sandbox")
	}
	var pv PolicyVersion
	sb, err := inTx(ctx, s.Driver, func(tx Tx) (Sandbox, error) {
		sb, err := tx.LockSandbox(ctx, sandbox)
		if err != nil {
			return Sandbox{}, err
		}
		if !sb.Frozen {
			return Sandbox{}, fmt.Errorf("%w: sandbox is not frozen", ErrConflict)
		}
		from, before := sb.FrozenFrom, sb.CurrentHash
		old, err := tx.GetPolicyVersion(ctx, sandbox, from)
		if err != nil {
			return Sandbox{}, fmt.Errorf("version %d before the freeze: %w", from, err)
		}
		ap := UnfreezeAppend(sandbox, sb.CurrentVersion, old.Document, old.Hash, from, reason, actor)
		if pv, err = AppendVersion(ctx, tx, ap); err != nil {
			return Sandbox{}, err
		}
		sb.CurrentVersion, sb.CurrentHash = pv.Version, pv.Hash
		sb.Frozen, sb.FrozenReason, sb.FrozenBy, sb.FrozenAt, sb.FrozenFrom = false, "", "", nil, 0
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return Sandbox{}, err
		}
		return sb, Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionUnfreeze, Sandbox: sandbox, Target: sandbox, BeforeHash: before, AfterHash: old.Hash,
			Detail: map[string]string{
				"reason": reason, "version": strconv.FormatInt(pv.Version, 10), "restored_from": strconv.FormatInt(from, 10),
			},
		})
	})
	if err != nil {
		return Sandbox{}, PolicyVersion{}, fmt.Errorf("unfreeze sandbox %q: %w", sandbox, err)
	}
	return sb, pv, nil
}
