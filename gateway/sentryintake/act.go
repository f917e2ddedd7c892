package sentryintake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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
	if spent, err := in.takeBudget(ctx, ev.Source); err != nil {
		return err
	} else if spent != "" {
		a.Status, a.Reason = store.SentryHeld, spent
		held, err := in.record(ctx, a)
		if err != nil {
			return err
		}
		if held.ID != 0 && in.cfg.Held != nil {
			in.cfg.Held(held)
		}
		return nil
	}
	defer in.returnBudget(ev.Source)
	in.urgent.enter()
	release := sync.OnceFunc(in.urgent.leave)
	defer func() {
		if release != nil {
			release()
		}
	}()
	freezing := in.cfg.Now()
	sb, err := in.life.Freeze(ctx, ev.Subject, quarantineReason(ev), Actor(ev.Source))
	frozen := in.cfg.Now()
	var conflict *lifecycle.ConflictError
	switch {
	case errors.As(err, &conflict):
		a.Status, a.Reason = store.SentryNoop, conflict.Error()
	case err != nil:
		a.Status, a.Reason = store.SentryFailed, err.Error()
	default:
		a.Status, a.Version = store.SentryFrozen, sb.CurrentVersion
		a.Reason = fmt.Sprintf("frozen at version %d", sb.CurrentVersion)
	}
	// The proxies may ACK while the action is being recorded: the wait
	// starts now, so that the time taken is until their ACK, not until
	// the record is written.
	recorded := make(chan store.SentryAction, 1)
	if a.Status == store.SentryFrozen {
		in.awaitAck(ctx, a, freezing, frozen, recorded, release)
		release = nil // awaitAck lets the bulk lane go
	}
	a, err = in.record(ctx, a)
	if err == nil && a.ID != 0 {
		recorded <- a
	}
	close(recorded)
	return err
}

// takeBudget takes a place in source's quarantine budget and in the
// fleet's for a freeze, to be given back (returnBudget) once its action
// is recorded, or says why there is none. The source's budget is checked
// first: a source past its own takes nothing from the fleet's. The places
// taken count with the freezes stored, so that two quarantines at once
// cannot both take the last one, and the lock is held only to count: a
// slow freeze does not hold up the next.
func (in *Intake) takeBudget(ctx context.Context, source string) (spent string, err error) {
	in.breaker.Lock()
	defer in.breaker.Unlock()
	since := in.cfg.Now().Add(-in.cfg.BudgetWindow)
	if per := in.cfg.QuarantineBudgetPerSource; per > 0 {
		n, err := in.st.CountSentryActions(ctx, source, []string{store.SentryFrozen}, since)
		if err != nil {
			return "", fmt.Errorf("count recent sentry freezes of source %q: %w", source, err)
		}
		if n += in.freezingBy[source]; n >= per {
			return fmt.Sprintf("quarantine budget of source %q spent: it froze %d of at most %d sandboxes in the last %s (--quarantine-budget-per-source); an operator must decide", source, n, per, in.cfg.BudgetWindow), nil
		}
	}
	if in.cfg.QuarantineBudget > 0 {
		n, err := in.st.CountSentryActions(ctx, "", []string{store.SentryFrozen}, since)
		if err != nil {
			return "", fmt.Errorf("count recent sentry freezes: %w", err)
		}
		if n += in.freezing; n >= in.cfg.QuarantineBudget {
			return fmt.Sprintf("quarantine budget spent: Sentry froze %d of at most %d sandboxes in the last %s (--quarantine-budget); an operator must decide", n, in.cfg.QuarantineBudget, in.cfg.BudgetWindow), nil
		}
	}
	in.freezing++
	in.freezingBy[source]++
	return "", nil
}

func (in *Intake) returnBudget(source string) {
	in.breaker.Lock()
	defer in.breaker.Unlock()
	in.freezing--
	if in.freezingBy[source]--; in.freezingBy[source] <= 0 {
		delete(in.freezingBy, source)
	}
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

// quarantineReason is the freeze's reason: the event that caused it.
func quarantineReason(ev sentry.Event) string {
	r := fmt.Sprintf("sentry %s %s/%s", ev.Class, ev.Source, ev.ID)
	if f := ev.Payload.Finding; f != nil && f.Title != "" {
		r += ": " + clip(f.Title)
	}
	return r
}

// record stores the action and audits it, and returns it with its ID; a
// zero ID when another replica recorded the same event's first (its own
// action is kept).
func (in *Intake) record(ctx context.Context, a store.SentryAction) (store.SentryAction, error) {
	err := in.st.InTx(ctx, func(tx store.Tx) error {
		a.CreatedAt = tx.Now()
		stored, err := tx.InsertSentryAction(ctx, a)
		if err != nil {
			return err
		}
		a = stored
		return store.Audit(ctx, tx, store.AuditEntry{
			Actor: Actor(a.Source), Action: store.ActionSentryAction, Sandbox: a.Sandbox, Target: a.Source + "/" + a.EventID,
			Detail: map[string]string{"status": a.Status, "reason": clip(a.Reason), "version": fmt.Sprint(a.Version), "action": fmt.Sprint(a.ID)},
		})
	})
	if errors.Is(err, store.ErrAlreadyExists) {
		a.ID = 0
		return a, nil
	}
	if err != nil {
		return a, fmt.Errorf("record the action of sentry event %s/%s: %w", a.Source, a.EventID, err)
	}
	in.log.WarnContext(ctx, "sentry remediation", "sandbox", a.Sandbox, "status", a.Status, "source", a.Source, "event", a.EventID, "version", a.Version, "reason", a.Reason)
	if in.cfg.Acted != nil {
		in.cfg.Acted(a)
	}
	return a, nil
}

// awaitAck waits, off the request, until the sandbox's proxies applied the
// freeze (a, not yet recorded), and records on the action recorded hands
// over the time from ingest to the last ACK. A closed recorded without an
// action (the record failed, or another replica's was first) records
// nothing. release lets the bulk lane go (urgent): once the proxies
// applied the freeze, or Config.UrgentHold from now, whichever is first.
func (in *Intake) awaitAck(ctx context.Context, a store.SentryAction, freezing, frozen time.Time, recorded <-chan store.SentryAction, release func()) {
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
		a, ok := <-recorded
		if !ok {
			return
		}
		if err := in.markAcked(wctx, a, now); err != nil {
			in.log.WarnContext(wctx, "record quarantine ack", "sandbox", a.Sandbox, "err", err)
		}
		in.log.WarnContext(wctx, "sentry quarantine applied by every proxy", "sandbox", a.Sandbox, "version", a.Version, "proxies", n,
			"event", a.EventID, "ingest_to_last_ack_ms", ms(took),
			"ingest_to_freeze_ms", ms(freezing.Sub(a.ReceivedAt)), "ingest_to_commit_ms", ms(frozen.Sub(a.ReceivedAt)))
		if in.cfg.Applied != nil {
			in.cfg.Applied(took)
		}
	}()
}

// ms is d in milliseconds, to the microsecond, for the log.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (in *Intake) markAcked(ctx context.Context, a store.SentryAction, at time.Time) error {
	return in.st.InTx(ctx, func(tx store.Tx) error {
		cur, err := tx.GetSentryAction(ctx, a.ID)
		if err != nil {
			return err
		}
		cur.AckedAt = &at
		return tx.UpdateSentryAction(ctx, cur)
	})
}

// Decisions an operator makes about a held action.
const (
	DecideFreeze  = "freeze"
	DecideDismiss = "dismiss"
)

// Decide answers a held action: freeze the sandbox now (applied; the
// breaker does not count an operator's freeze) or dismiss it. The reason
// is required. The answer is claimed first, in a transaction that holds
// the sandbox's row, so two operators cannot both decide; a freeze that
// then fails puts the action back to held.
func (in *Intake) Decide(ctx context.Context, id int64, decision, reason, actor string) (store.SentryAction, error) {
	if reason == "" {
		return store.SentryAction{}, &lifecycle.FieldError{Path: "reason", Message: "is required: say why"}
	}
	if decision != DecideFreeze && decision != DecideDismiss {
		return store.SentryAction{}, &lifecycle.FieldError{Path: "decision", Message: fmt.Sprintf("must be %q or %q, not %q", DecideFreeze, DecideDismiss, decision)}
	}
	held, err := in.st.GetSentryAction(ctx, id)
	if err != nil {
		return store.SentryAction{}, lifecycle.Missing(err, "sentry action %d not found", id)
	}
	status := store.SentryDismissed
	if decision == DecideFreeze {
		status = store.SentryApplied
	}
	a, err := in.transition(ctx, held, store.SentryHeld, func(a *store.SentryAction) {
		now := in.cfg.Now()
		a.Status, a.DecidedBy, a.DecidedAt = status, actor, &now
		a.Reason = fmt.Sprintf("%s — %s by %s: %s", a.Reason, status, actor, reason)
	}, actor)
	if err != nil {
		return a, err
	}
	if decision == DecideDismiss {
		in.decided(a)
		return a, nil
	}
	sb, err := in.life.Freeze(ctx, a.Sandbox, fmt.Sprintf("sentry %s/%s, held and then frozen by %s: %s", a.Source, a.EventID, actor, reason), actor)
	if err != nil {
		// Not frozen: the action is held again, for another try.
		if _, rerr := in.transition(ctx, a, store.SentryApplied, func(x *store.SentryAction) {
			x.Status, x.Reason, x.DecidedBy, x.DecidedAt = store.SentryHeld, held.Reason, "", nil
		}, actor); rerr != nil {
			in.log.ErrorContext(ctx, "put a sentry action back to held", "action", id, "err", rerr)
		}
		return held, err
	}
	a, err = in.transition(ctx, a, store.SentryApplied, func(x *store.SentryAction) { x.Version = sb.CurrentVersion }, actor)
	if err == nil {
		in.decided(a)
	}
	return a, err
}

func (in *Intake) decided(a store.SentryAction) {
	if in.cfg.Decided != nil {
		in.cfg.Decided(a)
	}
}

// transition changes action a, if it still has status from, in one
// transaction holding its sandbox's row (every decision on a sandbox's
// actions queues there), and audits the change.
func (in *Intake) transition(ctx context.Context, a store.SentryAction, from string, change func(*store.SentryAction), actor string) (store.SentryAction, error) {
	var out store.SentryAction
	err := in.st.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.LockSandbox(ctx, a.Sandbox); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		cur, err := tx.GetSentryAction(ctx, a.ID)
		if err != nil {
			return err
		}
		if cur.Status != from {
			return &lifecycle.ConflictError{Msg: fmt.Sprintf("sentry action %d is %s, not %s", a.ID, cur.Status, from)}
		}
		change(&cur)
		if err := tx.UpdateSentryAction(ctx, cur); err != nil {
			return err
		}
		out = cur
		return store.Audit(ctx, tx, store.AuditEntry{
			Actor: actor, Action: store.ActionSentryAction, Sandbox: cur.Sandbox, Target: cur.Source + "/" + cur.EventID,
			Detail: map[string]string{"status": cur.Status, "reason": clip(cur.Reason), "version": fmt.Sprint(cur.Version), "action": fmt.Sprint(cur.ID)},
		})
	})
	var conflict *lifecycle.ConflictError
	if errors.As(err, &conflict) {
		return a, err
	}
	if err != nil {
		return a, fmt.Errorf("decide sentry action %d: %w", a.ID, err)
	}
	return out, nil
}
