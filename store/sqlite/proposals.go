package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// The primitives of proposals, approvals and approval rules.

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

const proposalColumns = `id, sandbox, status, status_reason, rationale, proposer, idempotency_key,
	denial_id, document, dedupe_key, supersede_keys, base_version, base_hash, resulting,
	resulting_hash, findings, rebase_error, superseded_by, created_at, updated_at,
	expires_at, decided_at, decided_by, applied_version, grant_expires_at`

// scanProposal reads one row of proposalColumns; Approvals are read
// separately (fillApprovals).
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

// InsertProposal stores p as given and returns it as stored.
func (t *txn) InsertProposal(ctx context.Context, p store.Proposal) (store.Proposal, error) {
	if err := checkTimes(fmt.Sprintf("proposal of sandbox %q", p.Sandbox), p.ExpiresAt); err != nil {
		return store.Proposal{}, err
	}
	keys, err := encodeList(p.SupersedeKeys)
	if err != nil {
		return store.Proposal{}, err
	}
	out, err := scanProposal(t.wr.QueryRowContext(ctx, `
		INSERT INTO proposals (sandbox, status, status_reason, rationale, proposer, idempotency_key, denial_id, document,
			dedupe_key, supersede_keys, base_version, base_hash, resulting, resulting_hash, findings, rebase_error,
			created_at, updated_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		RETURNING `+proposalColumns,
		p.Sandbox, p.Status, p.StatusReason, p.Rationale, p.Proposer, p.IdempotencyKey, p.DenialID, orEmpty(p.Document),
		p.DedupeKey, keys, p.BaseVersion, p.BaseHash, orEmpty(p.Resulting), p.ResultingHash, orEmpty(p.Findings), p.RebaseError,
		nanos(p.CreatedAt), nanos(p.UpdatedAt), nullNanos(p.ExpiresAt)))
	return wrapRow(out, err, "insert proposal of sandbox %q", p.Sandbox)
}

// GetProposal returns the proposal with its approvals, or ErrNotFound.
func (t *txn) GetProposal(ctx context.Context, id int64) (store.Proposal, error) {
	p, err := scanProposal(t.rd.QueryRowContext(ctx, `SELECT `+proposalColumns+` FROM proposals WHERE id = ?`, id))
	if err != nil {
		return store.Proposal{}, fmt.Errorf("get proposal %d: %w", id, mapErr(err))
	}
	ps := []store.Proposal{p}
	if err := fillApprovals(ctx, t.rd, ps); err != nil {
		return store.Proposal{}, fmt.Errorf("get proposal %d: %w", id, err)
	}
	return ps[0], nil
}

// ListProposals returns the proposals f matches, newest first, with their
// approvals.
func (t *txn) ListProposals(ctx context.Context, f store.ProposalFilter) ([]store.Proposal, error) {
	if err := checkTimes("proposal filter", f.ExpiresBefore); err != nil {
		return nil, err
	}
	var (
		where []string
		args  []any
	)
	for _, c := range []struct{ col, v string }{
		{"sandbox", f.Sandbox}, {"status", f.Status}, {"idempotency_key", f.IdempotencyKey}, {"dedupe_key", f.DedupeKey},
	} {
		if c.v != "" {
			where, args = append(where, c.col+" = ?"), append(args, c.v)
		}
	}
	if !f.ExpiresBefore.IsZero() {
		where, args = append(where, "expires_at < ?"), append(args, nanos(f.ExpiresBefore))
	}
	q := `SELECT ` + proposalColumns + ` FROM proposals`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY id DESC`
	if f.Limit > 0 {
		q, args = q+` LIMIT ?`, append(args, f.Limit)
	}
	out, err := collect(ctx, t.rd, scanProposal, q, args...)
	if err == nil {
		err = fillApprovals(ctx, t.rd, out)
	}
	if err != nil {
		return nil, fmt.Errorf("list proposals: %w", err)
	}
	return out, nil
}

// CountProposals returns how many proposals of sandbox were created after
// since.
func (t *txn) CountProposals(ctx context.Context, sandbox string, since time.Time) (int, error) {
	var n int
	err := t.rd.QueryRowContext(ctx, `SELECT count(*) FROM proposals WHERE sandbox = ? AND created_at > ?`,
		sandbox, nanos(since)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count proposals of sandbox %q: %w", sandbox, mapErr(err))
	}
	return n, nil
}

// UpdateProposal writes p's mutable fields to the row p.ID.
func (t *txn) UpdateProposal(ctx context.Context, p store.Proposal) error {
	if err := checkTimes(fmt.Sprintf("update of proposal %d", p.ID), orZero(p.DecidedAt), p.GrantExpiresAt); err != nil {
		return err
	}
	return t.update(ctx, fmt.Sprintf("update proposal %d", p.ID), `
		UPDATE proposals SET status = ?, status_reason = ?, base_version = ?, base_hash = ?,
			resulting = ?, resulting_hash = ?, findings = ?, rebase_error = ?, superseded_by = ?,
			updated_at = ?, decided_at = ?, decided_by = ?, applied_version = ?, grant_expires_at = ?
		WHERE id = ?`,
		p.Status, p.StatusReason, p.BaseVersion, p.BaseHash,
		orEmpty(p.Resulting), p.ResultingHash, orEmpty(p.Findings), p.RebaseError, p.SupersededBy,
		nanos(p.UpdatedAt), nullNanosPtr(p.DecidedAt), p.DecidedBy, p.AppliedVersion, nullNanos(p.GrantExpiresAt), p.ID)
}

const approvalColumns = `proposal_id, approver, reason, resulting_hash, created_at`

// InsertApproval stores a for the proposal.
func (t *txn) InsertApproval(ctx context.Context, proposal int64, a store.Approval) error {
	return t.exec(ctx, fmt.Sprintf("insert approval of proposal %d", proposal),
		`INSERT INTO proposal_approvals (`+approvalColumns+`) VALUES (?, ?, ?, ?, ?)`,
		proposal, a.Approver, a.Reason, a.ResultingHash, nanos(a.CreatedAt))
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
	b, err := json.Marshal(ids)
	if err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	byID := make(map[int64][]store.Approval)
	_, err = collect(ctx, q, func(r scanner) (struct{}, error) {
		var id, at int64
		var a store.Approval
		err := r.Scan(&id, &a.Approver, &a.Reason, &a.ResultingHash, &at)
		a.CreatedAt = fromNanos(at)
		byID[id] = append(byID[id], a)
		return struct{}{}, err
	}, `SELECT `+approvalColumns+` FROM proposal_approvals
		WHERE proposal_id IN (SELECT value FROM json_each(?))
		ORDER BY id`, string(b))
	if err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	for i := range ps {
		ps[i].Approvals = byID[ps[i].ID]
	}
	return nil
}

const approvalPolicyColumns = `version, module, hash, author, created_at`

// GetApprovalPolicy returns the newest approval rules, or ErrNotFound.
func (t *txn) GetApprovalPolicy(ctx context.Context) (store.ApprovalPolicy, error) {
	var ap store.ApprovalPolicy
	var at int64
	err := t.rd.QueryRowContext(ctx, `SELECT `+approvalPolicyColumns+`
		FROM approval_policies ORDER BY version DESC LIMIT 1`).Scan(&ap.Version, &ap.Module, &ap.Hash, &ap.Author, &at)
	if err != nil {
		return store.ApprovalPolicy{}, fmt.Errorf("get approval policy: %w", mapErr(err))
	}
	ap.CreatedAt = fromNanos(at)
	return ap, nil
}

// InsertApprovalPolicy stores ap as given.
func (t *txn) InsertApprovalPolicy(ctx context.Context, ap store.ApprovalPolicy) error {
	return t.exec(ctx, fmt.Sprintf("insert approval policy %d", ap.Version),
		`INSERT INTO approval_policies (`+approvalPolicyColumns+`) VALUES (?, ?, ?, ?, ?)`,
		ap.Version, ap.Module, ap.Hash, ap.Author, nanos(ap.CreatedAt))
}

// CountPendingProposals counts the pending proposals, and those created
// before each of createdBefore, in one statement.
func (d *Driver) CountPendingProposals(ctx context.Context, createdBefore []time.Time) (store.PendingCount, error) {
	q := `SELECT count(*), min(created_at)`
	args := make([]any, 0, len(createdBefore)+1)
	for _, t := range createdBefore {
		q += `, coalesce(sum(CASE WHEN created_at < ? THEN 1 ELSE 0 END), 0)`
		args = append(args, nanos(t))
	}
	q += ` FROM proposals WHERE status = ?`
	args = append(args, store.ProposalPending)
	out := store.PendingCount{Before: make([]int, len(createdBefore))}
	var oldest sql.NullInt64
	dest := []any{&out.Total, &oldest}
	for i := range out.Before {
		dest = append(dest, &out.Before[i])
	}
	if err := d.r.QueryRowContext(ctx, q, args...).Scan(dest...); err != nil {
		return store.PendingCount{}, fmt.Errorf("count pending proposals: %w", mapErr(err))
	}
	if oldest.Valid {
		out.Oldest = fromNanos(oldest.Int64)
	}
	return out, nil
}
