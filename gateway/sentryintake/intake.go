// Package sentryintake takes watchdog (Sentry) events into the gateway:
// it checks what the sentry package's reader cannot (the sender's source,
// its signature key, replayed sequences), stores the events, and acts on
// the remediating ones through the policy lifecycle's kill switch, behind
// a circuit breaker. It reads the stores (store.Reader) and writes
// nothing itself: the events, their findings' flags, the actions, freezes
// and audit entries are written by package lifecycle. It imports store,
// sentry and lifecycle; never the gateway root or the API.
package sentryintake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
)

// The intake, event by event:
//
//   - The source must be the sender's own (a sentry token's name).
//   - When the sender's token is limited to some sandboxes (Sender.
//     Sandboxes), the event's subject must be one of them: a watchdog
//     reports on, and quarantines, only the sandboxes it watches.
//   - When the source has a registered key, the event must carry a
//     signature that verifies with it.
//   - A remediating event (a quarantine or boundary_breach with processing
//     remediate) must not reuse a sequence another event of its source
//     already holds: a replay is refused.
//
// An event that fails a check is refused alone, with its reason; the
// security refusals of a batch are audited in one entry (so a flood of bad
// events costs one audit write per batch, not one per event).
//
// Two lanes: remediating events are stored and acted on first, each on
// its own, outside the bulk lane's limit on concurrent appends, so they
// never wait behind bulk events; bulk events then share BulkSlots appends.
// A remediating event is acted on once: its action row, keyed by (source,
// id), is the proof it was handled, so a resend after a crash between
// storing and acting still acts, and a resend after acting does not. A
// freeze commits with its action (lifecycle.Quarantine), so a crash
// before the event is stored leaves an action naming it, to which the
// resent event is linked (and which repair, at start, logs meanwhile).

// The defaults of Config.
const (
	DefaultQuarantineBudget = 10
	// DefaultQuarantineBudgetPerSource: sandboxes one source may freeze
	// per BudgetWindow. Below the fleet's budget, so that one rogue or
	// broken watchdog spends only its own places and the others' freezes
	// go on (issue 34): it takes four sources to hold the fleet's.
	DefaultQuarantineBudgetPerSource = 3
	DefaultBudgetWindow              = 5 * time.Minute
	// DefaultMaxAge: a quarantine older than this is history, not an
	// incident to act on now (a watchdog's backlog, a replay of an old
	// log, an example with a fixed time).
	DefaultMaxAge = 10 * time.Minute
	// FutureSkew is how far ahead of the gateway's clock an event's time
	// may be: the watchdog's clock may be a little ahead, not more.
	FutureSkew = time.Minute
	// DefaultBulkSlots: bulk appends at once. Each holds a database
	// connection for its whole batch; the quarantine lane and every
	// other request need the rest of the pool. Two, not more: three
	// stored about a tenth more at full ingest, but the quarantine lane's
	// commit then shared the database's log with more bulk writes and its
	// p99 under load went from 72–90 ms to 95–207 ms (BENCHMARKS.md,
	// issue 13).
	DefaultBulkSlots = 2
	// DefaultAckWait bounds how long the ingest-to-ACK time of a freeze
	// is waited for.
	DefaultAckWait = 30 * time.Second
	// DefaultUrgentHold bounds how long a freeze holds new bulk appends
	// after its commit, while its proxies have not all ACKed it.
	// Quarantines are rare (the budget allows ten in five minutes), so
	// the bulk lane loses little; a proxy that does not ACK holds it up
	// no longer than this.
	DefaultUrgentHold = 250 * time.Millisecond
	// DefaultRetention keeps events 30 days; the sweep runs hourly.
	DefaultRetention = 30 * 24 * time.Hour
	sweepInterval    = time.Hour
)

// Config configures an Intake. Zero values take the defaults.
type Config struct {
	Now func() time.Time
	// DryRun records what would have been frozen and freezes nothing.
	DryRun bool
	// MaxAge: a remediating event whose own time is older than this when
	// it arrives, or more than FutureSkew ahead, is stored, flagged stale
	// and not acted on (action status stale). Default
	// DefaultMaxAge; negative: no check of the event's time at all.
	MaxAge time.Duration
	// QuarantineBudget sandboxes per BudgetWindow may be frozen by Sentry
	// events (across replicas: it counts the stored actions); past it a
	// quarantine is held. Negative: no budget.
	QuarantineBudget int
	// QuarantineBudgetPerSource sandboxes per BudgetWindow may be frozen
	// by one source's events; past it that source's quarantines are held
	// and the others' are not. Negative: no budget per source.
	QuarantineBudgetPerSource int
	BudgetWindow              time.Duration
	// BulkSlots bounds the concurrent appends of the bulk lane.
	BulkSlots int
	AckWait   time.Duration
	// UrgentHold bounds how long a freeze keeps new bulk appends waiting
	// once committed: until its sandbox's proxies ACKed it (WaitApplied)
	// or UrgentHold passed, whichever is first.
	UrgentHold time.Duration
	// Retention: events received longer ago are deleted by Run, whole
	// days at a time; negative keeps them forever.
	Retention time.Duration
	// Settle and Window tune the derived findings (correlate.go).
	Settle, Window time.Duration
	// WaitApplied waits until the sandbox's connected proxies applied
	// version (distribution.WaitApplied) and returns how many did and
	// when the last ACK of the version arrived; nil: acks are not waited
	// for.
	WaitApplied func(ctx context.Context, sandbox string, version int64) (acked int, lastAck time.Time, err error)
	// Stream is told what the intake did: each batch's outcome
	// (events.SentryBatch), each action recorded (SentryActed) and
	// decided (SentryDecided), each freeze's ingest-to-ACK time
	// (QuarantineApplied), each derived finding (SentryFinding) and the
	// stored events a security team should see (SentryNotable). Default
	// nil: nobody is told.
	Stream *events.Stream
}

// Intake is the gateway's Sentry intake. It reads the stores and writes
// nothing itself: every write (actions, freezes, audit entries, the events
// and their flags) goes through the lifecycle.
type Intake struct {
	cfg Config
	// st is the control plane's store; events the events' own
	// (lifecycle.Config.SentryEvents: maybe a database apart, so that
	// bulk ingest shares neither connections nor a write-ahead log with
	// the freezes, versions and audit entries).
	st, events store.Reader
	life       *lifecycle.Lifecycle
	log        *slog.Logger
	bulk       chan struct{}
	// urgent holds new bulk appends, batch reads and rounds of checks
	// while a remediation is freezing its sandbox, from before its commit
	// until its proxies ACKed the deny-all (at most Config.UrgentHold
	// after the commit): the commit shares the database's log with as few
	// bulk writes as possible, and the push and the ACKs get the CPU the
	// bulk lane would take.
	urgent gate
	// breaker guards freezing: the quarantines of this replica that hold
	// a place in the budget (takeBudget) and have not yet given it back,
	// keyed by their event (a stored freeze still here is counted once).
	breaker  sync.Mutex
	freezing map[eventKey]struct{}
	// background is the ack waits in flight (Wait, for tests and
	// shutdown).
	background sync.WaitGroup
	// reading bounds the batches being read at once (Reading).
	reading chan struct{}
	// checks are the stored events waiting for their derived findings.
	checks  chan check
	dropped atomic.Uint64
}

// New returns an Intake that reads st and writes through life.
func New(cfg Config, st store.Reader, life *lifecycle.Lifecycle, log *slog.Logger) *Intake {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// Zero takes the default; a negative budget is none and a negative
	// retention keeps events forever.
	cfg.QuarantineBudget = cmp.Or(cfg.QuarantineBudget, DefaultQuarantineBudget)
	cfg.QuarantineBudgetPerSource = cmp.Or(cfg.QuarantineBudgetPerSource, DefaultQuarantineBudgetPerSource)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.MaxAge = cmp.Or(cfg.MaxAge, DefaultMaxAge)
	// The sizes and durations mean nothing below one: they take the
	// default too.
	cfg.BudgetWindow = positiveOr(cfg.BudgetWindow, DefaultBudgetWindow)
	cfg.BulkSlots = positiveOr(cfg.BulkSlots, DefaultBulkSlots)
	cfg.AckWait = positiveOr(cfg.AckWait, DefaultAckWait)
	cfg.UrgentHold = positiveOr(cfg.UrgentHold, DefaultUrgentHold)
	cfg.Settle = positiveOr(cfg.Settle, DefaultSettle)
	cfg.Window = positiveOr(cfg.Window, DefaultWindow)
	return &Intake{cfg: cfg, st: st, events: life.SentryEvents(), life: life, log: log, bulk: make(chan struct{}, cfg.BulkSlots), freezing: map[eventKey]struct{}{},
		reading: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1)), checks: make(chan check, checkQueue)}
}

// positiveOr is v, or def when v is zero or negative.
func positiveOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Result is what one batch did: events stored for the first time,
// duplicates, the state of each source it named, and the events refused.
type Result struct {
	Stored, Duplicates int
	Sources            []store.SentrySource
	Refused            []sentry.Refusal
}

// Source returns the state of one source of the batch.
func (r Result) Source(name string) store.SentrySource {
	for _, s := range r.Sources {
		if s.Source == name {
			return s
		}
	}
	return store.SentrySource{Source: name}
}

// Events is the store the events are kept in, read-only.
func (in *Intake) Events() store.Reader { return in.events }

// Actor is how a source appears in the audit log and as the freezer.
func Actor(source string) string { return lifecycle.SentryActor(source) }

// Sender is who sends a batch: its sentry token's name, the one source
// it writes, and the sandboxes the token is limited to (name globs; none:
// every sandbox).
type Sender struct {
	Source    string
	Sandboxes []string
}

// Ingest takes a batch sent by sender: the events the reader accepted and
// those it refused. The error is for a store failure; refusals are in the
// Result.
func (in *Intake) Ingest(ctx context.Context, sender Sender, batch sentry.Batch) (Result, error) {
	source := sender.Source
	res := Result{Refused: slices.Clone(batch.Refused)}
	received := in.cfg.Now()
	key, err := in.sourceKey(ctx, source)
	if err != nil {
		return Result{}, err
	}
	type remediation struct {
		ev   sentry.Event
		seen bool // stored before: a resend
	}
	var urgent []remediation
	// The bulk lane's rows and their tools, made as the events are
	// checked.
	rows := make([]store.SentryEvent, 0, len(batch.Events))
	tools := make([]string, 0, len(batch.Events))
	// The bulk events the stream hears of as notable: usually none.
	var notable []sentry.Event
	var audited []sentry.Refusal
	// An event's index in the batch: the reader's refusals hold the
	// indexes it skipped.
	skipped := make(map[int]bool, len(batch.Refused))
	for _, r := range batch.Refused {
		skipped[r.Index] = true
	}
	at := -1
	for _, ev := range batch.Events {
		for at++; skipped[at]; at++ {
		}
		ferr := in.check(ctx, sender, key, ev)
		seen := false
		if ferr == nil && remediating(ev) {
			ferr, seen, err = in.checkReplay(ctx, ev)
			if err != nil {
				return Result{}, err
			}
		}
		if ferr != nil {
			r := sentry.Refusal{Index: at, ID: ev.ID, Err: ferr}
			res.Refused = append(res.Refused, r)
			audited = append(audited, r)
			continue
		}
		if ev.Flags&sentry.FlagTimeDefaulted != 0 {
			// CloudEvents makes time optional: the event happened at the
			// latest when it arrived (its signature, checked above,
			// covers no time).
			ev.Time = received
		}
		if remediating(ev) {
			urgent = append(urgent, remediation{ev, seen})
		} else {
			rows, tools = append(rows, stored(ev, received)), append(tools, toolOf(ev))
			if in.cfg.Stream != nil && Notable(ev) {
				notable = append(notable, detached(ev))
			}
		}
	}
	slices.SortFunc(res.Refused, func(a, b sentry.Refusal) int { return a.Index - b.Index })
	// The quarantine lane: one event at a time, no slot to wait for, and
	// the freeze first — the deny-all version is on its way to the proxies
	// before the event is stored.
	for _, u := range urgent {
		if err := in.act(ctx, u.ev, received, !u.seen); err != nil {
			return Result{}, err
		}
		row := stored(u.ev, received)
		if in.stale(u.ev, received) != "" {
			row.Flags = append(row.Flags, "stale")
		}
		out, err := in.life.AppendSentryEvents(ctx, []store.SentryEvent{row})
		if err != nil {
			return Result{}, err
		}
		res.add(out)
		if out.Stored == 0 {
			continue // a resend: checked and told when it was stored
		}
		in.queueChecks([]store.SentryEvent{row}, []string{toolOf(u.ev)})
		in.cfg.Stream.Publish(events.SentryNotable{Events: []sentry.Event{detached(u.ev)}, Received: received})
	}
	if len(audited) > 0 {
		if err := in.auditRefusals(ctx, source, audited); err != nil {
			return Result{}, err
		}
	}
	if len(rows) > 0 {
		select {
		case in.bulk <- struct{}{}:
			if err := in.urgent.wait(ctx); err != nil {
				<-in.bulk
				return Result{}, err
			}
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
		out, err := in.life.AppendSentryEvents(ctx, rows)
		<-in.bulk
		if err != nil {
			return Result{}, err
		}
		res.add(out)
		// A batch whose events were all stored before (a resend) was
		// checked and told of then, and is not again (its findings would
		// be counted and emitted twice); one partly stored before is (the
		// append does not say which events were new; an OCSF event's uid
		// is the Sentry event's key, source/id).
		if out.Stored > 0 {
			in.queueChecks(rows, tools)
			if len(notable) > 0 {
				in.cfg.Stream.Publish(events.SentryNotable{Events: notable, Received: received})
			}
		}
	}
	if len(res.Sources) == 0 {
		// Nothing stored: still say where the sender's stream stands.
		if res.Sources, err = in.events.SentryGaps(ctx, source); err != nil {
			return Result{}, err
		}
		if len(res.Sources) == 0 {
			res.Sources = []store.SentrySource{{Source: source}}
		}
	}
	in.cfg.Stream.Publish(events.SentryBatch{Stored: res.Stored, Duplicates: res.Duplicates, Refused: len(res.Refused), Sources: res.Sources})
	return res, nil
}

// add merges one append's outcome; a later state of a source replaces an
// earlier one.
func (r *Result) add(out store.SentryBatchResult) {
	r.Stored += out.Stored
	r.Duplicates += out.Duplicates
	for _, s := range out.Sources {
		if i := slices.IndexFunc(r.Sources, func(x store.SentrySource) bool { return x.Source == s.Source }); i >= 0 {
			r.Sources[i] = s
		} else {
			r.Sources = append(r.Sources, s)
		}
	}
}

// Reading waits for a turn to read a batch of more than one event and
// returns its release. Reading events is the intake's main cost in CPU,
// so at most GOMAXPROCS-1 batches (at least one) are read at once, and
// none starts while a quarantine is freezing its sandbox (urgent): an
// event sent on its own — a quarantine, as a watchdog should send it —
// is read without waiting and always finds a core.
func (in *Intake) Reading(ctx context.Context) (func(), error) {
	if err := in.urgent.wait(ctx); err != nil {
		return nil, err
	}
	select {
	case in.reading <- struct{}{}:
		return func() { <-in.reading }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Wait waits for the ack waits in flight.
func (in *Intake) Wait() { in.background.Wait() }

// Run checks stored events for derived findings, once at start looks
// for actions whose event was never stored (repair), and every hour (and
// once at start) makes the coming days' partitions and deletes events
// past the retention, until ctx ends; then it waits for the ack waits in
// flight.
func (in *Intake) Run(ctx context.Context) {
	defer in.Wait()
	var checks sync.WaitGroup
	defer checks.Wait()
	checks.Go(func() { in.runChecks(ctx) })
	in.repair(ctx)
	tick := time.NewTicker(sweepInterval)
	defer tick.Stop()
	for {
		in.partitionsAhead(ctx)
		var n int64
		var err error
		if in.cfg.Retention >= 0 {
			n, err = in.life.PruneSentryEvents(ctx, in.cfg.Now().Add(-in.cfg.Retention))
		}
		switch {
		case err != nil && ctx.Err() == nil:
			in.log.Warn("sentry retention sweep failed; will retry", "err", err)
		case n > 0:
			in.log.Info("sentry retention sweep", "deleted", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// partitionsAhead makes the partitions of the coming days, so that no
// append has to make its day's own.
func (in *Intake) partitionsAhead(ctx context.Context) {
	if err := in.life.SentryPartitionsAhead(ctx, in.cfg.Now(), partitionDays); err != nil && ctx.Err() == nil {
		in.log.Warn("make the coming days' sentry partitions; will retry", "err", err)
	}
}

// partitionDays: the partitions of today and the next two days.
const partitionDays = 3

func remediating(ev sentry.Event) bool {
	return ev.Class.Remediable() && ev.Payload.Processing == sentry.ProcessingRemediate
}

func (in *Intake) sourceKey(ctx context.Context, source string) ([]byte, error) {
	k, err := in.st.GetSentryKey(ctx, source)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the key of source %q: %w", source, err)
	}
	return k.PublicKey, nil
}

// check is the per-event authorization: the sender's own source, a
// sandbox the sender watches, and its signature when it has a key.
func (in *Intake) check(_ context.Context, sender Sender, key []byte, ev sentry.Event) *sentry.FieldError {
	source := sender.Source
	if ev.Source != source {
		return &sentry.FieldError{Field: "source", Reason: fmt.Sprintf("a sentry token of source %q may not send events of source %q", source, ev.Source)}
	}
	if ev.Subject != "" && !store.InSandboxScope(sender.Sandboxes, ev.Subject) {
		what := "send events about"
		if remediating(ev) {
			what = "quarantine"
		}
		return &sentry.FieldError{Field: "subject", Reason: fmt.Sprintf("sandbox %q is outside the scope of source %q (its token watches %s): it may not %s it",
			ev.Subject, source, strings.Join(sender.Sandboxes, ","), what)}
	}
	if key == nil {
		return nil
	}
	switch err := sentry.Verify(key, ev); {
	case errors.Is(err, sentry.ErrUnsigned):
		return &sentry.FieldError{Field: "signature", Reason: fmt.Sprintf("is required: source %q has a registered key", source)}
	case err != nil:
		return &sentry.FieldError{Field: "signature", Reason: fmt.Sprintf("does not verify with the key registered for source %q", source)}
	}
	return nil
}

// checkReplay refuses a remediating event whose sequence another event of
// its source holds; the same event again is a duplicate, not a replay
// (seen).
func (in *Intake) checkReplay(ctx context.Context, ev sentry.Event) (refused *sentry.FieldError, seen bool, err error) {
	old, err := in.events.SentryEventAt(ctx, ev.Source, ev.Sequence)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("look up sequence %d of source %q: %w", ev.Sequence, ev.Source, err)
	case old.ID == ev.ID:
		return nil, true, nil
	}
	return &sentry.FieldError{Field: "sequence", Reason: fmt.Sprintf("%d of source %q is event %q already: a replayed remediation is refused", ev.Sequence, ev.Source, old.ID)}, false, nil
}

// auditRefusals writes one audit entry for a batch's security refusals.
func (in *Intake) auditRefusals(ctx context.Context, source string, refused []sentry.Refusal) error {
	lines := make([]string, len(refused))
	for i, r := range refused {
		lines[i] = r.ID + ": " + r.Err.Error()
	}
	if err := in.life.AuditSentryRefusals(ctx, source, lines); err != nil {
		return err
	}
	in.log.WarnContext(ctx, "sentry events refused", "source", source, "refused", len(refused), "first", clip(lines[0]))
	return nil
}

func clip(s string) string {
	if len(s) <= 200 {
		return s
	}
	return strings.ToValidUTF8(s[:200], "") + "…"
}

// Notable reports whether a security team should see ev (the gateway
// writes it as an OCSF Detection Finding): it carries the watchdog's
// finding, asks for remediation, or is of high or critical severity.
// Heartbeats never are, nor the info-to-medium events without a finding
// that are most of a watchdog's stream: they are observations, kept in
// the store and the sandbox's timeline, and a SIEM fed the bulk lane's
// tens of thousands a second would lose the quarantines among them.
func Notable(ev sentry.Event) bool {
	switch {
	case ev.Class == sentry.ClassHeartbeat || ev.Class == "":
		return false
	case ev.Payload.Finding != nil, ev.Payload.Processing == sentry.ProcessingRemediate:
		return true
	}
	return ev.Payload.Severity == sentry.SeverityHigh || ev.Payload.Severity == sentry.SeverityCritical
}

// detached is ev without the slices of its batch's body (the raw event,
// its data, extensions and signature), so that holding it does not hold
// the body.
func detached(ev sentry.Event) sentry.Event {
	ev.Raw, ev.Data, ev.Extensions, ev.Signature = nil, nil, nil, nil
	return ev
}

// toolOf is the tool a tool_access event saw called ("" otherwise).
func toolOf(ev sentry.Event) string {
	if ev.Class != sentry.ClassToolAccess || ev.Payload.ToolCall == nil {
		return ""
	}
	return ev.Payload.ToolCall.Tool
}

// stored is the store's row of an event.
func stored(ev sentry.Event, received time.Time) store.SentryEvent {
	when := ev.Time
	if when.IsZero() {
		when = received // as the store would set it
	}
	row := store.SentryEvent{
		Source: ev.Source, ID: ev.ID, Sequence: ev.Sequence, Type: ev.Type, Subject: ev.Subject,
		Time: when, ReceivedAt: received,
		Severity: string(ev.Payload.Severity), Processing: string(ev.Payload.Processing),
		Document: ev.Raw,
	}
	if p := ev.Payload.Policy; p != nil {
		row.PolicyHash = p.Hash
	}
	if c := ev.Payload.Correlation; c != nil {
		row.DenialID, row.TraceID = c.DenialID, c.TraceID
	}
	if ev.Flags&sentry.FlagUnknownType != 0 {
		row.Flags = append(row.Flags, "unknown_type")
	}
	if ev.Flags&sentry.FlagUnknownField != 0 {
		row.Flags = append(row.Flags, "unknown_field")
	}
	if ev.Flags&sentry.FlagExtension != 0 {
		row.Flags = append(row.Flags, "extension")
	}
	if ev.Flags&sentry.FlagTimeDefaulted != 0 {
		row.Flags = append(row.Flags, "time_defaulted")
	}
	return row
}

// gate is closed while any holder is in; wait blocks until it opens.
type gate struct {
	mu   sync.Mutex
	in   int
	open chan struct{} // closed when the last holder leaves
}

func (g *gate) enter() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.in == 0 {
		g.open = make(chan struct{})
	}
	g.in++
}

func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.in--; g.in == 0 {
		close(g.open)
	}
}

// wait returns at once when nobody is in, else when the last leaves or
// ctx ends.
func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	open := g.open
	closed := g.in == 0
	g.mu.Unlock()
	if closed {
		return nil
	}
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
