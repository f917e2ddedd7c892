package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/internal/secretbox"
	"github.com/portcullis-dev/portcullis/provider"
	"github.com/portcullis-dev/portcullis/store"
)

// Credential providers: secrets the gateway keeps for a sandbox's proxies.
// Each write is one audited transaction written once in package store;
// lifecycle checks the provider (provider.Check: a provider.Problems
// error, every problem at its field), seals its secret under
// Config.SecretsKey (the JSON of its fields, bound to the provider's name,
// revision, type, hosts and settings), publishes CredentialsChanged for the sandboxes whose
// credentials generation moved, and re-proves a sandbox's pending
// proposals when a provider is attached or detached: its hosts are
// credentialed destinations.

// maxRotateRetries bounds a rotation without an expected revision that
// keeps losing to concurrent ones.
const maxRotateRetries = 3

// noKey is the error of a provider write or credential read on a gateway
// without a secrets key.
func noKey() error {
	return &PreconditionError{"this gateway keeps no credential providers: start it with --secrets-key-file " +
		"(every replica the same file; a gateway on SQLite makes one beside its database)"}
}

// providerAAD binds a sealed secret to everything that says where it
// goes: the provider's name, revision, type, hosts and settings, in a
// canonical encoding (JSON of fixed fields, settings' keys sorted, no
// settings and empty settings alike). Someone who can write the database
// but lacks the key cannot move a secret to another provider (a re-created
// one of the same name included: its hosts or settings differ, or its
// blob is its own), back to an older revision, or to other hosts or
// another token_url: the secret no longer opens and nothing is delivered.
func providerAAD(spec provider.Spec, revision int64) []byte {
	settings := spec.Settings
	if settings == nil {
		settings = map[string]string{}
	}
	hosts := spec.Hosts
	if hosts == nil {
		hosts = []string{}
	}
	b, err := json.Marshal(struct {
		Name     string            `json:"name"`
		Revision int64             `json:"revision"`
		Type     string            `json:"type"`
		Hosts    []string          `json:"hosts"`
		Settings map[string]string `json:"settings"`
	}{spec.Name, revision, spec.Type, hosts, settings})
	if err != nil {
		panic(err) // strings, a slice of them and a map of them always encode
	}
	return append([]byte("portcullis provider v2\x00"), b...)
}

// errMismatch is open's error for a sealed secret that does not open
// under this gateway's key with its provider's stored spec.
func errMismatch(name string) error {
	return fmt.Errorf("provider %q: its sealed secret does not match its stored settings (name, type, hosts, settings, revision): "+
		"they were changed outside the gateway, or the secret is damaged; nothing is delivered (delete and create it again): %w", name, secretbox.ErrOpen)
}

// seal checks secret against spec and seals it for revision.
func (l *Lifecycle) seal(spec provider.Spec, secret map[string][]byte, revision int64) (sealed []byte, fields []string, err error) {
	if secret == nil {
		secret = map[string][]byte{}
	}
	if err := provider.Check(spec, secret); err != nil {
		return nil, nil, err
	}
	plain, err := json.Marshal(secret)
	if err != nil {
		return nil, nil, err
	}
	defer clear(plain)
	if sealed, err = l.cfg.SecretsKey.Seal(plain, providerAAD(spec, revision)); err != nil {
		return nil, nil, err
	}
	for f := range secret {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	return sealed, fields, nil
}

// open returns p's secret.
func (l *Lifecycle) open(p store.Provider) (map[string]string, error) {
	plain, err := l.cfg.SecretsKey.Open(p.Sealed, providerAAD(specOf(p), p.Revision))
	if errors.Is(err, secretbox.ErrOpen) {
		return nil, errMismatch(p.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("provider %q: %w", p.Name, err)
	}
	defer clear(plain)
	var secret map[string][]byte
	if err := json.Unmarshal(plain, &secret); err != nil {
		// Never json's error: it can quote a character of the plaintext,
		// and the caller logs it.
		return nil, fmt.Errorf("provider %q: its sealed secret opened but is not a set of fields", p.Name)
	}
	out := make(map[string]string, len(secret))
	for f, v := range secret {
		out[f] = string(v)
		clear(v)
	}
	return out, nil
}

// specOf is the spec of a stored provider.
func specOf(p store.Provider) provider.Spec {
	return provider.Spec{Name: p.Name, Type: p.Type, Hosts: p.Hosts, Settings: p.Settings}
}

// CreateProvider checks spec and secret (provider.Problems), seals the
// secret and stores the provider at revision 1, created by actor
// (store.ErrAlreadyExists for a taken name).
func (l *Lifecycle) CreateProvider(ctx context.Context, spec provider.Spec, secret map[string][]byte, actor string) (store.Provider, error) {
	if l.cfg.SecretsKey == nil {
		return store.Provider{}, noKey()
	}
	sealed, fields, err := l.seal(spec, secret, 1)
	if err != nil {
		return store.Provider{}, err
	}
	p, err := l.st.CreateProvider(ctx, store.Provider{
		Name: spec.Name, Type: spec.Type, Hosts: spec.Hosts, Settings: spec.Settings,
		SecretFields: fields, Sealed: sealed, KeyID: l.cfg.SecretsKey.ID(),
	}, actor)
	if err != nil {
		return p, err
	}
	l.log.InfoContext(ctx, "provider created", "provider", p.Name, "type", p.Type, "by", actor)
	return p, nil
}

// RotateProvider replaces the provider's secret (checked against its
// type: provider.Problems) and moves its revision up by one, if its
// revision is expect (0: whatever it is; PreconditionError otherwise).
// The current secret must open with the provider's stored spec
// (PreconditionError otherwise: the store was changed outside the
// gateway, or it is sealed under another key).
// Every sandbox it is attached to moves to a new credentials generation.
func (l *Lifecycle) RotateProvider(ctx context.Context, name string, secret map[string][]byte, expect int64, actor string) (store.Provider, error) {
	if l.cfg.SecretsKey == nil {
		return store.Provider{}, noKey()
	}
	for try := 0; ; try++ {
		cur, err := l.st.GetProvider(ctx, name)
		if err != nil {
			return store.Provider{}, Missing(err, "provider %q not found", name)
		}
		if expect != 0 && cur.Revision != expect {
			return store.Provider{}, &PreconditionError{fmt.Sprintf("provider %q is at revision %d, not %d: another rotation came first", name, cur.Revision, expect)}
		}
		// The new secret is bound to the spec as stored: refuse unless the
		// current secret still opens with it, or a spec changed in the
		// database would be laundered into the new seal.
		if _, err := l.open(cur); err != nil {
			return store.Provider{}, &PreconditionError{err.Error() + "; a rotation keeps the provider's settings, so it is refused"}
		}
		spec := specOf(cur)
		cur.Sealed, cur.SecretFields, err = l.seal(spec, secret, cur.Revision+1)
		if err != nil {
			return store.Provider{}, err
		}
		cur.Revision, cur.KeyID = cur.Revision+1, l.cfg.SecretsKey.ID()
		p, err := l.st.RotateProvider(ctx, cur, actor)
		switch {
		case errors.Is(err, store.ErrConflict) && expect == 0 && try < maxRotateRetries:
			continue
		case errors.Is(err, store.ErrConflict) && expect != 0:
			return store.Provider{}, &PreconditionError{fmt.Sprintf("provider %q is no longer at revision %d: another rotation came first", name, expect)}
		case err != nil:
			return store.Provider{}, Missing(err, "provider %q not found", name)
		}
		l.log.InfoContext(ctx, "provider rotated", "provider", p.Name, "revision", p.Revision, "sandboxes", len(p.Sandboxes), "by", actor)
		l.credentialsChanged(p.Sandboxes...)
		return p, nil
	}
}

// DeleteProvider deletes a provider attached to no sandbox
// (PreconditionError naming them otherwise; NotFoundError).
func (l *Lifecycle) DeleteProvider(ctx context.Context, name, actor string) error {
	if l.cfg.SecretsKey == nil {
		return noKey()
	}
	err := l.st.DeleteProvider(ctx, name, actor)
	var inUse *store.InUseError
	if errors.As(err, &inUse) {
		return &PreconditionError{inUse.Error()}
	}
	if err != nil {
		return Missing(err, "provider %q not found", name)
	}
	l.log.InfoContext(ctx, "provider deleted", "provider", name, "by", actor)
	return nil
}

// AttachProvider attaches the provider to the sandbox (a no-op when it
// is), moves the sandbox to a new credentials generation and re-proves
// its pending proposals with the provider's hosts credentialed, in the
// background (NotFoundError for an unknown sandbox or provider).
func (l *Lifecycle) AttachProvider(ctx context.Context, sandbox, name, actor string) (store.Sandbox, error) {
	if l.cfg.SecretsKey == nil {
		return store.Sandbox{}, noKey()
	}
	sb, changed, err := l.st.AttachProvider(ctx, sandbox, name, actor)
	if err != nil {
		return sb, l.attachMissing(ctx, err, sandbox, "provider %q not found", name)
	}
	if changed {
		l.log.InfoContext(ctx, "provider attached", "sandbox", sandbox, "provider", name, "generation", sb.CredentialsGeneration, "by", actor)
		l.credentialsChanged(sandbox)
		l.refresh(sandbox)
	}
	return sb, nil
}

// DetachProvider detaches the provider from the sandbox, moves the
// sandbox to a new credentials generation and re-proves its pending
// proposals (NotFoundError when the sandbox does not exist or the
// provider is not attached to it).
func (l *Lifecycle) DetachProvider(ctx context.Context, sandbox, name, actor string) (store.Sandbox, error) {
	if l.cfg.SecretsKey == nil {
		return store.Sandbox{}, noKey()
	}
	sb, err := l.st.DetachProvider(ctx, sandbox, name, actor)
	if err != nil {
		return sb, l.attachMissing(ctx, err, sandbox, "provider %q is not attached to sandbox %q", name, sandbox)
	}
	l.log.InfoContext(ctx, "provider detached", "sandbox", sandbox, "provider", name, "generation", sb.CredentialsGeneration, "by", actor)
	l.credentialsChanged(sandbox)
	l.refresh(sandbox)
	return sb, nil
}

// attachMissing names what was not found, the sandbox or (format) the
// provider, when err is store.ErrNotFound.
func (l *Lifecycle) attachMissing(ctx context.Context, err error, sandbox, format string, args ...any) error {
	if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if _, serr := l.st.GetSandbox(ctx, sandbox); errors.Is(serr, store.ErrNotFound) {
		return &NotFoundError{fmt.Sprintf("sandbox %q not found", sandbox)}
	}
	return &NotFoundError{fmt.Sprintf(format, args...)}
}

func (l *Lifecycle) credentialsChanged(sandboxes ...string) {
	if len(sandboxes) > 0 {
		l.cfg.Stream.Publish(events.CredentialsChanged{Sandboxes: slices.Clone(sandboxes)})
	}
}

// SandboxCredentials returns what the sandbox's proxies hold: its
// providers with their secrets opened, at its credentials generation,
// the two read together (NotFoundError for an unknown sandbox;
// PreconditionError without a secrets key; an error naming both keys'
// ids when a secret was sealed under another key).
func (l *Lifecycle) SandboxCredentials(ctx context.Context, sandbox string) (*provider.Bundle, error) {
	if l.cfg.SecretsKey == nil {
		return nil, noKey()
	}
	gen, provs, err := l.st.SandboxCredentials(ctx, sandbox)
	if err != nil {
		return nil, Missing(err, "sandbox %q not found", sandbox)
	}
	b := &provider.Bundle{Sandbox: sandbox, Generation: uint64(gen), Providers: []provider.Provider{}}
	for _, p := range provs {
		secret, err := l.open(p)
		if err != nil {
			return nil, err
		}
		b.Providers = append(b.Providers, provider.Provider{
			Spec:     specOf(p),
			Revision: uint64(p.Revision), Secret: secret,
		})
	}
	return b, nil
}

// CredentialsGeneration returns the sandbox's credentials generation (0:
// no provider was ever attached; NotFoundError).
func (l *Lifecycle) CredentialsGeneration(ctx context.Context, sandbox string) (uint64, error) {
	sb, err := l.st.GetSandbox(ctx, sandbox)
	if err != nil {
		return 0, Missing(err, "sandbox %q not found", sandbox)
	}
	return uint64(sb.CredentialsGeneration), nil
}
