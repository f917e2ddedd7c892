// Package postgres is the PostgreSQL engine of store.Store, for production
// and for several gateway replicas sharing one database. It uses pgx
// directly (pgxpool) and applies the schema in migrations/postgres on Open.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
)

// Config tunes the Postgres store. The zero value is ready to use.
type Config struct {
	// Logger receives lifecycle messages. Default: discard.
	Logger *slog.Logger
	// MaxConns caps the pool. Default (0): pgxpool's default, the greater of
	// 4 and runtime.NumCPU(), unless the URL sets pool_max_conns.
	MaxConns int32
	// MinConns keeps this many connections open. Default (0): none, unless
	// the URL sets pool_min_conns.
	MinConns int32
}

// Store is a store.Store on PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	// Close stops running ListenPolicyCommits calls and waits for them.
	mu        sync.Mutex
	closed    bool
	done      chan struct{} // closed by Close
	listeners sync.WaitGroup
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.CommitListener = (*Store)(nil)
)

// Open connects to the database at url (postgres://…), applies pending
// migrations and returns the store. Close releases the pool.
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "store.postgres")

	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL, password included.
		return nil, errors.New("postgres: invalid database URL")
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	if cfg.MinConns > 0 {
		pcfg.MinConns = cfg.MinConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}

	db := stdlib.OpenDBFromPool(pool)
	err = migrations.Up(ctx, db, migrations.Postgres)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if n, err := chainUnchained(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	} else if n > 0 {
		log.Info("chained audit entries written before the hash chain", "entries", n)
	}
	log.Info("store open", "host", pcfg.ConnConfig.Host, "database", pcfg.ConnConfig.Database, "max_conns", pcfg.MaxConns)
	return &Store{pool: pool, log: log, done: make(chan struct{})}, nil
}

// Close releases every connection, the listeners' too. Pending calls fail.
func (s *Store) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	s.listeners.Wait()
	s.pool.Close()
	return nil
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// uniqueAlreadyExists names the unique constraints that mean "a sandbox or
// token with that name exists". Any other unique violation is a lost race.
var uniqueAlreadyExists = map[string]bool{
	"sandboxes_pkey":  true,
	"tokens_name_key": true,
}

// mapErr turns a database error into the store's sentinels, by SQLSTATE.
// It is the only place that inspects PostgreSQL error codes. The original
// error stays wrapped for logs.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "23505": // unique_violation
		if uniqueAlreadyExists[pgErr.ConstraintName] {
			return fmt.Errorf("%w: %w", store.ErrAlreadyExists, err)
		}
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	case "23503": // foreign_key_violation: the referenced sandbox is gone
		return fmt.Errorf("%w: %w", store.ErrNotFound, err)
	}
	return err
}

// inTx runs fn in a read-committed transaction and commits it. Every write
// method goes through here. The audit entries fn records (audit) are
// appended to the chain last, just before the commit.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return mapErr(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	t := &txn{Tx: tx}
	if err := fn(t); err != nil {
		return err
	}
	if err := appendAudit(ctx, tx, t.audit); err != nil {
		return err
	}
	return mapErr(tx.Commit(ctx))
}

// CreateSandbox creates the sandbox, its first token and, optionally, its
// first policy version in one transaction.
func (s *Store) CreateSandbox(ctx context.Context, in store.CreateSandbox) (store.Sandbox, error) {
	if err := in.Prepare(); err != nil {
		return store.Sandbox{}, err
	}
	var sb store.Sandbox
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var version int64
		var hash string
		if in.Policy != nil {
			version, hash = 1, in.Policy.Hash
		}
		var err error
		sb, err = scanSandbox(tx.QueryRow(ctx, `
			INSERT INTO sandboxes (name, current_version, current_hash, created_by)
			VALUES ($1, $2, $3, $4)
			RETURNING `+sandboxColumns,
			in.Name, version, hash, in.Actor))
		if err != nil {
			return mapErr(err)
		}
		if err := audit(ctx, tx, store.AuditEntry{
			Actor: in.Actor, Action: store.ActionSandboxCreate, Sandbox: in.Name, Target: in.Name, AfterHash: hash,
		}); err != nil {
			return err
		}
		if _, err := insertToken(ctx, tx, in.Token, in.Actor); err != nil {
			return err
		}
		if in.Policy != nil {
			p := in.Policy
			if _, err := insertVersion(ctx, tx, in.Name, 1, "", store.AppendPolicy{
				Hash: p.Hash, Document: p.Document, Author: p.Author, Source: p.Source, Provenance: p.Provenance,
			}, in.Actor); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("create sandbox %q: %w", in.Name, err)
	}
	return sb, nil
}

const sandboxColumns = `name, current_version, current_hash, created_at, created_by,
	boundary, boundary_hash, credentialed_hosts,
	frozen, frozen_reason, frozen_by, frozen_at, frozen_from`

func scanSandbox(r pgx.Row) (store.Sandbox, error) {
	var sb store.Sandbox
	err := r.Scan(&sb.Name, &sb.CurrentVersion, &sb.CurrentHash, &sb.CreatedAt, &sb.CreatedBy,
		&sb.Boundary, &sb.BoundaryHash, &sb.CredentialedHosts,
		&sb.Frozen, &sb.FrozenReason, &sb.FrozenBy, &sb.FrozenAt, &sb.FrozenFrom)
	sb.CreatedAt = sb.CreatedAt.UTC()
	sb.FrozenAt = utcPtr(sb.FrozenAt)
	if len(sb.Boundary) == 0 {
		sb.Boundary = nil
	}
	if len(sb.CredentialedHosts) == 0 {
		sb.CredentialedHosts = nil
	}
	return sb, err
}

// GetSandbox returns the sandbox or ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, name string) (store.Sandbox, error) {
	sb, err := scanSandbox(s.pool.QueryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE name = $1`, name))
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox %q: %w", name, mapErr(err))
	}
	return sb, nil
}

// ListSandboxes returns every sandbox ordered by name.
func (s *Store) ListSandboxes(ctx context.Context) ([]store.Sandbox, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+sandboxColumns+` FROM sandboxes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", mapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Sandbox, error) { return scanSandbox(r) })
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", mapErr(err))
	}
	return out, nil
}

// DeleteSandbox deletes the sandbox with its versions and revokes its tokens.
func (s *Store) DeleteSandbox(ctx context.Context, name, actor string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var hash string
		err := tx.QueryRow(ctx, `DELETE FROM sandboxes WHERE name = $1 RETURNING current_hash`, name).Scan(&hash)
		if err != nil {
			return mapErr(err)
		}
		tag, err := tx.Exec(ctx, `
			UPDATE tokens SET revoked_at = now()
			WHERE sandbox = $1 AND revoked_at IS NULL`, name)
		if err != nil {
			return mapErr(err)
		}
		return audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionSandboxDelete, Sandbox: name, Target: name, BeforeHash: hash,
			Detail: map[string]string{"tokens_revoked": fmt.Sprint(tag.RowsAffected())},
		})
	})
	if err != nil {
		return fmt.Errorf("delete sandbox %q: %w", name, err)
	}
	return nil
}

// RotateSandboxToken revokes the sandbox's live tokens and stores tok.
func (s *Store) RotateSandboxToken(ctx context.Context, sandbox, actor string, tok store.Token) (store.Token, error) {
	tok.Role, tok.Sandbox = store.RoleSandbox, sandbox
	if err := tok.Check(); err != nil {
		return store.Token{}, err
	}
	var out store.Token
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Lock the sandbox row so a concurrent delete or rotation waits.
		var name string
		if err := tx.QueryRow(ctx, `SELECT name FROM sandboxes WHERE name = $1 FOR UPDATE`, sandbox).Scan(&name); err != nil {
			return mapErr(err)
		}
		tag, err := tx.Exec(ctx, `
			UPDATE tokens SET revoked_at = now()
			WHERE sandbox = $1 AND revoked_at IS NULL`, sandbox)
		if err != nil {
			return mapErr(err)
		}
		out, err = insertTokenRow(ctx, tx, tok)
		if err != nil {
			return err
		}
		return audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionSandboxToken, Sandbox: sandbox, Target: tok.Name,
			Detail: map[string]string{"tokens_revoked": fmt.Sprint(tag.RowsAffected())},
		})
	})
	if err != nil {
		return store.Token{}, fmt.Errorf("rotate token of sandbox %q: %w", sandbox, err)
	}
	return out, nil
}

// AppendPolicyVersion stores version in.ExpectedVersion+1 if the sandbox's
// current version is still in.ExpectedVersion (compare-and-swap on the
// sandbox row), else ErrConflict and nothing is stored.
func (s *Store) AppendPolicyVersion(ctx context.Context, in store.AppendPolicy) (store.PolicyVersion, error) {
	if err := in.Prepare(); err != nil {
		return store.PolicyVersion{}, err
	}
	var pv store.PolicyVersion
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		pv, err = appendVersion(ctx, tx, in)
		return err
	})
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("append policy version of %q: %w", in.Sandbox, err)
	}
	return pv, nil
}

// appendVersion is AppendPolicyVersion inside tx (in already prepared):
// every policy version after a sandbox's first is committed through it,
// with its audit entry and notification.
func appendVersion(ctx context.Context, tx pgx.Tx, in store.AppendPolicy) (store.PolicyVersion, error) {
	next := in.ExpectedVersion + 1
	// Under READ COMMITTED a concurrent writer blocks on the row lock,
	// then re-evaluates the WHERE clause against the committed row: of
	// writers expecting the same version exactly one matches.
	tag, err := tx.Exec(ctx, `
		UPDATE sandboxes SET current_version = $3, current_hash = $4
		WHERE name = $1 AND current_version = $2`,
		in.Sandbox, in.ExpectedVersion, next, in.Hash)
	if err != nil {
		return store.PolicyVersion{}, mapErr(err)
	}
	if tag.RowsAffected() == 0 {
		var current int64
		err := tx.QueryRow(ctx, `SELECT current_version FROM sandboxes WHERE name = $1`, in.Sandbox).Scan(&current)
		if err != nil {
			return store.PolicyVersion{}, mapErr(err)
		}
		return store.PolicyVersion{}, fmt.Errorf("%w: expected version %d, current is %d", store.ErrConflict, in.ExpectedVersion, current)
	}
	var before string
	if in.ExpectedVersion > 0 {
		err := tx.QueryRow(ctx, `SELECT hash FROM policy_versions WHERE sandbox = $1 AND version = $2`,
			in.Sandbox, in.ExpectedVersion).Scan(&before)
		if err != nil {
			return store.PolicyVersion{}, fmt.Errorf("previous version: %w", mapErr(err))
		}
	}
	return insertVersion(ctx, tx, in.Sandbox, next, before, in, in.Author)
}

// insertVersion stores one policy version and its audit entry, and notifies
// the listening replicas (see ListenPolicyCommits).
func insertVersion(ctx context.Context, tx pgx.Tx, sandbox string, version int64, before string, in store.AppendPolicy, actor string) (store.PolicyVersion, error) {
	prov, err := strmap.Encode(in.Provenance)
	if err != nil {
		return store.PolicyVersion{}, err
	}
	source := in.Source
	if source == "" {
		source = store.SourceSet
	}
	pv := store.PolicyVersion{
		Sandbox: sandbox, Version: version, Hash: in.Hash, Document: in.Document,
		Author: in.Author, Source: source, Provenance: strmap.Clone(in.Provenance),
	}
	// The document goes in and out as text so its bytes are kept exactly.
	err = tx.QueryRow(ctx, `
		INSERT INTO policy_versions (sandbox, version, hash, document, author, source, provenance)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		RETURNING created_at`,
		sandbox, version, in.Hash, string(in.Document), in.Author, source, prov,
	).Scan(&pv.CreatedAt)
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("insert version %d: %w", version, mapErr(err))
	}
	pv.CreatedAt = pv.CreatedAt.UTC()
	// Delivered to every listening replica when (and only if) this
	// transaction commits.
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, policyChannel, policyPayload(sandbox, version)); err != nil {
		return store.PolicyVersion{}, fmt.Errorf("notify version %d: %w", version, mapErr(err))
	}
	err = audit(ctx, tx, store.AuditEntry{
		Actor: actor, Action: store.ActionPolicySet, Sandbox: sandbox, Target: sandbox,
		BeforeHash: before, AfterHash: in.Hash,
		Detail: map[string]string{"version": fmt.Sprint(version), "source": source},
	})
	return pv, err
}

const versionColumns = `sandbox, version, hash, author, source, provenance, created_at`

// GetPolicyVersion returns one version (0: the current one) or ErrNotFound.
func (s *Store) GetPolicyVersion(ctx context.Context, sandbox string, version int64) (store.PolicyVersion, error) {
	if version < 0 {
		return store.PolicyVersion{}, fmt.Errorf("get policy %q version %d: %w", sandbox, version, store.ErrNotFound)
	}
	var pv store.PolicyVersion
	var doc string
	var prov []byte
	err := s.pool.QueryRow(ctx, `
		SELECT pv.sandbox, pv.version, pv.hash, pv.author, pv.source, pv.provenance, pv.created_at, pv.document
		FROM policy_versions pv JOIN sandboxes s ON s.name = pv.sandbox
		WHERE pv.sandbox = $1
		  AND pv.version = CASE WHEN $2::bigint = 0 THEN s.current_version ELSE $2::bigint END`,
		sandbox, version,
	).Scan(&pv.Sandbox, &pv.Version, &pv.Hash, &pv.Author, &pv.Source, &prov, &pv.CreatedAt, &doc)
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("get policy %q version %d: %w", sandbox, version, mapErr(err))
	}
	pv.Document = []byte(doc)
	pv.CreatedAt = pv.CreatedAt.UTC()
	if pv.Provenance, err = strmap.Decode(prov); err != nil {
		return store.PolicyVersion{}, fmt.Errorf("get policy %q version %d: %w", sandbox, version, err)
	}
	return pv, nil
}

// ListPolicyVersions returns the sandbox's versions, oldest first, without
// documents; ErrNotFound if the sandbox does not exist.
func (s *Store) ListPolicyVersions(ctx context.Context, sandbox string) ([]store.PolicyVersion, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+versionColumns+`
		FROM policy_versions WHERE sandbox = $1 ORDER BY version`, sandbox)
	if err != nil {
		return nil, fmt.Errorf("list policy versions of %q: %w", sandbox, mapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.PolicyVersion, error) {
		var pv store.PolicyVersion
		var prov []byte
		if err := r.Scan(&pv.Sandbox, &pv.Version, &pv.Hash, &pv.Author, &pv.Source, &prov, &pv.CreatedAt); err != nil {
			return pv, err
		}
		pv.CreatedAt = pv.CreatedAt.UTC()
		var err error
		pv.Provenance, err = strmap.Decode(prov)
		return pv, err
	})
	if err != nil {
		return nil, fmt.Errorf("list policy versions of %q: %w", sandbox, mapErr(err))
	}
	if len(out) == 0 {
		if _, err := s.GetSandbox(ctx, sandbox); err != nil {
			return nil, err
		}
	}
	return out, nil
}

const tokenColumns = `id, name, role, sandbox, hash, created_by, created_at, last_used_at, revoked_at`

func scanToken(r pgx.Row) (store.Token, error) {
	var t store.Token
	var sandbox *string
	err := r.Scan(&t.ID, &t.Name, &t.Role, &sandbox, &t.Hash, &t.CreatedBy, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt)
	if sandbox != nil {
		t.Sandbox = *sandbox
	}
	t.CreatedAt = t.CreatedAt.UTC()
	t.LastUsedAt = utcPtr(t.LastUsedAt)
	t.RevokedAt = utcPtr(t.RevokedAt)
	return t, err
}

// insertToken checks a sandbox token's sandbox exists, stores the token and
// audits it.
//
// tokens.sandbox has no foreign key (tokens outlive their sandbox), so the
// check takes the key-share lock a foreign key would: a concurrent
// DeleteSandbox then waits for this transaction and revokes the new token
// too, or wins and this check finds no sandbox. A plain SELECT would let
// the token commit live after the delete revoked the others, ready to open
// a later sandbox of the same name.
func insertToken(ctx context.Context, tx pgx.Tx, tok store.Token, actor string) (store.Token, error) {
	if tok.Role == store.RoleSandbox {
		var name string
		if err := tx.QueryRow(ctx, `SELECT name FROM sandboxes WHERE name = $1 FOR KEY SHARE`, tok.Sandbox).Scan(&name); err != nil {
			return store.Token{}, fmt.Errorf("sandbox %q: %w", tok.Sandbox, mapErr(err))
		}
	}
	out, err := insertTokenRow(ctx, tx, tok)
	if err != nil {
		return store.Token{}, err
	}
	err = audit(ctx, tx, store.AuditEntry{
		Actor: actor, Action: store.ActionTokenCreate, Sandbox: tok.Sandbox, Target: tok.Name,
		Detail: map[string]string{"role": tok.Role},
	})
	return out, err
}

func insertTokenRow(ctx context.Context, tx pgx.Tx, tok store.Token) (store.Token, error) {
	var sandbox *string
	if tok.Sandbox != "" {
		sandbox = &tok.Sandbox
	}
	out, err := scanToken(tx.QueryRow(ctx, `
		INSERT INTO tokens (name, role, sandbox, hash, created_by)
		VALUES ($1, $2, $3, $4, $5)
		RETURNING `+tokenColumns,
		tok.Name, tok.Role, sandbox, tok.Hash, tok.CreatedBy))
	if err != nil {
		return store.Token{}, fmt.Errorf("insert token %q: %w", tok.Name, mapErr(err))
	}
	return out, nil
}

// CreateToken stores tok; ErrAlreadyExists if its name was ever used,
// ErrNotFound if it is a sandbox token for a missing sandbox.
func (s *Store) CreateToken(ctx context.Context, tok store.Token, actor string) (store.Token, error) {
	if err := tok.Check(); err != nil {
		return store.Token{}, err
	}
	var out store.Token
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = insertToken(ctx, tx, tok, actor)
		return err
	})
	if err != nil {
		return store.Token{}, fmt.Errorf("create token %q: %w", tok.Name, err)
	}
	return out, nil
}

// TokenByHash returns the token with that hash, revoked or not.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	t, err := scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1`, hash))
	if err != nil {
		return store.Token{}, fmt.Errorf("token by hash: %w", mapErr(err))
	}
	return t, nil
}

// ListTokens returns every token ordered by name, without hashes.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", mapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Token, error) {
		t, err := scanToken(r)
		t.Hash = ""
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", mapErr(err))
	}
	return out, nil
}

// RevokeToken revokes the live token with that name, else ErrNotFound.
func (s *Store) RevokeToken(ctx context.Context, name, actor string) error {
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// Lock every live admin token first: concurrent revocations then
		// queue here, and each sees the others' result when it counts.
		var admins int
		if err := tx.QueryRow(ctx, `
			SELECT count(*) FROM (
				SELECT id FROM tokens WHERE role = 'admin' AND revoked_at IS NULL FOR UPDATE
			) AS live`).Scan(&admins); err != nil {
			return mapErr(err)
		}
		var (
			sandbox *string
			role    string
		)
		err := tx.QueryRow(ctx, `
			UPDATE tokens SET revoked_at = now()
			WHERE name = $1 AND revoked_at IS NULL
			RETURNING sandbox, role`, name).Scan(&sandbox, &role)
		if err != nil {
			return mapErr(err)
		}
		if role == store.RoleAdmin && admins <= 1 {
			return store.ErrLastAdmin // rolls the revocation back
		}
		e := store.AuditEntry{Actor: actor, Action: store.ActionTokenRevoke, Target: name}
		if sandbox != nil {
			e.Sandbox = *sandbox
		}
		return audit(ctx, tx, e)
	})
	if err != nil {
		return fmt.Errorf("revoke token %q: %w", name, err)
	}
	return nil
}

// TouchToken records a use at time at. It never moves last use backwards.
func (s *Store) TouchToken(ctx context.Context, id int64, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE tokens SET last_used_at = GREATEST(last_used_at, $2)
		WHERE id = $1`, id, at)
	if err != nil {
		return fmt.Errorf("touch token %d: %w", id, mapErr(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("touch token %d: %w", id, store.ErrNotFound)
	}
	return nil
}

// CountTokens returns how many live tokens have the role.
func (s *Store) CountTokens(ctx context.Context, role string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tokens WHERE role = $1 AND revoked_at IS NULL`, role).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count tokens: %w", mapErr(err))
	}
	return n, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
