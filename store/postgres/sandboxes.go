package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlread"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
)

// ---- sandboxes ----

// sandboxColumns are sqlread's and the providers attached, sorted.
const sandboxColumns = sqlread.SandboxColumns +
	`, ARRAY(SELECT provider FROM sandbox_providers WHERE sandbox = sandboxes.name ORDER BY provider)`

func scanSandbox(r pgx.Row) (store.Sandbox, error) {
	var sb store.Sandbox
	err := r.Scan(&sb.Name, &sb.CurrentVersion, &sb.CurrentHash, &sb.CreatedAt, &sb.CreatedBy,
		&sb.Boundary, &sb.BoundaryHash, &sb.CredentialedHosts,
		&sb.Frozen, &sb.FrozenReason, &sb.FrozenBy, &sb.FrozenAt, &sb.FrozenFrom, &sb.CredentialsGeneration, &sb.Providers)
	sb.Providers = nilIfEmpty(sb.Providers)
	sb.CreatedAt, sb.FrozenAt = sb.CreatedAt.UTC(), utcPtr(sb.FrozenAt)
	sb.Boundary, sb.CredentialedHosts = nilIfEmpty(sb.Boundary), nilIfEmpty(sb.CredentialedHosts)
	return sb, err
}

// InsertSandbox stores a new sandbox row (ErrAlreadyExists for a taken
// name, leaving the transaction usable).
func (c *conn) InsertSandbox(ctx context.Context, sb store.Sandbox) error {
	err := c.insertUnique(ctx, "sandbox "+sb.Name, `
		INSERT INTO sandboxes (name, current_version, current_hash, created_at, created_by)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (name) DO NOTHING
		RETURNING name`,
		sb.Name, sb.CurrentVersion, sb.CurrentHash, sb.CreatedAt, sb.CreatedBy)
	if err != nil {
		return fmt.Errorf("insert sandbox %q: %w", sb.Name, err)
	}
	return nil
}

// GetSandbox returns the sandbox or ErrNotFound.
func (c *conn) GetSandbox(ctx context.Context, name string) (store.Sandbox, error) {
	return c.sandbox(ctx, name, "")
}

// LockSandbox is GetSandbox holding the row (SELECT … FOR UPDATE) until
// the transaction ends.
func (c *conn) LockSandbox(ctx context.Context, name string) (store.Sandbox, error) {
	return c.sandbox(ctx, name, c.forUpdate())
}

func (c *conn) sandbox(ctx context.Context, name, lock string) (store.Sandbox, error) {
	sb, err := scanSandbox(c.db.QueryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE name = $1`+lock, name))
	return wrapRow(sb, err, "get sandbox %q", name)
}

// ListSandboxes returns every sandbox ordered by name.
func (c *conn) ListSandboxes(ctx context.Context) ([]store.Sandbox, error) {
	rows, err := c.db.Query(ctx, `SELECT `+sandboxColumns+` FROM sandboxes ORDER BY name`)
	out, err := collect(rows, err, scanSandbox)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// UpdateSandbox writes sb's mutable columns.
func (c *conn) UpdateSandbox(ctx context.Context, sb store.Sandbox) error {
	tag, err := c.db.Exec(ctx, `
		UPDATE sandboxes SET current_version = $2, current_hash = $3,
			boundary = $4, boundary_hash = $5, credentialed_hosts = $6,
			frozen = $7, frozen_reason = $8, frozen_by = $9, frozen_at = $10, frozen_from = $11
		WHERE name = $1`,
		sb.Name, sb.CurrentVersion, sb.CurrentHash, nilIfEmpty(sb.Boundary), sb.BoundaryHash, notNull(sb.CredentialedHosts),
		sb.Frozen, sb.FrozenReason, sb.FrozenBy, nullTimePtr(sb.FrozenAt), sb.FrozenFrom)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return wrapf(err, "update sandbox %q", sb.Name)
}

// DeleteSandbox deletes the row (the schema cascades to its versions, CA,
// proxy statuses and proposals) and returns it as it was. The delete
// waits for a concurrent InsertToken's key-share lock on the row, so a
// revocation that follows it in the same transaction sees that token.
func (c *conn) DeleteSandbox(ctx context.Context, name string) (store.Sandbox, error) {
	sb, err := scanSandbox(c.db.QueryRow(ctx, `DELETE FROM sandboxes WHERE name = $1 RETURNING `+sandboxColumns, name))
	return wrapRow(sb, err, "delete sandbox %q", name)
}

// ---- policy versions ----

// InsertPolicyVersion stores v and, in the same statement, NOTIFYs the
// listening replicas (delivered when, and only if, the transaction
// commits). ErrAlreadyExists if the sandbox has that version.
func (c *conn) InsertPolicyVersion(ctx context.Context, v store.PolicyVersion) error {
	prov, err := strmap.Encode(v.Provenance)
	if err != nil {
		return fmt.Errorf("insert version %d of %q: %w", v.Version, v.Sandbox, err)
	}
	// The document goes in and out as text so its bytes are kept exactly.
	var notified int
	err = c.db.QueryRow(ctx, `
		WITH v AS (
			INSERT INTO policy_versions (sandbox, version, hash, document, author, source, provenance, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (sandbox, version) DO NOTHING
			RETURNING version)
		SELECT count(pg_notify($9, $10)) FROM v`,
		v.Sandbox, v.Version, v.Hash, string(v.Document), v.Author, v.Source, prov, v.CreatedAt,
		policyChannel, policyPayload(v.Sandbox, v.Version)).Scan(&notified)
	if err == nil && notified == 0 {
		err = fmt.Errorf("%w: version %d", store.ErrAlreadyExists, v.Version)
	}
	if err != nil {
		return fmt.Errorf("insert version %d of %q: %w", v.Version, v.Sandbox, mapErr(err))
	}
	c.announce(v)
	return nil
}

// ---- tokens ----

const tokenColumns = `id, name, role, sandbox, hash, created_by, created_at, last_used_at, revoked_at, sandboxes, expires_at`

func scanToken(r pgx.Row) (store.Token, error) {
	var t store.Token
	var sandbox *string
	var globs string
	err := r.Scan(&t.ID, &t.Name, &t.Role, &sandbox, &t.Hash, &t.CreatedBy, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt, &globs, &t.ExpiresAt)
	if sandbox != nil {
		t.Sandbox = *sandbox
	}
	t.Sandboxes = store.SplitSandboxGlobs(globs)
	t.CreatedAt = t.CreatedAt.UTC()
	t.LastUsedAt = utcPtr(t.LastUsedAt)
	t.RevokedAt = utcPtr(t.RevokedAt)
	t.ExpiresAt = utcPtr(t.ExpiresAt)
	return t, err
}

// InsertToken stores t and returns it with its ID: ErrNotFound when a
// sandbox token's sandbox does not exist, ErrAlreadyExists for a taken
// name. tokens.sandbox has no foreign key (tokens outlive their sandbox),
// so the insert takes the key-share lock a foreign key would: a
// concurrent delete of the sandbox waits for it, and a revocation after
// the delete revokes the new token too (else a live token would be left
// to open a later sandbox of the same name); or the delete wins and the
// insert finds no sandbox.
func (c *conn) InsertToken(ctx context.Context, t store.Token) (store.Token, error) {
	var sandbox *string
	if t.Sandbox != "" {
		sandbox = &t.Sandbox
	}
	out, err := scanToken(c.db.QueryRow(ctx, `
		INSERT INTO tokens (name, role, sandbox, hash, created_by, created_at, sandboxes, expires_at)
		SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::timestamptz, $7::text, $8::timestamptz
		WHERE $3::text IS NULL OR EXISTS (SELECT 1 FROM sandboxes WHERE name = $3 FOR KEY SHARE)
		ON CONFLICT (name) DO NOTHING
		RETURNING `+tokenColumns,
		t.Name, t.Role, sandbox, t.Hash, t.CreatedBy, t.CreatedAt, strings.Join(t.Sandboxes, ","), t.ExpiresAt))
	if errors.Is(err, pgx.ErrNoRows) { // a missing sandbox (said first) or a taken name
		err = fmt.Errorf("%w: token %s", store.ErrAlreadyExists, t.Name)
		if sandbox != nil {
			if _, serr := c.GetSandbox(ctx, t.Sandbox); serr != nil {
				err = serr
			}
		}
	}
	return wrapRow(out, err, "insert token %q", t.Name)
}

// TokenByHash returns the token with that hash, revoked or not.
func (c *conn) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	t, err := scanToken(c.db.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1`, hash))
	return wrapRow(t, err, "token by hash")
}

// ListTokens returns every token ordered by name, without hashes.
func (c *conn) ListTokens(ctx context.Context) ([]store.Token, error) {
	rows, err := c.db.Query(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY name`)
	out, err := collect(rows, err, func(r pgx.Row) (store.Token, error) {
		t, err := scanToken(r)
		t.Hash = ""
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// CountTokens returns how many live tokens have the role.
func (c *conn) CountTokens(ctx context.Context, role string) (int, error) {
	var n int
	err := c.db.QueryRow(ctx, `SELECT count(*) FROM tokens WHERE role = $1 AND revoked_at IS NULL`, role).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count tokens: %w", mapErr(err))
	}
	return n, nil
}

// RevokeToken marks the live token name revoked at at and returns it.
func (c *conn) RevokeToken(ctx context.Context, name string, at time.Time) (store.Token, error) {
	t, err := scanToken(c.db.QueryRow(ctx, `
		UPDATE tokens SET revoked_at = $2
		WHERE name = $1 AND revoked_at IS NULL
		RETURNING `+tokenColumns, name, at))
	return wrapRow(t, err, "revoke token %q", name)
}

// RevokeSandboxTokens marks every live token of sandbox revoked at at.
func (c *conn) RevokeSandboxTokens(ctx context.Context, sandbox string, at time.Time) (int, error) {
	tag, err := c.db.Exec(ctx, `
		UPDATE tokens SET revoked_at = $2
		WHERE sandbox = $1 AND revoked_at IS NULL`, sandbox, at)
	if err != nil {
		return 0, fmt.Errorf("revoke tokens of sandbox %q: %w", sandbox, mapErr(err))
	}
	return int(tag.RowsAffected()), nil
}

// TouchToken records a use at time at. It never moves last use backwards.
func (c *conn) TouchToken(ctx context.Context, id int64, at time.Time) error {
	tag, err := c.db.Exec(ctx, `
		UPDATE tokens SET last_used_at = GREATEST(last_used_at, $2)
		WHERE id = $1`, id, at)
	if err == nil && tag.RowsAffected() == 0 {
		err = store.ErrNotFound
	}
	return wrapf(err, "touch token %d", id)
}
