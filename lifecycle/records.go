package lifecycle

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

	"github.com/portcullis-dev/portcullis/store"
)

// The proposal workflows and the freeze: intake (idempotency, dedupe,
// frozen check, rate limit, supersede), status changes, rebase, approval,
// apply, expiry, freeze and unfreeze. Each is one transaction over store.Tx that
// locks the sandbox first, so the workflows of one sandbox run one after
// the other on every replica and a check made in one cannot go stale
// before its writes. They depend only on store.Tx, store.Audit and commit.

// lockProposal returns proposal id and its sandbox, holding the sandbox:
// the proposal is read again once the lock is held, so it is what the
// transaction before committed.
func lockProposal(ctx context.Context, tx store.Tx, id int64) (store.Proposal, store.Sandbox, error) {
	p, err := tx.GetProposal(ctx, id)
	if err != nil {
		return store.Proposal{}, store.Sandbox{}, err
	}
	sb, err := tx.LockSandbox(ctx, p.Sandbox)
	if err != nil {
		return store.Proposal{}, store.Sandbox{}, err
	}
	p, err = tx.GetProposal(ctx, id)
	return p, sb, err
}

// lockPending is lockProposal for the changes only a pending proposal
// takes (rebase, approval): store.ErrConflict if it has left pending.
func lockPending(ctx context.Context, tx store.Tx, id int64) (store.Proposal, error) {
	p, _, err := lockProposal(ctx, tx, id)
	if err == nil && p.Status != store.ProposalPending {
		err = fmt.Errorf("%w: proposal is %s, not pending", store.ErrConflict, p.Status)
	}
	return p, err
}

// saveProposal writes p's mutable fields and returns the proposal as
// stored, with its approvals.
func saveProposal(ctx context.Context, tx store.Tx, p store.Proposal) (store.Proposal, error) {
	if err := tx.UpdateProposal(ctx, p); err != nil {
		return store.Proposal{}, err
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

// createProposal stores a pending proposal in one transaction, in this
// order: a proposal of the sandbox with the same IdempotencyKey (any
// status) is returned with created false; so is a pending one with the
// same DedupeKey; then the rate limit (errRateLimited); then the proposal
// is inserted and every older pending proposal of the sandbox sharing a
// SupersedeKey becomes superseded (SupersededBy set). Audited. store.ErrNotFound
// for an unknown sandbox; errFrozen (nothing stored) for a frozen one,
// checked after the idempotency key and dedupe.
func createProposal(ctx context.Context, st *store.Store, in proposalIn, actor string) (p store.Proposal, created bool, err error) {
	if err := in.Prepare(); err != nil {
		return store.Proposal{}, false, err
	}
	np := in.Proposal
	err = st.InTx(ctx, func(tx store.Tx) error {
		created = false
		sb, err := tx.LockSandbox(ctx, np.Sandbox)
		if err != nil {
			return err
		}
		// The same submission again: its proposal, whatever became of it.
		// Then the same operations as a pending proposal: that one.
		for _, f := range []store.ProposalFilter{
			{Sandbox: np.Sandbox, IdempotencyKey: np.IdempotencyKey, Limit: 1},
			{Sandbox: np.Sandbox, Status: store.ProposalPending, DedupeKey: np.DedupeKey, Limit: 1},
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
			return errFrozen
		}
		now := tx.Now()
		if in.RateMax > 0 {
			n, err := tx.CountProposals(ctx, np.Sandbox, now.Add(-in.RateWindow))
			if err != nil {
				return err
			}
			if n >= in.RateMax {
				return fmt.Errorf("%w: %d proposals in the last %v (at most %d)", errRateLimited, n, in.RateWindow, in.RateMax)
			}
		}
		np.CreatedAt, np.UpdatedAt = now, now
		if p, err = tx.InsertProposal(ctx, np); err != nil {
			return fmt.Errorf("insert proposal: %w", err)
		}
		created = true
		if err := store.Audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionProposalNew, Sandbox: np.Sandbox, Target: strconv.FormatInt(p.ID, 10),
			AfterHash: np.ResultingHash,
			Detail:    map[string]string{"status": store.ProposalPending, "base_version": strconv.FormatInt(np.BaseVersion, 10)},
		}); err != nil {
			return err
		}
		return supersede(ctx, tx, p, actor)
	})
	if err != nil {
		return store.Proposal{}, false, fmt.Errorf("create proposal of sandbox %q: %w", np.Sandbox, err)
	}
	return p, created, nil
}

// supersede marks every older pending proposal of p's sandbox that shares
// a supersede key with p superseded by p, and audits each, oldest first.
func supersede(ctx context.Context, tx store.Tx, p store.Proposal, actor string) error {
	if len(p.SupersedeKeys) == 0 {
		return nil
	}
	pending, err := tx.ListProposals(ctx, store.ProposalFilter{Sandbox: p.Sandbox, Status: store.ProposalPending})
	if err != nil {
		return fmt.Errorf("supersede: %w", err)
	}
	slices.SortFunc(pending, func(a, b store.Proposal) int { return cmp.Compare(a.ID, b.ID) })
	reason := fmt.Sprintf("superseded by proposal %d", p.ID)
	for _, old := range pending {
		if old.ID >= p.ID || !slices.ContainsFunc(old.SupersedeKeys, func(k string) bool { return slices.Contains(p.SupersedeKeys, k) }) {
			continue
		}
		old.Status, old.StatusReason, old.SupersededBy, old.UpdatedAt = store.ProposalSuperseded, reason, p.ID, tx.Now()
		if err := tx.UpdateProposal(ctx, old); err != nil {
			return fmt.Errorf("supersede: %w", err)
		}
		if err := store.Audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionProposalState, Sandbox: p.Sandbox, Target: strconv.FormatInt(old.ID, 10),
			Detail: map[string]string{
				"from": store.ProposalPending, "to": store.ProposalSuperseded, "reason": reason,
				"superseded_by": strconv.FormatInt(p.ID, 10),
			},
		}); err != nil {
			return err
		}
	}
	return nil
}

// setProposalStatus moves a proposal from one of the statuses in from to
// status, with a reason; store.ErrConflict (nothing changes) if its status is
// not in from. Leaving pending sets DecidedAt and DecidedBy (actor).
// Audited.
func setProposalStatus(ctx context.Context, st *store.Store, id int64, from []string, status, reason, actor string) (store.Proposal, error) {
	if err := checkProposalStatus(status, from); err != nil {
		return store.Proposal{}, err
	}
	out, err := store.Transact(ctx, st.Driver, func(tx store.Tx) (store.Proposal, error) {
		p, _, err := lockProposal(ctx, tx, id)
		if err != nil {
			return store.Proposal{}, err
		}
		current := p.Status
		if !slices.Contains(from, current) {
			return store.Proposal{}, fmt.Errorf("%w: proposal is %s, not %s", store.ErrConflict, current, strings.Join(from, " or "))
		}
		now := tx.Now()
		p.Status, p.StatusReason, p.UpdatedAt = status, reason, now
		if current == store.ProposalPending && status != store.ProposalPending { // leaving pending is the decision
			p.DecidedAt, p.DecidedBy = &now, actor
		}
		if p, err = saveProposal(ctx, tx, p); err != nil {
			return store.Proposal{}, err
		}
		return p, store.Audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionProposalState, Sandbox: p.Sandbox, Target: strconv.FormatInt(id, 10),
			Detail: map[string]string{"from": current, "to": status, "reason": reason},
		})
	})
	if err != nil {
		return store.Proposal{}, fmt.Errorf("set status of proposal %d: %w", id, err)
	}
	return out, nil
}

// rebaseProposal records the proposal applied to a newer version (see
// Rebase). Audited with the resulting hash before and after.
func rebaseProposal(ctx context.Context, st *store.Store, in rebaseIn) (store.Proposal, error) {
	if err := in.Check(); err != nil {
		return store.Proposal{}, err
	}
	out, err := store.Transact(ctx, st.Driver, func(tx store.Tx) (store.Proposal, error) {
		p, err := lockPending(ctx, tx, in.ID)
		if err != nil {
			return store.Proposal{}, err
		}
		if p.BaseVersion != in.FromVersion {
			return store.Proposal{}, fmt.Errorf("%w: proposal is based on version %d, not %d", store.ErrConflict, p.BaseVersion, in.FromVersion)
		}
		before := p.ResultingHash
		p.BaseVersion, p.BaseHash = in.BaseVersion, in.BaseHash
		p.Resulting, p.ResultingHash = orNil(in.Resulting), in.ResultingHash
		p.Findings, p.RebaseError, p.UpdatedAt = orNil(in.Findings), in.RebaseError, tx.Now()
		if p, err = saveProposal(ctx, tx, p); err != nil {
			return store.Proposal{}, err
		}
		detail := map[string]string{
			"from_version": strconv.FormatInt(in.FromVersion, 10),
			"to_version":   strconv.FormatInt(in.BaseVersion, 10),
		}
		if in.RebaseError != "" {
			detail["rebase_error"] = in.RebaseError
		}
		return p, store.Audit(ctx, tx, store.AuditEntry{
			Actor: in.Actor, Action: store.ActionProposalBase, Sandbox: p.Sandbox, Target: strconv.FormatInt(in.ID, 10),
			BeforeHash: before, AfterHash: in.ResultingHash, Detail: detail,
		})
	})
	if err != nil {
		return store.Proposal{}, fmt.Errorf("rebase proposal %d: %w", in.ID, err)
	}
	return out, nil
}

// addApproval records approver's approval of a pending proposal whose
// resulting hash is still a.ResultingHash, in one transaction: store.ErrConflict
// if it is no longer pending or its hash moved (nothing stored),
// store.ErrAlreadyExists if approver approved it before. Audited. Returns the
// proposal with every approval.
func addApproval(ctx context.Context, st *store.Store, id int64, a store.Approval) (store.Proposal, error) {
	if err := checkApproval(id, a); err != nil {
		return store.Proposal{}, err
	}
	out, err := store.Transact(ctx, st.Driver, func(tx store.Tx) (store.Proposal, error) {
		p, err := lockPending(ctx, tx, id)
		if err != nil {
			return store.Proposal{}, err
		}
		if p.ResultingHash != a.ResultingHash {
			return store.Proposal{}, fmt.Errorf("%w: the proposal's resulting policy is now %s, not %s", store.ErrConflict, p.ResultingHash, a.ResultingHash)
		}
		return insertApproval(ctx, tx, p, a)
	})
	if err != nil {
		return store.Proposal{}, fmt.Errorf("approve proposal %d: %w", id, err)
	}
	return out, nil
}

// insertApproval records a on p (read under its sandbox's lock), audited,
// and returns p with every approval: store.ErrAlreadyExists if a's
// approver approved p before.
func insertApproval(ctx context.Context, tx store.Tx, p store.Proposal, a store.Approval) (store.Proposal, error) {
	if slices.ContainsFunc(p.Approvals, func(o store.Approval) bool { return o.Approver == a.Approver }) {
		return store.Proposal{}, fmt.Errorf("%w: %s approved it before", store.ErrAlreadyExists, a.Approver)
	}
	a.CreatedAt = tx.Now()
	if err := tx.InsertApproval(ctx, p.ID, a); err != nil {
		return store.Proposal{}, fmt.Errorf("insert approval: %w", err)
	}
	if err := store.Audit(ctx, tx, store.AuditEntry{
		Actor: a.Approver, Action: store.ActionProposalOK, Sandbox: p.Sandbox, Target: strconv.FormatInt(p.ID, 10),
		AfterHash: a.ResultingHash,
		Detail:    map[string]string{"approver": a.Approver, "reason": a.Reason},
	}); err != nil {
		return store.Proposal{}, err
	}
	return tx.GetProposal(ctx, p.ID)
}

// applyProposal commits the proposal as the sandbox's next policy version
// (source "proposal", through commit as every version) and marks it
// applied, in one transaction, only if it is still pending (or approved)
// with in.ResultingHash and its base version is still the sandbox's
// current version; otherwise store.ErrConflict and nothing changes. Two appliers
// racing: exactly one wins (the second finds it applied). With
// in.Approval, that approval is recorded first, in the same transaction.
// Audited.
func applyProposal(ctx context.Context, st *store.Store, in applyIn) (store.Proposal, store.PolicyVersion, error) {
	if err := in.Check(); err != nil {
		return store.Proposal{}, store.PolicyVersion{}, err
	}
	var pv store.PolicyVersion
	out, err := store.Transact(ctx, st.Driver, func(tx store.Tx) (store.Proposal, error) {
		p, sb, err := lockProposal(ctx, tx, in.ID)
		if err != nil {
			return store.Proposal{}, err
		}
		if err := checkApplicable(p.Status, p.ResultingHash, p.BaseVersion, sb.CurrentVersion, sb.Frozen, in); err != nil {
			return store.Proposal{}, err
		}
		if a := in.Approval; a != nil {
			if p, err = insertApproval(ctx, tx, p, *a); err != nil {
				return store.Proposal{}, err
			}
		}
		ap := in.Append(p.Sandbox, p.BaseVersion, p.Approvals)
		if pv, err = commit(ctx, tx, ap); err != nil {
			return store.Proposal{}, err
		}
		from, now := p.Status, tx.Now()
		p.Status, p.AppliedVersion, p.GrantExpiresAt = store.ProposalApplied, pv.Version, in.GrantExpiresAt
		p.DecidedAt, p.DecidedBy, p.UpdatedAt = &now, in.Actor, now
		if p, err = saveProposal(ctx, tx, p); err != nil {
			return store.Proposal{}, err
		}
		detail := map[string]string{
			"from": from, "version": strconv.FormatInt(pv.Version, 10), "approvers": ap.Provenance["approvers"],
		}
		if !in.GrantExpiresAt.IsZero() {
			detail["grant_expires_at"] = in.GrantExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		return p, store.Audit(ctx, tx, store.AuditEntry{
			Actor: in.Actor, Action: store.ActionProposalApply, Sandbox: p.Sandbox, Target: strconv.FormatInt(in.ID, 10),
			BeforeHash: sb.CurrentHash, AfterHash: in.Hash, Detail: detail,
		})
	})
	if err != nil {
		return store.Proposal{}, store.PolicyVersion{}, fmt.Errorf("apply proposal %d: %w", in.ID, err)
	}
	return out, pv, nil
}

// expireProposals marks every pending proposal whose ExpiresAt is before
// cutoff as expired (DecidedAt cutoff, audited) and returns them, oldest
// first. It locks their sandboxes in name order, so sweeps running at once
// queue rather than deadlock; a proposal that became due meanwhile in
// another sandbox is left for the next sweep.
func expireProposals(ctx context.Context, st *store.Store, cutoff time.Time, actor string) ([]store.Proposal, error) {
	if cutoff.IsZero() {
		return nil, fmt.Errorf("invalid expiry time %v", cutoff)
	}
	due := store.ProposalFilter{Status: store.ProposalPending, ExpiresBefore: cutoff}
	out, err := store.Transact(ctx, st.Driver, func(tx store.Tx) ([]store.Proposal, error) {
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
			if errors.Is(err, store.ErrNotFound) {
				continue // deleted meanwhile, with its proposals
			} else if err != nil {
				return nil, err
			}
			locked[name] = true
		}
		if ps, err = tx.ListProposals(ctx, due); err != nil {
			return nil, err
		}
		slices.SortFunc(ps, func(a, b store.Proposal) int { return cmp.Compare(a.ID, b.ID) })
		var out []store.Proposal
		for _, p := range ps {
			if !locked[p.Sandbox] {
				continue
			}
			p.Status, p.StatusReason, p.DecidedAt, p.DecidedBy, p.UpdatedAt = store.ProposalExpired, expiredReason, &cutoff, actor, tx.Now()
			if p, err = saveProposal(ctx, tx, p); err != nil {
				return nil, err
			}
			if err := store.Audit(ctx, tx, store.AuditEntry{
				Actor: actor, Action: store.ActionProposalState, Sandbox: p.Sandbox, Target: strconv.FormatInt(p.ID, 10),
				Detail: map[string]string{"from": store.ProposalPending, "to": store.ProposalExpired, "reason": expiredReason},
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

// freezeSandbox commits doc (a deny-all policy) as the next version
// (source "freeze") and marks the sandbox frozen with the reason,
// remembering the version that was current, in one transaction.
// store.ErrConflict if it is already frozen. Audited.
//
// A deny-all only takes access away, so it is pushed to the proxies as
// soon as it is committed, before the commit reaches disk
// (InTxEnforceFirst): a freeze does not wait behind the log of whatever
// else the database writes, such as bulk Sentry ingest. It returns once
// the freeze is durable.
func freezeSandbox(ctx context.Context, st *store.Store, sandbox, reason, actor string, doc []byte, hash string) (store.Sandbox, store.PolicyVersion, error) {
	return freezeSandboxAnd(ctx, st, sandbox, reason, actor, doc, hash, nil)
}

// freezeSandboxAnd is freezeSandbox, and also, if not nil, runs last in
// its transaction with the version committed: what the freeze is the
// cause of (a Sentry action's record) commits with it, or neither does.
func freezeSandboxAnd(ctx context.Context, st *store.Store, sandbox, reason, actor string, doc []byte, hash string, also func(store.Tx, store.PolicyVersion) error) (store.Sandbox, store.PolicyVersion, error) {
	if err := checkFreeze(sandbox, doc, hash); err != nil {
		return store.Sandbox{}, store.PolicyVersion{}, err
	}
	var pv store.PolicyVersion
	var sb store.Sandbox
	err := st.InTxEnforceFirst(ctx, func(tx store.Tx) error {
		var err error
		if sb, err = tx.LockSandbox(ctx, sandbox); err != nil {
			return err
		}
		if err := checkFreezable(sb.Frozen, sb.CurrentVersion); err != nil {
			return err
		}
		current, before, now := sb.CurrentVersion, sb.CurrentHash, tx.Now()
		if pv, err = commit(ctx, tx, freezeAppend(sandbox, current, doc, hash, reason, actor)); err != nil {
			return err
		}
		sb.CurrentVersion, sb.CurrentHash = pv.Version, pv.Hash
		sb.Frozen, sb.FrozenReason, sb.FrozenBy, sb.FrozenAt, sb.FrozenFrom = true, reason, actor, &now, current
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		err = store.Audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionFreeze, Sandbox: sandbox, Target: sandbox, BeforeHash: before, AfterHash: hash,
			Detail: map[string]string{
				"reason": reason, "version": strconv.FormatInt(pv.Version, 10), "frozen_from": strconv.FormatInt(current, 10),
			},
		})
		if err != nil || also == nil {
			return err
		}
		return also(tx, pv)
	})
	if err != nil {
		return store.Sandbox{}, store.PolicyVersion{}, fmt.Errorf("freeze sandbox %q: %w", sandbox, err)
	}
	return sb, pv, nil
}

// unfreezeSandbox commits the content of the version that was current
// before the freeze as the next version (source "unfreeze") and clears the
// freeze, in one transaction. store.ErrConflict if it is not frozen. Audited.
func unfreezeSandbox(ctx context.Context, st *store.Store, sandbox, reason, actor string) (store.Sandbox, store.PolicyVersion, error) {
	if sandbox == "" {
		return store.Sandbox{}, store.PolicyVersion{}, errors.New("invalid unfreeze: empty sandbox")
	}
	var pv store.PolicyVersion
	sb, err := store.Transact(ctx, st.Driver, func(tx store.Tx) (store.Sandbox, error) {
		sb, err := tx.LockSandbox(ctx, sandbox)
		if err != nil {
			return store.Sandbox{}, err
		}
		if !sb.Frozen {
			return store.Sandbox{}, fmt.Errorf("%w: sandbox is not frozen", store.ErrConflict)
		}
		from, before := sb.FrozenFrom, sb.CurrentHash
		old, err := tx.GetPolicyVersion(ctx, sandbox, from)
		if err != nil {
			return store.Sandbox{}, fmt.Errorf("version %d before the freeze: %w", from, err)
		}
		ap := unfreezeAppend(sandbox, sb.CurrentVersion, old.Document, old.Hash, from, reason, actor)
		if pv, err = commit(ctx, tx, ap); err != nil {
			return store.Sandbox{}, err
		}
		sb.CurrentVersion, sb.CurrentHash = pv.Version, pv.Hash
		sb.Frozen, sb.FrozenReason, sb.FrozenBy, sb.FrozenAt, sb.FrozenFrom = false, "", "", nil, 0
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return store.Sandbox{}, err
		}
		return sb, store.Audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionUnfreeze, Sandbox: sandbox, Target: sandbox, BeforeHash: before, AfterHash: old.Hash,
			Detail: map[string]string{
				"reason": reason, "version": strconv.FormatInt(pv.Version, 10), "restored_from": strconv.FormatInt(from, 10),
			},
		})
	})
	if err != nil {
		return store.Sandbox{}, store.PolicyVersion{}, fmt.Errorf("unfreeze sandbox %q: %w", sandbox, err)
	}
	return sb, pv, nil
}

// The inputs of the proposal records and their checks: what the
// transactions above refuse before they touch the store.

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
