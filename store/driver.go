package store

import (
	"context"
	"time"
)

// The engines (store/postgres, store/sqlite) are drivers: they run
// statements and map database errors, and hold no rule of the product.
// Every rule — audit entries, the hash chain, compare-and-swap on the
// current version, the last live admin token, and (in package lifecycle)
// proposal intake, approval and the version commit — is written once,
// above both, in terms of Tx. One conformance suite (store/storetest)
// checks that the two drivers give Tx the same meaning.

// Tx is one database transaction's view of the store: the primitives
// every operation is written with. Each runs one or a few statements. A
// method returns ErrNotFound when the row it names does not exist,
// ErrAlreadyExists when a unique name, id or (proposal, approver) pair is
// taken, and wrapped engine errors otherwise. Times are stored as given
// (callers use Now) and come back in UTC at the engine's precision.
type Tx interface {
	ReadTx

	// Now is the transaction's clock: the time every row it writes
	// carries, at the engine's precision (Postgres: microseconds). It is
	// read once, when the transaction begins.
	Now() time.Time

	// InsertSandbox stores a new sandbox row: Name, CurrentVersion,
	// CurrentHash, CreatedAt, CreatedBy (the rest take their defaults).
	InsertSandbox(ctx context.Context, sb Sandbox) error

	// LockSandbox is GetSandbox holding the sandbox row until the
	// transaction ends: every transaction that changes a sandbox's
	// versions, freeze or proposals locks it first, so they run one at a
	// time per sandbox on every replica.
	LockSandbox(ctx context.Context, name string) (Sandbox, error)

	// UpdateSandbox writes sb's mutable columns (current version and hash,
	// boundary, credentialed hosts, the freeze fields) to the row named
	// sb.Name.
	UpdateSandbox(ctx context.Context, sb Sandbox) error

	// DeleteSandbox deletes the sandbox row; its versions, CA, proxy
	// statuses and proposals go with it (the schema cascades). It returns
	// the row as it was.
	DeleteSandbox(ctx context.Context, name string) (Sandbox, error)

	// InsertPolicyVersion stores v as given (ErrAlreadyExists if the
	// sandbox has that version). After the transaction commits, the
	// driver announces it to ListenPolicyCommits.
	InsertPolicyVersion(ctx context.Context, v PolicyVersion) error

	// InsertToken stores t and returns it with its ID (ErrNotFound when a
	// sandbox token's sandbox does not exist).
	InsertToken(ctx context.Context, t Token) (Token, error)

	// RevokeToken marks the live token name revoked at at and returns it
	// (ErrNotFound if there is no live token of that name).
	RevokeToken(ctx context.Context, name string, at time.Time) (Token, error)

	// RevokeSandboxTokens marks every live token of sandbox revoked at at
	// and returns how many there were.
	RevokeSandboxTokens(ctx context.Context, sandbox string, at time.Time) (int, error)

	// TouchToken records a use of the token, never moving the last use
	// backwards (ErrNotFound for an unknown id).
	TouchToken(ctx context.Context, id int64, at time.Time) error

	// LockAuditHead returns the chain's head (0 and "" for an empty log),
	// holding it until the transaction ends: the audit entries of all
	// replicas form one order.
	LockAuditHead(ctx context.Context) (seq int64, hash string, err error)

	// InsertAudit stores e as given (Seq, PrevHash and Hash set by the
	// caller) and moves the head to e.Seq and e.Hash.
	InsertAudit(ctx context.Context, e AuditEntry) error

	// InsertSigningKey stores k (CreatedAt as given) as the newest key.
	InsertSigningKey(ctx context.Context, k SigningKey) error

	// InsertSandboxCA stores ca unless the sandbox has one, and returns
	// the one stored: the first writer wins. ErrNotFound if the sandbox
	// does not exist.
	InsertSandboxCA(ctx context.Context, ca SandboxCA) (SandboxCA, error)

	// SaveProxyStatuses upserts statuses by (Sandbox, ProxyID); statuses
	// of sandboxes that no longer exist are skipped, and so is a
	// disconnected status over a connected one another replica recorded
	// (the proxy moved there: the replica it left must not say it is
	// gone).
	SaveProxyStatuses(ctx context.Context, statuses []ProxyStatus) error

	// InsertProposal stores p as given (ID and Approvals ignored) and
	// returns it with its ID (ErrAlreadyExists for a taken idempotency
	// key of its sandbox, ErrNotFound for an unknown sandbox).
	InsertProposal(ctx context.Context, p Proposal) (Proposal, error)

	// UpdateProposal writes p's mutable fields (status and reason, base,
	// resulting, findings, rebase error, superseded by, updated, decided,
	// applied version, grant end) to the row p.ID.
	UpdateProposal(ctx context.Context, p Proposal) error

	// InsertApproval stores a (CreatedAt as given) for the proposal
	// (ErrAlreadyExists if a.Approver approved it before).
	InsertApproval(ctx context.Context, proposal int64, a Approval) error

	// InsertApprovalPolicy stores ap as given (ErrAlreadyExists if that
	// version exists).
	InsertApprovalPolicy(ctx context.Context, ap ApprovalPolicy) error

	// PutSentryKey stores k as its source's key, replacing the one it
	// had; DeleteSentryKey removes it and returns it (ErrNotFound if the
	// source has none). GetSentryKey returns one (ErrNotFound);
	// ListSentryKeys every key ordered by source.
	PutSentryKey(ctx context.Context, k SentryKey) error

	DeleteSentryKey(ctx context.Context, source string) (SentryKey, error)

	// SetSentryEventFlags replaces the flags of the stored event ev
	// (found by its source, sequence, id and receive time: its key, an
	// index and its day's partition) with flags: the intake's derived
	// findings. An event pruned meanwhile is no error.
	SetSentryEventFlags(ctx context.Context, ev SentryEvent, flags []string) error

	// InsertSentryAction stores a (ID ignored) and returns it with its ID
	// (ErrAlreadyExists if its (Source, EventID) has one).
	InsertSentryAction(ctx context.Context, a SentryAction) (SentryAction, error)

	// UpdateSentryAction writes a's mutable fields (status, reason,
	// version, acked, decided by and at) to the row a.ID (ErrNotFound).
	UpdateSentryAction(ctx context.Context, a SentryAction) error

	// InsertHeldCall stores c as given (ID ignored; Status held, no
	// decision) and returns it with its ID: ErrAlreadyExists (the
	// transaction usable) when its (Sandbox, ProxyID, Instance, Key) is
	// taken, ErrNotFound for an unknown sandbox.
	InsertHeldCall(ctx context.Context, c HeldCall) (HeldCall, error)

	// DecideHeldCall moves the held call c.ID to c's Status, DecidedAt,
	// DecidedBy, Reason and ProposalID, only if it is still held, and
	// returns it as stored: ErrConflict when it is no longer held,
	// ErrNotFound when there is no such call.
	DecideHeldCall(ctx context.Context, c HeldCall) (HeldCall, error)

	// SetHeldCallProposal records the proposal an approval filed for call
	// id (ErrNotFound).
	SetHeldCallProposal(ctx context.Context, id, proposal int64) error

	// FailHeldCalls ends as failed (decided by "gateway", at at, with
	// reason) the held calls of the sandbox's proxy proxyID whose instance
	// is not instance, and returns them as stored.
	FailHeldCalls(ctx context.Context, sandbox, proxyID, instance, reason string, at time.Time) ([]HeldCall, error)

	// ExpireHeldCalls ends as expired (decided by "gateway", at now, with
	// reason) the held calls whose deadline is at or before now, and
	// returns them as stored.
	ExpireHeldCalls(ctx context.Context, now time.Time, reason string) ([]HeldCall, error)

	// ClearHeldCallArguments empties the arguments of the calls decided
	// before before and returns how many it cleared.
	ClearHeldCallArguments(ctx context.Context, before time.Time) (int64, error)

	// InsertProvider stores p as given, Sandboxes ignored
	// (ErrAlreadyExists, the transaction usable, for a taken name).
	InsertProvider(ctx context.Context, p Provider) error

	// RotateProvider writes p's Sealed, KeyID, SecretFields, Revision,
	// RotatedAt and RotatedBy to the provider p.Name if its revision is
	// still previous: ErrConflict when it is not, ErrNotFound.
	RotateProvider(ctx context.Context, p Provider, previous int64) error

	// LockProvider is GetProvider holding the provider's row (shared)
	// until the transaction ends: an attach or detach takes it before the
	// sandbox's lock (every provider write locks the provider, then its
	// sandboxes), so a concurrent rotation waits, then sees the sandbox
	// attached and moves its credentials generation too.
	LockProvider(ctx context.Context, name string) (Provider, error)

	// DeleteProvider deletes the provider row: ErrNotFound, or ErrInUse
	// when a sandbox still refers to it.
	DeleteProvider(ctx context.Context, name string) error

	// AttachProvider attaches provider to sandbox, at at by by, and
	// reports whether it was not attached already.
	AttachProvider(ctx context.Context, sandbox, provider string, at time.Time, by string) (bool, error)

	// DetachProvider detaches it (ErrNotFound when it is not attached).
	DetachProvider(ctx context.Context, sandbox, provider string) error

	// BumpCredentialsGeneration moves the sandbox's credentials generation
	// up by one and returns it (ErrNotFound).
	BumpCredentialsGeneration(ctx context.Context, sandbox string) (int64, error)

	// InsertCallApproval stores a for held call id (ErrAlreadyExists if
	// a.Approver approved it before, ErrNotFound for an unknown call).
	InsertCallApproval(ctx context.Context, id int64, a CallApproval) error
}

// ReadTx is the primitives that only read: in a transaction (Tx) they
// see its writes; outside one (Reader) each runs on its own on the read
// pool.
type ReadTx interface {
	GetSandbox(ctx context.Context, name string) (Sandbox, error)

	// ListSandboxes returns every sandbox ordered by name.
	ListSandboxes(ctx context.Context) ([]Sandbox, error)

	// GetPolicyVersion returns one version; version 0 means the current
	// one (ErrNotFound when the sandbox has no policy yet).
	GetPolicyVersion(ctx context.Context, sandbox string, version int64) (PolicyVersion, error)

	// ListPolicyVersions returns every version, oldest first, without
	// documents (ErrNotFound for an unknown sandbox).
	ListPolicyVersions(ctx context.Context, sandbox string) ([]PolicyVersion, error)

	// PolicyHashes returns the hashes of the sandbox's versions from to
	// to (inclusive), oldest first: what the push hub chains into a
	// version's parent, without reading the rest of the history.
	PolicyHashes(ctx context.Context, sandbox string, from, to int64) ([]string, error)

	// TokenByHash returns the token with that hash, revoked or not.
	TokenByHash(ctx context.Context, hash string) (Token, error)

	// ListTokens returns every token ordered by name, hashes omitted.
	ListTokens(ctx context.Context) ([]Token, error)

	// CountTokens returns how many live tokens have the role.
	CountTokens(ctx context.Context, role string) (int, error)

	// ListAudit returns audit entries, newest first.
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, error)

	// AuditChain returns up to limit entries (0: no cap) with Seq greater
	// than afterSeq, oldest first.
	AuditChain(ctx context.Context, afterSeq int64, limit int) ([]AuditEntry, error)

	// AuditHead returns the head without holding it.
	AuditHead(ctx context.Context) (seq int64, hash string, err error)

	// SigningKeys returns the signing keys, oldest first.
	SigningKeys(ctx context.Context) ([]SigningKey, error)

	// GetSandboxCA returns the sandbox's CA (ErrNotFound when the sandbox
	// or its CA does not exist).
	GetSandboxCA(ctx context.Context, sandbox string) (SandboxCA, error)

	// ListProxyStatuses returns the statuses of one sandbox ("" for all),
	// ordered by sandbox and proxy id.
	ListProxyStatuses(ctx context.Context, sandbox string) ([]ProxyStatus, error)

	// GetProposal returns the proposal with its approvals, oldest first.
	GetProposal(ctx context.Context, id int64) (Proposal, error)

	// ListProposals returns the proposals f matches, newest first, with
	// their approvals.
	ListProposals(ctx context.Context, f ProposalFilter) ([]Proposal, error)

	// CountProposals returns how many proposals of sandbox were created
	// after since.
	CountProposals(ctx context.Context, sandbox string, since time.Time) (int, error)

	// GetApprovalPolicy returns the newest stored Rego rules (ErrNotFound
	// when none was ever set).
	GetApprovalPolicy(ctx context.Context) (ApprovalPolicy, error)

	GetSentryKey(ctx context.Context, source string) (SentryKey, error)

	ListSentryKeys(ctx context.Context) ([]SentryKey, error)

	// SentryEventAt returns the stored event of source with that sequence
	// (ErrNotFound; with several, the first received): the intake refuses
	// a remediating event that replays a sequence already used.
	SentryEventAt(ctx context.Context, source string, sequence uint64) (SentryEvent, error)

	// GetSentryAction returns one action by ID (ErrNotFound).
	GetSentryAction(ctx context.Context, id int64) (SentryAction, error)

	// ListSentryActions returns the actions f matches, newest first.
	ListSentryActions(ctx context.Context, f SentryActionFilter) ([]SentryAction, error)

	// CountSentryActions returns how many actions of source ("": of
	// every source) with one of statuses were created at or after since
	// (the quarantine circuit breaker, per source and for the fleet).
	CountSentryActions(ctx context.Context, source string, statuses []string, since time.Time) (int, error)

	// GetHeldCall returns one held call by ID (ErrNotFound);
	// HeldCallByKey the call its proxy names (sandbox, proxy id, instance,
	// key; ErrNotFound).
	GetHeldCall(ctx context.Context, id int64) (HeldCall, error)
	HeldCallByKey(ctx context.Context, sandbox, proxyID, instance, key string) (HeldCall, error)

	// ListHeldCalls returns the calls f matches, newest first (requested,
	// then ID).
	ListHeldCalls(ctx context.Context, f HeldCallFilter) ([]HeldCall, error)

	// CountHeldCalls returns how many calls of sandbox ("": of every
	// sandbox) are still held.
	CountHeldCalls(ctx context.Context, sandbox string) (int, error)

	// DecidedHeldCalls returns those of the calls ids names that are no
	// longer held, in no order: what the streams waiting on them ask
	// every replica's store now and then.
	DecidedHeldCalls(ctx context.Context, ids []int64) ([]HeldCall, error)

	// CallApprovals returns the approvals of held call id, oldest first.
	CallApprovals(ctx context.Context, id int64) ([]CallApproval, error)

	// GetProvider returns one provider with its sandboxes (ErrNotFound);
	// ListProviders every provider, ordered by name.
	GetProvider(ctx context.Context, name string) (Provider, error)
	ListProviders(ctx context.Context) ([]Provider, error)

	// SandboxCredentials returns the sandbox's credentials generation and
	// its providers with their sealed secrets, ordered by name (Sandboxes
	// not set), read in one statement so that the two agree (ErrNotFound
	// for an unknown sandbox).
	SandboxCredentials(ctx context.Context, sandbox string) (int64, []Provider, error)
}

// Reader is the store seen read-only: what every part of the gateway but
// package lifecycle holds (the handlers, distribution, the Sentry intake,
// notify), so that a write outside lifecycle's workflows does not
// compile. A *Store is a Reader.
type Reader interface {
	ReadTx

	// ListenPolicyCommits calls fn for each policy version committed after
	// its transaction committed — through this process at once, and (on
	// Postgres) through any replica, via LISTEN/NOTIFY — until ctx ends.
	// It reconnects by itself after errors; notifications sent while it
	// was disconnected are lost, so callers also compare versions now and
	// then. A version may be heard twice (Postgres hears its own NOTIFY
	// too) and a listener that falls far behind misses versions (see
	// CommitFeed): listeners go by version. A version this process
	// committed comes with its row (Commit.Inserted). It returns ctx's
	// error.
	ListenPolicyCommits(ctx context.Context, fn func(Commit)) error

	// ListDecisions returns the records f matches, oldest first.
	ListDecisions(ctx context.Context, f DecisionFilter) ([]Decision, error)

	// CountPendingProposals counts the pending proposals, in one
	// statement: all of them, and for each of createdBefore those created
	// before it (same order); oldest is the oldest one's creation time
	// (zero when none is pending). The gateway's metrics read it.
	CountPendingProposals(ctx context.Context, createdBefore []time.Time) (PendingCount, error)

	// ListToolDefinitions returns the definitions f matches, ordered by
	// host, port, path and tool, and each tool's newest first (LastSeen,
	// then the latest stored).
	ListToolDefinitions(ctx context.Context, f ToolDefinitionFilter) ([]ToolDefinition, error)

	// ListSentryEvents returns the events f matches, oldest first (by
	// Time, then source, sequence and id).
	ListSentryEvents(ctx context.Context, f SentryEventFilter) ([]SentryEvent, error)

	// SentryGaps returns the ordering state of one source, or of every
	// source ordered by name when source is "".
	SentryGaps(ctx context.Context, source string) ([]SentrySource, error)

	// Ping checks the database is reachable (for /readyz).
	Ping(ctx context.Context) error

	// Migrated returns the schema migrations opening the store applied,
	// oldest first (none when the schema was current).
	Migrated() []int64
}

// Driver is an engine: Tx's primitives (outside InTx each runs on its
// own, reads on the read pool), the transaction runner, and what only an
// engine can do efficiently (decision records) or must do itself
// (commit notifications).
type Driver interface {
	Tx
	Reader

	// InTx runs fn in one write transaction and commits it if fn returns
	// nil; otherwise it rolls back and returns fn's error.
	InTx(ctx context.Context, fn func(tx Tx) error) error

	// InTxEnforceFirst is InTx for a change that is safe to enforce
	// before it is durable — a freeze, which only denies. The versions fn
	// inserts are announced (and so pushed to proxies) as soon as the
	// commit is visible, without waiting for its log to reach disk behind
	// whatever else the database is writing; it still returns only once
	// the commit is durable. Should the database crash in between, the
	// commit is lost and a proxy may keep enforcing a version the store
	// no longer has: a deny-all, replaced by the next version of that
	// number or above. Postgres commits with synchronous_commit off, then
	// waits for its log flush; SQLite commits durably first, as InTx.
	InTxEnforceFirst(ctx context.Context, fn func(tx Tx) error) error

	// AppendDecisions stores decision records (Postgres: one COPY) and
	// returns how many it stored. Records outlive their sandbox.
	AppendDecisions(ctx context.Context, records []Decision) (int, error)

	// PruneDecisions deletes the records outside r's bounds in batches,
	// each its own short transaction, and returns how many it deleted. A
	// record whose DenialID a proposal of its sandbox names is kept.
	PruneDecisions(ctx context.Context, r DecisionRetention) (int64, error)

	// RecordToolDefinitions stores the tool definitions proxies reported,
	// in one transaction: a definition stored already for its sandbox,
	// endpoint, tool and fingerprint keeps the earliest FirstSeen and the
	// latest LastSeen (with that report's proxy and, when it had none,
	// definition). Definitions of sandboxes that no longer exist are
	// skipped. Each sandbox written to then keeps its
	// MaxToolDefinitionsPerSandbox definitions seen last. It returns how
	// many definitions it stored or updated.
	RecordToolDefinitions(ctx context.Context, defs []ToolDefinition) (int, error)

	// AppendSentryEvents stores a batch of watchdog events in one short
	// transaction of its own (never NOTIFY: ingest must not serialise on
	// the commit feed). An event whose (Source, ID) is stored already, or
	// repeats one earlier in the batch, is a duplicate and is not stored.
	// It then advances each source's acked sequence over the contiguous
	// sequences stored and reports the gaps that remain (see SentryEvent).
	// Concurrent appends store each event once.
	AppendSentryEvents(ctx context.Context, events []SentryEvent) (SentryBatchResult, error)

	// PruneSentryEvents deletes every event received before
	// SentryPruneCutoff(before) and returns how many it deleted. Sources
	// keep their acked sequences.
	PruneSentryEvents(ctx context.Context, before time.Time) (int64, error)

	Close() error
}
