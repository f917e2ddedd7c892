package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- proposals and their approvals ----

const proposalColumns = `id, sandbox, status, status_reason, rationale, proposer, idempotency_key,
	denial_id, document, dedupe_key, supersede_keys, base_version, base_hash, resulting,
	resulting_hash, findings, rebase_error, superseded_by, created_at, updated_at,
	expires_at, decided_at, decided_by, applied_version, grant_expires_at`

// scanProposal reads one row of proposalColumns; Approvals are read
// separately (proposals).
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
	p.Document, p.Resulting, p.Findings = nilIfEmpty(p.Document), nilIfEmpty(p.Resulting), nilIfEmpty(p.Findings)
	p.SupersedeKeys = nilIfEmpty(p.SupersedeKeys)
	return p, nil
}

// InsertProposal stores p as given and returns it as stored, with its ID:
// ErrAlreadyExists (the transaction stays usable) for a taken idempotency
// key of its sandbox, ErrNotFound for an unknown sandbox.
func (c *conn) InsertProposal(ctx context.Context, p store.Proposal) (store.Proposal, error) {
	out, err := scanProposal(c.db.QueryRow(ctx, `
		INSERT INTO proposals (sandbox, status, status_reason, rationale, proposer, idempotency_key, denial_id,
			document, dedupe_key, supersede_keys, base_version, base_hash, resulting, resulting_hash, findings,
			rebase_error, superseded_by, created_at, updated_at, expires_at, decided_at, decided_by,
			applied_version, grant_expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24)
		ON CONFLICT (sandbox, idempotency_key) WHERE idempotency_key <> '' DO NOTHING
		RETURNING `+proposalColumns,
		p.Sandbox, p.Status, p.StatusReason, p.Rationale, p.Proposer, p.IdempotencyKey, p.DenialID,
		p.Document, p.DedupeKey, notNull(p.SupersedeKeys), p.BaseVersion, p.BaseHash, notNull(p.Resulting), p.ResultingHash,
		notNull(p.Findings), p.RebaseError, p.SupersededBy, p.CreatedAt, p.UpdatedAt, nullTime(p.ExpiresAt),
		nullTimePtr(p.DecidedAt), p.DecidedBy, p.AppliedVersion, nullTime(p.GrantExpiresAt)))
	if err != nil {
		return store.Proposal{}, fmt.Errorf("insert proposal of %q: %w", p.Sandbox,
			alreadyExists(err, "idempotency key "+p.IdempotencyKey))
	}
	return out, nil
}

// GetProposal returns the proposal with its approvals, or ErrNotFound.
func (c *conn) GetProposal(ctx context.Context, id int64) (store.Proposal, error) {
	ps, err := c.proposals(ctx, `WHERE id = $1`, id)
	if err == nil && len(ps) == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Proposal{}, fmt.Errorf("get proposal %d: %w", id, err)
	}
	return ps[0], nil
}

// ListProposals returns the proposals f matches, newest first, with their
// approvals.
func (c *conn) ListProposals(ctx context.Context, f store.ProposalFilter) ([]store.Proposal, error) {
	out, err := c.proposals(ctx, `
		WHERE ($1 = '' OR sandbox = $1) AND ($2 = '' OR status = $2)
		  AND ($3 = '' OR idempotency_key = $3) AND ($4 = '' OR dedupe_key = $4)
		  AND ($5::timestamptz IS NULL OR expires_at < $5)
		ORDER BY id DESC
		LIMIT $6`, f.Sandbox, f.Status, f.IdempotencyKey, f.DedupeKey, nullTime(f.ExpiresBefore), limitOf(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("list proposals: %w", err)
	}
	return out, nil
}

// proposals returns the proposals the query's clauses select, with their
// approvals (oldest first, nil when none), in two queries.
func (c *conn) proposals(ctx context.Context, clauses string, args ...any) ([]store.Proposal, error) {
	rows, err := c.db.Query(ctx, `SELECT `+proposalColumns+` FROM proposals `+clauses, args...)
	ps, err := collect(rows, err, scanProposal)
	if err != nil || len(ps) == 0 {
		return ps, err
	}
	ids := make([]int64, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	if rows, err = c.db.Query(ctx, `SELECT proposal_id, approver, reason, resulting_hash, created_at
		FROM proposal_approvals WHERE proposal_id = ANY($1) ORDER BY id`, ids); err != nil {
		return nil, fmt.Errorf("approvals: %w", mapErr(err))
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
		return nil, fmt.Errorf("approvals: %w", mapErr(err))
	}
	for i := range ps {
		ps[i].Approvals = byID[ps[i].ID]
	}
	return ps, nil
}

// CountProposals returns how many proposals of sandbox were created after
// since.
func (c *conn) CountProposals(ctx context.Context, sandbox string, since time.Time) (int, error) {
	var n int
	err := c.db.QueryRow(ctx, `SELECT count(*) FROM proposals WHERE sandbox = $1 AND created_at > $2`,
		sandbox, since).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count proposals of %q: %w", sandbox, mapErr(err))
	}
	return n, nil
}

// UpdateProposal writes p's mutable fields to the row p.ID.
func (c *conn) UpdateProposal(ctx context.Context, p store.Proposal) error {
	tag, err := c.db.Exec(ctx, `
		UPDATE proposals SET status = $2, status_reason = $3, base_version = $4, base_hash = $5,
			resulting = $6, resulting_hash = $7, findings = $8, rebase_error = $9, superseded_by = $10,
			updated_at = $11, decided_at = $12, decided_by = $13, applied_version = $14, grant_expires_at = $15
		WHERE id = $1`,
		p.ID, p.Status, p.StatusReason, p.BaseVersion, p.BaseHash,
		notNull(p.Resulting), p.ResultingHash, notNull(p.Findings), p.RebaseError, p.SupersededBy,
		p.UpdatedAt, nullTimePtr(p.DecidedAt), p.DecidedBy, p.AppliedVersion, nullTime(p.GrantExpiresAt))
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return wrapf(err, "update proposal %d", p.ID)
}

// InsertApproval stores a for the proposal: ErrAlreadyExists (the
// transaction stays usable) if a.Approver approved it before, ErrNotFound
// for an unknown proposal.
func (c *conn) InsertApproval(ctx context.Context, proposal int64, a store.Approval) error {
	err := c.insertUnique(ctx, a.Approver+" approved it before", `
		INSERT INTO proposal_approvals (proposal_id, approver, reason, resulting_hash, created_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (proposal_id, approver) DO NOTHING
		RETURNING id`, proposal, a.Approver, a.Reason, a.ResultingHash, a.CreatedAt)
	if err != nil {
		return fmt.Errorf("approve proposal %d: %w", proposal, err)
	}
	return nil
}

// ---- approval rules ----

// GetApprovalPolicy returns the newest approval rules, or ErrNotFound.
func (c *conn) GetApprovalPolicy(ctx context.Context) (store.ApprovalPolicy, error) {
	var ap store.ApprovalPolicy
	err := c.db.QueryRow(ctx, `SELECT version, module, hash, author, created_at
		FROM approval_policies ORDER BY version DESC LIMIT 1`).
		Scan(&ap.Version, &ap.Module, &ap.Hash, &ap.Author, &ap.CreatedAt)
	if err != nil {
		return store.ApprovalPolicy{}, fmt.Errorf("get approval policy: %w", mapErr(err))
	}
	ap.CreatedAt = ap.CreatedAt.UTC()
	return ap, nil
}

// InsertApprovalPolicy stores ap as given (ErrAlreadyExists, the
// transaction usable, if that version exists).
func (c *conn) InsertApprovalPolicy(ctx context.Context, ap store.ApprovalPolicy) error {
	err := c.insertUnique(ctx, fmt.Sprint("version ", ap.Version), `
		INSERT INTO approval_policies (version, module, hash, author, created_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (version) DO NOTHING
		RETURNING version`, ap.Version, ap.Module, ap.Hash, ap.Author, ap.CreatedAt)
	if err != nil {
		return fmt.Errorf("insert approval policy %d: %w", ap.Version, err)
	}
	return nil
}

// CountPendingProposals counts the pending proposals, and those created
// before each of createdBefore, in one statement.
func (d *Driver) CountPendingProposals(ctx context.Context, createdBefore []time.Time) (store.PendingCount, error) {
	q := `SELECT count(*), min(created_at)`
	args := []any{store.ProposalPending}
	for _, t := range createdBefore {
		args = append(args, t)
		q += fmt.Sprintf(`, count(*) FILTER (WHERE created_at < $%d)`, len(args))
	}
	q += ` FROM proposals WHERE status = $1`
	out := store.PendingCount{Before: make([]int, len(createdBefore))}
	var oldest *time.Time
	dest := []any{&out.Total, &oldest}
	for i := range out.Before {
		dest = append(dest, &out.Before[i])
	}
	if err := d.pool.QueryRow(ctx, q, args...).Scan(dest...); err != nil {
		return store.PendingCount{}, fmt.Errorf("count pending proposals: %w", mapErr(err))
	}
	if oldest != nil {
		out.Oldest = oldest.UTC()
	}
	return out, nil
}
