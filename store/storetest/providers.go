package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- credential providers ----

// TestProvider is a provider to create: its sealed secret is opaque bytes
// to the store.
func TestProvider(name string) store.Provider {
	return store.Provider{
		Name: name, Type: "header", Hosts: []string{"api.example.com", "*.example.org:8443"},
		Settings: map[string]string{"header": "X-Api-Key"}, SecretFields: []string{"value"},
		Sealed: []byte("sealed-" + name + "-\x00\xff"), KeyID: "0a1b2c3d4e5f",
	}
}

func createProvider(t *testing.T, s *store.Store, name string) store.Provider {
	t.Helper()
	p, err := s.CreateProvider(ctx(t), TestProvider(name), "alice")
	return must(t, p, err, "CreateProvider(%q)", name)
}

func generation(t *testing.T, s *store.Store, sandbox string) int64 {
	t.Helper()
	return GetSandbox(t, s, sandbox).CredentialsGeneration
}

func testProviders(t *testing.T, s *store.Store) {
	MustCreate(t, s, "a", false)
	MustCreate(t, s, "b", false)
	if ps, err := s.ListProviders(ctx(t)); err != nil || len(ps) != 0 {
		t.Fatalf("ListProviders on an empty store = %+v, %v", ps, err)
	}
	gh := createProvider(t, s, "gh")
	want := TestProvider("gh")
	if gh.Revision != 1 || gh.CreatedBy != "alice" || gh.CreatedAt.IsZero() || gh.RotatedAt != nil ||
		!bytes.Equal(gh.Sealed, want.Sealed) || !slices.Equal(gh.Hosts, want.Hosts) {
		t.Errorf("CreateProvider = %+v", gh)
	}
	got, err := s.GetProvider(ctx(t), "gh")
	if err != nil || got.Revision != 1 || !got.CreatedAt.Equal(gh.CreatedAt) || got.Settings["header"] != "X-Api-Key" ||
		!slices.Equal(got.SecretFields, []string{"value"}) || !bytes.Equal(got.Sealed, want.Sealed) || got.KeyID != want.KeyID ||
		!slices.Equal(got.Hosts, want.Hosts) || got.Sandboxes != nil || got.Type != "header" {
		t.Errorf("GetProvider = %+v, %v", got, err)
	}
	if _, err := s.CreateProvider(ctx(t), TestProvider("gh"), "bob"); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("CreateProvider of a taken name = %v, want ErrAlreadyExists", err)
	}
	if _, err := s.GetProvider(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetProvider(nope) = %v", err)
	}
	bad := TestProvider("x")
	bad.Sealed = nil
	if _, err := s.CreateProvider(ctx(t), bad, "bob"); err == nil {
		t.Error("CreateProvider without a sealed secret succeeded")
	}
	if _, err := s.GetProvider(ctx(t), "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused provider was stored: %v", err)
	}

	// Attach: the sandbox's generation moves, once.
	sb, changed, err := s.AttachProvider(ctx(t), "a", "gh", "carol")
	if err != nil || !changed || sb.CredentialsGeneration != 1 || !slices.Equal(sb.Providers, []string{"gh"}) {
		t.Fatalf("AttachProvider = %+v, %v, %v", sb, changed, err)
	}
	sb, changed, err = s.AttachProvider(ctx(t), "a", "gh", "carol")
	if err != nil || changed || sb.CredentialsGeneration != 1 || !slices.Equal(sb.Providers, []string{"gh"}) {
		t.Errorf("AttachProvider again = %+v, %v, %v (want a no-op)", sb, changed, err)
	}
	for _, c := range [][2]string{{"ghost", "gh"}, {"a", "ghost"}} {
		if _, _, err := s.AttachProvider(ctx(t), c[0], c[1], "carol"); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "ghost") {
			t.Errorf("AttachProvider(%q, %q) = %v, want ErrNotFound naming it", c[0], c[1], err)
		}
	}
	createProvider(t, s, "aws")
	if _, _, err := s.AttachProvider(ctx(t), "a", "aws", "carol"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AttachProvider(ctx(t), "b", "gh", "carol"); err != nil {
		t.Fatal(err)
	}
	if got := GetSandbox(t, s, "a"); got.CredentialsGeneration != 2 || !slices.Equal(got.Providers, []string{"aws", "gh"}) {
		t.Errorf("GetSandbox(a) = gen %d providers %q", got.CredentialsGeneration, got.Providers)
	}
	sbs, err := s.ListSandboxes(ctx(t))
	if err != nil || len(sbs) != 2 || !slices.Equal(sbs[1].Providers, []string{"gh"}) || sbs[1].CredentialsGeneration != 1 {
		t.Errorf("ListSandboxes = %+v, %v", sbs, err)
	}
	if got, _ := s.GetProvider(ctx(t), "gh"); !slices.Equal(got.Sandboxes, []string{"a", "b"}) {
		t.Errorf("GetProvider(gh).Sandboxes = %q", got.Sandboxes)
	}
	ps, err := s.ListProviders(ctx(t))
	if err != nil || len(ps) != 2 || ps[0].Name != "aws" || !slices.Equal(ps[0].Sandboxes, []string{"a"}) || !slices.Equal(ps[1].Sandboxes, []string{"a", "b"}) {
		t.Errorf("ListProviders = %+v, %v", ps, err)
	}
	gen, creds, err := s.SandboxCredentials(ctx(t), "a")
	if err != nil || gen != 2 || len(creds) != 2 || creds[0].Name != "aws" || creds[1].Name != "gh" ||
		!bytes.Equal(creds[1].Sealed, want.Sealed) || creds[1].Revision != 1 || creds[1].Settings["header"] != "X-Api-Key" {
		t.Errorf("SandboxCredentials(a) = %d, %+v, %v", gen, creds, err)
	}

	// Rotate: a compare-and-set on the revision; every attached sandbox moves.
	rot := TestProvider("gh")
	rot.Sealed, rot.Revision = []byte("sealed-gh-2"), 2
	r, err := s.RotateProvider(ctx(t), rot, "dave")
	if err != nil || r.Revision != 2 || r.RotatedBy != "dave" || r.RotatedAt == nil || !bytes.Equal(r.Sealed, rot.Sealed) ||
		!slices.Equal(r.Sandboxes, []string{"a", "b"}) || r.CreatedBy != "alice" {
		t.Fatalf("RotateProvider = %+v, %v", r, err)
	}
	if generation(t, s, "a") != 3 || generation(t, s, "b") != 2 {
		t.Errorf("generations after a rotation: a %d b %d, want 3 2", generation(t, s, "a"), generation(t, s, "b"))
	}
	if _, err := s.RotateProvider(ctx(t), rot, "dave"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("RotateProvider at a stale revision = %v, want ErrConflict", err)
	}
	if got, _ := s.GetProvider(ctx(t), "gh"); got.Revision != 2 || generation(t, s, "a") != 3 {
		t.Errorf("a refused rotation changed something: revision %d generation %d", got.Revision, generation(t, s, "a"))
	}
	ghost := TestProvider("ghost")
	ghost.Revision = 2
	if _, err := s.RotateProvider(ctx(t), ghost, "dave"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RotateProvider(ghost) = %v", err)
	}

	// Delete is refused while attached, naming the sandboxes.
	err = s.DeleteProvider(ctx(t), "gh", "erin")
	var inUse *store.InUseError
	if !errors.Is(err, store.ErrInUse) || !errors.As(err, &inUse) || !slices.Equal(inUse.Sandboxes, []string{"a", "b"}) {
		t.Errorf("DeleteProvider of an attached provider = %v", err)
	}
	sb, err = s.DetachProvider(ctx(t), "b", "gh", "erin")
	if err != nil || sb.Providers != nil || sb.CredentialsGeneration != 3 {
		t.Errorf("DetachProvider = %+v, %v", sb, err)
	}
	if _, err := s.DetachProvider(ctx(t), "b", "gh", "erin"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DetachProvider of one not attached = %v, want ErrNotFound", err)
	}
	if generation(t, s, "b") != 3 {
		t.Errorf("a refused detach moved the generation: %d", generation(t, s, "b"))
	}
	gen, creds, err = s.SandboxCredentials(ctx(t), "b")
	if err != nil || gen != 3 || len(creds) != 0 {
		t.Errorf("SandboxCredentials(b) with none = %d, %+v, %v", gen, creds, err)
	}
	if _, _, err := s.SandboxCredentials(ctx(t), "ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SandboxCredentials(ghost) = %v", err)
	}
	// A sandbox's deletion takes its attachments with it.
	if err := s.DeleteSandbox(ctx(t), "a", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProvider(ctx(t), "gh", "erin"); err != nil {
		t.Fatalf("DeleteProvider: %v", err)
	}
	if err := s.DeleteProvider(ctx(t), "gh", "erin"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteProvider again = %v", err)
	}

	wantProviderAudit(t, s)
}

// wantProviderAudit checks the audit entries testProviders' writes left:
// one a write, never with the sealed secret.
func wantProviderAudit(t *testing.T, s *store.Store) {
	t.Helper()
	var actions []string
	for _, e := range Audits(t, s, store.AuditFilter{}) {
		if strings.HasPrefix(e.Action, "provider.") || strings.HasPrefix(e.Action, "sandbox.provider.") {
			actions = append(actions, e.Action+" "+e.Sandbox+" "+e.Target+" "+e.Detail["revision"])
		}
		if strings.Contains(fmt.Sprint(e), "sealed-") {
			t.Errorf("audit entry %+v holds the sealed secret", e)
		}
	}
	slices.Reverse(actions)
	wantActions := []string{
		"provider.create  gh 1", "sandbox.provider.attach a gh 1", "provider.create  aws 1",
		"sandbox.provider.attach a aws 1", "sandbox.provider.attach b gh 1", "provider.rotate  gh 2",
		"sandbox.provider.detach b gh 2", "provider.delete  gh 2",
	}
	if !slices.Equal(actions, wantActions) {
		t.Errorf("audit =\n%q\nwant\n%q", actions, wantActions)
	}
}

// testProvidersConcurrent: attaches, detaches and rotations racing on
// one provider neither deadlock (on Postgres a deadlock is reported as
// ErrConflict) nor lose a rotation, and each sandbox's generation moved
// for each of its attaches and detaches and at most once per rotation.
func testProvidersConcurrent(t *testing.T, s *store.Store) {
	sandboxes := []string{"s1", "s2", "s3", "s4"}
	for _, sb := range sandboxes {
		MustCreate(t, s, sb, false)
	}
	createProvider(t, s, "gh")
	const rotations, rounds = 8, 6
	var wg sync.WaitGroup
	errs := make(chan error, len(sandboxes)*(2*rounds+1)+rotations)
	for _, sb := range sandboxes {
		wg.Go(func() {
			// attach, attach again (a no-op that still locks), detach; and
			// attached at the end
			for i := range rounds + 1 {
				if _, _, err := s.AttachProvider(ctx(t), sb, "gh", "alice"); err != nil {
					errs <- fmt.Errorf("attach %s: %w", sb, err)
				}
				if _, _, err := s.AttachProvider(ctx(t), sb, "gh", "alice"); err != nil {
					errs <- fmt.Errorf("attach %s again: %w", sb, err)
				}
				if i < rounds {
					if _, err := s.DetachProvider(ctx(t), sb, "gh", "alice"); err != nil {
						errs <- fmt.Errorf("detach %s: %w", sb, err)
					}
				}
			}
		})
	}
	for range rotations {
		wg.Go(func() {
			for {
				cur, err := s.GetProvider(ctx(t), "gh")
				if err != nil {
					errs <- err
					return
				}
				p := TestProvider("gh")
				p.Revision = cur.Revision + 1
				_, err = s.RotateProvider(ctx(t), p, "bob")
				if errors.Is(err, store.ErrConflict) && strings.Contains(err.Error(), "is at revision") {
					continue // another rotation came first (a deadlock is not that)
				}
				if err != nil {
					errs <- fmt.Errorf("rotate: %w", err)
				}
				return
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent attach, detach or rotate: %v", err)
	}
	p, err := s.GetProvider(ctx(t), "gh")
	if err != nil || p.Revision != 1+rotations || !slices.Equal(p.Sandboxes, sandboxes) {
		t.Fatalf("after the race: %+v, %v", p, err)
	}
	for _, sb := range sandboxes {
		if g, lo := generation(t, s, sb), int64(2*rounds+1); g < lo || g > lo+rotations {
			t.Errorf("sandbox %s at generation %d, want %d to %d", sb, g, lo, lo+rotations)
		}
	}
}

// testProviderDeleteAttachRace: a delete racing attaches of the same
// provider either deletes it (and each attach finds no provider) or is
// refused as in use, naming the sandboxes, the provider kept; never
// "not found" for a provider that is there.
func testProviderDeleteAttachRace(t *testing.T, s *store.Store) {
	sandboxes := []string{"s1", "s2", "s3"}
	for _, sb := range sandboxes {
		MustCreate(t, s, sb, false)
	}
	for round := range 20 {
		name := fmt.Sprintf("p%d", round)
		createProvider(t, s, name)
		var wg sync.WaitGroup
		attached := make([]bool, len(sandboxes))
		var delErr error
		start := make(chan struct{})
		for i, sb := range sandboxes {
			wg.Go(func() {
				<-start
				_, _, err := s.AttachProvider(ctx(t), sb, name, "alice")
				switch {
				case err == nil:
					attached[i] = true
				case !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), name):
					t.Errorf("attach %s to %s while deleting: %v", name, sb, err)
				}
			})
		}
		wg.Go(func() {
			<-start
			delErr = s.DeleteProvider(ctx(t), name, "erin")
		})
		close(start)
		wg.Wait()
		p, getErr := s.GetProvider(ctx(t), name)
		var inUse *store.InUseError
		switch {
		case delErr == nil:
			if !errors.Is(getErr, store.ErrNotFound) || slices.Contains(attached, true) {
				t.Errorf("round %d: deleted, yet GetProvider = %+v, %v and attached %v", round, p, getErr, attached)
			}
		case errors.As(delErr, &inUse) && errors.Is(delErr, store.ErrInUse):
			if getErr != nil || len(p.Sandboxes) == 0 || len(inUse.Sandboxes) == 0 || !strings.Contains(delErr.Error(), inUse.Sandboxes[0]) {
				t.Errorf("round %d: refused as in use (%v), provider %+v, %v", round, delErr, p, getErr)
			}
		default:
			t.Errorf("round %d: DeleteProvider racing attaches = %v, want nil or in use", round, delErr)
		}
	}
}

// testPrimProviderDeleteReferenced: deleting a provider row a sandbox
// still refers to is ErrInUse, not ErrNotFound, and deletes nothing.
func testPrimProviderDeleteReferenced(t *testing.T, s *store.Store) {
	MustCreate(t, s, "a", false)
	createProvider(t, s, "gh")
	if _, _, err := s.AttachProvider(ctx(t), "a", "gh", "alice"); err != nil {
		t.Fatal(err)
	}
	err := s.InTx(ctx(t), func(tx store.Tx) error { return tx.DeleteProvider(ctx(t), "gh") })
	if !errors.Is(err, store.ErrInUse) || errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteProvider of a referenced row in InTx = %v, want ErrInUse", err)
	}
	if err := s.Driver.DeleteProvider(ctx(t), "gh"); !errors.Is(err, store.ErrInUse) {
		t.Errorf("DeleteProvider of a referenced row = %v, want ErrInUse", err)
	}
	if p, err := s.GetProvider(ctx(t), "gh"); err != nil || !slices.Equal(p.Sandboxes, []string{"a"}) {
		t.Errorf("after refused deletes: %+v, %v", p, err)
	}
	if err := s.Driver.DeleteProvider(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteProvider(nope) = %v, want ErrNotFound", err)
	}
}
