package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- sandbox context: boundary and credentialed hosts ----

// encodeList stores a list as a JSON array ("[]" when empty).
func encodeList(list []string) (string, error) {
	if len(list) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(list)
	if err != nil {
		return "", fmt.Errorf("encode list: %w", err)
	}
	return string(b), nil
}

// decodeList reads what encodeList stored; an empty array reads as nil.
func decodeList(s string) ([]string, error) {
	var list []string
	if err := json.Unmarshal([]byte(s), &list); err != nil {
		return nil, fmt.Errorf("decode list: %w", err)
	}
	if len(list) == 0 {
		return nil, nil
	}
	return list, nil
}

// SetSandboxBoundary stores (or, with an empty doc, removes) the sandbox's
// boundary.
func (s *Store) SetSandboxBoundary(ctx context.Context, sandbox string, doc []byte, hash, actor string) (store.Sandbox, error) {
	if err := store.CheckBoundary(sandbox, doc, hash); err != nil {
		return store.Sandbox{}, err
	}
	var boundary any // NULL: none
	if len(doc) == 0 {
		hash = ""
	} else {
		boundary = bytes.Clone(doc)
	}
	at := now()
	var sb store.Sandbox
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var before string
		if err := tx.QueryRowContext(ctx, `SELECT boundary_hash FROM sandboxes WHERE name = ?`, sandbox).Scan(&before); err != nil {
			return mapErr(err)
		}
		var err error
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `
			UPDATE sandboxes SET boundary = ?, boundary_hash = ?
			WHERE name = ?
			RETURNING `+sandboxColumns, boundary, hash, sandbox))
		if err != nil {
			return mapErr(err)
		}
		return audit(ctx, tx, at, store.AuditEntry{
			Actor: actor, Action: store.ActionBoundarySet, Sandbox: sandbox, Target: sandbox,
			BeforeHash: before, AfterHash: hash,
		})
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("set boundary of sandbox %q: %w", sandbox, err)
	}
	return sb, nil
}

// UpdateCredentialedHosts adds and then removes credentialed hosts.
func (s *Store) UpdateCredentialedHosts(ctx context.Context, sandbox string, add, remove []string, actor string) (store.Sandbox, error) {
	if err := store.CheckCredentialedHosts(sandbox, add, remove); err != nil {
		return store.Sandbox{}, err
	}
	at := now()
	var sb store.Sandbox
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var stored string
		if err := tx.QueryRowContext(ctx, `SELECT credentialed_hosts FROM sandboxes WHERE name = ?`, sandbox).Scan(&stored); err != nil {
			return mapErr(err)
		}
		before, err := decodeList(stored)
		if err != nil {
			return err
		}
		after := store.MergeCredentialedHosts(before, add, remove)
		hosts, err := encodeList(after)
		if err != nil {
			return err
		}
		sb, err = scanSandbox(tx.QueryRowContext(ctx, `
			UPDATE sandboxes SET credentialed_hosts = ?
			WHERE name = ?
			RETURNING `+sandboxColumns, hosts, sandbox))
		if err != nil {
			return mapErr(err)
		}
		return audit(ctx, tx, at, store.AuditEntry{
			Actor: actor, Action: store.ActionCredentials, Sandbox: sandbox, Target: sandbox,
			Detail: map[string]string{"before": strings.Join(before, ","), "after": strings.Join(after, ",")},
		})
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("update credentialed hosts of sandbox %q: %w", sandbox, err)
	}
	return sb, nil
}

// ---- proposals ----

const proposalColumns = `id, sandbox, status, status_reason, rationale, proposer, idempotency_key,
	denial_id, document, dedupe_key, supersede_keys, base_version, base_hash, resulting,
	resulting_hash, findings, rebase_error, superseded_by, created_at, updated_at,
	expires_at, decided_at, decided_by, applied_version, grant_expires_at`

// scanProposal reads one row of proposalColumns; Approvals are read
// separately (withApprovals).
func scanProposal(r scanner) (store.Proposal, error) {
	var p store.Proposal
	var keys string
	var created, updated int64
	var expires, decided, grantExpires sql.NullInt64
	err := r.Scan(&p.ID, &p.Sandbox, &p.Status, &p.StatusReason, &p.Rationale, &p.Proposer, &p.IdempotencyKey,
		&p.DenialID, &p.Document, &p.DedupeKey, &keys, &p.BaseVersion, &p.BaseHash, &p.Resulting,
		&p.ResultingHash, &p.Findings, &p.RebaseError, &p.SupersededBy, &created, &updated,
		&expires, &decided, &p.DecidedBy, &p.AppliedVersion, &grantExpires)
	if err != nil {
		return p, err
	}
	p.CreatedAt, p.UpdatedAt = fromNanos(created), fromNanos(updated)
	p.ExpiresAt, p.DecidedAt, p.GrantExpiresAt = zeroNanos(expires), fromNullNanos(decided), zeroNanos(grantExpires)
	for _, b := range []*[]byte{&p.Document, &p.Resulting, &p.Findings} {
		if len(*b) == 0 {
			*b = nil
		}
	}
	p.SupersedeKeys, err = decodeList(keys)
	return p, err
}

// orEmpty returns b, or an empty slice for a NOT NULL column.
func orEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// CreateProposal stores a pending proposal unless an equivalent one exists
// (see store.Store). Write transactions are serialised (BEGIN IMMEDIATE),
// so the lookups, the rate count and the insert cannot interleave with
// another submission.
func (s *Store) CreateProposal(ctx context.Context, in store.NewProposal, actor string) (store.Proposal, bool, error) {
	if err := in.Prepare(); err != nil {
		return store.Proposal{}, false, err
	}
	p := in.Proposal
	if !inNanos(p.ExpiresAt) {
		return store.Proposal{}, false, fmt.Errorf("invalid proposal of sandbox %q: expiry %v out of range", p.Sandbox, p.ExpiresAt)
	}
	keys, err := encodeList(p.SupersedeKeys)
	if err != nil {
		return store.Proposal{}, false, err
	}
	at := now()
	var (
		out     store.Proposal
		created bool
	)
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var frozen bool
		if err := tx.QueryRowContext(ctx, `SELECT frozen FROM sandboxes WHERE name = ?`, p.Sandbox).Scan(&frozen); err != nil {
			return mapErr(err)
		}
		// The same submission again: its proposal, whatever became of it.
		if p.IdempotencyKey != "" {
			got, err := scanProposal(tx.QueryRowContext(ctx, `SELECT `+proposalColumns+` FROM proposals
				WHERE sandbox = ? AND idempotency_key = ? AND idempotency_key <> ''`, p.Sandbox, p.IdempotencyKey))
			if err == nil {
				out = got
				return withApprovals(ctx, tx, &out)
			} else if !errors.Is(err, sql.ErrNoRows) {
				return mapErr(err)
			}
		}
		// The same operations as a pending proposal: that one.
		if p.DedupeKey != "" {
			got, err := scanProposal(tx.QueryRowContext(ctx, `SELECT `+proposalColumns+` FROM proposals
				WHERE sandbox = ? AND status = 'pending' AND dedupe_key = ?
				ORDER BY id DESC LIMIT 1`, p.Sandbox, p.DedupeKey))
			if err == nil {
				out = got
				return withApprovals(ctx, tx, &out)
			} else if !errors.Is(err, sql.ErrNoRows) {
				return mapErr(err)
			}
		}
		if frozen {
			return store.ErrFrozen
		}
		if in.RateMax > 0 {
			var n int
			err := tx.QueryRowContext(ctx, `SELECT count(*) FROM proposals WHERE sandbox = ? AND created_at > ?`,
				p.Sandbox, at-in.RateWindow.Nanoseconds()).Scan(&n)
			if err != nil {
				return mapErr(err)
			}
			if n >= in.RateMax {
				return fmt.Errorf("%w: %d proposals in the last %v (at most %d)", store.ErrRateLimited, n, in.RateWindow, in.RateMax)
			}
		}
		out, err = scanProposal(tx.QueryRowContext(ctx, `
			INSERT INTO proposals (sandbox, status, rationale, proposer, idempotency_key, denial_id, document,
				dedupe_key, supersede_keys, base_version, base_hash, resulting, resulting_hash, findings,
				created_at, updated_at, expires_at)
			VALUES (?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			RETURNING `+proposalColumns,
			p.Sandbox, p.Rationale, p.Proposer, p.IdempotencyKey, p.DenialID, p.Document,
			p.DedupeKey, keys, p.BaseVersion, p.BaseHash, p.Resulting, p.ResultingHash, orEmpty(p.Findings),
			at, at, nullNanos(p.ExpiresAt)))
		if err != nil {
			return fmt.Errorf("insert proposal: %w", mapErr(err))
		}
		created = true
		id := strconv.FormatInt(out.ID, 10)
		if err := audit(ctx, tx, at, store.AuditEntry{
			Actor: actor, Action: store.ActionProposalNew, Sandbox: p.Sandbox, Target: id, AfterHash: p.ResultingHash,
			Detail: map[string]string{"status": store.ProposalPending, "base_version": strconv.FormatInt(p.BaseVersion, 10)},
		}); err != nil {
			return err
		}
		if len(p.SupersedeKeys) == 0 {
			return nil
		}
		return supersede(ctx, tx, at, out, keys, actor)
	})
	if err != nil {
		return store.Proposal{}, false, fmt.Errorf("create proposal of sandbox %q: %w", p.Sandbox, err)
	}
	return out, created, nil
}

// supersede marks every older pending proposal of p's sandbox that shares
// a supersede key (keys, as stored) with p superseded by p, and audits
// each.
func supersede(ctx context.Context, tx *sql.Tx, at int64, p store.Proposal, keys, actor string) error {
	reason := fmt.Sprintf("superseded by proposal %d", p.ID)
	rows, err := tx.QueryContext(ctx, `
		UPDATE proposals SET status = 'superseded', status_reason = ?1, superseded_by = ?2, updated_at = ?3
		WHERE sandbox = ?4 AND status = 'pending' AND id < ?2
		  AND EXISTS (SELECT 1 FROM json_each(supersede_keys) AS k
		              WHERE k.value IN (SELECT value FROM json_each(?5)))
		RETURNING id`, reason, p.ID, at, p.Sandbox, keys)
	if err != nil {
		return fmt.Errorf("supersede: %w", mapErr(err))
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return mapErr(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("supersede: %w", mapErr(err))
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := audit(ctx, tx, at, store.AuditEntry{
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
	p, err := scanProposal(s.r.QueryRowContext(ctx, `SELECT `+proposalColumns+` FROM proposals WHERE id = ?`, id))
	if err != nil {
		return store.Proposal{}, fmt.Errorf("get proposal %d: %w", id, mapErr(err))
	}
	if err := withApprovals(ctx, s.r, &p); err != nil {
		return store.Proposal{}, fmt.Errorf("get proposal %d: %w", id, err)
	}
	return p, nil
}

// ListProposals returns the proposals f matches, newest first.
func (s *Store) ListProposals(ctx context.Context, f store.ProposalFilter) ([]store.Proposal, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = -1 // no limit
	}
	out, err := collect(ctx, s.r, scanProposal, `SELECT `+proposalColumns+` FROM proposals
		WHERE (?1 = '' OR sandbox = ?1) AND (?2 = '' OR status = ?2)
		ORDER BY id DESC
		LIMIT ?3`, f.Sandbox, f.Status, limit)
	if err != nil {
		return nil, fmt.Errorf("list proposals: %w", err)
	}
	if err := fillApprovals(ctx, s.r, out); err != nil {
		return nil, fmt.Errorf("list proposals: %w", err)
	}
	return out, nil
}

// SetProposalStatus moves the proposal from one of the statuses in from to
// status.
func (s *Store) SetProposalStatus(ctx context.Context, id int64, from []string, status, reason, actor string) (store.Proposal, error) {
	if err := store.CheckProposalStatus(status, from); err != nil {
		return store.Proposal{}, err
	}
	at := now()
	var out store.Proposal
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var sandbox, current string
		err := tx.QueryRowContext(ctx, `SELECT sandbox, status FROM proposals WHERE id = ?`, id).Scan(&sandbox, &current)
		if err != nil {
			return mapErr(err)
		}
		if !slices.Contains(from, current) {
			return fmt.Errorf("%w: proposal is %s, not %s", store.ErrConflict, current, strings.Join(from, " or "))
		}
		// Leaving pending is the decision.
		decided := current == store.ProposalPending && status != store.ProposalPending
		out, err = scanProposal(tx.QueryRowContext(ctx, `
			UPDATE proposals SET status = ?1, status_reason = ?2, updated_at = ?3,
				decided_at = CASE WHEN ?5 THEN ?3 ELSE decided_at END,
				decided_by = CASE WHEN ?5 THEN ?6 ELSE decided_by END
			WHERE id = ?4
			RETURNING `+proposalColumns, status, reason, at, id, decided, actor))
		if err != nil {
			return mapErr(err)
		}
		if err := withApprovals(ctx, tx, &out); err != nil {
			return err
		}
		return audit(ctx, tx, at, store.AuditEntry{
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
func (s *Store) RebaseProposal(ctx context.Context, in store.Rebase) (store.Proposal, error) {
	if err := in.Check(); err != nil {
		return store.Proposal{}, err
	}
	at := now()
	var out store.Proposal
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var sandbox, status, before string
		var base int64
		err := tx.QueryRowContext(ctx, `SELECT sandbox, status, base_version, resulting_hash FROM proposals WHERE id = ?`,
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
		out, err = scanProposal(tx.QueryRowContext(ctx, `
			UPDATE proposals SET base_version = ?, base_hash = ?, resulting = ?, resulting_hash = ?,
				findings = ?, rebase_error = ?, updated_at = ?
			WHERE id = ?
			RETURNING `+proposalColumns,
			in.BaseVersion, in.BaseHash, orEmpty(in.Resulting), in.ResultingHash,
			orEmpty(in.Findings), in.RebaseError, at, in.ID))
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
		return audit(ctx, tx, at, store.AuditEntry{
			Actor: in.Actor, Action: store.ActionProposalBase, Sandbox: sandbox, Target: strconv.FormatInt(in.ID, 10),
			BeforeHash: before, AfterHash: in.ResultingHash, Detail: detail,
		})
	})
	if err != nil {
		return store.Proposal{}, fmt.Errorf("rebase proposal %d: %w", in.ID, err)
	}
	return out, nil
}
