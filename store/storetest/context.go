package storetest

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- boundary and credentialed hosts ----

func testSandboxBoundary(t *testing.T, s *store.Store) {
	created, _ := MustCreate(t, s, "bounded", true)
	if created.Boundary != nil || created.BoundaryHash != "" {
		t.Errorf("CreateSandbox boundary = %q, %q; want none", created.Boundary, created.BoundaryHash)
	}
	if sb := GetSandbox(t, s, "bounded"); sb.Boundary != nil || sb.BoundaryHash != "" {
		t.Errorf("GetSandbox boundary of a new sandbox = %q, %q; want none", sb.Boundary, sb.BoundaryHash)
	}

	d1, h1 := Doc(11)
	arg := bytes.Clone(d1)
	sb, err := s.SetSandboxBoundary(ctx(t), "bounded", arg, h1, "alice")
	if err != nil {
		t.Fatalf("SetSandboxBoundary: %v", err)
	}
	arg[0] = 'X' // the store must have kept its own copy
	if !bytes.Equal(sb.Boundary, d1) || sb.BoundaryHash != h1 || sb.CurrentVersion != 1 || sb.Name != "bounded" {
		t.Errorf("SetSandboxBoundary = %+v", sb)
	}
	got := GetSandbox(t, s, "bounded")
	if !bytes.Equal(got.Boundary, d1) || got.BoundaryHash != h1 || got.CurrentVersion != 1 || got.CurrentHash != created.CurrentHash {
		t.Errorf("GetSandbox after SetSandboxBoundary = %+v", got)
	}
	sbs, err := s.ListSandboxes(ctx(t))
	if err != nil || len(sbs) != 1 || !bytes.Equal(sbs[0].Boundary, d1) || sbs[0].BoundaryHash != h1 {
		t.Errorf("ListSandboxes after SetSandboxBoundary = %+v, %v", sbs, err)
	}
	e := FindAudit(t, Audits(t, s, store.AuditFilter{Sandbox: "bounded"}), store.ActionBoundarySet, "bounded")
	if e.Actor != "alice" || e.BeforeHash != "" || e.AfterHash != h1 {
		t.Errorf("first boundary audit = %+v", e)
	}

	d2, h2 := Doc(12)
	if _, err := s.SetSandboxBoundary(ctx(t), "bounded", d2, h2, "bob"); err != nil {
		t.Fatalf("SetSandboxBoundary(replace): %v", err)
	}
	e = FindAudit(t, Audits(t, s, store.AuditFilter{Sandbox: "bounded"}), store.ActionBoundarySet, "bounded")
	if e.Actor != "bob" || e.BeforeHash != h1 || e.AfterHash != h2 {
		t.Errorf("replacing boundary audit = %+v, want %s -> %s", e, h1, h2)
	}

	// An empty document removes it; the hash given is ignored.
	sb, err = s.SetSandboxBoundary(ctx(t), "bounded", nil, "ignored", "carol")
	if err != nil {
		t.Fatalf("SetSandboxBoundary(clear): %v", err)
	}
	if sb.Boundary != nil || sb.BoundaryHash != "" {
		t.Errorf("SetSandboxBoundary(clear) = %q, %q; want none", sb.Boundary, sb.BoundaryHash)
	}
	if got := GetSandbox(t, s, "bounded"); got.Boundary != nil || got.BoundaryHash != "" {
		t.Errorf("GetSandbox after clearing = %q, %q; want none", got.Boundary, got.BoundaryHash)
	}
	e = FindAudit(t, Audits(t, s, store.AuditFilter{Sandbox: "bounded"}), store.ActionBoundarySet, "bounded")
	if e.Actor != "carol" || e.BeforeHash != h2 || e.AfterHash != "" {
		t.Errorf("clearing boundary audit = %+v", e)
	}
	if _, err := s.SetSandboxBoundary(ctx(t), "bounded", []byte{}, "", "carol"); err != nil {
		t.Errorf("SetSandboxBoundary(clear with empty document): %v", err)
	}

	before := len(Audits(t, s, store.AuditFilter{}))
	_, err = s.SetSandboxBoundary(ctx(t), "missing", d1, h1, "alice")
	WantErr(t, "SetSandboxBoundary(missing sandbox)", err, store.ErrNotFound)
	if after := len(Audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("SetSandboxBoundary(missing sandbox) wrote %d audit entries", after-before)
	}
}

func testCredentialedHosts(t *testing.T, s *store.Store) {
	created, _ := MustCreate(t, s, "creds", false)
	if created.CredentialedHosts != nil {
		t.Errorf("CreateSandbox credentialed hosts = %q, want nil", created.CredentialedHosts)
	}
	if sb := GetSandbox(t, s, "creds"); sb.CredentialedHosts != nil {
		t.Errorf("GetSandbox credentialed hosts of a new sandbox = %q, want nil", sb.CredentialedHosts)
	}

	sb, err := s.UpdateCredentialedHosts(ctx(t), "creds",
		[]string{"b.example.com:443", "a.example.com:443", "b.example.com:443"}, nil, "alice")
	if err != nil {
		t.Fatalf("UpdateCredentialedHosts(add): %v", err)
	}
	want := []string{"a.example.com:443", "b.example.com:443"}
	if !slices.Equal(sb.CredentialedHosts, want) || sb.Name != "creds" {
		t.Errorf("UpdateCredentialedHosts(add) = %+v, want hosts %q", sb, want)
	}
	if got := GetSandbox(t, s, "creds"); !slices.Equal(got.CredentialedHosts, want) {
		t.Errorf("GetSandbox hosts = %q, want %q", got.CredentialedHosts, want)
	}
	e := FindAudit(t, Audits(t, s, store.AuditFilter{Sandbox: "creds"}), store.ActionCredentials, "creds")
	if e.Actor != "alice" || e.Detail["before"] != "" || e.Detail["after"] != "a.example.com:443,b.example.com:443" {
		t.Errorf("credentials audit = %+v", e)
	}

	// Add, then remove: an entry both added and removed ends up absent;
	// removing an absent entry is fine; hosts are kept lower-case.
	sb, err = s.UpdateCredentialedHosts(ctx(t), "creds",
		[]string{"C.Example.com:8443", "d.example.com:443"},
		[]string{"a.example.com:443", "absent.example.com:1", "d.example.com:443"}, "bob")
	if err != nil {
		t.Fatalf("UpdateCredentialedHosts(add and remove): %v", err)
	}
	want = []string{"b.example.com:443", "c.example.com:8443"}
	if !slices.Equal(sb.CredentialedHosts, want) {
		t.Errorf("UpdateCredentialedHosts(add and remove) hosts = %q, want %q", sb.CredentialedHosts, want)
	}
	sbs, err := s.ListSandboxes(ctx(t))
	if err != nil || len(sbs) != 1 || !slices.Equal(sbs[0].CredentialedHosts, want) {
		t.Errorf("ListSandboxes = %+v, %v; want hosts %q", sbs, err, want)
	}
	e = FindAudit(t, Audits(t, s, store.AuditFilter{Sandbox: "creds"}), store.ActionCredentials, "creds")
	if e.Actor != "bob" || e.Detail["before"] != "a.example.com:443,b.example.com:443" ||
		e.Detail["after"] != "b.example.com:443,c.example.com:8443" {
		t.Errorf("second credentials audit = %+v", e)
	}

	sb, err = s.UpdateCredentialedHosts(ctx(t), "creds", nil, want, "carol")
	if err != nil || sb.CredentialedHosts != nil {
		t.Errorf("UpdateCredentialedHosts(remove all) = %q, %v; want nil", sb.CredentialedHosts, err)
	}
	if got := GetSandbox(t, s, "creds"); got.CredentialedHosts != nil {
		t.Errorf("GetSandbox hosts after removing all = %q, want nil", got.CredentialedHosts)
	}
	e = FindAudit(t, Audits(t, s, store.AuditFilter{Sandbox: "creds"}), store.ActionCredentials, "creds")
	if e.Actor != "carol" || e.Detail["before"] != "b.example.com:443,c.example.com:8443" || e.Detail["after"] != "" {
		t.Errorf("third credentials audit = %+v", e)
	}

	before := len(Audits(t, s, store.AuditFilter{}))
	_, err = s.UpdateCredentialedHosts(ctx(t), "missing", []string{"a.example.com:443"}, nil, "alice")
	WantErr(t, "UpdateCredentialedHosts(missing sandbox)", err, store.ErrNotFound)
	if after := len(Audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("UpdateCredentialedHosts(missing sandbox) wrote %d audit entries", after-before)
	}
}

// ---- approval rules ----

func testApprovalPolicies(t *testing.T, s *store.Store) {
	_, err := s.GetApprovalPolicy(ctx(t))
	WantErr(t, "GetApprovalPolicy(none)", err, store.ErrNotFound)

	m1 := "package portcullis.approval\n\ndefault allow := false\n"
	ap, err := s.SetApprovalPolicy(ctx(t), m1, HashOf([]byte(m1)), "alice")
	if err != nil {
		t.Fatalf("SetApprovalPolicy: %v", err)
	}
	if ap.Version != 1 || ap.Module != m1 || ap.Hash != HashOf([]byte(m1)) || ap.Author != "alice" {
		t.Errorf("SetApprovalPolicy = %+v", ap)
	}
	Recent(t, "approval policy CreatedAt", ap.CreatedAt)
	if got, err := s.GetApprovalPolicy(ctx(t)); err != nil || got != ap {
		t.Errorf("GetApprovalPolicy = %+v, %v; want %+v", got, err, ap)
	}

	m2 := m1 + "allow if count(input.approvals) >= 2\n"
	ap2, err := s.SetApprovalPolicy(ctx(t), m2, HashOf([]byte(m2)), "bob")
	if err != nil || ap2.Version != 2 || ap2.Module != m2 {
		t.Fatalf("SetApprovalPolicy(second) = %+v, %v", ap2, err)
	}
	if got, err := s.GetApprovalPolicy(ctx(t)); err != nil || got != ap2 {
		t.Errorf("GetApprovalPolicy after the second = %+v, %v; want %+v", got, err, ap2)
	}
	e := FindAudit(t, Audits(t, s, store.AuditFilter{}), store.ActionApprovalRules, "2")
	if e.Actor != "bob" || e.BeforeHash != ap.Hash || e.AfterHash != ap2.Hash {
		t.Errorf("approval rules audit = %+v", e)
	}

	auditBefore := len(Audits(t, s, store.AuditFilter{}))
	_, err = s.SetApprovalPolicy(ctx(t), "", "h", "alice")
	WantPlainError(t, "SetApprovalPolicy(empty module)", err)
	_, err = s.SetApprovalPolicy(ctx(t), m1, "", "alice")
	WantPlainError(t, "SetApprovalPolicy(empty hash)", err)
	if after := len(Audits(t, s, store.AuditFilter{})); after != auditBefore {
		t.Errorf("refused approval rules wrote %d audit entries", after-auditBefore)
	}

	// Concurrent setters each get their own next version.
	const n = 8
	got := make([]int64, n)
	errs := race(n, func(i int) error {
		m := fmt.Sprintf("package portcullis.approval\n# %d\n", i)
		ap, err := s.SetApprovalPolicy(ctx(t), m, HashOf([]byte(m)), "w"+strconv.Itoa(i))
		got[i] = ap.Version
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent SetApprovalPolicy %d: %v", i, err)
		}
	}
	slices.Sort(got)
	for i, v := range got {
		if v != int64(3+i) {
			t.Errorf("concurrent versions = %v, want 3 to %d", got, 2+n)
			break
		}
	}
	if last, err := s.GetApprovalPolicy(ctx(t)); err != nil || last.Version != 2+n {
		t.Errorf("GetApprovalPolicy after concurrent sets = %+v, %v", last, err)
	}
}
