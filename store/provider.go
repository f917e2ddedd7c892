package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Provider is a credential provider as stored: its spec, the names of
// its secret's fields, and the secret sealed (package secretbox, by
// lifecycle) under the key KeyID names. The store never sees the secret.
type Provider struct {
	Name     string
	Type     string
	Hosts    []string
	Settings map[string]string
	// SecretFields names the secret's fields, sorted.
	SecretFields []string
	Sealed       []byte
	KeyID        string
	// Revision is 1 at creation, one more at each rotation.
	Revision  int64
	CreatedAt time.Time
	CreatedBy string
	// RotatedAt is nil until the first rotation.
	RotatedAt *time.Time
	RotatedBy string
	// Sandboxes are the sandboxes it is attached to, sorted (set by
	// GetProvider and ListProviders).
	Sandboxes []string
}

// Audit actions of providers.
const (
	ActionProviderCreate = "provider.create"
	ActionProviderRotate = "provider.rotate"
	ActionProviderDelete = "provider.delete"
	ActionProviderAttach = "sandbox.provider.attach"
	ActionProviderDetach = "sandbox.provider.detach"
)

// ErrInUse: a provider attached to sandboxes cannot be deleted (the
// error names them).
var ErrInUse = errors.New("in use")

// InUseError is the ErrInUse DeleteProvider returns: the sandboxes the
// provider is attached to.
type InUseError struct {
	Provider  string
	Sandboxes []string
}

func (e *InUseError) Error() string {
	if len(e.Sandboxes) == 0 {
		return fmt.Sprintf("provider %q is attached to a sandbox: detach it first", e.Provider)
	}
	return fmt.Sprintf("provider %q is attached to sandboxes %s: detach it first", e.Provider, strings.Join(e.Sandboxes, ", "))
}

func (e *InUseError) Unwrap() error { return ErrInUse }

func checkProvider(p Provider) error {
	switch {
	case p.Name == "":
		return errors.New("provider: name is empty")
	case p.Type == "":
		return fmt.Errorf("provider %q: type is empty", p.Name)
	case len(p.Sealed) == 0 || p.KeyID == "":
		return fmt.Errorf("provider %q: no sealed secret", p.Name)
	}
	return nil
}

// providerAudit is a provider's audit detail: never its secret, sealed or
// not.
func providerAudit(p Provider) map[string]string {
	return map[string]string{
		"provider": p.Name, "type": p.Type, "hosts": strings.Join(p.Hosts, ","),
		"revision": fmt.Sprint(p.Revision), "secret_fields": strings.Join(p.SecretFields, ","), "key_id": p.KeyID,
	}
}

// CreateProvider stores p at revision 1 (the revision its secret must be
// sealed for), created now by actor: ErrAlreadyExists for a taken name.
// Audited (provider.create).
func (s *Store) CreateProvider(ctx context.Context, p Provider, actor string) (Provider, error) {
	if err := checkProvider(p); err != nil {
		return Provider{}, err
	}
	p = cloneProvider(p)
	p.Revision, p.RotatedAt, p.RotatedBy, p.Sandboxes, p.CreatedBy = 1, nil, "", nil, actor
	return transact(ctx, s, func(tx Tx) (Provider, error) {
		p.CreatedAt = tx.Now()
		if err := tx.InsertProvider(ctx, p); err != nil {
			return Provider{}, err
		}
		return p, Audit(ctx, tx, AuditEntry{Actor: actor, Action: ActionProviderCreate, Target: p.Name, Detail: providerAudit(p)})
	}, "create provider %q", p.Name)
}

// RotateProvider replaces the sealed secret of provider p.Name (with
// p.Sealed, p.KeyID and p.SecretFields, the rest ignored) if its revision
// is still p.Revision-1 (the revision p's secret is sealed for), and
// moves up the credentials generation of every sandbox it is attached
// to: ErrConflict when another rotation came first, ErrNotFound. It
// returns the provider as stored, with those sandboxes. Audited
// (provider.rotate).
func (s *Store) RotateProvider(ctx context.Context, p Provider, actor string) (Provider, error) {
	if err := checkProvider(p); err != nil {
		return Provider{}, err
	}
	if p.Revision < 2 {
		return Provider{}, fmt.Errorf("rotate provider %q: revision %d: a rotation makes revision 2 or later", p.Name, p.Revision)
	}
	return transact(ctx, s, func(tx Tx) (Provider, error) {
		now := tx.Now()
		p.RotatedAt, p.RotatedBy = &now, actor
		if err := tx.RotateProvider(ctx, p, p.Revision-1); err != nil {
			return Provider{}, err
		}
		out, err := tx.GetProvider(ctx, p.Name)
		if err != nil {
			return Provider{}, err
		}
		if err := bumpGenerations(ctx, tx, out.Sandboxes); err != nil {
			return Provider{}, err
		}
		return out, Audit(ctx, tx, AuditEntry{Actor: actor, Action: ActionProviderRotate, Target: p.Name, Detail: providerAudit(out)})
	}, "rotate provider %q", p.Name)
}

// bumpGenerations moves each sandbox's credentials generation up by one,
// in name order (so that two transactions bumping the same sandboxes
// cannot deadlock).
func bumpGenerations(ctx context.Context, tx Tx, sandboxes []string) error {
	for _, sb := range slices.Sorted(slices.Values(sandboxes)) {
		if _, err := tx.BumpCredentialsGeneration(ctx, sb); err != nil {
			return err
		}
	}
	return nil
}

// DeleteProvider deletes the provider: ErrNotFound, or an *InUseError
// (ErrInUse) naming the sandboxes it is still attached to. Audited
// (provider.delete).
func (s *Store) DeleteProvider(ctx context.Context, name, actor string) error {
	err := s.inTx(ctx, func(tx Tx) error {
		p, err := tx.GetProvider(ctx, name)
		if err != nil {
			return err
		}
		if len(p.Sandboxes) > 0 {
			return &InUseError{Provider: name, Sandboxes: p.Sandboxes}
		}
		if err := tx.DeleteProvider(ctx, name); err != nil {
			return err
		}
		return Audit(ctx, tx, AuditEntry{Actor: actor, Action: ActionProviderDelete, Target: name, Detail: providerAudit(p)})
	}, "delete provider %q", name)
	// An attach that committed between the read above and the delete
	// leaves the provider referenced: in use, naming its sandboxes as they
	// are now.
	var inUse *InUseError
	if errors.Is(err, ErrInUse) && !errors.As(err, &inUse) {
		inUse = &InUseError{Provider: name}
		if p, gerr := s.GetProvider(ctx, name); gerr == nil {
			inUse.Sandboxes = p.Sandboxes
		}
		return inUse
	}
	return err
}

// AttachProvider attaches the provider to the sandbox and moves the
// sandbox's credentials generation up; attaching one attached changes
// nothing (changed false, not audited). ErrNotFound (wrapped, naming it)
// for an unknown sandbox or provider. It returns the sandbox as stored.
// Audited (sandbox.provider.attach).
func (s *Store) AttachProvider(ctx context.Context, sandbox, provider, actor string) (sb Sandbox, changed bool, err error) {
	err = s.inTx(ctx, func(tx Tx) error {
		p, err := lockProviderSandbox(ctx, tx, provider, sandbox)
		if err != nil {
			return err
		}
		if changed, err = tx.AttachProvider(ctx, sandbox, provider, tx.Now(), actor); err != nil || !changed {
			sb, _ = tx.GetSandbox(ctx, sandbox)
			return err
		}
		return attachWrite(ctx, tx, &sb, sandbox, p, actor, ActionProviderAttach)
	}, "attach provider %q to sandbox %q", provider, sandbox)
	return sb, changed, err
}

// DetachProvider detaches the provider from the sandbox and moves the
// sandbox's credentials generation up: ErrNotFound when it is not
// attached (or the sandbox does not exist). It returns the sandbox as
// stored. Audited (sandbox.provider.detach).
func (s *Store) DetachProvider(ctx context.Context, sandbox, provider, actor string) (Sandbox, error) {
	var sb Sandbox
	err := s.inTx(ctx, func(tx Tx) error {
		p, err := lockProviderSandbox(ctx, tx, provider, sandbox)
		if err != nil {
			return err
		}
		if err := tx.DetachProvider(ctx, sandbox, provider); err != nil {
			return err
		}
		return attachWrite(ctx, tx, &sb, sandbox, p, actor, ActionProviderDetach)
	}, "detach provider %q from sandbox %q", provider, sandbox)
	return sb, err
}

// lockProviderSandbox locks the provider (shared), then the sandbox, and
// returns the provider. Every write of a provider locks in this order,
// provider then sandboxes (a rotation holds the provider's row while it
// bumps its sandboxes' generations): the other order let an attach and a
// rotation deadlock on Postgres.
func lockProviderSandbox(ctx context.Context, tx Tx, provider, sandbox string) (Provider, error) {
	p, err := tx.LockProvider(ctx, provider)
	if err != nil {
		return Provider{}, fmt.Errorf("provider %q: %w", provider, err)
	}
	if _, err := tx.LockSandbox(ctx, sandbox); err != nil {
		return Provider{}, fmt.Errorf("sandbox %q: %w", sandbox, err)
	}
	return p, nil
}

// attachWrite bumps the sandbox's generation after an attach or detach,
// reads it into sb and audits the change.
func attachWrite(ctx context.Context, tx Tx, sb *Sandbox, sandbox string, p Provider, actor, action string) error {
	gen, err := tx.BumpCredentialsGeneration(ctx, sandbox)
	if err != nil {
		return err
	}
	if *sb, err = tx.GetSandbox(ctx, sandbox); err != nil {
		return err
	}
	detail := providerAudit(p)
	detail["generation"] = fmt.Sprint(gen)
	return Audit(ctx, tx, AuditEntry{Actor: actor, Action: action, Sandbox: sandbox, Target: p.Name, Detail: detail})
}

func cloneProvider(p Provider) Provider {
	p.Hosts, p.SecretFields, p.Sandboxes = slices.Clone(p.Hosts), slices.Clone(p.SecretFields), slices.Clone(p.Sandboxes)
	p.Sealed = slices.Clone(p.Sealed)
	if p.Settings != nil {
		m := make(map[string]string, len(p.Settings))
		for k, v := range p.Settings {
			m[k] = v
		}
		p.Settings = m
	}
	if len(p.Settings) == 0 {
		p.Settings = nil
	}
	return p
}
