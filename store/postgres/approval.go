package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- approval workflow: approvals, applying, expiry, freeze, rules ----
//
// Locks are taken sandbox row first, then proposal rows, as CreateProposal
// does, so writers of one sandbox queue instead of deadlocking.

// querier is what reads approvals: the pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// fillApprovals sets the Approvals of every proposal in ps, oldest first,
// with one query (nil when a proposal has none).
func fillApprovals(ctx context.Context, q querier, ps []store.Proposal) error {
	if len(ps) == 0 {
		return nil
	}
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	rows, err := q.Query(ctx, `SELECT proposal_id, approver, reason, resulting_hash, created_at
		FROM proposal_approvals WHERE proposal_id = ANY($1) ORDER BY id`, ids)
	if err != nil {
		return fmt.Errorf("approvals: %w", mapErr(err))
	}
	byID := make(map[int64][]store.Approval)
	var (
		id int64
		a  store.Approval
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &a.Approver, &a.Reason, &a.ResultingHash, &a.CreatedAt}, func() error {
		a.CreatedAt = a.CreatedAt.UTC()
		byID[id] = append(byID[id], a)
		return nil
	})
	if err != nil {
		return fmt.Errorf("approvals: %w", mapErr(err))
	}
	for i := range ps {
		ps[i].Approvals = byID[ps[i].ID]
	}
	return nil
}

// withApprovals sets p's Approvals.
func withApprovals(ctx context.Context, q querier, p *store.Proposal) error {
	ps := []store.Proposal{{ID: p.ID}}
	err := fillApprovals(ctx, q, ps)
	p.Approvals = ps[0].Approvals
	return err
}

// AddApproval records approver a.Approver's approval of the pending
// proposal id whose resulting hash is still a.ResultingHash. The proposal
// row is locked while it is checked, so an approver approving twice at
// once is told ErrAlreadyExists once.
func (s *Store) AddApproval(ctx context.Context, id int64, a store.Approval) (store.Proposal, error) {
	if err := store.CheckApproval(id, a); err != nil {
		return store.Proposal{}, err
	}
	var out store.Proposal
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var sandbox, status, hash string
		err := tx.QueryRow(ctx, `SELECT sandbox, status, resulting_hash FROM proposals WHERE id = $1 FOR UPDATE`, id).
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
		var exists bool
		err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM proposal_approvals WHERE proposal_id = $1 AND approver = $2)`,
			id, a.Approver).Scan(&exists)
		if err != nil {
			return mapErr(err)
		}
		if exists {
			return fmt.Errorf("%w: %s approved it before", store.ErrAlreadyExists, a.Approver)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO proposal_approvals (proposal_id, approver, reason, resulting_hash)
			VALUES ($1, $2, $3, $4)`, id, a.Approver, a.Reason, a.ResultingHash); err != nil {
			return fmt.Errorf("insert approval: %w", mapErr(err))
		}
		if err := audit(ctx, tx, store.AuditEntry{
			Actor: a.Approver, Action: store.ActionProposalOK, Sandbox: sandbox, Target: strconv.FormatInt(id, 10),
			AfterHash: a.ResultingHash,
			Detail:    map[string]string{"approver": a.Approver, "reason": a.Reason},
		}); err != nil {
			return err
		}
		out, err = scanProposal(tx.QueryRow(ctx, `SELECT `+proposalColumns+` FROM proposals WHERE id = $1`, id))
		if err != nil {
			return mapErr(err)
		}
		return withApprovals(ctx, tx, &out)
	})
	if err != nil {
		return store.Proposal{}, fmt.Errorf("approve proposal %d: %w", id, err)
	}
	return out, nil
}

// ApplyProposal commits the proposal as the sandbox's next version and
// marks it applied. It locks the sandbox row, then the proposal's, so
// appliers, committers and submitters of the sandbox run one after the
// other: of two appliers the second finds the proposal applied. The
// version goes through appendVersion, as every commit does, so the
// sandbox's current version, the policy.set audit entry and the commit
// notification are those of any other commit.
func (s *Store) ApplyProposal(ctx context.Context, in store.ApplyProposal) (store.Proposal, store.PolicyVersion, error) {
	if err := in.Check(); err != nil {
		return store.Proposal{}, store.PolicyVersion{}, err
	}
	var (
		out store.Proposal
		pv  store.PolicyVersion
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var sandbox string
		if err := tx.QueryRow(ctx, `SELECT sandbox FROM proposals WHERE id = $1`, in.ID).Scan(&sandbox); err != nil {
			return mapErr(err)
		}
		var current int64
		var before string
		var frozen bool
		err := tx.QueryRow(ctx, `SELECT current_version, current_hash, frozen FROM sandboxes WHERE name = $1 FOR UPDATE`, sandbox).
			Scan(&current, &before, &frozen)
		if err != nil {
			return mapErr(err)
		}
		var status, hash string
		var base int64
		err = tx.QueryRow(ctx, `SELECT status, resulting_hash, base_version FROM proposals WHERE id = $1 FOR UPDATE`, in.ID).
			Scan(&status, &hash, &base)
		if err != nil {
			return mapErr(err)
		}
		if err := store.CheckApplicable(status, hash, base, current, frozen, in); err != nil {
			return err
		}
		approvals := []store.Proposal{{ID: in.ID}}
		if err := fillApprovals(ctx, tx, approvals); err != nil {
			return err
		}
		ap := in.Append(sandbox, base, approvals[0].Approvals)
		if pv, err = appendVersion(ctx, tx, ap); err != nil {
			return err
		}
		out, err = scanProposal(tx.QueryRow(ctx, `
			UPDATE proposals SET status = 'applied', applied_version = $2, grant_expires_at = $3,
				decided_at = now(), decided_by = $4, updated_at = now()
			WHERE id = $1
			RETURNING `+proposalColumns, in.ID, pv.Version, nullTime(in.GrantExpiresAt), in.Actor))
		if err != nil {
			return mapErr(err)
		}
		out.Approvals = approvals[0].Approvals
		detail := map[string]string{
			"from": status, "version": strconv.FormatInt(pv.Version, 10), "approvers": ap.Provenance["approvers"],
		}
		if !in.GrantExpiresAt.IsZero() {
			detail["grant_expires_at"] = in.GrantExpiresAt.UTC().Format(time.RFC3339Nano)
		}
		return audit(ctx, tx, store.AuditEntry{
			Actor: in.Actor, Action: store.ActionProposalApply, Sandbox: sandbox, Target: strconv.FormatInt(in.ID, 10),
			BeforeHash: before, AfterHash: in.Hash, Detail: detail,
		})
	})
	if err != nil {
		return store.Proposal{}, store.PolicyVersion{}, fmt.Errorf("apply proposal %d: %w", in.ID, err)
	}
	return out, pv, nil
}

// ExpireProposals marks the pending proposals whose expiry is before
// cutoff expired, oldest first. It locks them in id order, so two expiries
// running at once queue rather than deadlock, and skips any another writer
// moved out of pending meanwhile.
func (s *Store) ExpireProposals(ctx context.Context, cutoff time.Time, actor string) ([]store.Proposal, error) {
	if cutoff.IsZero() {
		return nil, fmt.Errorf("invalid expiry time %v", cutoff)
	}
	var out []store.Proposal
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			WITH due AS (
				SELECT id FROM proposals WHERE status = 'pending' AND expires_at < $2
				ORDER BY id FOR UPDATE
			)
			UPDATE proposals SET status = 'expired', status_reason = $1, decided_at = $2, decided_by = $3, updated_at = now()
			WHERE id IN (SELECT id FROM due) AND status = 'pending'
			RETURNING `+proposalColumns, store.ExpiredReason, cutoff, actor)
		if err != nil {
			return mapErr(err)
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Proposal, error) { return scanProposal(r) })
		if err != nil {
			return mapErr(err)
		}
		slices.SortFunc(out, func(a, b store.Proposal) int { return cmp.Compare(a.ID, b.ID) })
		if err := fillApprovals(ctx, tx, out); err != nil {
			return err
		}
		for _, p := range out {
			if err := audit(ctx, tx, store.AuditEntry{
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
// frozen, with the sandbox row locked.
func (s *Store) FreezeSandbox(ctx context.Context, sandbox, reason, actor string, doc []byte, hash string) (store.Sandbox, store.PolicyVersion, error) {
	if err := store.CheckFreeze(sandbox, doc, hash); err != nil {
		return store.Sandbox{}, store.PolicyVersion{}, err
	}
	var (
		sb store.Sandbox
		pv store.PolicyVersion
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var current int64
		var before string
		var frozen bool
		err := tx.QueryRow(ctx, `SELECT current_version, current_hash, frozen FROM sandboxes WHERE name = $1 FOR UPDATE`, sandbox).
			Scan(&current, &before, &frozen)
		if err != nil {
			return mapErr(err)
		}
		if err := store.CheckFreezable(frozen, current); err != nil {
			return err
		}
		if pv, err = appendVersion(ctx, tx, store.FreezeAppend(sandbox, current, doc, hash, reason, actor)); err != nil {
			return err
		}
		sb, err = scanSandbox(tx.QueryRow(ctx, `
			UPDATE sandboxes SET frozen = true, frozen_reason = $2, frozen_by = $3, frozen_at = now(), frozen_from = $4
			WHERE name = $1
			RETURNING `+sandboxColumns, sandbox, reason, actor, current))
		if err != nil {
			return mapErr(err)
		}
		return audit(ctx, tx, store.AuditEntry{
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
// freeze as the next version and clears the freeze, with the sandbox row
// locked.
func (s *Store) UnfreezeSandbox(ctx context.Context, sandbox, reason, actor string) (store.Sandbox, store.PolicyVersion, error) {
	if sandbox == "" {
		return store.Sandbox{}, store.PolicyVersion{}, errors.New("invalid unfreeze: empty sandbox")
	}
	var (
		sb store.Sandbox
		pv store.PolicyVersion
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var current, from int64
		var before string
		var frozen bool
		err := tx.QueryRow(ctx, `SELECT current_version, current_hash, frozen, frozen_from FROM sandboxes WHERE name = $1 FOR UPDATE`, sandbox).
			Scan(&current, &before, &frozen, &from)
		if err != nil {
			return mapErr(err)
		}
		if !frozen {
			return fmt.Errorf("%w: sandbox is not frozen", store.ErrConflict)
		}
		var doc, hash string
		if err := tx.QueryRow(ctx, `SELECT document, hash FROM policy_versions WHERE sandbox = $1 AND version = $2`,
			sandbox, from).Scan(&doc, &hash); err != nil {
			return fmt.Errorf("version %d before the freeze: %w", from, mapErr(err))
		}
		if pv, err = appendVersion(ctx, tx, store.UnfreezeAppend(sandbox, current, []byte(doc), hash, from, reason, actor)); err != nil {
			return err
		}
		sb, err = scanSandbox(tx.QueryRow(ctx, `
			UPDATE sandboxes SET frozen = false, frozen_reason = '', frozen_by = '', frozen_at = NULL, frozen_from = 0
			WHERE name = $1
			RETURNING `+sandboxColumns, sandbox))
		if err != nil {
			return mapErr(err)
		}
		return audit(ctx, tx, store.AuditEntry{
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

func scanApprovalPolicy(r pgx.Row) (store.ApprovalPolicy, error) {
	var ap store.ApprovalPolicy
	err := r.Scan(&ap.Version, &ap.Module, &ap.Hash, &ap.Author, &ap.CreatedAt)
	ap.CreatedAt = ap.CreatedAt.UTC()
	return ap, err
}

// GetApprovalPolicy returns the newest approval rules, or ErrNotFound.
func (s *Store) GetApprovalPolicy(ctx context.Context) (store.ApprovalPolicy, error) {
	ap, err := scanApprovalPolicy(s.pool.QueryRow(ctx, `SELECT `+approvalPolicyColumns+`
		FROM approval_policies ORDER BY version DESC LIMIT 1`))
	if err != nil {
		return store.ApprovalPolicy{}, fmt.Errorf("get approval policy: %w", mapErr(err))
	}
	return ap, nil
}

// SetApprovalPolicy stores the rules as the next version. The table lock
// (which readers do not wait for) makes concurrent setters number their
// versions one after the other instead of colliding.
func (s *Store) SetApprovalPolicy(ctx context.Context, module, hash, actor string) (store.ApprovalPolicy, error) {
	if err := store.CheckApprovalPolicy(module, hash); err != nil {
		return store.ApprovalPolicy{}, err
	}
	var out store.ApprovalPolicy
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE approval_policies IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return mapErr(err)
		}
		var before string
		err := tx.QueryRow(ctx, `SELECT hash FROM approval_policies ORDER BY version DESC LIMIT 1`).Scan(&before)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return mapErr(err)
		}
		out, err = scanApprovalPolicy(tx.QueryRow(ctx, `
			INSERT INTO approval_policies (version, module, hash, author)
			VALUES ((SELECT coalesce(max(version), 0) + 1 FROM approval_policies), $1, $2, $3)
			RETURNING `+approvalPolicyColumns, module, hash, actor))
		if err != nil {
			return fmt.Errorf("insert approval policy: %w", mapErr(err))
		}
		return audit(ctx, tx, store.AuditEntry{
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
