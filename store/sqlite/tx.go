package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlread"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
)

// The primitives of sandboxes, policy versions and tokens.

// sandboxColumns are sqlread's and the providers attached, sorted, as
// a JSON array.
const sandboxColumns = sqlread.SandboxColumns + `, (SELECT json_group_array(provider) FROM
	(SELECT provider FROM sandbox_providers WHERE sandbox = sandboxes.name ORDER BY provider))`

func scanSandbox(r scanner) (store.Sandbox, error) {
	var sb store.Sandbox
	var at int64
	var hosts, providers string
	var frozenAt sql.NullInt64
	err := r.Scan(&sb.Name, &sb.CurrentVersion, &sb.CurrentHash, &at, &sb.CreatedBy,
		&sb.Boundary, &sb.BoundaryHash, &hosts,
		&sb.Frozen, &sb.FrozenReason, &sb.FrozenBy, &frozenAt, &sb.FrozenFrom, &sb.CredentialsGeneration, &providers)
	if err != nil {
		return sb, err
	}
	if sb.Providers, err = decodeList(providers); err != nil {
		return sb, err
	}
	sb.CreatedAt = fromNanos(at)
	sb.FrozenAt = fromNullNanos(frozenAt)
	if len(sb.Boundary) == 0 {
		sb.Boundary = nil
	}
	sb.CredentialedHosts, err = decodeList(hosts)
	return sb, err
}

// InsertSandbox stores a new sandbox row.
func (t *txn) InsertSandbox(ctx context.Context, sb store.Sandbox) error {
	return t.exec(ctx, fmt.Sprintf("insert sandbox %q", sb.Name), `
		INSERT INTO sandboxes (name, current_version, current_hash, created_at, created_by)
		VALUES (?, ?, ?, ?, ?)`,
		sb.Name, sb.CurrentVersion, sb.CurrentHash, nanos(sb.CreatedAt), sb.CreatedBy)
}

// GetSandbox returns the sandbox or ErrNotFound.
func (t *txn) GetSandbox(ctx context.Context, name string) (store.Sandbox, error) {
	return t.sandbox(ctx, t.rd, name)
}

// LockSandbox is GetSandbox on the writer: the transaction already holds
// the database (BEGIN IMMEDIATE), so no row lock is needed.
func (t *txn) LockSandbox(ctx context.Context, name string) (store.Sandbox, error) {
	return t.sandbox(ctx, t.wr, name)
}

func (t *txn) sandbox(ctx context.Context, q querier, name string) (store.Sandbox, error) {
	sb, err := scanSandbox(q.QueryRowContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE name = ?`, name))
	return wrapRow(sb, err, "get sandbox %q", name)
}

// ListSandboxes returns every sandbox ordered by name.
func (t *txn) ListSandboxes(ctx context.Context) ([]store.Sandbox, error) {
	out, err := collect(ctx, t.rd, scanSandbox, `SELECT `+sandboxColumns+` FROM sandboxes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// UpdateSandbox writes sb's mutable columns.
func (t *txn) UpdateSandbox(ctx context.Context, sb store.Sandbox) error {
	hosts, err := encodeList(sb.CredentialedHosts)
	if err != nil {
		return err
	}
	var boundary any // NULL: none
	if len(sb.Boundary) > 0 {
		boundary = sb.Boundary
	}
	return t.update(ctx, fmt.Sprintf("update sandbox %q", sb.Name), `
		UPDATE sandboxes SET current_version = ?, current_hash = ?, boundary = ?, boundary_hash = ?,
			credentialed_hosts = ?, frozen = ?, frozen_reason = ?, frozen_by = ?, frozen_at = ?, frozen_from = ?
		WHERE name = ?`,
		sb.CurrentVersion, sb.CurrentHash, boundary, sb.BoundaryHash,
		hosts, sb.Frozen, sb.FrozenReason, sb.FrozenBy, nullNanosPtr(sb.FrozenAt), sb.FrozenFrom, sb.Name)
}

// DeleteSandbox deletes the sandbox row (the schema cascades) and returns
// it as it was.
func (t *txn) DeleteSandbox(ctx context.Context, name string) (store.Sandbox, error) {
	sb, err := scanSandbox(t.wr.QueryRowContext(ctx, `DELETE FROM sandboxes WHERE name = ? RETURNING `+sandboxColumns, name))
	return wrapRow(sb, err, "delete sandbox %q", name)
}

// InsertPolicyVersion stores v; it is announced once its transaction
// commits (at once outside a transaction).
func (t *txn) InsertPolicyVersion(ctx context.Context, v store.PolicyVersion) error {
	prov, err := strmap.Encode(v.Provenance)
	if err != nil {
		return err
	}
	// The document is bound as TEXT and read back as the same bytes.
	err = t.exec(ctx, fmt.Sprintf("insert version %d of %q", v.Version, v.Sandbox), `
		INSERT INTO policy_versions (sandbox, version, hash, document, author, source, provenance, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		v.Sandbox, v.Version, v.Hash, string(v.Document), v.Author, v.Source, string(prov), nanos(v.CreatedAt))
	if err != nil {
		return err
	}
	if t.tx == nil {
		t.d.feed.Publish(v)
	} else {
		t.versions = append(t.versions, v)
	}
	return nil
}

const tokenColumns = `id, name, role, sandbox, hash, created_by, created_at, last_used_at, revoked_at, sandboxes, expires_at`

func scanToken(r scanner) (store.Token, error) {
	var tok store.Token
	var sandbox sql.NullString
	var at int64
	var used, revoked, expires sql.NullInt64
	var globs string
	if err := r.Scan(&tok.ID, &tok.Name, &tok.Role, &sandbox, &tok.Hash, &tok.CreatedBy, &at, &used, &revoked, &globs, &expires); err != nil {
		return tok, err
	}
	tok.Sandbox = sandbox.String
	tok.Sandboxes = store.SplitSandboxGlobs(globs)
	tok.CreatedAt = fromNanos(at)
	tok.LastUsedAt = fromNullNanos(used)
	tok.RevokedAt = fromNullNanos(revoked)
	tok.ExpiresAt = fromNullNanos(expires)
	return tok, nil
}

// InsertToken stores tok. Tokens outlive their sandbox (no foreign key),
// so a sandbox token's sandbox is looked up first.
func (t *txn) InsertToken(ctx context.Context, tok store.Token) (store.Token, error) {
	if tok.Sandbox != "" {
		if _, err := t.LockSandbox(ctx, tok.Sandbox); err != nil {
			return store.Token{}, err
		}
	}
	sandbox := sql.NullString{String: tok.Sandbox, Valid: tok.Sandbox != ""}
	out, err := scanToken(t.wr.QueryRowContext(ctx, `
		INSERT INTO tokens (name, role, sandbox, hash, created_by, created_at, sandboxes, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		RETURNING `+tokenColumns,
		tok.Name, tok.Role, sandbox, tok.Hash, tok.CreatedBy, nanos(tok.CreatedAt), strings.Join(tok.Sandboxes, ","), nullNanosPtr(tok.ExpiresAt)))
	return wrapRow(out, err, "insert token %q", tok.Name)
}

// TokenByHash returns the token with that hash, revoked or not.
func (t *txn) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	tok, err := scanToken(t.rd.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = ?`, hash))
	return wrapRow(tok, err, "token by hash")
}

// ListTokens returns every token ordered by name, without hashes.
func (t *txn) ListTokens(ctx context.Context) ([]store.Token, error) {
	scan := func(r scanner) (store.Token, error) {
		tok, err := scanToken(r)
		tok.Hash = ""
		return tok, err
	}
	out, err := collect(ctx, t.rd, scan, `SELECT `+tokenColumns+` FROM tokens ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// CountTokens returns how many live tokens have the role.
func (t *txn) CountTokens(ctx context.Context, role string) (int, error) {
	var n int
	err := t.rd.QueryRowContext(ctx, `SELECT count(*) FROM tokens WHERE role = ? AND revoked_at IS NULL`, role).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count tokens: %w", mapErr(err))
	}
	return n, nil
}

// RevokeToken marks the live token name revoked at at and returns it.
func (t *txn) RevokeToken(ctx context.Context, name string, at time.Time) (store.Token, error) {
	tok, err := scanToken(t.wr.QueryRowContext(ctx, `
		UPDATE tokens SET revoked_at = ?
		WHERE name = ? AND revoked_at IS NULL
		RETURNING `+tokenColumns, nanos(at), name))
	return wrapRow(tok, err, "revoke token %q", name)
}

// RevokeSandboxTokens marks every live token of sandbox revoked at at.
func (t *txn) RevokeSandboxTokens(ctx context.Context, sandbox string, at time.Time) (int, error) {
	res, err := t.wr.ExecContext(ctx, `
		UPDATE tokens SET revoked_at = ?
		WHERE sandbox = ? AND revoked_at IS NULL`, nanos(at), sandbox)
	if err != nil {
		return 0, fmt.Errorf("revoke tokens of sandbox %q: %w", sandbox, mapErr(err))
	}
	n, err := res.RowsAffected()
	return int(n), mapErr(err)
}

// TouchToken records a use at time at. It never moves last use backwards.
func (t *txn) TouchToken(ctx context.Context, id int64, at time.Time) error {
	return t.update(ctx, fmt.Sprintf("touch token %d", id), `
		UPDATE tokens SET last_used_at = max(coalesce(last_used_at, ?1), ?1)
		WHERE id = ?2`, nanos(at), id)
}
