package store

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store/internal/strmap"
)

// Store is a Driver, whose reads (and primitives, for the workflows built
// on InTx) it passes through, and every write of the product, written
// once over Tx so both engines keep the same rules. Package lifecycle
// holds it and is the one caller of its writes; the rest of the gateway
// holds it as a Reader. Methods return ErrNotFound, ErrConflict or ErrAlreadyExists
// (possibly wrapped) for those cases and wrapped engine errors otherwise;
// an input the schema cannot hold (empty name or hash, unknown role, a
// sandbox on an admin token) is refused with a plain error before the
// database is touched. Times come back in UTC; Postgres keeps
// microseconds, so callers should not rely on finer ones.
//
// Serialisation: a transaction that changes a sandbox's versions, freeze
// or proposals locks the sandbox row first (Tx.LockSandbox). The rare
// writes that change no sandbox but read before they write — the last live
// admin token, the signing key chain, the approval rules — queue on the
// audit chain's head (Tx.LockAuditHead), which they would take to audit
// anyway. Every other transaction audits after it has written the rows it
// may have to wait for (it then writes only rows of the sandbox it holds),
// so no deadlock can go through the head.
type Store struct {
	Driver
}

// New returns the Store over d. Closing the Store closes d.
func New(d Driver) *Store { return &Store{Driver: d} }

// Transact runs fn in one transaction of d (InTx) and returns its result.
//
// Transact, Audit and AppendVersion are exported for package lifecycle,
// whose workflows (proposals, approval, the freeze, every commit) are
// transactions over Tx: Go has no friend packages, so CI checks that no
// package but store and lifecycle calls them.
func Transact[T any](ctx context.Context, d Driver, fn func(tx Tx) (T, error)) (T, error) {
	var out T
	err := d.InTx(ctx, func(tx Tx) error {
		var err error
		out, err = fn(tx)
		return err
	})
	return out, err
}

// inTx runs fn in one transaction (InTx); its error says what the
// transaction was for (format and args), then why it failed.
func (s *Store) inTx(ctx context.Context, fn func(tx Tx) error, format string, args ...any) error {
	if err := s.InTx(ctx, fn); err != nil {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
	}
	return nil
}

// transact is Transact, its error saying what the transaction was for
// (format and args), then why it failed; no result then.
func transact[T any](ctx context.Context, s *Store, fn func(tx Tx) (T, error), format string, args ...any) (T, error) {
	out, err := Transact(ctx, s.Driver, fn)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)
	}
	return out, nil
}

// Audit appends e to the audit log in tx, chained after the head (which it
// holds until tx ends), at tx.Now(). Seq, Time, PrevHash and Hash are set
// here; the hash covers the detail as a read gives it back. For store and
// lifecycle only (see Transact).
func Audit(ctx context.Context, tx Tx, e AuditEntry) error {
	detail, err := strmap.Encode(e.Detail)
	if err == nil {
		e.Detail, err = strmap.Decode(detail)
	}
	if err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	seq, prev, err := tx.LockAuditHead(ctx)
	if err != nil {
		return fmt.Errorf("audit %s: lock chain head: %w", e.Action, err)
	}
	e.Seq, e.PrevHash, e.Time = seq+1, prev, tx.Now()
	e.Hash = AuditHash(e)
	if err := tx.InsertAudit(ctx, e); err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	return nil
}

// AppendVersion stores version in.ExpectedVersion+1 of in.Sandbox in tx if
// the sandbox's current version is still in.ExpectedVersion (ErrConflict
// otherwise, ErrNotFound for an unknown sandbox), moves the sandbox to it
// and audits it (policy.set, by in.Author). It locks the sandbox first.
// Every policy version after a sandbox's first is committed through it,
// by lifecycle's commit and nothing else (see Transact); tests without
// lifecycle use storetest.AppendVersion.
func AppendVersion(ctx context.Context, tx Tx, in AppendPolicy) (PolicyVersion, error) {
	if err := in.Prepare(); err != nil {
		return PolicyVersion{}, err
	}
	sb, err := tx.LockSandbox(ctx, in.Sandbox)
	if err != nil {
		return PolicyVersion{}, err
	}
	if sb.CurrentVersion != in.ExpectedVersion {
		return PolicyVersion{}, fmt.Errorf("%w: expected version %d, current is %d", ErrConflict, in.ExpectedVersion, sb.CurrentVersion)
	}
	pv, e, err := insertVersion(ctx, tx, in.Sandbox, in.ExpectedVersion+1, sb.CurrentHash, in, in.Author)
	if err != nil {
		return PolicyVersion{}, err
	}
	sb.CurrentVersion, sb.CurrentHash = pv.Version, pv.Hash
	if err := tx.UpdateSandbox(ctx, sb); err != nil {
		return PolicyVersion{}, err
	}
	return pv, Audit(ctx, tx, e)
}

// insertVersion stores one policy version (in.Source already defaulted)
// and returns it with its audit entry (by actor); before is the hash of
// the version it follows.
func insertVersion(ctx context.Context, tx Tx, sandbox string, version int64, before string, in AppendPolicy, actor string) (PolicyVersion, AuditEntry, error) {
	pv := PolicyVersion{
		Sandbox: sandbox, Version: version, Hash: in.Hash, Document: in.Document,
		Author: in.Author, Source: in.Source, Provenance: strmap.Clone(in.Provenance), CreatedAt: tx.Now(),
	}
	if err := tx.InsertPolicyVersion(ctx, pv); err != nil {
		return PolicyVersion{}, AuditEntry{}, fmt.Errorf("insert version %d: %w", version, err)
	}
	detail := map[string]string{"version": fmt.Sprint(version), "source": in.Source}
	maps.Copy(detail, in.AuditDetail)
	return pv, AuditEntry{
		Actor: actor, Action: ActionPolicySet, Sandbox: sandbox, Target: sandbox,
		BeforeHash: before, AfterHash: in.Hash, Detail: detail,
	}, nil
}

// CreateSandbox creates the sandbox, its token and, optionally, its
// first policy version, atomically.
func (s *Store) CreateSandbox(ctx context.Context, in CreateSandbox) (Sandbox, error) {
	if err := in.Prepare(); err != nil {
		return Sandbox{}, err
	}
	return transact(ctx, s, func(tx Tx) (Sandbox, error) {
		sb := Sandbox{Name: in.Name, CreatedAt: tx.Now(), CreatedBy: in.Actor}
		if in.Policy != nil {
			sb.CurrentVersion, sb.CurrentHash = 1, in.Policy.Hash
		}
		if err := tx.InsertSandbox(ctx, sb); err != nil {
			return sb, err
		}
		// The rows first, the audit entries last: a transaction holding
		// the chain head then waits for no row another one may hold (a
		// token name taken by a concurrent, uncommitted insert).
		entries := []AuditEntry{{
			Actor: in.Actor, Action: ActionSandboxCreate, Sandbox: in.Name, Target: in.Name, AfterHash: sb.CurrentHash,
		}}
		_, e, err := insertToken(ctx, tx, in.Token, in.Actor)
		if err != nil {
			return sb, err
		}
		entries = append(entries, e)
		if p := in.Policy; p != nil {
			_, e, err := insertVersion(ctx, tx, in.Name, 1, "", AppendPolicy{
				Hash: p.Hash, Document: p.Document, Author: p.Author, Source: p.Source, Provenance: p.Provenance,
			}, in.Actor)
			if err != nil {
				return sb, err
			}
			entries = append(entries, e)
		}
		for _, e := range entries {
			if err := Audit(ctx, tx, e); err != nil {
				return sb, err
			}
		}
		return sb, nil
	}, "create sandbox %q", in.Name)
}

// DeleteSandbox removes the sandbox and its policy versions and revokes
// its tokens (ErrNotFound if there is no such sandbox). The audit log
// keeps its history.
func (s *Store) DeleteSandbox(ctx context.Context, name, actor string) error {
	return s.inTx(ctx, func(tx Tx) error {
		sb, err := tx.DeleteSandbox(ctx, name)
		if err != nil {
			return err
		}
		n, err := tx.RevokeSandboxTokens(ctx, name, tx.Now())
		if err != nil {
			return err
		}
		return Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionSandboxDelete, Sandbox: name, Target: name, BeforeHash: sb.CurrentHash,
			Detail: map[string]string{"tokens_revoked": fmt.Sprint(n)},
		})
	}, "delete sandbox %q", name)
}

// RotateSandboxToken revokes every live token of the sandbox and stores
// the new one (Role and Sandbox set by the store; its Name must be new,
// else ErrAlreadyExists and nothing changes).
func (s *Store) RotateSandboxToken(ctx context.Context, sandbox, actor string, tok Token) (Token, error) {
	tok.Role, tok.Sandbox = RoleSandbox, sandbox
	if err := tok.Check(); err != nil {
		return Token{}, err
	}
	return transact(ctx, s, func(tx Tx) (Token, error) {
		if _, err := tx.LockSandbox(ctx, sandbox); err != nil {
			return Token{}, err
		}
		n, err := tx.RevokeSandboxTokens(ctx, sandbox, tx.Now())
		if err != nil {
			return Token{}, err
		}
		tok.CreatedAt = tx.Now()
		out, err := tx.InsertToken(ctx, tok)
		if err != nil {
			return Token{}, fmt.Errorf("insert token %q: %w", tok.Name, err)
		}
		return out, Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionSandboxToken, Sandbox: sandbox, Target: tok.Name,
			Detail: map[string]string{"tokens_revoked": fmt.Sprint(n)},
		})
	}, "rotate token of sandbox %q", sandbox)
}

// insertToken stores tok (checked) at tx's time and returns it as stored
// with its audit entry (by actor).
func insertToken(ctx context.Context, tx Tx, tok Token, actor string) (Token, AuditEntry, error) {
	tok.CreatedAt = tx.Now()
	out, err := tx.InsertToken(ctx, tok)
	if err != nil {
		return Token{}, AuditEntry{}, fmt.Errorf("insert token %q: %w", tok.Name, err)
	}
	detail := map[string]string{"role": tok.Role}
	if len(tok.Sandboxes) > 0 {
		detail["sandboxes"] = strings.Join(tok.Sandboxes, ",")
	}
	if tok.ExpiresAt != nil {
		detail["expires_at"] = tok.ExpiresAt.UTC().Format(time.RFC3339Nano)
	}
	return out, AuditEntry{
		Actor: actor, Action: ActionTokenCreate, Sandbox: tok.Sandbox, Target: tok.Name,
		Detail: detail,
	}, nil
}

// CreateToken stores a token (name unique among live and revoked tokens:
// ErrAlreadyExists). A sandbox token's sandbox must exist (ErrNotFound).
func (s *Store) CreateToken(ctx context.Context, tok Token, actor string) (Token, error) {
	if err := tok.Check(); err != nil {
		return Token{}, err
	}
	return transact(ctx, s, func(tx Tx) (Token, error) {
		out, e, err := insertToken(ctx, tx, tok, actor)
		if err != nil {
			return Token{}, err
		}
		return out, Audit(ctx, tx, e)
	}, "create token %q", tok.Name)
}

// RevokeToken marks the token revoked; revoking twice is ErrNotFound.
// Revoking the last live admin token is ErrLastAdmin, decided in the same
// transaction as the revocation, so two admins revoking each other at once
// cannot leave none.
func (s *Store) RevokeToken(ctx context.Context, name, actor string) error {
	return s.inTx(ctx, func(tx Tx) error {
		t, err := tx.RevokeToken(ctx, name, tx.Now())
		if err != nil {
			return err
		}
		if t.Role == RoleAdmin {
			// Admin revocations queue on the chain head, so each counts
			// after the one before it committed (Postgres reads each
			// statement at its start, under READ COMMITTED).
			if _, _, err := tx.LockAuditHead(ctx); err != nil {
				return err
			}
			n, err := tx.CountTokens(ctx, RoleAdmin)
			if err != nil {
				return err
			}
			if n == 0 {
				return ErrLastAdmin // rolls the revocation back
			}
		}
		return Audit(ctx, tx, AuditEntry{Actor: actor, Action: ActionTokenRevoke, Sandbox: t.Sandbox, Target: name})
	}, "revoke token %q", name)
}

// AddSigningKey appends k to the chain if the newest key is still
// previousID ("" when there are none); otherwise ErrConflict (another
// replica added one first) and nothing is stored. Audited.
func (s *Store) AddSigningKey(ctx context.Context, k SigningKey, previousID, actor string) (SigningKey, error) {
	if err := k.Check(); err != nil {
		return SigningKey{}, err
	}
	out := SigningKey{
		ID:          k.ID,
		PublicKey:   bytes.Clone(k.PublicKey),
		PrivateKey:  bytes.Clone(k.PrivateKey),
		Endorsement: bytes.Clone(k.Endorsement),
	}
	if len(out.Endorsement) == 0 {
		out.Endorsement = nil
	}
	return transact(ctx, s, func(tx Tx) (SigningKey, error) {
		// Rotations queue on the chain head: the newest key read next
		// cannot change before the insert.
		if _, _, err := tx.LockAuditHead(ctx); err != nil {
			return SigningKey{}, err
		}
		keys, err := tx.SigningKeys(ctx)
		if err != nil {
			return SigningKey{}, err
		}
		var newest string
		if len(keys) > 0 {
			newest = keys[len(keys)-1].ID
		}
		if newest != previousID {
			return SigningKey{}, fmt.Errorf("%w: the newest signing key is %q, not %q", ErrConflict, newest, previousID)
		}
		out.CreatedAt = tx.Now()
		if err := tx.InsertSigningKey(ctx, out); err != nil {
			return SigningKey{}, err
		}
		return out, Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionSigningKeyAdd, Target: out.ID,
			Detail: map[string]string{"previous": previousID},
		})
	}, "add signing key %q", k.ID)
}

// PutSandboxCA stores ca as the sandbox's CA unless it already has one,
// and returns the one stored: the first writer wins, so replicas racing to
// create it agree. ErrNotFound if the sandbox does not exist. The CA goes
// with the sandbox when it is deleted.
func (s *Store) PutSandboxCA(ctx context.Context, ca SandboxCA) (SandboxCA, error) {
	if err := ca.Check(); err != nil {
		return SandboxCA{}, err
	}
	return transact(ctx, s, func(tx Tx) (SandboxCA, error) {
		ca.CreatedAt = tx.Now()
		return tx.InsertSandboxCA(ctx, ca)
	}, "put CA of sandbox %q", ca.Sandbox)
}

// SetSandboxBoundary stores the sandbox's boundary (doc nil or empty
// removes it; hash is then ignored). Audited with before and after hash.
// ErrNotFound for an unknown sandbox.
func (s *Store) SetSandboxBoundary(ctx context.Context, sandbox string, doc []byte, hash, actor string) (Sandbox, error) {
	if err := CheckBoundary(sandbox, doc, hash); err != nil {
		return Sandbox{}, err
	}
	if len(doc) == 0 {
		doc, hash = nil, ""
	}
	return transact(ctx, s, func(tx Tx) (Sandbox, error) {
		sb, err := tx.LockSandbox(ctx, sandbox)
		if err != nil {
			return Sandbox{}, err
		}
		before := sb.BoundaryHash
		sb.Boundary, sb.BoundaryHash = bytes.Clone(doc), hash
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return Sandbox{}, err
		}
		return sb, Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionBoundarySet, Sandbox: sandbox, Target: sandbox,
			BeforeHash: before, AfterHash: hash,
		})
	}, "set boundary of sandbox %q", sandbox)
}

// UpdateCredentialedHosts adds and then removes "host:port" entries in
// one transaction (removing an absent one is not an error) and returns the
// sandbox. Audited with the lists before and after.
func (s *Store) UpdateCredentialedHosts(ctx context.Context, sandbox string, add, remove []string, actor string) (Sandbox, error) {
	if err := CheckCredentialedHosts(sandbox, add, remove); err != nil {
		return Sandbox{}, err
	}
	return transact(ctx, s, func(tx Tx) (Sandbox, error) {
		sb, err := tx.LockSandbox(ctx, sandbox)
		if err != nil {
			return Sandbox{}, err
		}
		before := sb.CredentialedHosts
		sb.CredentialedHosts = MergeCredentialedHosts(before, add, remove)
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return Sandbox{}, err
		}
		return sb, Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionCredentials, Sandbox: sandbox, Target: sandbox,
			Detail: map[string]string{"before": strings.Join(before, ","), "after": strings.Join(sb.CredentialedHosts, ",")},
		})
	}, "update credentialed hosts of sandbox %q", sandbox)
}

// SetApprovalPolicy stores the rules as the next version. Audited.
func (s *Store) SetApprovalPolicy(ctx context.Context, module, hash, actor string) (ApprovalPolicy, error) {
	if err := CheckApprovalPolicy(module, hash); err != nil {
		return ApprovalPolicy{}, err
	}
	return transact(ctx, s, func(tx Tx) (ApprovalPolicy, error) {
		// Setters queue on the chain head, so they number their versions
		// one after the other instead of colliding.
		if _, _, err := tx.LockAuditHead(ctx); err != nil {
			return ApprovalPolicy{}, err
		}
		cur, err := tx.GetApprovalPolicy(ctx)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return ApprovalPolicy{}, err
		}
		ap := ApprovalPolicy{Version: cur.Version + 1, Module: module, Hash: hash, Author: actor, CreatedAt: tx.Now()}
		if err := tx.InsertApprovalPolicy(ctx, ap); err != nil {
			return ApprovalPolicy{}, fmt.Errorf("insert approval policy: %w", err)
		}
		version := fmt.Sprint(ap.Version)
		return ap, Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionApprovalRules, Target: version,
			BeforeHash: cur.Hash, AfterHash: hash,
			Detail: map[string]string{"version": version},
		})
	}, "set approval policy")
}

// SetSentryKey registers k as the key its source signs events with,
// replacing the one it had. Audited.
func (s *Store) SetSentryKey(ctx context.Context, k SentryKey, actor string) (SentryKey, error) {
	if err := CheckSentrySource(k.Source); err != nil {
		return SentryKey{}, err
	}
	if len(k.PublicKey) != ed25519.PublicKeySize {
		return SentryKey{}, fmt.Errorf("sentry key of %q: an Ed25519 public key is %d bytes, not %d", k.Source, ed25519.PublicKeySize, len(k.PublicKey))
	}
	out := SentryKey{Source: k.Source, PublicKey: bytes.Clone(k.PublicKey), CreatedBy: actor}
	return transact(ctx, s, func(tx Tx) (SentryKey, error) {
		before := ""
		if old, err := tx.GetSentryKey(ctx, k.Source); err == nil {
			before = sentryKeyHash(old.PublicKey)
		} else if !errors.Is(err, ErrNotFound) {
			return SentryKey{}, err
		}
		out.CreatedAt = tx.Now()
		if err := tx.PutSentryKey(ctx, out); err != nil {
			return SentryKey{}, err
		}
		return out, Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionSentryKeySet, Target: k.Source,
			BeforeHash: before, AfterHash: sentryKeyHash(out.PublicKey),
		})
	}, "set sentry key of %q", k.Source)
}

// DeleteSentryKey removes the source's key: its events need no signature
// again. ErrNotFound if it has none. Audited.
func (s *Store) DeleteSentryKey(ctx context.Context, source, actor string) error {
	return s.inTx(ctx, func(tx Tx) error {
		old, err := tx.DeleteSentryKey(ctx, source)
		if err != nil {
			return err
		}
		return Audit(ctx, tx, AuditEntry{
			Actor: actor, Action: ActionSentryKeyDel, Target: source, BeforeHash: sentryKeyHash(old.PublicKey),
		})
	}, "delete sentry key of %q", source)
}

// sentryKeyHash names a public key in the audit log.
func sentryKeyHash(pub []byte) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:])
}
