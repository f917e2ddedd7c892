package sentryintake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
)

// The quarantine lane. A remediating event freezes its sandbox through
// the lifecycle's kill switch (deny-all committed and pushed, proposals
// refused) unless:
//
//   - the gateway runs dry: the action is recorded as dry_run;
//   - the circuit breaker is open: QuarantineBudgetPerSource sandboxes
//     were frozen by the event's source, or QuarantineBudget by all
//     sources, in the last BudgetWindow (counted over the stored actions,
//     so on every replica), and the action is held — the sandbox
//     untouched, the webhook alerted — until an operator decides
//     (Decide). A source that spends its own budget holds only its own
//     quarantines: the others' still freeze while the fleet's lasts;
//   - the sandbox is frozen already (already_frozen) or cannot be frozen
//     (failed, with the reason).
//
// Before all of these, an event whose own time is older than MaxAge, or
// more than FutureSkew ahead of the gateway's clock, when it arrives is
// stale: recorded as such, flagged, and nothing frozen — history, a
// replay of an old log or a wrong clock is no incident to act on now.
//
// Release is never a Sentry event: unfreezing is an operator's action
// (portcullis sandbox unfreeze NAME --reason R).

// act decides and records what to do about one remediating event, before
// it is stored. An event stored before (fresh false) may have been handled
// already: it is when it has an action.
func (in *Intake) act(ctx context.Context, ev sentry.Event, received time.Time, fresh bool) error {
	if !fresh {
		if _, err := in.actionOf(ctx, ev); err == nil {
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	a := store.SentryAction{Source: ev.Source, EventID: ev.ID, Sandbox: ev.Subject, Type: ev.Type, ReceivedAt: received}
	if why := in.stale(ev, received); why != "" {
		a.Status, a.Reason = store.SentryStale, why
		_, err := in.record(ctx, a)
		return err
	}
	if in.cfg.DryRun {
		a.Status, a.Reason = store.SentryDryRun, fmt.Sprintf("dry run (--sentry-dry-run): sandbox %q would have been frozen", ev.Subject)
		_, err := in.record(ctx, a)
		return err
	}
	// A quarantine that cannot freeze anything takes no place in the
	// budget and raises no alert.
	switch sb, err := in.st.GetSandbox(ctx, ev.Subject); {
	case errors.Is(err, store.ErrNotFound):
		a.Status, a.Reason = store.SentryFailed, fmt.Sprintf("sandbox %q not found", ev.Subject)
		_, err := in.record(ctx, a)
		return err
	case err != nil:
		return fmt.Errorf("read sandbox %q: %w", ev.Subject, err)
	case sb.Frozen:
		a.Status, a.Reason = store.SentryNoop, fmt.Sprintf("sandbox %q is already frozen", ev.Subject)
		_, err := in.record(ctx, a)
		return err
	}
	if spent, err := in.takeBudget(ctx, ev.Source, ev.ID); err != nil {
		return err
	} else if spent != "" {
		a.Status, a.Reason = store.SentryHeld, spent
		_, err := in.record(ctx, a)
		return err
	}
	defer in.returnBudget(ev.Source, ev.ID)
	in.urgent.enter()
	release := sync.OnceFunc(in.urgent.leave)
	defer func() {
		if release != nil {
			release()
		}
	}()
	freezing := in.cfg.Now()
	// The freeze and its action commit together (lifecycle.Quarantine):
	// a crash before the event is stored leaves the action naming it.
	a, err := in.life.Quarantine(ctx, a, quarantineReason(ev))
	frozen := in.cfg.Now()
	if err != nil {
		return err
	}
	in.recorded(ctx, a)
	if a.Status == store.SentryFrozen && a.ID != 0 {
		in.awaitAck(ctx, a, freezing, frozen, release)
		release = nil // awaitAck lets the bulk lane go
	}
	return nil
}

// stale says why ev, received at received, is too old (MaxAge) or too far
// ahead (FutureSkew) to act on; "" when it is not. An event without a
// time was given the time received: never stale. A negative MaxAge turns
// the check off, both ways (a backfill of old logs, a test's fixed clock).
func (in *Intake) stale(ev sentry.Event, received time.Time) string {
	age := received.Sub(ev.Time).Truncate(time.Second)
	switch {
	case in.cfg.MaxAge < 0:
		return ""
	case received.Sub(ev.Time) > in.cfg.MaxAge:
		return fmt.Sprintf("stale: event time %s is %s before it was received, older than %s (--sentry-max-age); sandbox %q not frozen",
			ev.Time.UTC().Format(time.RFC3339), age, in.cfg.MaxAge, ev.Subject)
	case ev.Time.Sub(received) > FutureSkew:
		return fmt.Sprintf("stale: event time %s is %s after it was received, more than %s ahead (a wrong clock?); sandbox %q not frozen",
			ev.Time.UTC().Format(time.RFC3339), -age, FutureSkew, ev.Subject)
	}
	return ""
}

// eventKey names one event: a quarantine's place in the budget and its
// stored action.
type eventKey struct{ source, id string }

// takeBudget takes a place in source's quarantine budget and in the
// fleet's for the freeze of event id, to be given back (returnBudget)
// once its action is recorded, or says why there is none. The source's
// budget is checked first: a source past its own takes nothing from the
// fleet's. The places taken count with the freezes stored, each event
// once (a freeze committed but not yet given back is both), so that two
// quarantines at once cannot both take the last place and a freeze is
// never counted twice; the lock is held only to count: a slow freeze
// does not hold up the next.
func (in *Intake) takeBudget(ctx context.Context, source, id string) (spent string, err error) {
	in.breaker.Lock()
	defer in.breaker.Unlock()
	per, fleet := in.cfg.QuarantineBudgetPerSource, in.cfg.QuarantineBudget
	if per <= 0 && fleet <= 0 {
		in.freezing[eventKey{source, id}] = struct{}{}
		return "", nil
	}
	stored, err := in.st.ListSentryActions(ctx, store.SentryActionFilter{
		Status: []string{store.SentryFrozen}, Since: in.cfg.Now().Add(-in.cfg.BudgetWindow)})
	if err != nil {
		return "", fmt.Errorf("list recent sentry freezes: %w", err)
	}
	frozen := make(map[eventKey]struct{}, len(stored)+len(in.freezing))
	for _, a := range stored {
		frozen[eventKey{a.Source, a.EventID}] = struct{}{}
	}
	maps.Copy(frozen, in.freezing)
	bySource := 0
	for k := range frozen {
		if k.source == source {
			bySource++
		}
	}
	if per > 0 && bySource >= per {
		return fmt.Sprintf("quarantine budget of source %q spent: it froze %d of at most %d sandboxes in the last %s (--quarantine-budget-per-source); an operator must decide", source, bySource, per, in.cfg.BudgetWindow), nil
	}
	if fleet > 0 && len(frozen) >= fleet {
		return fmt.Sprintf("quarantine budget spent: Sentry froze %d of at most %d sandboxes in the last %s (--quarantine-budget); an operator must decide", len(frozen), fleet, in.cfg.BudgetWindow), nil
	}
	in.freezing[eventKey{source, id}] = struct{}{}
	return "", nil
}

func (in *Intake) returnBudget(source, id string) {
	in.breaker.Lock()
	defer in.breaker.Unlock()
	delete(in.freezing, eventKey{source, id})
}

func (in *Intake) actionOf(ctx context.Context, ev sentry.Event) (store.SentryAction, error) {
	list, err := in.st.ListSentryActions(ctx, store.SentryActionFilter{Sandbox: ev.Subject})
	if err != nil {
		return store.SentryAction{}, fmt.Errorf("look up the action of event %q: %w", ev.ID, err)
	}
	for _, a := range list {
		if a.Source == ev.Source && a.EventID == ev.ID {
			return a, nil
		}
	}
	return store.SentryAction{}, store.ErrNotFound
}

// repairWindow is how far back, at start, the intake looks for actions
// whose event was never stored.
const repairWindow = 24 * time.Hour

// repair looks, at start, for the actions recorded in the last
// repairWindow whose event the events store does not hold — the gateway
// stopped between a quarantine's freeze, which commits with its action,
// and the event's append — and logs each. Nothing else is needed: the
// watchdog resends an event until its sequence is acknowledged, and the
// resend is then stored and linked, by its source and id, to the action
// that froze the sandbox (the action, not the event, proves it was
// handled, so the resend acts no more).
func (in *Intake) repair(ctx context.Context) {
	lost, err := in.unstored(ctx)
	if err != nil {
		if ctx.Err() == nil {
			in.log.WarnContext(ctx, "look for sentry actions whose event was not stored", "err", err)
		}
		return
	}
	for _, a := range lost {
		in.log.WarnContext(ctx, "sentry action whose event was never stored (the gateway stopped before storing it); its watchdog's resend will be linked to it",
			"action", a.ID, "sandbox", a.Sandbox, "status", a.Status, "source", a.Source, "event", a.EventID, "version", a.Version)
	}
}

// unstored returns the actions of the last repairWindow (and of the
// events' retention) whose event is not stored, newest first.
func (in *Intake) unstored(ctx context.Context) ([]store.SentryAction, error) {
	since := in.cfg.Now().Add(-repairWindow)
	if in.cfg.Retention >= 0 {
		if kept := store.SentryPruneCutoff(in.cfg.Now().Add(-in.cfg.Retention)); kept.After(since) {
			since = kept
		}
	}
	actions, err := in.st.ListSentryActions(ctx, store.SentryActionFilter{Since: since})
	if err != nil {
		return nil, err
	}
	// The events of each sandbox, source and type, read once.
	type key struct{ sandbox, source, typ string }
	ids := map[key]map[string]bool{}
	var lost []store.SentryAction
	for _, a := range actions {
		k := key{a.Sandbox, a.Source, a.Type}
		if ids[k] == nil {
			evs, err := in.events.ListSentryEvents(ctx, store.SentryEventFilter{Sandbox: a.Sandbox, Source: a.Source, Type: a.Type})
			if err != nil {
				return nil, err
			}
			ids[k] = make(map[string]bool, len(evs))
			for _, ev := range evs {
				ids[k][ev.ID] = true
			}
		}
		if !ids[k][a.EventID] {
			lost = append(lost, a)
		}
	}
	return lost, nil
}

// quarantineReason is the freeze's reason: the event that caused it.
func quarantineReason(ev sentry.Event) string {
	r := fmt.Sprintf("sentry %s %s/%s", ev.Class, ev.Source, ev.ID)
	if f := ev.Payload.Finding; f != nil && f.Title != "" {
		r += ": " + clip(f.Title)
	}
	return r
}

// record stores an action that froze nothing (lifecycle) and tells of
// it; a zero ID when another replica recorded the same event's first (its
// own action is kept).
func (in *Intake) record(ctx context.Context, a store.SentryAction) (store.SentryAction, error) {
	a, err := in.life.RecordSentryAction(ctx, a)
	if err != nil {
		return a, err
	}
	in.recorded(ctx, a)
	return a, nil
}

// recorded logs and tells of an action just recorded (none for a zero
// ID: another's record stands).
func (in *Intake) recorded(ctx context.Context, a store.SentryAction) {
	if a.ID == 0 {
		return
	}
	in.log.WarnContext(ctx, "sentry remediation", "sandbox", a.Sandbox, "status", a.Status, "source", a.Source, "event", a.EventID, "version", a.Version, "reason", a.Reason)
	in.cfg.Stream.Publish(events.SentryActed{Action: a})
}

// awaitAck waits, off the request, until the sandbox's proxies applied
// the freeze recorded as a, and records on a the time from ingest to the
// last ACK. release lets the bulk lane go (urgent): once the proxies
// applied the freeze, or Config.UrgentHold from now, whichever is first.
func (in *Intake) awaitAck(ctx context.Context, a store.SentryAction, freezing, frozen time.Time, release func()) {
	if in.cfg.WaitApplied == nil {
		release()
		return
	}
	held := time.AfterFunc(in.cfg.UrgentHold, release)
	in.background.Add(1)
	go func() {
		defer in.background.Done()
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.cfg.AckWait)
		defer cancel()
		n, lastAck, err := in.cfg.WaitApplied(wctx, a.Sandbox, a.Version)
		held.Stop()
		release()
		if err != nil {
			in.log.WarnContext(wctx, "sentry quarantine not applied by every proxy", "sandbox", a.Sandbox, "version", a.Version, "err", err)
			return
		}
		if n == 0 {
			in.log.InfoContext(wctx, "sentry quarantine committed; no proxy of the sandbox is connected here", "sandbox", a.Sandbox, "version", a.Version)
			return
		}
		// The freeze is pushed before it is durable (InTxEnforceFirst):
		// the proxies may ACK before Freeze returns, so the time taken is
		// the last ACK's, not the end of this wait.
		now := lastAck
		if now.IsZero() { // acked a later version: done by now
			now = in.cfg.Now()
		}
		took := now.Sub(a.ReceivedAt)
		if err := in.life.AckSentryAction(wctx, a.ID, now); err != nil {
			in.log.WarnContext(wctx, "record quarantine ack", "sandbox", a.Sandbox, "err", err)
		}
		in.log.WarnContext(wctx, "sentry quarantine applied by every proxy", "sandbox", a.Sandbox, "version", a.Version, "proxies", n,
			"event", a.EventID, "ingest_to_last_ack_ms", ms(took),
			"ingest_to_freeze_ms", ms(freezing.Sub(a.ReceivedAt)), "ingest_to_commit_ms", ms(frozen.Sub(a.ReceivedAt)))
		in.cfg.Stream.Publish(events.QuarantineApplied{Action: a, Took: took})
	}()
}

// ms is d in milliseconds, to the microsecond, for the log.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Decisions an operator makes about a held action.
const (
	DecideFreeze  = lifecycle.DecideFreeze
	DecideDismiss = lifecycle.DecideDismiss
)

// Decide answers a held action (lifecycle.DecideSentryAction): freeze
// the sandbox now or dismiss it, with a reason, and tells of the answer.
func (in *Intake) Decide(ctx context.Context, id int64, decision, reason, actor string) (store.SentryAction, error) {
	a, err := in.life.DecideSentryAction(ctx, id, decision, reason, actor)
	if err == nil {
		in.cfg.Stream.Publish(events.SentryDecided{Action: a})
	}
	return a, err
}
