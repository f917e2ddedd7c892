package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- approval workflow: approvals, applying, expiry, freeze, rules ----
//
// Write transactions are serialised (BEGIN IMMEDIATE), so a check made in
// one cannot go stale before its writes: of two appliers of a proposal the
// second finds it applied.

// queryer is what reads approvals: the read pool or a write transaction.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

const approvalColumns = `proposal_id, approver, reason, resulting_hash, created_at`

// approvalsOf returns the approvals of the proposals whose ids are in ids
// (a JSON array), oldest first, by proposal id.
func approvalsOf(ctx context.Context, q queryer, ids string) (map[int64][]store.Approval, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+approvalColumns+` FROM proposal_approvals
		WHERE proposal_id IN (SELECT value FROM json_each(?))
		ORDER BY id`, ids)
	if err != nil {
		return nil, fmt.Errorf("approvals: %w", mapErr(err))
	}
	defer rows.Close()
	out := make(map[int64][]store.Approval)
	for rows.Next() {
		var id, at int64
		var a store.Approval
		if err := rows.Scan(&id, &a.Approver, &a.Reason, &a.ResultingHash, &at); err != nil {
			return nil, fmt.Errorf("approvals: %w", mapErr(err))
		}
		a.CreatedAt = fromNanos(at)
		out[id] = append(out[id], a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("approvals: %w", mapErr(err))
	}
	return out, nil
}

// fillApprovals sets the Approvals of every proposal in ps with one query
// (nil when a proposal has none).
func fillApprovals(ctx context.Context, q queryer, ps []store.Proposal) error {
	if len(ps) == 0 {
		return nil
	}
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	byID, err := approvalsOf(ctx, q, string(b))
	if err != nil {
		return err
	}
	for i := range ps {
		ps[i].Approvals = byID[ps[i].ID]
	}
	return nil
}

// withApprovals sets p's Approvals.
func withApprovals(ctx context.Context, q queryer, p *store.Proposal) error {
	byID, err := approvalsOf(ctx, q, "["+strconv.FormatInt(p.ID, 10)+"]")
	p.Approvals = byID[p.ID]
	return err
}

// AddApproval records approver a.Approver's approval of the pending
// proposal id whose resulting hash is still a.ResultingHash.
func (s *Store) AddApproval(ctx context.Context, id int64, a store.Approval) (store.Proposal, error) {
	if err := store.CheckApproval(id, a); err != nil {
		return store.Proposal{}, err
	}
	at := now()
	var out store.Proposal
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var sandbox, status, hash string
		err := tx.QueryRowContext(ctx, `SELECT sandbox, status, resulting_hash FROM proposals WHERE id = ?`, id).
			Scan(&sandbox, &status, &hash)
		if err != nil {
			return mapErr(err)
		}
		switch {
		case status != store.ProposalPending:
			return fmt.Errorf("%w: proposal is %s, not pending", store.ErrConflict, status)
		case hash != a.ResultingHash:
			return fmt.Errorf("%w: the proposal's resulting policy is now %s, not %s", store.ErrConflict, hash, a.ResultingHash)
		}
		var n int
		err = tx.QueryRowContext(ctx, `SELECT count(*) FROM proposal_approvals WHERE proposal_id = ? AND approver = ?`,
			id, a.Approver).Scan(&n)
		if err != nil {
			return mapErr(err)
		}
		if n > 0 {
			return fmt.Errorf("%w: %s approved it before", store.ErrAlreadyExists, a.Approver)
		}
		if _, err := tx.ExecContext(ctx, `
			INSERT INTO proposal_approvals (proposal_id, approver, reason, resulting_hash, created_at)
			VALUES (?, ?, ?, ?, ?)`, id, a.Approver, a.Reason, a.ResultingHash, at); err != nil {
			return fmt.Errorf("insert approval: %w", mapErr(err))
		}
		if err := audit(ctx, tx, at, store.AuditEntry{
			Actor: a.Approver, Action: store.ActionProposalOK, Sandbox: sandbox, Target: strconv.FormatInt(id, 10),
			AfterHash: a.ResultingHash,
			Detail:    map[string]string{"approver": a.Approver, "reason": a.Reason},
		}); err != nil {
			return err
		}
		out, err = proposalInTx(ctx, tx, id)
		return err
	})
	if err != nil {
		return store.Proposal{}, fmt.Errorf("approve proposal %d: %w", id, err)
	}
	return out, nil
}

// proposalInTx reads a proposal with its approvals inside tx.
func proposalInTx(ctx context.Context, tx *sql.Tx, id int64) (store.Proposal, error) {
	p, err := scanProposal(tx.QueryRowContext(ctx, `SELECT `+proposalColumns+` FROM proposals WHERE id = ?`, id))
	if err != nil {
		return store.Proposal{}, mapErr(err)
	}
	err = withApprovals(ctx, tx, &p)
	return p, err
}

// ApplyProposal commits the proposal as the sandbox's next version and
// marks it applied. The version goes through appendVersion, as every
// commit does, so the sandbox's current version and the policy.set audit
// entry are those of any other commit.
func (s *Store) ApplyProposal(ctx context.Context, in store.ApplyProposal) (store.Proposal, store.PolicyVersion, error) {
	if err := in.Check(); err != nil {
		return store.Proposal{}, store.PolicyVersion{}, err
	}
	if !inNanos(in.GrantExpiresAt) {
		return store.Proposal{}, store.PolicyVersion{}, fmt.Errorf("invalid apply of proposal %d: grant end %v out of range", in.ID, in.GrantExpiresAt)
	}
	at := now()
	var (
		out store.Proposal
		pv  store.PolicyVersion
	)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var sandbox, status, hash string
		var base int64
		err := tx.QueryRowContext(ctx, `SELECT sandbox, status, resulting_hash, base_version FROM proposals WHERE id = ?`, in.ID).
			Scan(&sandbox, &status, &hash, &base)
		if err != nil {
			return mapErr(err)
		}
		var current int64
		var before string
		var frozen bool
		if err := tx.QueryRowContext(ctx, `SELECT current_version, current_hash, frozen FROM sandboxes WHERE name = ?`, sandbox).
			Scan(&current, &before, &frozen); err != nil {
			return mapErr(err)
		}
		if err := store.CheckApplicable(status, hash, base, current, frozen, in); err != nil {
			return err
		}
		byID, err := approvalsOf(ctx, tx, "["+strconv.FormatInt(in.ID, 10)+"]")
		if err != nil {
			return err
		}
		approvals := byID[in.ID]
		ap := in.Append(sandbox, base, approvals)
		if pv, err = appendVersion(ctx, tx, at, ap); err != nil {
			return err
		}
		out, err = scanProposal(tx.QueryRowContext(ctx, `
			UPDATE proposals SET status = 'applied', applied_version = ?, grant_expires_at = ?,
				decided_at = ?, decided_by = ?, updated_at = ?
			WHERE id = ?
			RETURNING `+proposalColumns, pv.Version, nullNanos(in.GrantExpiresAt), at, in.Actor, at, in.ID))
		if err != nil {
			return mapErr(err)
		}
		out.Approvals = approvals
		detail := map[string]string{
			"from": status, "version": strconv.FormatInt(pv.Version, 10), "approvers": ap.Provenance["approvers"],
		}
		if !in.GrantExpiresAt.IsZero() {
			detail["grant_expires_at"] = in.GrantExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		return audit(ctx, tx, at, store.AuditEntry{
			Actor: in.Actor, Action: store.ActionProposalApply, Sandbox: sandbox, Target: strconv.FormatInt(in.ID, 10),
			BeforeHash: before, AfterHash: in.Hash, Detail: detail,
		})
	})
	if err != nil {
		return store.Proposal{}, store.PolicyVersion{}, fmt.Errorf("apply proposal %d: %w", in.ID, err)
	}
	return out, pv, nil
}

// ExpireProposals marks the pending proposals whose expiry is before now
// expired, oldest first.
func (s *Store) ExpireProposals(ctx context.Context, cutoff time.Time, actor string) ([]store.Proposal, error) {
	if cutoff.IsZero() || !inNanos(cutoff) {
		return nil, fmt.Errorf("invalid expiry time %v", cutoff)
	}
	at := now()
	var out []store.Proposal
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `
			UPDATE proposals SET status = 'expired', status_reason = ?1, decided_at = ?2, decided_by = ?3, updated_at = ?4
			WHERE status = 'pending' AND expires_at < ?2
			RETURNING `+proposalColumns, store.ExpiredReason, cutoff.UnixNano(), actor, at)
		if err != nil {
			return mapErr(err)
		}
		for rows.Next() {
			p, err := scanProposal(rows)
			if err != nil {
				rows.Close()
				return mapErr(err)
			}
			out = append(out, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return mapErr(err)
		}
		slices.SortFunc(out, func(a, b store.Proposal) int { return cmp.Compare(a.ID, b.ID) })
		if err := fillApprovals(ctx, tx, out); err != nil {
			return err
		}
		for _, p := range out {
			if err := audit(ctx, tx, at, store.AuditEntry{
				Actor: actor, Action: store.ActionProposalState, Sandbox: p.Sandbox, Target: strconv.FormatInt(p.ID, 10),
				Detail: map[string]string{"from": store.ProposalPending, "to": store.ProposalExpired, "reason": store.ExpiredReason},
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("expire proposals: %w", err)
	}
	return out, nil
}

// FreezeSandbox commits doc as the next version and marks the sandbox
// frozen.
func (s *Store) FreezeSandbox(ctx context.Context, sandbox, reason, actor string, doc []byte, hash string) (store.Sandbox, store.PolicyVersion, error) {
	if err := store.CheckFreeze(sandbox, doc, hash); err != nil {
		return store.Sandbox{}, store.PolicyVersion{}, err
	}
	at := now()
	var (
		sb store.Sandbox
		pv store.PolicyVersion
	)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var current int64
		var before string
		var frozen bool
		err := tx.QueryRowContext(ctx, `SELECT current_version, current_hash, frozen FROM sandboxes WHERE name = ?`, sandbox).
			Scan(&current, &before, &frozen)
		if err != nil {
			return mapErr(err)
		}
		if err := store.CheckFreezable(frozen, current); err != nil {
			return err
		}
		ap := store.FreezeAppend(sandbox, current, doc, hash, reason, actor)
		if pv, err = appendVersion(ctx, tx, at, ap); err != nil {
			return err
		}
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `
			UPDATE sandboxes SET frozen = 1, frozen_reason = ?, frozen_by = ?, frozen_at = ?, frozen_from = ?
			WHERE name = ?
			RETURNING `+sandboxColumns, reason, actor, at, current, sandbox))
		if err != nil {
			return mapErr(err)
		}
		return audit(ctx, tx, at, store.AuditEntry{
			Actor: actor, Action: store.ActionFreeze, Sandbox: sandbox, Target: sandbox, BeforeHash: before, AfterHash: hash,
			Detail: map[string]string{
				"reason": reason, "version": strconv.FormatInt(pv.Version, 10), "frozen_from": strconv.FormatInt(current, 10),
			},
		})
	})
	if err != nil {
		return store.Sandbox{}, store.PolicyVersion{}, fmt.Errorf("freeze sandbox %q: %w", sandbox, err)
	}
	return sb, pv, nil
}

// UnfreezeSandbox commits the content of the version current before the
// freeze as the next version and clears the freeze.
func (s *Store) UnfreezeSandbox(ctx context.Context, sandbox, reason, actor string) (store.Sandbox, store.PolicyVersion, error) {
	if sandbox == "" {
		return store.Sandbox{}, store.PolicyVersion{}, errors.New("invalid unfreeze: empty sandbox")
	}
	at := now()
	var (
		sb store.Sandbox
		pv store.PolicyVersion
	)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var current, from int64
		var before string
		var frozen bool
		err := tx.QueryRowContext(ctx, `SELECT current_version, current_hash, frozen, frozen_from FROM sandboxes WHERE name = ?`, sandbox).
			Scan(&current, &before, &frozen, &from)
		if err != nil {
			return mapErr(err)
		}
		if !frozen {
			return fmt.Errorf("%w: sandbox is not frozen", store.ErrConflict)
		}
		var doc, hash string
		if err := tx.QueryRowContext(ctx, `SELECT document, hash FROM policy_versions WHERE sandbox = ? AND version = ?`,
			sandbox, from).Scan(&doc, &hash); err != nil {
			return fmt.Errorf("version %d before the freeze: %w", from, mapErr(err))
		}
		ap := store.UnfreezeAppend(sandbox, current, []byte(doc), hash, from, reason, actor)
		if pv, err = appendVersion(ctx, tx, at, ap); err != nil {
			return err
		}
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `
			UPDATE sandboxes SET frozen = 0, frozen_reason = '', frozen_by = '', frozen_at = NULL, frozen_from = 0
			WHERE name = ?
			RETURNING `+sandboxColumns, sandbox))
		if err != nil {
			return mapErr(err)
		}
		return audit(ctx, tx, at, store.AuditEntry{
			Actor: actor, Action: store.ActionUnfreeze, Sandbox: sandbox, Target: sandbox, BeforeHash: before, AfterHash: hash,
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

const approvalPolicyColumns = `version, module, hash, author, created_at`

func scanApprovalPolicy(r scanner) (store.ApprovalPolicy, error) {
	var ap store.ApprovalPolicy
	var at int64
	err := r.Scan(&ap.Version, &ap.Module, &ap.Hash, &ap.Author, &at)
	ap.CreatedAt = fromNanos(at)
	return ap, err
}

// GetApprovalPolicy returns the newest approval rules, or ErrNotFound.
func (s *Store) GetApprovalPolicy(ctx context.Context) (store.ApprovalPolicy, error) {
	ap, err := scanApprovalPolicy(s.r.QueryRowContext(ctx, `SELECT `+approvalPolicyColumns+`
		FROM approval_policies ORDER BY version DESC LIMIT 1`))
	if err != nil {
		return store.ApprovalPolicy{}, fmt.Errorf("get approval policy: %w", mapErr(err))
	}
	return ap, nil
}

// SetApprovalPolicy stores the rules as the next version.
func (s *Store) SetApprovalPolicy(ctx context.Context, module, hash, actor string) (store.ApprovalPolicy, error) {
	if err := store.CheckApprovalPolicy(module, hash); err != nil {
		return store.ApprovalPolicy{}, err
	}
	at := now()
	var out store.ApprovalPolicy
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var before string
		err := tx.QueryRowContext(ctx, `SELECT hash FROM approval_policies ORDER BY version DESC LIMIT 1`).Scan(&before)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return mapErr(err)
		}
		out, err = scanApprovalPolicy(tx.QueryRowContext(ctx, `
			INSERT INTO approval_policies (version, module, hash, author, created_at)
			VALUES ((SELECT coalesce(max(version), 0) + 1 FROM approval_policies), ?, ?, ?, ?)
			RETURNING `+approvalPolicyColumns, module, hash, actor, at))
		if err != nil {
			return fmt.Errorf("insert approval policy: %w", mapErr(err))
		}
		return audit(ctx, tx, at, store.AuditEntry{
			Actor: actor, Action: store.ActionApprovalRules, Target: strconv.FormatInt(out.Version, 10),
			BeforeHash: before, AfterHash: hash,
			Detail: map[string]string{"version": strconv.FormatInt(out.Version, 10)},
		})
	})
	if err != nil {
		return store.ApprovalPolicy{}, fmt.Errorf("set approval policy: %w", err)
	}
	return out, nil
}
