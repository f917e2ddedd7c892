package store

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"unicode"
)

// Input checks every engine runs before it touches the database, so both
// refuse the same inputs with the same messages. They are plain errors,
// not sentinels: the caller sent something the schema cannot hold.

// Check reports whether t can be stored: a name, a hash and a known role,
// with a sandbox exactly when the role is sandbox, and a sentry token's name
// a valid event source.
func (t Token) Check() error {
	switch {
	case t.Name == "":
		return errors.New("invalid token: empty name")
	case t.Hash == "":
		return errors.New("invalid token: empty hash")
	}
	if len(t.Sandboxes) > 0 && t.Role != RoleSentry {
		return fmt.Errorf("invalid token: role %s cannot be limited to sandboxes (only a sentry token)", t.Role)
	}
	if err := CheckSandboxGlobs(t.Sandboxes); err != nil {
		return fmt.Errorf("invalid token: sandboxes: %w", err)
	}
	switch t.Role {
	case RoleAdmin, RoleOperator:
		if t.Sandbox != "" {
			return fmt.Errorf("invalid token: role %s cannot be scoped to a sandbox", t.Role)
		}
	case RoleSandbox:
		if t.Sandbox == "" {
			return errors.New("invalid token: role sandbox needs a sandbox")
		}
	case RoleSentry:
		if t.Sandbox != "" {
			return fmt.Errorf("invalid token: role %s cannot be scoped to a sandbox", t.Role)
		}
		if err := CheckSentrySource(t.Name); err != nil {
			return fmt.Errorf("invalid token: %w", err)
		}
	default:
		return fmt.Errorf("invalid token: unknown role %q", t.Role)
	}
	return nil
}

// Bounds of a sentry token's sandbox globs.
const (
	maxSandboxGlobs   = 64
	maxSandboxGlobLen = 255
)

// CheckSandboxGlobs reports whether globs can limit a sentry token: at
// most 64, each 1 to 255 bytes of printable ASCII without spaces or
// commas (they are stored comma-separated) and a valid path.Match
// pattern, none twice.
func CheckSandboxGlobs(globs []string) error {
	if len(globs) > maxSandboxGlobs {
		return fmt.Errorf("%d globs, at most %d", len(globs), maxSandboxGlobs)
	}
	for i, g := range globs {
		if g == "" || len(g) > maxSandboxGlobLen {
			return fmt.Errorf("glob %d (%q) must be 1 to %d bytes", i, g, maxSandboxGlobLen)
		}
		for j := 0; j < len(g); j++ {
			if c := g[j]; c <= ' ' || c > '~' || c == ',' {
				return fmt.Errorf("glob %q must be printable ASCII without spaces or commas (byte %d is %#x)", g, j, c)
			}
		}
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("glob %q: %w", g, err)
		}
		if slices.Contains(globs[:i], g) {
			return fmt.Errorf("glob %q given twice", g)
		}
	}
	return nil
}

// SplitSandboxGlobs reads a token's stored globs (comma-separated; empty
// for none).
func SplitSandboxGlobs(stored string) []string {
	if stored == "" {
		return nil
	}
	return strings.Split(stored, ",")
}

// InSandboxScope reports whether sandbox is one a token limited to globs
// may name: any sandbox when globs is empty, else one a glob matches.
// Globs are checked when stored (CheckSandboxGlobs), so a malformed one
// here matches nothing.
func InSandboxScope(globs []string, sandbox string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if ok, err := path.Match(g, sandbox); ok && err == nil {
			return true
		}
	}
	return false
}

// maxSentrySource bounds a sentry token's name, the event source it may
// write: it is stored with every event and keys the source's ordering state.
const maxSentrySource = 255

// CheckSentrySource reports whether name can be a sentry token's name, that
// is a CloudEvents source (a URI-reference such as urn:dpu:node-17 or
// sentry/node-17): 1 to 255 bytes of printable ASCII without spaces. The
// token's scope is compared byte for byte with each event's source, so
// anything that could be written two ways (spaces, control or non-ASCII
// characters) is refused here rather than matched loosely later.
func CheckSentrySource(name string) error {
	if name == "" || len(name) > maxSentrySource {
		return fmt.Errorf("sentry source %q must be 1 to %d bytes", name, maxSentrySource)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("sentry source %q must be printable ASCII without spaces (byte %d is %#x)", name, i, c)
		}
	}
	return nil
}

// Prepare checks in and fills in what the store derives: the token's role,
// sandbox and creator, and the policy's default source. The policy is
// copied first, so the caller's PolicyVersion is never changed.
func (in *CreateSandbox) Prepare() error {
	if in.Name == "" {
		return errors.New("invalid sandbox: empty name")
	}
	in.Token.Role, in.Token.Sandbox = RoleSandbox, in.Name
	if in.Token.CreatedBy == "" {
		in.Token.CreatedBy = in.Actor
	}
	if err := in.Token.Check(); err != nil {
		return err
	}
	if in.Policy != nil {
		p := *in.Policy
		if p.Hash == "" || len(p.Document) == 0 {
			return errors.New("invalid policy: empty hash or document")
		}
		if p.Source == "" {
			p.Source = SourceCreate
		}
		in.Policy = &p
	}
	return nil
}

// Prepare checks in and defaults its source to "set".
func (in *AppendPolicy) Prepare() error {
	switch {
	case in.Sandbox == "":
		return errors.New("invalid policy: empty sandbox")
	case in.ExpectedVersion < 0:
		return fmt.Errorf("invalid policy: expected version %d", in.ExpectedVersion)
	case in.Hash == "" || len(in.Document) == 0:
		return errors.New("invalid policy: empty hash or document")
	}
	if in.Source == "" {
		in.Source = SourceSet
	}
	return nil
}

// Check reports whether k is a well-formed Ed25519 key with an id.
func (k SigningKey) Check() error {
	switch {
	case k.ID == "":
		return errors.New("invalid signing key: empty id")
	case len(k.PublicKey) != ed25519.PublicKeySize:
		return fmt.Errorf("invalid signing key %q: public key of %d bytes, want %d", k.ID, len(k.PublicKey), ed25519.PublicKeySize)
	case len(k.PrivateKey) != ed25519.PrivateKeySize:
		return fmt.Errorf("invalid signing key %q: private key of %d bytes, want %d", k.ID, len(k.PrivateKey), ed25519.PrivateKeySize)
	case !bytes.Equal(k.PrivateKey[ed25519.SeedSize:], k.PublicKey):
		// An Ed25519 private key ends with its public key.
		return fmt.Errorf("invalid signing key %q: the private key does not match the public key", k.ID)
	}
	return nil
}

// Check reports whether ca names a sandbox and holds a certificate and key.
func (ca SandboxCA) Check() error {
	switch {
	case ca.Sandbox == "":
		return errors.New("invalid sandbox CA: empty sandbox")
	case len(ca.CertPEM) == 0 || len(ca.KeyPEM) == 0:
		return fmt.Errorf("invalid CA of sandbox %q: empty certificate or key", ca.Sandbox)
	}
	return nil
}

// checkReported reports what item i of a batch a proxy reports (kind
// names the batch's items) lacks: every such item names the sandbox and
// the proxy it came from.
func checkReported(kind string, i int, sandbox, proxyID string) error {
	switch {
	case sandbox == "":
		return fmt.Errorf("invalid %s %d: empty sandbox", kind, i)
	case proxyID == "":
		return fmt.Errorf("invalid %s %d (sandbox %q): empty proxy id", kind, i, sandbox)
	}
	return nil
}

// CheckProxyStatuses reports the first status without a sandbox or proxy id.
func CheckProxyStatuses(statuses []ProxyStatus) error {
	for i, st := range statuses {
		if err := checkReported("proxy status", i, st.Sandbox, st.ProxyID); err != nil {
			return err
		}
	}
	return nil
}

// CheckDecisions reports the first record without a sandbox or proxy id,
// or with a port out of range.
func CheckDecisions(records []Decision) error {
	for i, d := range records {
		if err := checkReported("decision record", i, d.Sandbox, d.ProxyID); err != nil {
			return err
		}
		if d.Port < 0 || d.Port > 65535 {
			return fmt.Errorf("invalid decision record %d (sandbox %q): port %d", i, d.Sandbox, d.Port)
		}
	}
	return nil
}

// Check reports whether r can be applied: KeepPerSandbox not negative.
func (r DecisionRetention) Check() error {
	if r.KeepPerSandbox < 0 {
		return fmt.Errorf("invalid decision retention: keep %d records per sandbox", r.KeepPerSandbox)
	}
	return nil
}

// PruneBatch is the most decision records PruneDecisions deletes in one
// transaction.
const PruneBatch = 5000

// CheckBoundary reports whether a boundary can be stored: a sandbox, and a
// hash with a document (an empty document removes the boundary).
func CheckBoundary(sandbox string, doc []byte, hash string) error {
	switch {
	case sandbox == "":
		return errors.New("invalid boundary: empty sandbox")
	case len(doc) > 0 && hash == "":
		return fmt.Errorf("invalid boundary of sandbox %q: empty hash", sandbox)
	}
	return nil
}

// CheckCredentialedHosts reports the first entry of add or remove that is
// empty or holds a comma or white space (the audit log joins the lists
// with commas).
func CheckCredentialedHosts(sandbox string, add, remove []string) error {
	if sandbox == "" {
		return errors.New("invalid credentialed hosts: empty sandbox")
	}
	for _, list := range [][]string{add, remove} {
		for _, hp := range list {
			if hp == "" || strings.ContainsFunc(hp, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
				return fmt.Errorf("invalid credentialed host %q of sandbox %q", hp, sandbox)
			}
		}
	}
	return nil
}

// MergeCredentialedHosts returns current with add added and then remove
// removed, lower-cased, sorted and without duplicates; nil when empty. Both
// engines compute the stored list with it, so they cannot drift.
func MergeCredentialedHosts(current, add, remove []string) []string {
	set := make(map[string]bool, len(current)+len(add))
	for _, hp := range current {
		set[strings.ToLower(hp)] = true
	}
	for _, hp := range add {
		set[strings.ToLower(hp)] = true
	}
	for _, hp := range remove {
		delete(set, strings.ToLower(hp))
	}
	if len(set) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(set))
}

// CheckApprovalPolicy reports whether approval rules can be stored: a
// module and its hash.
func CheckApprovalPolicy(module, hash string) error {
	if module == "" || hash == "" {
		return errors.New("invalid approval policy: empty module or hash")
	}
	return nil
}
