package events

import (
	"time"

	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
)

// The events, by who publishes them. Each is published once, after what
// it tells of is committed (or, for what is not stored, done). Slices and
// maps in an event are the publisher's: subscribers read them and keep
// them, never change them.

// happened makes a type of this package an Event.
type happened struct{}

func (happened) event() {}

// Proposals (lifecycle).

// ProposalPending: a new proposal waits for approvers (Required of
// them), with its prover findings.
type ProposalPending struct {
	happened
	Proposal store.Proposal
	Findings []store.Finding
	Required int
}

// ProposalDecided: a proposal left pending (applied, rejected, expired,
// superseded, withdrawn).
type ProposalDecided struct {
	happened
	Proposal store.Proposal
}

// The audit log (lifecycle.FollowAudit, from the store: every replica's
// entries).

// AuditAppended: an entry committed to the audit log.
type AuditAppended struct {
	happened
	Entry store.AuditEntry
}

// ProposalAudited: the proposal a proposal.* audit entry (but an
// approval) is about, as read right after the entry, with its prover
// findings.
type ProposalAudited struct {
	happened
	Proposal store.Proposal
	Findings []store.Finding
}

// Sentry (gateway/sentryintake).

// SentryBatch: what one batch of watchdog events did.
type SentryBatch struct {
	happened
	// Stored and Duplicates count the batch's events stored for the first
	// time and those stored before; Refused those refused.
	Stored, Duplicates, Refused int
	// Sources is the state of each source the batch named.
	Sources []store.SentrySource
}

// SentryActed: the action taken about a remediating event, just recorded
// (frozen, held, dry_run, stale, already_frozen, failed).
type SentryActed struct {
	happened
	Action store.SentryAction
}

// SentryDecided: an operator's answer to a held action, once done
// (dismissed, or applied with its version).
type SentryDecided struct {
	happened
	Action store.SentryAction
}

// QuarantineApplied: every connected proxy of a quarantined sandbox
// applied its freeze, Took after the event was received.
type QuarantineApplied struct {
	happened
	Action store.SentryAction
	Took   time.Duration
}

// SentryFinding: a finding derived from a stored event (Kind: drift,
// unmediated); Tool is the tool an unmediated call named.
type SentryFinding struct {
	happened
	Kind  string
	Event store.SentryEvent
	Tool  string
}

// SentryNotable: stored events a security team should see
// (sentryintake.Notable), in order, received by the gateway at Received.
type SentryNotable struct {
	happened
	Events   []sentry.Event
	Received time.Time
}

// Proxies (gateway/distribution).

// ProxyAcked: a proxy applied a version of Sandbox, Lag after its commit.
// KeepFailed: it enforces it but could not keep it in its data dir.
type ProxyAcked struct {
	happened
	Sandbox    string
	Lag        time.Duration
	KeepFailed bool
}

// ProxyNacked: a proxy refused a version of Sandbox; Fork: because it
// does not descend from the version the proxy holds.
type ProxyNacked struct {
	happened
	Sandbox string
	Fork    bool
}

// DecisionsShipped: a proxy of Sandbox shipped a valid message of
// decision records: how many of each decision (a summary counts those it
// stands for; before the ingest limit), and the records and OCSF events
// it says it dropped before shipping.
type DecisionsShipped struct {
	happened
	Sandbox, ProxyID     string
	Decisions            map[string]int
	Dropped, OCSFDropped uint64
}

// Credential providers (lifecycle).

// CredentialsChanged: the credentials of Sandboxes moved to a new
// generation (a provider attached, detached or rotated): their proxies
// must be sent the new bundle.
type CredentialsChanged struct {
	happened
	Sandboxes []string
}

// Held calls (lifecycle).

// CallHeld: a proxy filed a call a review rule holds; it waits for a
// person until its deadline.
type CallHeld struct {
	happened
	Call store.HeldCall
}

// CallDecided: a held call left held (approved, denied, expired, failed).
type CallDecided struct {
	happened
	Call store.HeldCall
}
