package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- sandbox context: boundary and credentialed hosts ----

// SetSandboxBoundary stores (or, with an empty doc, removes) the sandbox's
// boundary.
func (s *Store) SetSandboxBoundary(ctx context.Context, sandbox string, doc []byte, hash, actor string) (store.Sandbox, error) {
	if err := store.CheckBoundary(sandbox, doc, hash); err != nil {
		return store.Sandbox{}, err
	}
	var boundary []byte // nil: NULL, none
	if len(doc) == 0 {
		hash = ""
	} else {
		boundary = bytes.Clone(doc)
	}
	var sb store.Sandbox
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var before string
		if err := tx.QueryRow(ctx, `SELECT boundary_hash FROM sandboxes WHERE name = $1 FOR UPDATE`, sandbox).Scan(&before); err != nil {
			return mapErr(err)
		}
		var err error
		sb, err = scanSandbox(tx.QueryRow(ctx, `
			UPDATE sandboxes SET boundary = $2, boundary_hash = $3
			WHERE name = $1
			RETURNING `+sandboxColumns, sandbox, boundary, hash))
		if err != nil {
			return mapErr(err)
		}
		return audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionBoundarySet, Sandbox: sandbox, Target: sandbox,
			BeforeHash: before, AfterHash: hash,
		})
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("set boundary of sandbox %q: %w", sandbox, err)
	}
	return sb, nil
}

// UpdateCredentialedHosts adds and then removes credentialed hosts. The
// sandbox row is locked while the new list is computed, so concurrent
// updates apply one after the other.
func (s *Store) UpdateCredentialedHosts(ctx context.Context, sandbox string, add, remove []string, actor string) (store.Sandbox, error) {
	if err := store.CheckCredentialedHosts(sandbox, add, remove); err != nil {
		return store.Sandbox{}, err
	}
	var sb store.Sandbox
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var before []string
		if err := tx.QueryRow(ctx, `SELECT credentialed_hosts FROM sandboxes WHERE name = $1 FOR UPDATE`, sandbox).Scan(&before); err != nil {
			return mapErr(err)
		}
		after := store.MergeCredentialedHosts(before, add, remove)
		var err error
		sb, err = scanSandbox(tx.QueryRow(ctx, `
			UPDATE sandboxes SET credentialed_hosts = $2
			WHERE name = $1
			RETURNING `+sandboxColumns, sandbox, orNone(after)))
		if err != nil {
			return mapErr(err)
		}
		return audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionCredentials, Sandbox: sandbox, Target: sandbox,
			Detail: map[string]string{"before": strings.Join(before, ","), "after": strings.Join(after, ",")},
		})
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("update credentialed hosts of sandbox %q: %w", sandbox, err)
	}
	return sb, nil
}

// orNone returns list, or an empty one for a NOT NULL column (pgx sends a
// nil slice as NULL).
func orNone(list []string) []string {
	if list == nil {
		return []string{}
	}
	return list
}

// orEmpty returns b, or an empty slice for a NOT NULL column.
func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// ---- proposals ----

const proposalColumns = `id, sandbox, status, status_reason, rationale, proposer, idempotency_key,
	denial_id, document, dedupe_key, supersede_keys, base_version, base_hash, resulting,
	resulting_hash, findings, rebase_error, superseded_by, created_at, updated_at,
	expires_at, decided_at, decided_by, applied_version, grant_expires_at`

// scanProposal reads one row of proposalColumns; Approvals are read
// separately (withApprovals).
func scanProposal(r pgx.Row) (store.Proposal, error) {
	var p store.Proposal
	var expires, grantExpires *time.Time
	err := r.Scan(&p.ID, &p.Sandbox, &p.Status, &p.StatusReason, &p.Rationale, &p.Proposer, &p.IdempotencyKey,
		&p.DenialID, &p.Document, &p.DedupeKey, &p.SupersedeKeys, &p.BaseVersion, &p.BaseHash, &p.Resulting,
		&p.ResultingHash, &p.Findings, &p.RebaseError, &p.SupersededBy, &p.CreatedAt, &p.UpdatedAt,
		&expires, &p.DecidedAt, &p.DecidedBy, &p.AppliedVersion, &grantExpires)
	if err != nil {
		return p, err
	}
	p.CreatedAt, p.UpdatedAt = p.CreatedAt.UTC(), p.UpdatedAt.UTC()
	p.ExpiresAt, p.DecidedAt, p.GrantExpiresAt = zeroTime(expires), utcPtr(p.DecidedAt), zeroTime(grantExpires)
	for _, b := range []*[]byte{&p.Document, &p.Resulting, &p.Findings} {
		if len(*b) == 0 {
			*b = nil
		}
	}
	if len(p.SupersedeKeys) == 0 {
		p.SupersedeKeys = nil
	}
	return p, nil
}

// CreateProposal stores a pending proposal unless an equivalent one exists
// (see store.Store). It locks the sandbox row first: submissions to one
// sandbox then run one after the other, and under READ COMMITTED each
// statement after the lock sees what the previous holder committed, so the
// idempotency and dedupe lookups and the rate count cannot go stale.
func (s *Store) CreateProposal(ctx context.Context, in store.NewProposal, actor string) (store.Proposal, bool, error) {
	if err := in.Prepare(); err != nil {
		return store.Proposal{}, false, err
	}
	p := in.Proposal
	var (
		out     store.Proposal
		created bool
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var frozen bool
		if err := tx.QueryRow(ctx, `SELECT frozen FROM sandboxes WHERE name = $1 FOR UPDATE`, p.Sandbox).Scan(&frozen); err != nil {
			return mapErr(err)
		}
		// The same submission again: its proposal, whatever became of it.
		if p.IdempotencyKey != "" {
			got, err := scanProposal(tx.QueryRow(ctx, `SELECT `+proposalColumns+` FROM proposals
				WHERE sandbox = $1 AND idempotency_key = $2 AND idempotency_key <> ''`, p.Sandbox, p.IdempotencyKey))
			if err == nil {
				out = got
				return withApprovals(ctx, tx, &out)
			} else if !errors.Is(err, pgx.ErrNoRows) {
				return mapErr(err)
			}
		}
		// The same operations as a pending proposal: that one.
		if p.DedupeKey != "" {
			got, err := scanProposal(tx.QueryRow(ctx, `SELECT `+proposalColumns+` FROM proposals
				WHERE sandbox = $1 AND status = 'pending' AND dedupe_key = $2
				ORDER BY id DESC LIMIT 1`, p.Sandbox, p.DedupeKey))
			if err == nil {
				out = got
				return withApprovals(ctx, tx, &out)
			} else if !errors.Is(err, pgx.ErrNoRows) {
				return mapErr(err)
			}
		}
		if frozen {
			return store.ErrFrozen
		}
		if in.RateMax > 0 {
			var n int
			err := tx.QueryRow(ctx, `
				SELECT count(*) FROM proposals
				WHERE sandbox = $1 AND created_at > now() - $2::bigint * interval '1 microsecond'`,
				p.Sandbox, in.RateWindow.Microseconds()).Scan(&n)
			if err != nil {
				return mapErr(err)
			}
			if n >= in.RateMax {
				return fmt.Errorf("%w: %d proposals in the last %v (at most %d)", store.ErrRateLimited, n, in.RateWindow, in.RateMax)
			}
		}
		var err error
		out, err = scanProposal(tx.QueryRow(ctx, `
			INSERT INTO proposals (sandbox, status, rationale, proposer, idempotency_key, denial_id, document,
				dedupe_key, supersede_keys, base_version, base_hash, resulting, resulting_hash, findings, expires_at)
			VALUES ($1, 'pending', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
			RETURNING `+proposalColumns,
			p.Sandbox, p.Rationale, p.Proposer, p.IdempotencyKey, p.DenialID, p.Document,
			p.DedupeKey, orNone(p.SupersedeKeys), p.BaseVersion, p.BaseHash, p.Resulting, p.ResultingHash,
			orEmpty(p.Findings), nullTime(p.ExpiresAt)))
		if err != nil {
			return fmt.Errorf("insert proposal: %w", mapErr(err))
		}
		created = true
		if err := audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionProposalNew, Sandbox: p.Sandbox, Target: strconv.FormatInt(out.ID, 10),
			AfterHash: p.ResultingHash,
			Detail:    map[string]string{"status": store.ProposalPending, "base_version": strconv.FormatInt(p.BaseVersion, 10)},
		}); err != nil {
			return err
		}
		if len(p.SupersedeKeys) == 0 {
			return nil
		}
		return supersede(ctx, tx, out, actor)
	})
	if err != nil {
		return store.Proposal{}, false, fmt.Errorf("create proposal of sandbox %q: %w", p.Sandbox, err)
	}
	return out, created, nil
}

// supersede marks every older pending proposal of p's sandbox that shares
// a supersede key with p superseded by p, and audits each.
func supersede(ctx context.Context, tx pgx.Tx, p store.Proposal, actor string) error {
	reason := fmt.Sprintf("superseded by proposal %d", p.ID)
	rows, err := tx.Query(ctx, `
		UPDATE proposals SET status = 'superseded', status_reason = $1, superseded_by = $2, updated_at = now()
		WHERE sandbox = $3 AND status = 'pending' AND id < $2 AND supersede_keys && $4
		RETURNING id`, reason, p.ID, p.Sandbox, p.SupersedeKeys)
	if err != nil {
		return fmt.Errorf("supersede: %w", mapErr(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("supersede: %w", mapErr(err))
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionProposalState, Sandbox: p.Sandbox, Target: strconv.FormatInt(id, 10),
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

// GetProposal returns the proposal or ErrNotFound.
func (s *Store) GetProposal(ctx context.Context, id int64) (store.Proposal, error) {
	p, err := scanProposal(s.pool.QueryRow(ctx, `SELECT `+proposalColumns+` FROM proposals WHERE id = $1`, id))
	if err != nil {
		return store.Proposal{}, fmt.Errorf("get proposal %d: %w", id, mapErr(err))
	}
	if err := withApprovals(ctx, s.pool, &p); err != nil {
		return store.Proposal{}, fmt.Errorf("get proposal %d: %w", id, err)
	}
	return p, nil
}

// ListProposals returns the proposals f matches, newest first.
func (s *Store) ListProposals(ctx context.Context, f store.ProposalFilter) ([]store.Proposal, error) {
	var limit *int
	if f.Limit > 0 {
		limit = &f.Limit
	}
	rows, err := s.pool.Query(ctx, `SELECT `+proposalColumns+` FROM proposals
		WHERE ($1 = '' OR sandbox = $1) AND ($2 = '' OR status = $2)
		ORDER BY id DESC
		LIMIT $3`, f.Sandbox, f.Status, limit)
	if err != nil {
		return nil, fmt.Errorf("list proposals: %w", mapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Proposal, error) { return scanProposal(r) })
	if err != nil {
		return nil, fmt.Errorf("list proposals: %w", mapErr(err))
	}
	if err := fillApprovals(ctx, s.pool, out); err != nil {
		return nil, fmt.Errorf("list proposals: %w", err)
	}
	return out, nil
}

// SetProposalStatus moves the proposal from one of the statuses in from to
// status. The row is locked while its status is checked.
func (s *Store) SetProposalStatus(ctx context.Context, id int64, from []string, status, reason, actor string) (store.Proposal, error) {
	if err := store.CheckProposalStatus(status, from); err != nil {
		return store.Proposal{}, err
	}
	var out store.Proposal
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var sandbox, current string
		err := tx.QueryRow(ctx, `SELECT sandbox, status FROM proposals WHERE id = $1 FOR UPDATE`, id).Scan(&sandbox, &current)
		if err != nil {
			return mapErr(err)
		}
		if !slices.Contains(from, current) {
			return fmt.Errorf("%w: proposal is %s, not %s", store.ErrConflict, current, strings.Join(from, " or "))
		}
		// Leaving pending is the decision.
		decided := current == store.ProposalPending && status != store.ProposalPending
		out, err = scanProposal(tx.QueryRow(ctx, `
			UPDATE proposals SET status = $2, status_reason = $3, updated_at = now(),
				decided_at = CASE WHEN $4 THEN now() ELSE decided_at END,
				decided_by = CASE WHEN $4 THEN $5 ELSE decided_by END
			WHERE id = $1
			RETURNING `+proposalColumns, id, status, reason, decided, actor))
		if err != nil {
			return mapErr(err)
		}
		if err := withApprovals(ctx, tx, &out); err != nil {
			return err
		}
		return audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionProposalState, Sandbox: sandbox, Target: strconv.FormatInt(id, 10),
			Detail: map[string]string{"from": current, "to": status, "reason": reason},
		})
	})
	if err != nil {
		return store.Proposal{}, fmt.Errorf("set status of proposal %d: %w", id, err)
	}
	return out, nil
}

// RebaseProposal records the pending proposal applied to a newer version.
// The row is locked while its status and base are checked.
func (s *Store) RebaseProposal(ctx context.Context, in store.Rebase) (store.Proposal, error) {
	if err := in.Check(); err != nil {
		return store.Proposal{}, err
	}
	var out store.Proposal
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var sandbox, status, before string
		var base int64
		err := tx.QueryRow(ctx, `
			SELECT sandbox, status, base_version, resulting_hash FROM proposals WHERE id = $1 FOR UPDATE`,
			in.ID).Scan(&sandbox, &status, &base, &before)
		if err != nil {
			return mapErr(err)
		}
		switch {
		case status != store.ProposalPending:
			return fmt.Errorf("%w: proposal is %s, not pending", store.ErrConflict, status)
		case base != in.FromVersion:
			return fmt.Errorf("%w: proposal is based on version %d, not %d", store.ErrConflict, base, in.FromVersion)
		}
		out, err = scanProposal(tx.QueryRow(ctx, `
			UPDATE proposals SET base_version = $2, base_hash = $3, resulting = $4, resulting_hash = $5,
				findings = $6, rebase_error = $7, updated_at = now()
			WHERE id = $1
			RETURNING `+proposalColumns,
			in.ID, in.BaseVersion, in.BaseHash, orEmpty(in.Resulting), in.ResultingHash,
			orEmpty(in.Findings), in.RebaseError))
		if err != nil {
			return mapErr(err)
		}
		if err := withApprovals(ctx, tx, &out); err != nil {
			return err
		}
		detail := map[string]string{
			"from_version": strconv.FormatInt(in.FromVersion, 10),
			"to_version":   strconv.FormatInt(in.BaseVersion, 10),
		}
		if in.RebaseError != "" {
			detail["rebase_error"] = in.RebaseError
		}
		return audit(ctx, tx, store.AuditEntry{
			Actor: in.Actor, Action: store.ActionProposalBase, Sandbox: sandbox, Target: strconv.FormatInt(in.ID, 10),
			BeforeHash: before, AfterHash: in.ResultingHash, Detail: detail,
		})
	})
	if err != nil {
		return store.Proposal{}, fmt.Errorf("rebase proposal %d: %w", in.ID, err)
	}
	return out, nil
}
