// Package store owns Portcullis's persistent state: its types, the
// errors every engine maps to, the primitives every engine implements (Tx,
// Driver), and the record-keeping every write shares — audit entries and
// their hash chain, compare-and-swap on a sandbox's current version
// (AppendVersion), the last live admin token, the signing key chain —
// written once (Store) over those primitives. The workflows built on them
// (proposal intake, approval, the freeze) live in package lifecycle, the
// one caller of every write; the rest of the gateway holds the store as a
// Reader, which cannot write. The engines are drivers: Postgres
// (store/postgres, for production and replicas) and embedded SQLite
// (store/sqlite, the zero-setup default). The conformance suite in
// store/storetest runs against both.
//
// Every mutating method is one transaction that also appends to the audit
// log. Policy versions are append-only; a write names the version it expects
// to be current and loses with ErrConflict, never silently overwriting.
package store

import (
	"errors"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
)

// Errors every engine maps its database errors to (by SQLSTATE code or
// SQLite result code, once, in the engine).
var (
	// ErrNotFound: the sandbox, version or token does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the expected current version is stale, or a concurrent
	// writer won.
	ErrConflict = errors.New("conflict")
	// ErrAlreadyExists: a sandbox or token with that name exists.
	ErrAlreadyExists = errors.New("already exists")
	// ErrLastAdmin: revoking the token would leave no live admin token.
	ErrLastAdmin = errors.New("last live admin token")
	// ErrUnavailable: the database cannot be reached (down, restarting,
	// the connection lost). A write that failed so may or may not have
	// committed; the caller may retry later.
	ErrUnavailable = errors.New("database unavailable")
)

// Roles a token may carry.
const (
	RoleAdmin    = "admin"
	RoleOperator = "operator"
	RoleSandbox  = "sandbox"
	// RoleSentry is a watchdog's credential: it may only write events of
	// one source, the token's name (see CheckSentrySource).
	RoleSentry = "sentry"
)

// Policy version sources.
const (
	SourceSet      = "set"
	SourceRollback = "rollback"
	SourceCreate   = "create"
	SourceProposal = "proposal"
	SourceExpiry   = "expiry"
	SourceFreeze   = "freeze"
	SourceUnfreeze = "unfreeze"
)

// Proposal statuses.
const (
	ProposalPending    = "pending"
	ProposalApproved   = "approved"
	ProposalApplied    = "applied"
	ProposalRejected   = "rejected"
	ProposalExpired    = "expired"
	ProposalSuperseded = "superseded"
	ProposalWithdrawn  = "withdrawn"
)

// PendingCount is what CountPendingProposals counts.
type PendingCount struct {
	Total int
	// Before[i] counts those created before the i-th time asked about.
	Before []int
	// Oldest is when the oldest pending proposal was created (zero: none).
	Oldest time.Time
}

// Sandbox is one sandbox. CurrentVersion is 0 until its first policy.
type Sandbox struct {
	Name           string
	CurrentVersion int64
	CurrentHash    string
	CreatedAt      time.Time
	CreatedBy      string
	// Boundary is the most the sandbox may ever be granted: a canonical
	// policy document (nil when there is none), with its hash.
	Boundary     []byte
	BoundaryHash string
	// CredentialedHosts are "host:port" destinations whose requests carry
	// credentials injected for the sandbox, sorted, hosts lower-case.
	CredentialedHosts []string
	// Frozen: the kill switch holds the sandbox at a deny-all version
	// (FrozenFrom is the version that was current before it).
	Frozen       bool
	FrozenReason string
	FrozenBy     string
	FrozenAt     *time.Time
	FrozenFrom   int64
	// Providers are the credential providers attached, sorted (reads
	// only: attach and detach change them).
	Providers []string
	// CredentialsGeneration goes up by one with every attach, detach and
	// rotation of its providers (0: never any); reads only.
	CredentialsGeneration int64
}

// PolicyVersion is one stored version of a sandbox's policy.
type PolicyVersion struct {
	Sandbox string
	Version int64
	// Hash is the hex SHA-256 of Document.
	Hash string
	// Document is the canonical JSON form of the policy.
	Document []byte
	Author   string
	// Source is "set", "rollback", "create", or later "proposal" / "expiry".
	Source     string
	Provenance map[string]string
	CreatedAt  time.Time
}

// Token is an API credential. Only its SHA-256 hash is stored.
//
// Names are unique among every token ever stored, revoked ones and those of
// deleted sandboxes included, so that the audit log's targets stay
// unambiguous: a rotated or re-created sandbox token needs a fresh name.
type Token struct {
	ID   int64
	Name string
	Role string
	// Sandbox scopes a sandbox-role token; empty for every other role (a
	// sentry token is scoped by its Name, the event source).
	Sandbox string
	// Sandboxes limits a sentry token to the sandboxes its watchdog
	// watches: name globs (path.Match), of which one must match an
	// event's subject (InSandboxScope). Empty: every sandbox. Only a
	// sentry token has any.
	Sandboxes  []string
	Hash       string
	CreatedBy  string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
	// ExpiresAt is the instant from which the token is refused as
	// expired (Expired); nil never expires.
	ExpiresAt *time.Time
}

// Expired reports whether the token has expired at now.
func (t Token) Expired(now time.Time) bool {
	return t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)
}

// AuditEntry records one change: who, what, when, before and after hash.
// Entries form a hash chain (see AuditHash).
type AuditEntry struct {
	ID int64
	// Seq orders the chain: 1, 2, … across every replica, without gaps.
	Seq        int64
	Time       time.Time
	Actor      string
	Action     string
	Sandbox    string
	Target     string
	BeforeHash string
	AfterHash  string
	Detail     map[string]string
	// PrevHash is the Hash of entry Seq-1 ("" for the first); Hash is
	// AuditHash of this entry.
	PrevHash string
	Hash     string
}

// Audit actions written by the store.
const (
	ActionSandboxCreate = "sandbox.create"
	ActionSandboxDelete = "sandbox.delete"
	ActionSandboxToken  = "sandbox.rotate_token"
	ActionPolicySet     = "policy.set"
	ActionTokenCreate   = "token.create"
	ActionTokenRevoke   = "token.revoke"
	ActionSigningKeyAdd = "signing_key.add"
	ActionBoundarySet   = "sandbox.set_boundary"
	ActionCredentials   = "sandbox.set_credentialed_hosts"
	ActionProposalNew   = "proposal.submit"
	ActionProposalState = "proposal.status"
	ActionProposalBase  = "proposal.rebase"
	ActionProposalOK    = "proposal.approve"
	ActionProposalApply = "proposal.apply"
	ActionFreeze        = "sandbox.freeze"
	ActionUnfreeze      = "sandbox.unfreeze"
	ActionApprovalRules = "approval_policy.set"
	ActionSentryKeySet  = "sentry.key_set"
	ActionSentryKeyDel  = "sentry.key_delete"
	// ActionSentryRefused: the intake refused an event that would have
	// acted (wrong source, bad signature, replayed sequence).
	ActionSentryRefused = "sentry.refused"
	// ActionSentryAction: what the gateway did about a remediating event
	// (SentryAction.Status), and an operator's answer to a held one.
	ActionSentryAction = "sentry.action"
	// ActionCallApprove and ActionCallDeny: a person's decision on a held
	// call (an approval a quorum still waits on is a call.approve too, the
	// call still held).
	ActionCallApprove = "call.approve"
	ActionCallDeny    = "call.deny"
)

// Proposal is a stored proposal of a sandbox. The store keeps the
// advisor's and prover's results as given (Document, Resulting, Findings
// are opaque JSON to it).
type Proposal struct {
	ID      int64
	Sandbox string
	Status  string
	// StatusReason is the reason given with the last status change.
	StatusReason string
	Rationale    string
	// Proposer is the name of the token that submitted it.
	Proposer       string
	IdempotencyKey string
	DenialID       string
	// Document is the proposal's canonical JSON form.
	Document []byte
	// DedupeKey identifies proposals with the same operations: a new one
	// identical to a pending one of its sandbox is not stored twice.
	DedupeKey string
	// SupersedeKeys name what the proposal grants (endpoint + binary); a
	// newer pending proposal sharing one supersedes an older one.
	SupersedeKeys []string
	BaseVersion   int64
	BaseHash      string
	// Resulting is the exact canonical policy an approval would commit.
	Resulting     []byte
	ResultingHash string
	// Findings is the prover's report (JSON).
	Findings []byte
	// RebaseError is set when the proposal no longer applies to the
	// current version.
	RebaseError  string
	SupersededBy int64
	CreatedAt    time.Time
	UpdatedAt    time.Time
	// ExpiresAt is when a pending proposal expires (zero: never).
	ExpiresAt time.Time
	// Approvals so far, oldest first (set by GetProposal and
	// ListProposals).
	Approvals []Approval
	// DecidedAt and DecidedBy are set when the proposal leaves pending
	// (approved, applied, rejected, expired, superseded, withdrawn).
	DecidedAt *time.Time
	DecidedBy string
	// AppliedVersion is the policy version an applied proposal became;
	// GrantExpiresAt the end of its grant (zero: none).
	AppliedVersion int64
	GrantExpiresAt time.Time
}

// Approval is one approver's approval of a proposal.
type Approval struct {
	Approver string
	Reason   string
	// ResultingHash is the resulting-policy hash the approver confirmed.
	ResultingHash string
	CreatedAt     time.Time
}

// ApprovalPolicy is one stored version of the Rego approval rules.
type ApprovalPolicy struct {
	Version   int64
	Module    string
	Hash      string
	Author    string
	CreatedAt time.Time
}

// ProposalFilter narrows ListProposals. Zero values match everything.
type ProposalFilter struct {
	Sandbox string
	Status  string
	// IdempotencyKey and DedupeKey match proposals with that key.
	IdempotencyKey string
	DedupeKey      string
	// ExpiresBefore matches proposals whose ExpiresAt is set and before it.
	ExpiresBefore time.Time
	// Limit caps the proposals returned (the newest); 0 means no cap.
	Limit int
}

// SigningKey is one of the gateway's Ed25519 signing keys. The keys form a
// chain: each one after the first carries the previous key's endorsement,
// so a proxy that pinned an older key can follow a rotation. The newest key
// signs.
type SigningKey struct {
	ID         string
	PublicKey  []byte // ed25519.PublicKeySize bytes
	PrivateKey []byte // ed25519.PrivateKeySize bytes
	// Endorsement is the previous key's signature over this key (see
	// internal/signing); empty for the first key.
	Endorsement []byte
	CreatedAt   time.Time
}

// SandboxCA is the certificate authority a sandbox's proxies share.
type SandboxCA struct {
	Sandbox   string
	CertPEM   []byte
	KeyPEM    []byte
	CreatedAt time.Time
}

// ProxyStatus is what the gateways last recorded of one proxy, keyed by
// (Sandbox, ProxyID).
type ProxyStatus struct {
	Sandbox string
	ProxyID string
	// Replica is the gateway replica that recorded it.
	Replica     string
	Build       string
	Connected   bool
	ConnectedAt time.Time
	LastSeenAt  time.Time
	// AppliedVersion and AppliedHash are the last version the proxy
	// ACKed (0 and "" before any).
	AppliedVersion int64
	AppliedHash    string
	LastAckAt      *time.Time
	// LastNack* describe the last version the proxy refused.
	LastNackVersion int64
	LastNackError   string
	LastNackAt      *time.Time
	// LagMillis is the time from the applied version's commit to its ACK.
	LagMillis int64
	// DecisionsDropped counts the proxy's decision records that were lost:
	// those it reported dropping (the gateway's ingest rate limit
	// summarises, it loses none).
	DecisionsDropped int64
	// CredentialsGeneration is the generation of the sandbox's
	// credentials the proxy last said it holds (0: none yet), and
	// CredentialsError that answer's error.
	CredentialsGeneration int64
	CredentialsError      string
}

// Decision is one decision record a proxy shipped, as the gateway keeps
// it: the record (package decision) and what the gateway adds to it.
type Decision struct {
	// ID orders records as they were stored; set by the store.
	ID int64
	// ReceivedAt is when the gateway stored it; set by the store.
	ReceivedAt time.Time
	// ProxyID is the proxy that shipped it; set by the gateway from the
	// stream it came on.
	ProxyID string
	// Record is what the proxy recorded. Its Sandbox is the shipper's
	// (the gateway's word, not the record's); its TraceID is never stored
	// (the API does not carry it).
	decision.Record
}

// DecisionFilter narrows ListDecisions. Zero values match everything.
type DecisionFilter struct {
	Sandbox  string
	Decision string
	DenialID string
	// Tool matches records of tools/call of that tool.
	Tool string
	// AfterID returns only records stored after that one, oldest first,
	// at most Limit of them (for tailing).
	AfterID int64
	// Limit caps the records returned. With AfterID 0 they are the newest
	// Limit records, still oldest first. 0 means no cap.
	Limit int
}

// DecisionRetention is the input of Store.PruneDecisions: the bounds
// decision records are kept within. Zero values bound nothing.
type DecisionRetention struct {
	// Before: records received (ReceivedAt, the store's clock — not the
	// proxy's Time, which the sandbox chooses) before it go.
	Before time.Time
	// KeepPerSandbox: of each sandbox's records only the newest
	// KeepPerSandbox (by ID) stay. Negative is refused.
	KeepPerSandbox int
}

// CreateSandbox is the input of Store.CreateSandbox.
type CreateSandbox struct {
	Name  string
	Actor string
	// Token is the sandbox's first token. The store sets its Role to
	// sandbox and its Sandbox to Name; CreatedBy defaults to Actor.
	Token Token
	// Policy, if set, becomes version 1 in the same transaction. Only Hash,
	// Document, Author, Source (default "create") and Provenance are used.
	Policy *PolicyVersion
}

// AppendPolicy is the input of AppendVersion: one policy version to
// commit.
type AppendPolicy struct {
	Sandbox string
	// ExpectedVersion must equal the sandbox's current version (0 when it
	// has none); the new version is ExpectedVersion+1.
	ExpectedVersion int64
	Hash            string
	Document        []byte
	Author          string
	// Source defaults to "set".
	Source     string
	Provenance map[string]string
	// AuditDetail is added to the version's audit entry (a set that took
	// grants away on purpose names them there).
	AuditDetail map[string]string
}

// AuditFilter narrows ListAudit. Zero values match everything.
type AuditFilter struct {
	Sandbox string
	// Limit caps the number of entries (the newest); 0 means no cap.
	Limit int
	// BeforeSeq, when > 0, keeps only entries with a smaller seq: the
	// next page of a list whose oldest entry had that seq.
	BeforeSeq int64
}
