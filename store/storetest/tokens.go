package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// ---- tokens ----

func testTokenCreateAndLookup(t *testing.T, s *store.Store) {
	in := NewToken("ops-alice", store.RoleOperator, "")
	got, err := s.CreateToken(ctx(t), in, "root")
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	if got.ID == 0 || got.Name != in.Name || got.Role != store.RoleOperator || got.Sandbox != "" ||
		got.Hash != in.Hash || got.CreatedBy != "tester" || got.LastUsedAt != nil || got.RevokedAt != nil {
		t.Errorf("CreateToken = %+v", got)
	}
	Recent(t, "Token.CreatedAt", got.CreatedAt)

	by, err := s.TokenByHash(ctx(t), in.Hash)
	if err != nil {
		t.Fatalf("TokenByHash: %v", err)
	}
	if by.ID != got.ID || by.Name != in.Name || by.Hash != in.Hash || by.Role != in.Role || !by.CreatedAt.Equal(got.CreatedAt) {
		t.Errorf("TokenByHash = %+v, want %+v", by, got)
	}
	_, err = s.TokenByHash(ctx(t), strings.Repeat("0", 64))
	WantErr(t, "TokenByHash(unknown)", err, store.ErrNotFound)

	_, err = s.CreateToken(ctx(t), NewToken("ops-alice", store.RoleAdmin, ""), "root")
	WantErr(t, "CreateToken(duplicate name)", err, store.ErrAlreadyExists)
	if err := s.RevokeToken(ctx(t), "ops-alice", "root"); err != nil {
		t.Fatalf("RevokeToken: %v", err)
	}
	_, err = s.CreateToken(ctx(t), NewToken("ops-alice", store.RoleAdmin, ""), "root")
	WantErr(t, "CreateToken(name of a revoked token)", err, store.ErrAlreadyExists)

	// A sandbox token made directly needs its sandbox.
	_, err = s.CreateToken(ctx(t), NewToken("sb", store.RoleSandbox, "nowhere"), "root")
	WantErr(t, "CreateToken(sandbox token, missing sandbox)", err, store.ErrNotFound)
	MustCreate(t, s, "somewhere", false)
	st, err := s.CreateToken(ctx(t), NewToken("sb", store.RoleSandbox, "somewhere"), "root")
	if err != nil || st.Sandbox != "somewhere" || st.Role != store.RoleSandbox {
		t.Errorf("CreateToken(sandbox token) = %+v, %v", st, err)
	}

	e := FindAudit(t, Audits(t, s, store.AuditFilter{}), store.ActionTokenCreate, "ops-alice")
	if e.Actor != "root" || e.Detail["role"] != store.RoleOperator {
		t.Errorf("token.create audit = %+v", e)
	}
}

func testTokenInvalid(t *testing.T, s *store.Store) {
	for _, tok := range []store.Token{
		NewToken("x", "superuser", ""),
		NewToken("x", store.RoleAdmin, "some-sandbox"),
		NewToken("x", store.RoleSandbox, ""),
		NewToken("", store.RoleAdmin, ""),
		{Name: "x", Role: store.RoleAdmin},
	} {
		if _, err := s.CreateToken(ctx(t), tok, "root"); err == nil {
			t.Errorf("CreateToken(%+v) succeeded, want an error", tok)
		}
	}
	if ts, err := s.ListTokens(ctx(t)); err != nil || len(ts) != 0 {
		t.Errorf("tokens after invalid creates = %v, %v", ts, err)
	}
}

// testInvalidInput: inputs the schema cannot hold are refused before the
// database is touched, with a plain error (not a sentinel the gateway
// would turn into NotFound or Conflict), and nothing is written.
func testInvalidInput(t *testing.T, s *store.Store) {
	MustCreate(t, s, "box", true)
	before := len(Audits(t, s, store.AuditFilter{}))
	d, h := Doc(2)
	tok := NewToken("sandbox-new", "", "")
	for what, call := range map[string]func() error{
		"CreateSandbox(empty name)": func() error {
			_, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Actor: "a", Token: tok})
			return err
		},
		"CreateSandbox(token without hash)": func() error {
			_, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "new", Actor: "a", Token: store.Token{Name: "n"}})
			return err
		},
		"CreateSandbox(policy without document)": func() error {
			_, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "new", Actor: "a", Token: tok, Policy: &store.PolicyVersion{Hash: h}})
			return err
		},
		"AppendVersion(empty sandbox)": func() error {
			_, err := AppendVersion(ctx(t), s, store.AppendPolicy{ExpectedVersion: 1, Hash: h, Document: d})
			return err
		},
		"AppendVersion(negative expected version)": func() error {
			_, err := AppendVersion(ctx(t), s, store.AppendPolicy{Sandbox: "box", ExpectedVersion: -1, Hash: h, Document: d})
			return err
		},
		"AppendVersion(empty hash)": func() error {
			_, err := AppendVersion(ctx(t), s, store.AppendPolicy{Sandbox: "box", ExpectedVersion: 1, Document: d})
			return err
		},
		"AppendVersion(empty document)": func() error {
			_, err := AppendVersion(ctx(t), s, store.AppendPolicy{Sandbox: "box", ExpectedVersion: 1, Hash: h})
			return err
		},
		"RotateSandboxToken(empty hash)": func() error {
			_, err := s.RotateSandboxToken(ctx(t), "box", "a", store.Token{Name: "n"})
			return err
		},
	} {
		WantPlainError(t, what, call())
	}
	if after := len(Audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("invalid inputs wrote %d audit entries", after-before)
	}
	if sb, err := s.GetSandbox(ctx(t), "box"); err != nil || sb.CurrentVersion != 1 {
		t.Errorf("sandbox after invalid inputs = %+v, %v", sb, err)
	}
}

// testCallerInputUnchanged: the store fills in defaults on its own copy;
// the caller's values (which it may reuse) are left as they were.
func testCallerInputUnchanged(t *testing.T, s *store.Store) {
	d, h := Doc(1)
	pol := &store.PolicyVersion{Hash: h, Document: d, Author: "alice"}
	if _, err := s.CreateSandbox(ctx(t), store.CreateSandbox{Name: "box", Actor: "alice", Token: NewToken("sandbox-box", "", ""), Policy: pol}); err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	if pol.Source != "" {
		t.Errorf("CreateSandbox set the caller's Policy.Source to %q", pol.Source)
	}
	if pv, err := s.GetPolicyVersion(ctx(t), "box", 1); err != nil || pv.Source != store.SourceCreate {
		t.Errorf("version 1 = %+v, %v; want source %q", pv, err, store.SourceCreate)
	}
}

func testTokenList(t *testing.T, s *store.Store) {
	MustCreate(t, s, "box", false) // token "sandbox-box"
	for _, tok := range []store.Token{NewToken("zed", store.RoleAdmin, ""), NewToken("amy", store.RoleOperator, "")} {
		if _, err := s.CreateToken(ctx(t), tok, "root"); err != nil {
			t.Fatalf("CreateToken: %v", err)
		}
	}
	if err := s.RevokeToken(ctx(t), "amy", "root"); err != nil {
		t.Fatal(err)
	}
	ts, err := s.ListTokens(ctx(t))
	if err != nil {
		t.Fatalf("ListTokens: %v", err)
	}
	var names []string
	for _, tk := range ts {
		names = append(names, tk.Name)
		if tk.Hash != "" {
			t.Errorf("ListTokens returned the hash of %q", tk.Name)
		}
		if tk.ID == 0 || tk.Role == "" {
			t.Errorf("ListTokens entry = %+v", tk)
		}
	}
	if !slices.Equal(names, []string{"amy", "sandbox-box", "zed"}) {
		t.Errorf("ListTokens names = %v, want [amy sandbox-box zed]", names)
	}
	if ts[0].RevokedAt == nil || ts[2].RevokedAt != nil {
		t.Errorf("revoked flags wrong: %+v", ts)
	}
	if ts[1].Sandbox != "box" || ts[1].Role != store.RoleSandbox {
		t.Errorf("sandbox token in list = %+v", ts[1])
	}
}

func testTokenRevoke(t *testing.T, s *store.Store) {
	tok := NewToken("temp", store.RoleOperator, "")
	if _, err := s.CreateToken(ctx(t), tok, "root"); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeToken(ctx(t), "temp", "root"); err != nil {
		t.Fatalf("RevokeToken: %v", err)
	}
	got, err := s.TokenByHash(ctx(t), tok.Hash)
	if err != nil || got.RevokedAt == nil {
		t.Fatalf("TokenByHash(revoked) = %+v, %v; want found and revoked", got, err)
	}
	Recent(t, "RevokedAt", *got.RevokedAt)
	WantErr(t, "RevokeToken(twice)", s.RevokeToken(ctx(t), "temp", "root"), store.ErrNotFound)
	WantErr(t, "RevokeToken(missing)", s.RevokeToken(ctx(t), "never", "root"), store.ErrNotFound)

	again, err := s.TokenByHash(ctx(t), tok.Hash)
	if err != nil || again.RevokedAt == nil || !again.RevokedAt.Equal(*got.RevokedAt) {
		t.Errorf("second revoke changed the token: %+v", again)
	}
	es := Audits(t, s, store.AuditFilter{})
	e := FindAudit(t, es, store.ActionTokenRevoke, "temp")
	if e.Actor != "root" {
		t.Errorf("token.revoke audit = %+v", e)
	}
	revokes := 0
	for _, e := range es {
		if e.Action == store.ActionTokenRevoke {
			revokes++
		}
	}
	if revokes != 1 {
		t.Errorf("token.revoke audit entries = %d, want 1", revokes)
	}
}

func testTokenTouch(t *testing.T, s *store.Store) {
	tok, err := s.CreateToken(ctx(t), NewToken("toucher", store.RoleOperator, ""), "root")
	if err != nil {
		t.Fatal(err)
	}
	before := len(Audits(t, s, store.AuditFilter{}))
	// Microsecond precision: the finest both engines keep.
	t1 := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	if err := s.TouchToken(ctx(t), tok.ID, t1); err != nil {
		t.Fatalf("TouchToken: %v", err)
	}
	got, err := s.TokenByHash(ctx(t), tok.Hash)
	if err != nil || got.LastUsedAt == nil || !got.LastUsedAt.Equal(t1) {
		t.Fatalf("LastUsedAt = %v, %v; want %v", got.LastUsedAt, err, t1)
	}
	// An older, late-arriving touch does not move it back.
	if err := s.TouchToken(ctx(t), tok.ID, t1.Add(-time.Hour)); err != nil {
		t.Fatalf("TouchToken(older): %v", err)
	}
	if got, _ := s.TokenByHash(ctx(t), tok.Hash); got.LastUsedAt == nil || !got.LastUsedAt.Equal(t1) {
		t.Errorf("LastUsedAt after older touch = %v, want %v", got.LastUsedAt, t1)
	}
	t2 := t1.Add(time.Minute)
	if err := s.TouchToken(ctx(t), tok.ID, t2.In(time.FixedZone("X", 3600))); err != nil {
		t.Fatalf("TouchToken(newer): %v", err)
	}
	if got, _ := s.TokenByHash(ctx(t), tok.Hash); got.LastUsedAt == nil || !got.LastUsedAt.Equal(t2) || got.LastUsedAt.Location() != time.UTC {
		t.Errorf("LastUsedAt after newer touch = %v, want %v in UTC", got.LastUsedAt, t2)
	}
	WantErr(t, "TouchToken(missing)", s.TouchToken(ctx(t), tok.ID+1000, t1), store.ErrNotFound)
	if after := len(Audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("TouchToken wrote %d audit entries, want none", after-before)
	}
}

func testTokenCount(t *testing.T, s *store.Store) {
	for _, role := range []string{store.RoleAdmin, store.RoleOperator, store.RoleSandbox} {
		if n, err := s.CountTokens(ctx(t), role); err != nil || n != 0 {
			t.Errorf("CountTokens(%s) on empty store = %d, %v", role, n, err)
		}
	}
	for _, tok := range []store.Token{
		NewToken("a1", store.RoleAdmin, ""), NewToken("a2", store.RoleAdmin, ""), NewToken("o1", store.RoleOperator, ""),
	} {
		if _, err := s.CreateToken(ctx(t), tok, "root"); err != nil {
			t.Fatal(err)
		}
	}
	MustCreate(t, s, "s1", false)
	MustCreate(t, s, "s2", false)
	if err := s.RevokeToken(ctx(t), "a1", "root"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx(t), "s2", "root"); err != nil {
		t.Fatal(err)
	}
	for role, want := range map[string]int{store.RoleAdmin: 1, store.RoleOperator: 1, store.RoleSandbox: 1, "nobody": 0} {
		if n, err := s.CountTokens(ctx(t), role); err != nil || n != want {
			t.Errorf("CountTokens(%s) = %d, %v; want %d", role, n, err, want)
		}
	}
}

// testLastAdmin: revoking the last live admin token is refused, and two
// admins revoking each other at once cannot both succeed.
func testLastAdmin(t *testing.T, s *store.Store) {
	for _, tok := range []store.Token{NewToken("a1", store.RoleAdmin, ""), NewToken("a2", store.RoleAdmin, ""), NewToken("op", store.RoleOperator, "")} {
		if _, err := s.CreateToken(ctx(t), tok, "root"); err != nil {
			t.Fatal(err)
		}
	}
	errs := make(chan error, 2)
	for _, name := range []string{"a1", "a2"} {
		go func() { errs <- s.RevokeToken(ctx(t), name, "root") }()
	}
	var ok, last int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, store.ErrLastAdmin):
			last++
		default:
			t.Errorf("concurrent revoke: %v", err)
		}
	}
	if ok != 1 || last != 1 {
		t.Fatalf("two admins revoking each other: %d succeeded, %d refused as last admin; want 1 and 1", ok, last)
	}
	if n, err := s.CountTokens(ctx(t), store.RoleAdmin); err != nil || n != 1 {
		t.Fatalf("live admins = %d, %v; want 1", n, err)
	}
	before := Audits(t, s, store.AuditFilter{})
	for _, name := range []string{"a1", "a2"} {
		if err := s.RevokeToken(ctx(t), name, "root"); err != nil && !errors.Is(err, store.ErrLastAdmin) && !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoke %s: %v", name, err)
		}
	}
	if n, _ := s.CountTokens(ctx(t), store.RoleAdmin); n != 1 {
		t.Fatalf("the last admin was revoked: %d live admins", n)
	}
	if after := Audits(t, s, store.AuditFilter{}); len(after) != len(before) {
		t.Errorf("a refused revocation wrote to the audit log")
	}
	if err := s.RevokeToken(ctx(t), "op", "root"); err != nil {
		t.Errorf("revoking an operator with one admin left: %v", err)
	}
}

// testTokenSentry: a sentry token is stored, listed and revoked like an
// operator's, scoped by its name (the event source) and never by a
// sandbox; a name that is not a valid source is refused with a plain error
// naming it, and nothing is written.
// testTokenSentrySandboxes: a sentry token keeps the sandbox globs it was
// created with (read back by hash and listed); globs that do not parse,
// hold a comma or repeat, and globs on another role, are refused with a
// plain error naming them, and store and audit nothing.
func testTokenSentrySandboxes(t *testing.T, s *store.Store) {
	tok := NewToken("urn:dpu:node-17", store.RoleSentry, "")
	tok.Sandboxes = []string{"support", "team-a-*"}
	got, err := s.CreateToken(ctx(t), tok, "root")
	if err != nil || !slices.Equal(got.Sandboxes, tok.Sandboxes) {
		t.Fatalf("CreateToken(sentry, sandboxes) = %+v, %v", got, err)
	}
	if by, err := s.TokenByHash(ctx(t), tok.Hash); err != nil || !slices.Equal(by.Sandboxes, tok.Sandboxes) {
		t.Errorf("TokenByHash = %+v, %v; want sandboxes %v", by, err, tok.Sandboxes)
	}
	plain := NewToken("urn:dpu:node-18", store.RoleSentry, "")
	if _, err := s.CreateToken(ctx(t), plain, "root"); err != nil {
		t.Fatal(err)
	}
	before := len(Audits(t, s, store.AuditFilter{}))
	for name, bad := range map[string]store.Token{
		"bad glob":    {Name: "urn:dpu:a", Role: store.RoleSentry, Hash: "h-a", Sandboxes: []string{"team-[a"}},
		"comma":       {Name: "urn:dpu:b", Role: store.RoleSentry, Hash: "h-b", Sandboxes: []string{"a,b"}},
		"empty":       {Name: "urn:dpu:c", Role: store.RoleSentry, Hash: "h-c", Sandboxes: []string{""}},
		"twice":       {Name: "urn:dpu:d", Role: store.RoleSentry, Hash: "h-d", Sandboxes: []string{"a", "a"}},
		"operator":    {Name: "olive", Role: store.RoleOperator, Hash: "h-e", Sandboxes: []string{"a"}},
		"sandbox tok": {Name: "box-token", Role: store.RoleSandbox, Sandbox: "box", Hash: "h-f", Sandboxes: []string{"a"}},
	} {
		_, err := s.CreateToken(ctx(t), bad, "root")
		WantPlainError(t, "CreateToken("+name+")", err)
		if err != nil && !strings.Contains(err.Error(), "sandboxes") {
			t.Errorf("CreateToken(%s) = %v, want an error naming the sandboxes", name, err)
		}
	}
	if after := len(Audits(t, s, store.AuditFilter{})); after != before {
		t.Errorf("refused tokens wrote %d audit entries", after-before)
	}
	ts, err := s.ListTokens(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Name != tok.Name || !slices.Equal(ts[0].Sandboxes, tok.Sandboxes) || ts[1].Sandboxes != nil {
		t.Errorf("ListTokens = %+v, want the two sentry tokens, the first with its sandboxes", ts)
	}
	for _, c := range []struct {
		sandbox string
		in      bool
	}{{"support", true}, {"team-a-1", true}, {"team-b-1", false}, {"supports", false}, {"", false}} {
		if got := store.InSandboxScope(tok.Sandboxes, c.sandbox); got != c.in {
			t.Errorf("InSandboxScope(%v, %q) = %v, want %v", tok.Sandboxes, c.sandbox, got, c.in)
		}
	}
	if !store.InSandboxScope(nil, "anything") {
		t.Error("a token without sandboxes is not limited")
	}
}

func testTokenSentry(t *testing.T, s *store.Store) {
	const source = "urn:dpu:node-17"
	got, err := s.CreateToken(ctx(t), NewToken(source, store.RoleSentry, ""), "root")
	if err != nil || got.Role != store.RoleSentry || got.Name != source || got.Sandbox != "" {
		t.Fatalf("CreateToken(sentry) = %+v, %v", got, err)
	}
	if by, err := s.TokenByHash(ctx(t), got.Hash); err != nil || by.Role != store.RoleSentry || by.Name != source {
		t.Errorf("TokenByHash(sentry) = %+v, %v", by, err)
	}
	if _, err := s.CreateToken(ctx(t), NewToken("sentry/node-18", store.RoleSentry, ""), "root"); err != nil {
		t.Fatalf("CreateToken(sentry, path source): %v", err)
	}
	if n, err := s.CountTokens(ctx(t), store.RoleSentry); err != nil || n != 2 {
		t.Errorf("CountTokens(sentry) = %d, %v; want 2", n, err)
	}

	before := len(Audits(t, s, store.AuditFilter{}))
	for name, tok := range map[string]store.Token{
		"scoped to a sandbox": NewToken("urn:dpu:node-19", store.RoleSentry, "box"),
		"space":               NewToken("node 19", store.RoleSentry, ""),
		"control character":   NewToken("node\t19", store.RoleSentry, ""),
		"non-ASCII":           NewToken("nœud-19", store.RoleSentry, ""),
		"too long":            NewToken(strings.Repeat("n", 256), store.RoleSentry, ""),
	} {
		_, err := s.CreateToken(ctx(t), tok, "root")
		WantPlainError(t, "CreateToken(sentry, "+name+")", err)
		if err != nil && name != "scoped to a sandbox" && !strings.Contains(err.Error(), "source") {
			t.Errorf("CreateToken(sentry, %s) = %v, want an error naming the source", name, err)
		}
	}
	if _, err := s.CreateToken(ctx(t), NewToken(strings.Repeat("n", 255), store.RoleSentry, ""), "root"); err != nil {
		t.Errorf("CreateToken(sentry, 255-byte source): %v", err)
	}
	if after := len(Audits(t, s, store.AuditFilter{})); after != before+1 {
		t.Errorf("invalid sentry tokens wrote %d audit entries, want only the valid one's", after-before-1)
	}

	if err := s.RevokeToken(ctx(t), source, "root"); err != nil {
		t.Fatalf("RevokeToken(sentry): %v", err)
	}
	ts, err := s.ListTokens(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, tk := range ts {
		if tk.Role != store.RoleSentry {
			t.Errorf("ListTokens has %+v, want only sentry tokens", tk)
		}
		if (tk.Name == source) != (tk.RevokedAt != nil) {
			t.Errorf("ListTokens entry %q revoked at %v", tk.Name, tk.RevokedAt)
		}
		listed = append(listed, tk.Name)
	}
	if len(listed) != 3 || !slices.Contains(listed, source) || !slices.Contains(listed, "sentry/node-18") {
		t.Errorf("ListTokens names = %v", listed)
	}
	if n, err := s.CountTokens(ctx(t), store.RoleSentry); err != nil || n != 2 {
		t.Errorf("CountTokens(sentry) after revoke = %d, %v; want 2", n, err)
	}
}

// testTokenExpiry: a token's expiry is stored, read back by hash and in
// the list, and audited; a token without one never expires.
func testTokenExpiry(t *testing.T, s *store.Store) {
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	in := NewToken("ci", store.RoleAdmin, "")
	in.ExpiresAt = &at
	got, err := s.CreateToken(ctx(t), in, "root")
	if err != nil {
		t.Fatalf("CreateToken: %v", err)
	}
	if got.ExpiresAt == nil || !got.ExpiresAt.Equal(at) {
		t.Errorf("CreateToken ExpiresAt = %v, want %v", got.ExpiresAt, at)
	}
	by, err := s.TokenByHash(ctx(t), in.Hash)
	if err != nil || by.ExpiresAt == nil || !by.ExpiresAt.Equal(at) {
		t.Errorf("TokenByHash ExpiresAt = %v, %v; want %v", by.ExpiresAt, err, at)
	}
	if by.Expired(at.Add(-time.Second)) || !by.Expired(at) {
		t.Errorf("Expired around %v wrong", at)
	}
	forever, err := s.CreateToken(ctx(t), NewToken("forever", store.RoleOperator, ""), "root")
	if err != nil || forever.ExpiresAt != nil || forever.Expired(time.Now().Add(100*365*24*time.Hour)) {
		t.Errorf("token without expiry = %+v, %v", forever, err)
	}
	list, err := s.ListTokens(ctx(t))
	if err != nil || len(list) != 2 || list[0].Name != "ci" || list[0].ExpiresAt == nil || !list[0].ExpiresAt.Equal(at) || list[1].ExpiresAt != nil {
		t.Errorf("ListTokens = %+v, %v", list, err)
	}
	e := FindAudit(t, Audits(t, s, store.AuditFilter{}), store.ActionTokenCreate, "ci")
	if e.Detail["expires_at"] != at.Format(time.RFC3339Nano) {
		t.Errorf("token.create audit detail = %v, want expires_at %s", e.Detail, at.Format(time.RFC3339Nano))
	}
}
