package store

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Sentry events are what an out-of-band watchdog reports about a sandbox.
// The schema is Portcullis's own (CloudEvents envelope, our payload in
// data), not any vendor's. The store keeps them durable, idempotent and
// ordered per source:
//
//   - (Source, ID) is the idempotency key: senders deliver at least once,
//     and an event whose key is known is counted as a duplicate and not
//     stored again.
//   - Each source numbers its events 1, 2, 3… (Sequence; 0 means the event
//     is not sequenced and takes no part in ordering). A source's acked
//     sequence is the highest N such that 1…N are all stored; the holes
//     between it and the highest sequence stored are its gaps. The acked
//     and highest sequences and the gaps are kept (tables sentry_sources
//     and sentry_gaps) and changed by each append only where its
//     sequences fall: an event that arrives fills the gap holding its
//     sequence, and one past the highest leaves a gap if it skips some.
//     So an append costs the same however many events its source has
//     stored above a hole that never closes, and an answer lists a
//     source's first MaxSentryGaps gaps and counts the rest (MoreGaps).
//     Retention does not reopen gaps: a pruned event was received.
//   - Retention is by day: PruneSentryEvents removes every event received
//     before the UTC day its cutoff falls in, so Postgres can drop whole
//     daily partitions and SQLite deletes the same rows.

// SentryEvent is one stored watchdog event: the columns the store indexes
// and filters on, extracted from the event by the intake, and the whole
// event as received.
type SentryEvent struct {
	Source   string // CloudEvents source: who sent it
	ID       string // CloudEvents id: unique per source
	Sequence uint64 // position in the source's stream; 0: not sequenced
	Type     string // e.g. portcullis.sentry.v1.quarantine
	Subject  string // the sandbox the event is about ("" if none)
	// Time is when the watchdog says it happened; ReceivedAt is when the
	// gateway received it. The store sets ReceivedAt to its clock when
	// zero, and Time to ReceivedAt when zero, so every event has a place
	// in time order. Both are kept to the microsecond.
	Time, ReceivedAt time.Time
	Severity         string
	Processing       string // store_only or remediate
	PolicyHash       string // the policy hash the watchdog saw
	DenialID         string
	TraceID          string
	// Document is the whole event JSON, verbatim (never re-encoded).
	Document []byte
	// Flags mark what the intake noticed (unknown type, unknown fields…).
	Flags []string
}

// The findings the gateway derives from a stored event, checking it
// against what the proxies reported (gateway/sentryintake): the flags it
// marks the event with, and events.SentryFinding's Kind.
const (
	SentryDrift      = "drift"
	SentryUnmediated = "unmediated"
)

// MaxSentryGaps bounds the gaps a source's state lists; MoreGaps counts
// the rest.
const MaxSentryGaps = 100

// SentrySource is a source's ordering state: the highest contiguous
// sequence stored (AckedSequence), the highest seen (MaxSequence) and the
// holes between them, each [from, to] inclusive, in order: the first
// MaxSentryGaps of them, and how many more there are (MoreGaps).
type SentrySource struct {
	Source        string
	AckedSequence uint64
	MaxSequence   uint64
	Gaps          [][2]uint64
	MoreGaps      uint64
}

// SentryBatchResult is what AppendSentryEvents did: how many events it
// stored and how many it had already (or twice in the batch), and the
// state of every source the batch named, ordered by source.
type SentryBatchResult struct {
	Stored, Duplicates int
	Sources            []SentrySource
}

// Source returns the state of one source of the batch (zero with the
// name if the batch did not name it).
func (r SentryBatchResult) Source(name string) SentrySource {
	for _, s := range r.Sources {
		if s.Source == name {
			return s
		}
	}
	return SentrySource{Source: name}
}

// SentryEventFilter selects events for ListSentryEvents; zero fields
// match everything. Since (inclusive) and Until (exclusive) bound the
// event's Time. Limit > 0 keeps the newest Limit events.
type SentryEventFilter struct {
	Sandbox, Source, Type string
	Since, Until          time.Time
	Limit                 int
}

// SentryBatch checks events and returns those to store, in order, with
// ReceivedAt set to now and Time to ReceivedAt where they are zero, and how many repeat a (Source,
// ID) earlier in the batch (they count as duplicates). It refuses the
// whole batch on the first event without a source or id or with a
// sequence past int64: the intake validates events one by one before
// this, so a bad event here is a bug. A document that is not JSON refuses
// the batch too, in the engine (Postgres's json column; SQLite's
// SentryDocumentsValid), not here: the intake has just read every byte,
// and a third reading cost 7% of the gateway's CPU at full ingest.
func SentryBatch(events []SentryEvent, now time.Time) (unique []SentryEvent, dups int, err error) {
	type key struct{ source, id string }
	seen := make(map[key]bool, len(events))
	unique = make([]SentryEvent, 0, len(events))
	for i, e := range events {
		switch {
		case e.Source == "" || e.ID == "":
			return nil, 0, fmt.Errorf("invalid sentry event %d: source and id are required", i)
		case e.Sequence > math.MaxInt64:
			return nil, 0, fmt.Errorf("invalid sentry event %d (%s/%s): sequence %d out of range", i, e.Source, e.ID, e.Sequence)
		}
		k := key{e.Source, e.ID}
		if seen[k] {
			dups++
			continue
		}
		seen[k] = true
		if e.ReceivedAt.IsZero() {
			e.ReceivedAt = now
		}
		if e.Time.IsZero() {
			e.Time = e.ReceivedAt
		}
		// Microseconds on both engines (Postgres would round the rest).
		e.ReceivedAt, e.Time = e.ReceivedAt.UTC().Truncate(time.Microsecond), e.Time.UTC().Truncate(time.Microsecond)
		e.Flags = slices.Clone(e.Flags)
		unique = append(unique, e)
	}
	return unique, dups, nil
}

// SentryDocumentsValid refuses a batch (as SentryBatch returned it) with a
// document that is not JSON, for an engine whose column does not check.
func SentryDocumentsValid(batch []SentryEvent) error {
	for _, e := range batch {
		if !json.Valid(e.Document) {
			return fmt.Errorf("invalid sentry event %s/%s: document is not JSON", e.Source, e.ID)
		}
	}
	return nil
}

// SentrySources returns the distinct sources of events, sorted: the order
// in which an append locks their state, so concurrent appends cannot
// deadlock.
func SentrySources(events []SentryEvent) []string {
	out := make([]string, 0, 1)
	for _, e := range events {
		out = append(out, e.Source)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// SentryPruneCutoff is the instant PruneSentryEvents(before) deletes
// events received before: the start of before's UTC day.
func SentryPruneCutoff(before time.Time) time.Time {
	return before.UTC().Truncate(24 * time.Hour)
}

// SentryKey is the Ed25519 public key a source signs its events with.
// Once a source has a key, its events must carry a valid signature.
type SentryKey struct {
	Source    string
	PublicKey []byte // ed25519.PublicKeySize bytes
	CreatedAt time.Time
	CreatedBy string
}

// The statuses of a SentryAction.
const (
	// SentryFrozen: the event froze its sandbox; Version is the deny-all
	// version it committed.
	SentryFrozen = "frozen"
	// SentryHeld: the quarantine budget was spent; the sandbox was left
	// untouched until an operator acts (SentryAction.DecidedBy).
	SentryHeld = "held"
	// SentryDryRun: the gateway runs with --sentry-dry-run; this is what
	// would have been frozen.
	SentryDryRun = "dry_run"
	// SentryStale: the event's own time was older than the gateway's
	// sentry max age, or too far in the future, when it came: stored,
	// flagged stale, and nothing frozen; Reason says by how much.
	SentryStale = "stale"
	// SentryNoop: the sandbox was frozen already when the event came.
	SentryNoop = "already_frozen"
	// SentryFailed: the freeze failed (the sandbox has no policy, or was
	// deleted); Reason says why.
	SentryFailed = "failed"
	// SentryDismissed and SentryApplied: an operator's answer to a held
	// action — left alone, or frozen after all.
	SentryDismissed = "dismissed"
	SentryApplied   = "applied"
)

// SentryAction is what the gateway did about one remediating event (a
// quarantine or boundary_breach with processing remediate): one per
// (Source, EventID).
type SentryAction struct {
	ID      int64
	Source  string
	EventID string
	Sandbox string
	Type    string // the event's type
	Status  string // one of the Sentry* statuses above
	Reason  string // why this status (budget spent, dry run, the error…)
	// Version is the policy version the action committed (0 if none).
	Version int64
	// ReceivedAt is when the gateway received the event; CreatedAt when
	// the action was recorded; AckedAt when the last connected proxy of
	// the sandbox applied Version (nil until then, or without proxies).
	ReceivedAt, CreatedAt time.Time
	AckedAt               *time.Time
	// DecidedBy and DecidedAt: the operator who answered a held action.
	DecidedBy string
	DecidedAt *time.Time
}

// SentryActionFilter selects actions for ListSentryActions; zero fields
// match everything. Since bounds CreatedAt (inclusive).
type SentryActionFilter struct {
	Sandbox string
	Status  []string
	Since   time.Time
	Limit   int // > 0: the newest Limit
}
