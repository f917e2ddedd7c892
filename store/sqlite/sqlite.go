// Package sqlite is the embedded engine of store.Store: one file, pure Go
// (modernc.org/sqlite), no server to run — the gateway's zero-setup default.
// It applies the schema in migrations/sqlite on Open.
//
// Writes go through a single connection whose transactions begin IMMEDIATE,
// so concurrent writers in this process queue for it instead of failing
// with SQLITE_BUSY; reads use a separate pool of read-only connections,
// which WAL mode lets run alongside the writer.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
)

// Config tunes the SQLite store. The zero value is ready to use.
type Config struct {
	// Logger receives lifecycle messages. Default: discard.
	Logger *slog.Logger
	// MaxReadConns caps the read-only pool. Default (0): the greater of 4
	// and runtime.NumCPU(). Writes always use one connection.
	MaxReadConns int
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection to the file (another process, a checkpoint) before it
	// fails. Default (0): 5 s.
	BusyTimeout time.Duration
}

// Store is a store.Store on an SQLite file. It is safe for concurrent use
// within one process; two processes must not open the same file.
type Store struct {
	w   *sql.DB // one connection, BEGIN IMMEDIATE: every write
	r   *sql.DB // read-only pool: every read
	log *slog.Logger
}

var _ store.Store = (*Store)(nil)

// Open opens (creating it if needed) the database file at path, applies
// pending migrations and returns the store. A new file is created with mode
// 0600 and missing directories with 0700: the file holds token hashes and
// every policy.
func Open(ctx context.Context, path string, cfg Config) (*Store, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "store.sqlite")
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: create directory: %w", err)
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		_ = f.Close()
	case errors.Is(err, fs.ErrExist):
		if fi, err := os.Stat(abs); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("database file is readable by other users", "path", abs, "mode", fi.Mode().Perm().String())
		}
	default:
		return nil, fmt.Errorf("sqlite: create database file: %w", err)
	}

	// SQLite decodes %XX in a file: URI, so escape the path; WAL, the
	// -wal and -shm files inherit the main file's mode. Every pragma is
	// read back in a test: the driver cannot check _pragma values.
	name := "file:" + (&url.URL{Path: abs}).EscapedPath()
	busy := cfg.BusyTimeout
	if busy <= 0 {
		busy = 5 * time.Second
	}
	common := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)", busy.Milliseconds())
	// synchronous(FULL): a commit is on disk before it is acknowledged
	// (NORMAL, common with WAL, may lose the last commits on power loss).
	w, err := sql.Open("sqlite", name+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&"+common+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	if err := migrations.Up(ctx, w, migrations.SQLite); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if n, err := chainUnchained(ctx, w); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	} else if n > 0 {
		log.Info("chained audit entries written before the hash chain", "entries", n)
	}

	r, err := sql.Open("sqlite", name+"?"+common+"&_pragma=query_only(1)")
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	n := cfg.MaxReadConns
	if n <= 0 {
		n = max(4, runtime.NumCPU())
	}
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	log.Info("store open", "path", abs, "read_conns", n)
	return &Store{w: w, r: r, log: log}, nil
}

// Close closes both pools.
func (s *Store) Close() error {
	return errors.Join(s.r.Close(), s.w.Close())
}

// Ping checks the file can be read.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// alreadyExists lists the unique columns whose violation means "a sandbox
// or token with that name exists"; any other unique violation is a lost
// race. SQLite names the columns only in the message
// ("UNIQUE constraint failed: tokens.name"), not by constraint name.
var alreadyExists = map[string]bool{
	"sandboxes.name": true,
	"tokens.name":    true,
}

// mapErr turns a database error into the store's sentinels, by extended
// SQLite result code (the driver enables extended codes on every
// connection). It is the only place that inspects SQLite errors. The
// original error stays wrapped for logs.
//
// SQLITE_BUSY is not a conflict: it means another connection held the
// lock past the busy timeout, not that a concurrent writer changed what
// the caller expected, so it stays an engine error.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY: // the referenced sandbox is gone
		return fmt.Errorf("%w: %w", store.ErrNotFound, err)
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		if alreadyExists[uniqueColumns(se.Error())] {
			return fmt.Errorf("%w: %w", store.ErrAlreadyExists, err)
		}
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	return err
}

// uniqueColumns returns "table.column[, table.column…]" from SQLite's
// unique-violation message, or "".
func uniqueColumns(msg string) string {
	const prefix = "UNIQUE constraint failed: "
	i := strings.Index(msg, prefix)
	if i < 0 {
		return ""
	}
	cols := msg[i+len(prefix):]
	if j := strings.Index(cols, " ("); j >= 0 { // the driver appends " (code)"
		cols = cols[:j]
	}
	return cols
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE on the single writer
// connection) and commits it.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(tx); err != nil {
		return err
	}
	return mapErr(tx.Commit())
}

// now is the time written to rows: UTC, nanoseconds since the epoch.
func now() int64 { return time.Now().UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromNanos(n.Int64)
	return &t
}

// CreateSandbox creates the sandbox, its first token and, optionally, its
// first policy version in one transaction.
func (s *Store) CreateSandbox(ctx context.Context, in store.CreateSandbox) (store.Sandbox, error) {
	if err := in.Prepare(); err != nil {
		return store.Sandbox{}, err
	}
	at := now()
	sb := store.Sandbox{Name: in.Name, CreatedAt: fromNanos(at), CreatedBy: in.Actor}
	if in.Policy != nil {
		sb.CurrentVersion, sb.CurrentHash = 1, in.Policy.Hash
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO sandboxes (name, current_version, current_hash, created_at, created_by)
			VALUES (?, ?, ?, ?, ?)`,
			sb.Name, sb.CurrentVersion, sb.CurrentHash, at, sb.CreatedBy)
		if err != nil {
			return mapErr(err)
		}
		if err := audit(ctx, tx, at, store.AuditEntry{
			Actor: in.Actor, Action: store.ActionSandboxCreate, Sandbox: in.Name, Target: in.Name, AfterHash: sb.CurrentHash,
		}); err != nil {
			return err
		}
		if _, err := insertToken(ctx, tx, at, in.Token, in.Actor); err != nil {
			return err
		}
		if p := in.Policy; p != nil {
			if _, err := insertVersion(ctx, tx, at, in.Name, 1, "", store.AppendPolicy{
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

func scanSandbox(r interface{ Scan(...any) error }) (store.Sandbox, error) {
	var sb store.Sandbox
	var at int64
	var hosts string
	var frozenAt sql.NullInt64
	err := r.Scan(&sb.Name, &sb.CurrentVersion, &sb.CurrentHash, &at, &sb.CreatedBy,
		&sb.Boundary, &sb.BoundaryHash, &hosts,
		&sb.Frozen, &sb.FrozenReason, &sb.FrozenBy, &frozenAt, &sb.FrozenFrom)
	if err != nil {
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

// GetSandbox returns the sandbox or ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, name string) (store.Sandbox, error) {
	sb, err := scanSandbox(s.r.QueryRowContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE name = ?`, name))
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox %q: %w", name, mapErr(err))
	}
	return sb, nil
}

// ListSandboxes returns every sandbox ordered by name.
func (s *Store) ListSandboxes(ctx context.Context) ([]store.Sandbox, error) {
	out, err := collect(ctx, s.r, scanSandbox, `SELECT `+sandboxColumns+` FROM sandboxes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// DeleteSandbox deletes the sandbox with its versions and revokes its tokens.
func (s *Store) DeleteSandbox(ctx context.Context, name, actor string) error {
	at := now()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var hash string
		err := tx.QueryRowContext(ctx, `DELETE FROM sandboxes WHERE name = ? RETURNING current_hash`, name).Scan(&hash)
		if err != nil {
			return mapErr(err)
		}
		res, err := tx.ExecContext(ctx, `
			UPDATE tokens SET revoked_at = ?
			WHERE sandbox = ? AND revoked_at IS NULL`, at, name)
		if err != nil {
			return mapErr(err)
		}
		n, _ := res.RowsAffected()
		return audit(ctx, tx, at, store.AuditEntry{
			Actor: actor, Action: store.ActionSandboxDelete, Sandbox: name, Target: name, BeforeHash: hash,
			Detail: map[string]string{"tokens_revoked": fmt.Sprint(n)},
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
	at := now()
	var out store.Token
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var name string
		if err := tx.QueryRowContext(ctx, `SELECT name FROM sandboxes WHERE name = ?`, sandbox).Scan(&name); err != nil {
			return mapErr(err)
		}
		res, err := tx.ExecContext(ctx, `
			UPDATE tokens SET revoked_at = ?
			WHERE sandbox = ? AND revoked_at IS NULL`, at, sandbox)
		if err != nil {
			return mapErr(err)
		}
		n, _ := res.RowsAffected()
		out, err = insertTokenRow(ctx, tx, at, tok)
		if err != nil {
			return err
		}
		return audit(ctx, tx, at, store.AuditEntry{
			Actor: actor, Action: store.ActionSandboxToken, Sandbox: sandbox, Target: tok.Name,
			Detail: map[string]string{"tokens_revoked": fmt.Sprint(n)},
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
	at := now()
	var pv store.PolicyVersion
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		pv, err = appendVersion(ctx, tx, at, in)
		return err
	})
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("append policy version of %q: %w", in.Sandbox, err)
	}
	return pv, nil
}

// appendVersion is AppendPolicyVersion inside tx (in already prepared):
// every policy version after a sandbox's first is committed through it.
func appendVersion(ctx context.Context, tx *sql.Tx, at int64, in store.AppendPolicy) (store.PolicyVersion, error) {
	next := in.ExpectedVersion + 1
	res, err := tx.ExecContext(ctx, `
		UPDATE sandboxes SET current_version = ?, current_hash = ?
		WHERE name = ? AND current_version = ?`,
		next, in.Hash, in.Sandbox, in.ExpectedVersion)
	if err != nil {
		return store.PolicyVersion{}, mapErr(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return store.PolicyVersion{}, mapErr(err)
	} else if n == 0 {
		var current int64
		err := tx.QueryRowContext(ctx, `SELECT current_version FROM sandboxes WHERE name = ?`, in.Sandbox).Scan(&current)
		if err != nil {
			return store.PolicyVersion{}, mapErr(err)
		}
		return store.PolicyVersion{}, fmt.Errorf("%w: expected version %d, current is %d", store.ErrConflict, in.ExpectedVersion, current)
	}
	var before string
	if in.ExpectedVersion > 0 {
		err := tx.QueryRowContext(ctx, `SELECT hash FROM policy_versions WHERE sandbox = ? AND version = ?`,
			in.Sandbox, in.ExpectedVersion).Scan(&before)
		if err != nil {
			return store.PolicyVersion{}, fmt.Errorf("previous version: %w", mapErr(err))
		}
	}
	return insertVersion(ctx, tx, at, in.Sandbox, next, before, in, in.Author)
}

// insertVersion stores one policy version and its audit entry.
func insertVersion(ctx context.Context, tx *sql.Tx, at int64, sandbox string, version int64, before string, in store.AppendPolicy, actor string) (store.PolicyVersion, error) {
	prov, err := strmap.Encode(in.Provenance)
	if err != nil {
		return store.PolicyVersion{}, err
	}
	source := in.Source
	if source == "" {
		source = store.SourceSet
	}
	// The document is bound as TEXT and read back as the same bytes.
	_, err = tx.ExecContext(ctx, `
		INSERT INTO policy_versions (sandbox, version, hash, document, author, source, provenance, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		sandbox, version, in.Hash, string(in.Document), in.Author, source, string(prov), at)
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("insert version %d: %w", version, mapErr(err))
	}
	if err := audit(ctx, tx, at, store.AuditEntry{
		Actor: actor, Action: store.ActionPolicySet, Sandbox: sandbox, Target: sandbox,
		BeforeHash: before, AfterHash: in.Hash,
		Detail: map[string]string{"version": fmt.Sprint(version), "source": source},
	}); err != nil {
		return store.PolicyVersion{}, err
	}
	return store.PolicyVersion{
		Sandbox: sandbox, Version: version, Hash: in.Hash, Document: in.Document,
		Author: in.Author, Source: source, Provenance: strmap.Clone(in.Provenance), CreatedAt: fromNanos(at),
	}, nil
}

const versionColumns = `pv.sandbox, pv.version, pv.hash, pv.author, pv.source, pv.provenance, pv.created_at`

func scanVersion(r interface{ Scan(...any) error }, extra ...any) (store.PolicyVersion, error) {
	var pv store.PolicyVersion
	var prov string
	var at int64
	dest := append([]any{&pv.Sandbox, &pv.Version, &pv.Hash, &pv.Author, &pv.Source, &prov, &at}, extra...)
	if err := r.Scan(dest...); err != nil {
		return pv, err
	}
	pv.CreatedAt = fromNanos(at)
	var err error
	pv.Provenance, err = strmap.Decode([]byte(prov))
	return pv, err
}

// GetPolicyVersion returns one version (0: the current one) or ErrNotFound.
func (s *Store) GetPolicyVersion(ctx context.Context, sandbox string, version int64) (store.PolicyVersion, error) {
	if version < 0 {
		return store.PolicyVersion{}, fmt.Errorf("get policy %q version %d: %w", sandbox, version, store.ErrNotFound)
	}
	var doc string
	pv, err := scanVersion(s.r.QueryRowContext(ctx, `
		SELECT `+versionColumns+`, pv.document
		FROM policy_versions pv JOIN sandboxes s ON s.name = pv.sandbox
		WHERE pv.sandbox = ?1
		  AND pv.version = CASE WHEN ?2 = 0 THEN s.current_version ELSE ?2 END`,
		sandbox, version), &doc)
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("get policy %q version %d: %w", sandbox, version, mapErr(err))
	}
	pv.Document = []byte(doc)
	return pv, nil
}

// ListPolicyVersions returns the sandbox's versions, oldest first, without
// documents; ErrNotFound if the sandbox does not exist.
func (s *Store) ListPolicyVersions(ctx context.Context, sandbox string) ([]store.PolicyVersion, error) {
	scan := func(r interface{ Scan(...any) error }) (store.PolicyVersion, error) { return scanVersion(r) }
	out, err := collect(ctx, s.r, scan, `SELECT `+versionColumns+`
		FROM policy_versions pv WHERE pv.sandbox = ? ORDER BY pv.version`, sandbox)
	if err != nil {
		return nil, fmt.Errorf("list policy versions of %q: %w", sandbox, err)
	}
	if len(out) == 0 {
		if _, err := s.GetSandbox(ctx, sandbox); err != nil {
			return nil, err
		}
	}
	return out, nil
}

const tokenColumns = `id, name, role, sandbox, hash, created_by, created_at, last_used_at, revoked_at`

func scanToken(r interface{ Scan(...any) error }) (store.Token, error) {
	var t store.Token
	var sandbox sql.NullString
	var at int64
	var used, revoked sql.NullInt64
	if err := r.Scan(&t.ID, &t.Name, &t.Role, &sandbox, &t.Hash, &t.CreatedBy, &at, &used, &revoked); err != nil {
		return t, err
	}
	t.Sandbox = sandbox.String
	t.CreatedAt = fromNanos(at)
	t.LastUsedAt = fromNullNanos(used)
	t.RevokedAt = fromNullNanos(revoked)
	return t, nil
}

// insertToken checks a sandbox token's sandbox exists, stores the token and
// audits it.
func insertToken(ctx context.Context, tx *sql.Tx, at int64, tok store.Token, actor string) (store.Token, error) {
	if tok.Role == store.RoleSandbox {
		var name string
		if err := tx.QueryRowContext(ctx, `SELECT name FROM sandboxes WHERE name = ?`, tok.Sandbox).Scan(&name); err != nil {
			return store.Token{}, fmt.Errorf("sandbox %q: %w", tok.Sandbox, mapErr(err))
		}
	}
	out, err := insertTokenRow(ctx, tx, at, tok)
	if err != nil {
		return store.Token{}, err
	}
	err = audit(ctx, tx, at, store.AuditEntry{
		Actor: actor, Action: store.ActionTokenCreate, Sandbox: tok.Sandbox, Target: tok.Name,
		Detail: map[string]string{"role": tok.Role},
	})
	return out, err
}

func insertTokenRow(ctx context.Context, tx *sql.Tx, at int64, tok store.Token) (store.Token, error) {
	sandbox := sql.NullString{String: tok.Sandbox, Valid: tok.Sandbox != ""}
	out, err := scanToken(tx.QueryRowContext(ctx, `
		INSERT INTO tokens (name, role, sandbox, hash, created_by, created_at)
		VALUES (?, ?, ?, ?, ?, ?)
		RETURNING `+tokenColumns,
		tok.Name, tok.Role, sandbox, tok.Hash, tok.CreatedBy, at))
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
	at := now()
	var out store.Token
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = insertToken(ctx, tx, at, tok, actor)
		return err
	})
	if err != nil {
		return store.Token{}, fmt.Errorf("create token %q: %w", tok.Name, err)
	}
	return out, nil
}

// TokenByHash returns the token with that hash, revoked or not.
func (s *Store) TokenByHash(ctx context.Context, hash string) (store.Token, error) {
	t, err := scanToken(s.r.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = ?`, hash))
	if err != nil {
		return store.Token{}, fmt.Errorf("token by hash: %w", mapErr(err))
	}
	return t, nil
}

// ListTokens returns every token ordered by name, without hashes.
func (s *Store) ListTokens(ctx context.Context) ([]store.Token, error) {
	scan := func(r interface{ Scan(...any) error }) (store.Token, error) {
		t, err := scanToken(r)
		t.Hash = ""
		return t, err
	}
	out, err := collect(ctx, s.r, scan, `SELECT `+tokenColumns+` FROM tokens ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	return out, nil
}

// RevokeToken revokes the live token with that name, else ErrNotFound.
func (s *Store) RevokeToken(ctx context.Context, name, actor string) error {
	at := now()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		// Write transactions are serialised (BEGIN IMMEDIATE), so this
		// count cannot go stale before the update.
		var admins int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM tokens WHERE role = 'admin' AND revoked_at IS NULL`).Scan(&admins); err != nil {
			return mapErr(err)
		}
		var (
			sandbox sql.NullString
			role    string
		)
		err := tx.QueryRowContext(ctx, `
			UPDATE tokens SET revoked_at = ?
			WHERE name = ? AND revoked_at IS NULL
			RETURNING sandbox, role`, at, name).Scan(&sandbox, &role)
		if err != nil {
			return mapErr(err)
		}
		if role == store.RoleAdmin && admins <= 1 {
			return store.ErrLastAdmin // rolls the revocation back
		}
		return audit(ctx, tx, at, store.AuditEntry{
			Actor: actor, Action: store.ActionTokenRevoke, Sandbox: sandbox.String, Target: name,
		})
	})
	if err != nil {
		return fmt.Errorf("revoke token %q: %w", name, err)
	}
	return nil
}

// TouchToken records a use at time at. It never moves last use backwards.
func (s *Store) TouchToken(ctx context.Context, id int64, at time.Time) error {
	res, err := s.w.ExecContext(ctx, `
		UPDATE tokens SET last_used_at = max(coalesce(last_used_at, ?1), ?1)
		WHERE id = ?2`, at.UnixNano(), id)
	if err != nil {
		return fmt.Errorf("touch token %d: %w", id, mapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("touch token %d: %w", id, mapErr(err))
	} else if n == 0 {
		return fmt.Errorf("touch token %d: %w", id, store.ErrNotFound)
	}
	return nil
}

// CountTokens returns how many live tokens have the role.
func (s *Store) CountTokens(ctx context.Context, role string) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM tokens WHERE role = ? AND revoked_at IS NULL`, role).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count tokens: %w", mapErr(err))
	}
	return n, nil
}

// collect runs a query and scans every row with scan.
func collect[T any](ctx context.Context, db *sql.DB, scan func(interface{ Scan(...any) error }) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, mapErr(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}
