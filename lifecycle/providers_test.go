package lifecycle

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/internal/secretbox"
	"github.com/portcullis-dev/portcullis/provider"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

const testSecret = "ghp_Sup3rS3cretValue"

func newKey(t *testing.T) *secretbox.Key {
	t.Helper()
	k, err := secretbox.Generate(filepath.Join(t.TempDir(), "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// changes records the sandboxes of every CredentialsChanged published.
type changes struct {
	mu  sync.Mutex
	got [][]string
}

func (c *changes) take() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.got
	c.got = nil
	return out
}

func providerLifecycle(t *testing.T, key *secretbox.Key) (*Lifecycle, *store.Store, *changes) {
	t.Helper()
	s := openSQLite(t)
	stream := events.New()
	ch := &changes{}
	stream.Subscribe(func(e events.Event) {
		if c, ok := e.(events.CredentialsChanged); ok {
			ch.mu.Lock()
			ch.got = append(ch.got, c.Sandboxes)
			ch.mu.Unlock()
		}
	})
	return New(Config{Logger: slog.New(slog.DiscardHandler), SecretsKey: key, Stream: stream}, s), s, ch
}

var ghSpec = provider.Spec{Name: "gh", Type: provider.TypeBearer, Hosts: []string{"api.github.com"}}

func TestProvidersWithoutKey(t *testing.T) {
	l, s, _ := providerLifecycle(t, nil)
	storetest.MustCreate(t, s, "box", false)
	var pe *PreconditionError
	for name, err := range map[string]error{
		"create": func() error {
			_, err := l.CreateProvider(ctx(t), ghSpec, map[string][]byte{"token": []byte(testSecret)}, "op")
			return err
		}(),
		"rotate": func() error { _, err := l.RotateProvider(ctx(t), "gh", nil, 0, "op"); return err }(),
		"attach": func() error { _, err := l.AttachProvider(ctx(t), "box", "gh", "op"); return err }(),
		"detach": func() error { _, err := l.DetachProvider(ctx(t), "box", "gh", "op"); return err }(),
		"delete": l.DeleteProvider(ctx(t), "gh", "op"),
		"read":   func() error { _, err := l.SandboxCredentials(ctx(t), "box"); return err }(),
	} {
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "--secrets-key-file") {
			t.Errorf("%s without a key = %v, want a PreconditionError naming the flag", name, err)
		}
	}
	if ps, _ := s.ListProviders(ctx(t)); len(ps) != 0 {
		t.Errorf("providers stored without a key: %+v", ps)
	}
	if gen, err := l.CredentialsGeneration(ctx(t), "box"); err != nil || gen != 0 {
		t.Errorf("CredentialsGeneration = %d, %v", gen, err)
	}
}

func TestProviderLifecycle(t *testing.T) {
	key := newKey(t)
	l, s, ch := providerLifecycle(t, key)
	storetest.MustCreate(t, s, "box", false)

	// Problems come back at their fields, and nothing is stored.
	bad := provider.Spec{Name: "gh", Type: provider.TypeBearer, Hosts: []string{"169.254.169.254"}}
	_, err := l.CreateProvider(ctx(t), bad, map[string][]byte{"tokn": []byte(testSecret)}, "op")
	var ps provider.Problems
	if !errors.As(err, &ps) || !slices.ContainsFunc(ps, func(p provider.Problem) bool { return p.Field == "hosts[0]" }) ||
		!slices.ContainsFunc(ps, func(p provider.Problem) bool { return p.Field == "secret" }) || strings.Contains(err.Error(), "tokn") {
		t.Fatalf("CreateProvider(invalid) = %v", err)
	}
	if strings.Contains(err.Error(), testSecret) {
		t.Errorf("the problems hold the secret: %v", err)
	}
	if got, _ := s.ListProviders(ctx(t)); len(got) != 0 {
		t.Fatalf("an invalid provider was stored: %+v", got)
	}

	p, err := l.CreateProvider(ctx(t), ghSpec, map[string][]byte{"token": []byte(testSecret)}, "op")
	if err != nil || p.Revision != 1 || p.KeyID != key.ID() || !slices.Equal(p.SecretFields, []string{"token"}) {
		t.Fatalf("CreateProvider = %+v, %v", p, err)
	}
	if strings.Contains(string(p.Sealed), testSecret) {
		t.Fatal("the stored secret is in plaintext")
	}
	if _, err := l.CreateProvider(ctx(t), ghSpec, map[string][]byte{"token": []byte("x")}, "op"); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("CreateProvider of a taken name = %v", err)
	}
	if got := ch.take(); got != nil {
		t.Errorf("a creation changed credentials: %q", got)
	}

	sb, err := l.AttachProvider(ctx(t), "box", "gh", "op")
	if err != nil || sb.CredentialsGeneration != 1 || !slices.Equal(sb.Providers, []string{"gh"}) {
		t.Fatalf("AttachProvider = %+v, %v", sb, err)
	}
	if _, err := l.AttachProvider(ctx(t), "box", "gh", "op"); err != nil {
		t.Fatal(err)
	}
	if got := ch.take(); !slices.EqualFunc(got, [][]string{{"box"}}, slices.Equal) {
		t.Errorf("events after attach (twice) = %q, want one for box", got)
	}
	var nf *NotFoundError
	if _, err := l.AttachProvider(ctx(t), "ghost", "gh", "op"); !errors.As(err, &nf) || !strings.Contains(nf.Msg, `sandbox "ghost"`) {
		t.Errorf("attach to an unknown sandbox = %v", err)
	}
	if _, err := l.AttachProvider(ctx(t), "box", "ghost", "op"); !errors.As(err, &nf) || !strings.Contains(nf.Msg, `provider "ghost"`) {
		t.Errorf("attach of an unknown provider = %v", err)
	}

	b, err := l.SandboxCredentials(ctx(t), "box")
	if err != nil || b.Generation != 1 || len(b.Providers) != 1 || b.Providers[0].Secret["token"] != testSecret ||
		b.Providers[0].Revision != 1 || b.Providers[0].Name != "gh" || !slices.Equal(b.Providers[0].Hosts, ghSpec.Hosts) {
		t.Fatalf("SandboxCredentials = %+v, %v", b, err)
	}
	if gen, err := l.CredentialsGeneration(ctx(t), "box"); err != nil || gen != 1 {
		t.Errorf("CredentialsGeneration = %d, %v", gen, err)
	}

	// Rotation: a stale expected revision is refused; the secret is
	// checked against the provider's type.
	var pe *PreconditionError
	if _, err := l.RotateProvider(ctx(t), "gh", map[string][]byte{"token": []byte("new")}, 7, "op"); !errors.As(err, &pe) {
		t.Errorf("rotate at a stale revision = %v", err)
	}
	if _, err := l.RotateProvider(ctx(t), "gh", map[string][]byte{"value": []byte("new")}, 0, "op"); !errors.As(err, &ps) {
		t.Errorf("rotate with a wrong field = %v", err)
	}
	if _, err := l.RotateProvider(ctx(t), "ghost", map[string][]byte{"token": []byte("new")}, 0, "op"); !errors.As(err, &nf) {
		t.Errorf("rotate of an unknown provider = %v", err)
	}
	r, err := l.RotateProvider(ctx(t), "gh", map[string][]byte{"token": []byte("rotated-" + testSecret)}, 1, "op")
	if err != nil || r.Revision != 2 || !slices.Equal(r.Sandboxes, []string{"box"}) {
		t.Fatalf("RotateProvider = %+v, %v", r, err)
	}
	if got := ch.take(); !slices.EqualFunc(got, [][]string{{"box"}}, slices.Equal) {
		t.Errorf("events after rotation = %q", got)
	}
	if b, err := l.SandboxCredentials(ctx(t), "box"); err != nil || b.Generation != 2 || b.Providers[0].Secret["token"] != "rotated-"+testSecret || b.Providers[0].Revision != 2 {
		t.Errorf("SandboxCredentials after rotation = %+v, %v", b, err)
	}

	// A gateway with another key says so, naming both.
	other, _, _ := providerLifecycle(t, newKey(t))
	other.st = s
	if _, err := other.SandboxCredentials(ctx(t), "box"); !errors.Is(err, secretbox.ErrWrongKey) || !strings.Contains(err.Error(), key.ID()) {
		t.Errorf("SandboxCredentials under another key = %v", err)
	}

	if err := l.DeleteProvider(ctx(t), "gh", "op"); !errors.As(err, &pe) || !strings.Contains(pe.Msg, "box") {
		t.Errorf("delete of an attached provider = %v", err)
	}
	if sb, err := l.DetachProvider(ctx(t), "box", "gh", "op"); err != nil || sb.CredentialsGeneration != 3 || sb.Providers != nil {
		t.Errorf("DetachProvider = %+v, %v", sb, err)
	}
	if _, err := l.DetachProvider(ctx(t), "box", "gh", "op"); !errors.As(err, &nf) || !strings.Contains(nf.Msg, "not attached") {
		t.Errorf("detach of one not attached = %v", err)
	}
	if b, err := l.SandboxCredentials(ctx(t), "box"); err != nil || b.Generation != 3 || len(b.Providers) != 0 {
		t.Errorf("SandboxCredentials after detach = %+v, %v", b, err)
	}
	if err := l.DeleteProvider(ctx(t), "gh", "op"); err != nil {
		t.Errorf("DeleteProvider = %v", err)
	}
	if err := l.DeleteProvider(ctx(t), "gh", "op"); !errors.As(err, &nf) {
		t.Errorf("DeleteProvider again = %v", err)
	}
	for _, e := range storetest.Audits(t, s, store.AuditFilter{}) {
		if strings.Contains(fmt.Sprint(e), testSecret) {
			t.Errorf("audit entry holds the secret: %+v", e)
		}
	}
}

// TestAttachReproves: a provider's hosts are credentialed destinations,
// so attaching one re-proves the sandbox's pending proposals with them,
// and detaching it again without.
func TestAttachReproves(t *testing.T) {
	l, s, _ := providerLifecycle(t, newKey(t))
	contextSandbox(t, l)
	prop, err := advisor.ParseProposal([]byte("rationale: file issues\noperations:\n  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: POST, path: /repos/acme/app/issues } } ] }\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := l.Submit(ctx(t), Submission{Sandbox: "box", Proposer: "sandbox-box", Actor: "sandbox:box", Proposal: prop})
	if err != nil {
		t.Fatal(err)
	}
	id := out.Proposal.ID
	credentialed := func() bool {
		f, err := DecodeFindings(storetest.GetProposal(t, s, id).Findings)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(f, func(f Finding) bool { return f.Credentialed })
	}
	wait := func(what string, want bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			changed := l.Changed("box")
			if credentialed() == want {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("%s: credentialed findings %v, want %v", what, !want, want)
			}
		}
	}
	wait("before any provider", false)
	if _, err := l.CreateProvider(ctx(t), ghSpec, map[string][]byte{"token": []byte(testSecret)}, "op"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AttachProvider(ctx(t), "box", "gh", "op"); err != nil {
		t.Fatal(err)
	}
	wait("after attaching a provider of api.github.com", true)
	if _, err := l.DetachProvider(ctx(t), "box", "gh", "op"); err != nil {
		t.Fatal(err)
	}
	wait("after detaching it", false)
}

// tamper rewrites provider name in the store as someone who can write
// the database but lacks the key would: with the store's write primitives
// (detach, delete, insert the row changed by edit, attach again), the
// sealed secret untouched.
func tamper(t *testing.T, s *store.Store, name string, edit func(p *store.Provider)) {
	t.Helper()
	err := s.InTx(ctx(t), func(tx store.Tx) error {
		p, err := tx.GetProvider(ctx(t), name)
		if err != nil {
			return err
		}
		for _, sb := range p.Sandboxes {
			if err := tx.DetachProvider(ctx(t), sb, name); err != nil {
				return err
			}
		}
		if err := tx.DeleteProvider(ctx(t), name); err != nil {
			return err
		}
		edit(&p)
		if err := tx.InsertProvider(ctx(t), p); err != nil {
			return err
		}
		for _, sb := range p.Sandboxes {
			if _, err := tx.AttachProvider(ctx(t), sb, p.Name, tx.Now(), "mallory"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("tamper with %q: %v", name, err)
	}
}

// TestSealedSecretBoundToSpec: a provider's hosts, settings and type
// changed in the database (by someone without the key) make its secret
// not open: nothing is delivered, the error names the provider, and a
// rotation does not seal a new secret for the changed spec.
func TestSealedSecretBoundToSpec(t *testing.T) {
	l, s, _ := providerLifecycle(t, newKey(t))
	storetest.MustCreate(t, s, "box", false)
	crm := provider.Spec{Name: "crm", Type: provider.TypeOAuth2ClientCredentials, Hosts: []string{"api.crm.example"},
		Settings: map[string]string{provider.SettingTokenURL: "https://login.crm.example/token", provider.SettingScopes: "read"}}
	if _, err := l.CreateProvider(ctx(t), crm, map[string][]byte{"client_id": []byte("app"), "client_secret": []byte(testSecret)}, "op"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AttachProvider(ctx(t), "box", "crm", "op"); err != nil {
		t.Fatal(err)
	}
	if b, err := l.SandboxCredentials(ctx(t), "box"); err != nil || len(b.Providers) != 1 || b.Providers[0].Secret["client_secret"] != testSecret {
		t.Fatalf("SandboxCredentials before = %+v, %v", b, err)
	}
	orig, err := s.GetProvider(ctx(t), "crm")
	if err != nil {
		t.Fatal(err)
	}
	for what, edit := range map[string]func(p *store.Provider){
		"hosts":              func(p *store.Provider) { p.Hosts = []string{"evil.example"} },
		"one more host":      func(p *store.Provider) { p.Hosts = append(p.Hosts, "evil.example") },
		"settings.token_url": func(p *store.Provider) { p.Settings["token_url"] = "https://evil.example/token" },
		"a setting added":    func(p *store.Provider) { p.Settings["audience"] = "evil" },
		"a setting removed":  func(p *store.Provider) { delete(p.Settings, "scopes") },
		"type":               func(p *store.Provider) { p.Type = provider.TypeTokenExchange },
		"revision":           func(p *store.Provider) { p.Revision = 2 },
	} {
		tamper(t, s, "crm", edit)
		b, err := l.SandboxCredentials(ctx(t), "box")
		if b != nil || err == nil || !strings.Contains(err.Error(), `provider "crm"`) ||
			!strings.Contains(err.Error(), "sealed secret does not match its stored settings") || strings.Contains(err.Error(), testSecret) {
			t.Errorf("%s changed: SandboxCredentials = %+v, %v; want nothing and a mismatch naming crm", what, b, err)
		}
		var pe *PreconditionError
		if _, err := l.RotateProvider(ctx(t), "crm", map[string][]byte{"client_id": []byte("app"), "client_secret": []byte("new-" + testSecret)}, 0, "op"); !errors.As(err, &pe) ||
			!strings.Contains(err.Error(), "does not match its stored settings") {
			t.Errorf("%s changed: RotateProvider = %v, want refused", what, err)
		}
		if p, _ := s.GetProvider(ctx(t), "crm"); !slices.Equal(p.Sealed, orig.Sealed) {
			t.Errorf("%s changed: a refused rotation sealed a new secret", what)
		}
		tamper(t, s, "crm", func(p *store.Provider) { *p = orig })
		if b, err := l.SandboxCredentials(ctx(t), "box"); err != nil || len(b.Providers) != 1 {
			t.Fatalf("%s restored: SandboxCredentials = %+v, %v", what, b, err)
		}
	}
	// A blob moved to another provider (same type, hosts and settings)
	// does not open either.
	twin := crm
	twin.Name = "twin"
	if _, err := l.CreateProvider(ctx(t), twin, map[string][]byte{"client_id": []byte("app"), "client_secret": []byte("twin")}, "op"); err != nil {
		t.Fatal(err)
	}
	tamper(t, s, "twin", func(p *store.Provider) { p.Sealed = orig.Sealed })
	if _, err := l.AttachProvider(ctx(t), "box", "twin", "op"); err != nil {
		t.Fatal(err)
	}
	if b, err := l.SandboxCredentials(ctx(t), "box"); b != nil || err == nil || !strings.Contains(err.Error(), `provider "twin"`) {
		t.Errorf("a blob moved to twin: SandboxCredentials = %+v, %v", b, err)
	}
}

// TestOpenNeverQuotesPlaintext: a sealed secret that opens but is not
// JSON fields (encoding/json's error would quote a character of it) is
// refused with a fixed message naming the provider.
func TestOpenNeverQuotesPlaintext(t *testing.T) {
	l, s, _ := providerLifecycle(t, newKey(t))
	storetest.MustCreate(t, s, "box", false)
	if _, err := l.CreateProvider(ctx(t), ghSpec, map[string][]byte{"token": []byte(testSecret)}, "op"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AttachProvider(ctx(t), "box", "gh", "op"); err != nil {
		t.Fatal(err)
	}
	for _, plain := range []string{`{"token":Q` + testSecret + `}`, `"` + testSecret, `{"token":"` + testSecret + `"`} {
		sealed, err := l.cfg.SecretsKey.Seal([]byte(plain), providerAAD(ghSpec, 1))
		if err != nil {
			t.Fatal(err)
		}
		tamper(t, s, "gh", func(p *store.Provider) { p.Sealed = sealed })
		b, err := l.SandboxCredentials(ctx(t), "box")
		if b != nil || err == nil || err.Error() != `provider "gh": its sealed secret opened but is not a set of fields` {
			t.Errorf("plaintext %q: SandboxCredentials = %+v, %v; want the fixed message", plain, b, err)
		}
	}
}
