package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Remediation: what the gateway did about each remediating Sentry event.
// gateway/sentryintake decides (dry run, the circuit breaker, whether a
// sandbox can be frozen) and when; every write it makes is here. An
// event's action, keyed by its source and id (store.SentryAction), is
// the proof the event was handled: it is recorded once, and a resend of
// the event, on any replica, finds it.
//
// A quarantine freezes its sandbox and records its action in one
// transaction (Quarantine): no crash leaves a sandbox frozen by an event
// without the action that names that event. The event itself is stored
// after, in the events store (possibly another database), and is linked
// to its action by (source, id) alone.

// SentryActor is how a Sentry source appears in the audit log and as the
// freezer of a sandbox it quarantined.
func SentryActor(source string) string { return "sentry:" + source }

// errActedBefore rolls a quarantine back when its event has an action
// already: it was handled (by another replica, or before a crash).
var errActedBefore = errors.New("the event's action was recorded before")

// RecordSentryAction stores a — an action that froze nothing: dry run,
// held, already frozen, failed — with its audit entry, in one
// transaction, and returns it with its ID. The ID is zero when the
// event's action was recorded before; that one is kept.
func (l *Lifecycle) RecordSentryAction(ctx context.Context, a store.SentryAction) (store.SentryAction, error) {
	err := l.st.InTx(ctx, func(tx store.Tx) error {
		var err error
		a, err = insertSentryAction(ctx, tx, a)
		return err
	})
	if errors.Is(err, store.ErrAlreadyExists) {
		a.ID = 0
		return a, nil
	}
	if err != nil {
		return a, fmt.Errorf("record the action of sentry event %s/%s: %w", a.Source, a.EventID, err)
	}
	return a, nil
}

// Quarantine freezes a.Sandbox for the remediating event a names (reason
// is the freeze's) and records a as frozen, at the version committed, in
// the freeze's one transaction. A sandbox that cannot be frozen records
// a as already_frozen (frozen meanwhile) or failed, with the reason, and
// freezes nothing. A zero ID: the event's action was recorded before, and
// nothing was frozen now.
func (l *Lifecycle) Quarantine(ctx context.Context, a store.SentryAction, reason string) (store.SentryAction, error) {
	frozen := a
	_, err := l.freeze(ctx, a.Sandbox, reason, SentryActor(a.Source), func(tx store.Tx, v store.PolicyVersion) error {
		frozen.Status, frozen.Version = store.SentryFrozen, v.Version
		frozen.Reason = fmt.Sprintf("frozen at version %d", v.Version)
		var err error
		if frozen, err = insertSentryAction(ctx, tx, frozen); errors.Is(err, store.ErrAlreadyExists) {
			return errActedBefore
		}
		return err
	})
	var conflict *ConflictError
	switch {
	case err == nil:
		return frozen, nil
	case errors.Is(err, errActedBefore):
		a.ID = 0
		return a, nil
	case errors.As(err, &conflict):
		a.Status, a.Reason = store.SentryNoop, conflict.Error()
	default:
		a.Status, a.Reason = store.SentryFailed, err.Error()
	}
	return l.RecordSentryAction(ctx, a)
}

// insertSentryAction stores a in tx and audits it as its source's doing.
func insertSentryAction(ctx context.Context, tx store.Tx, a store.SentryAction) (store.SentryAction, error) {
	a.CreatedAt = tx.Now()
	stored, err := tx.InsertSentryAction(ctx, a)
	if err != nil {
		return a, err
	}
	return stored, auditSentryAction(ctx, tx, SentryActor(stored.Source), stored)
}

func auditSentryAction(ctx context.Context, tx store.Tx, actor string, a store.SentryAction) error {
	return store.Audit(ctx, tx, store.AuditEntry{
		Actor: actor, Action: store.ActionSentryAction, Sandbox: a.Sandbox, Target: a.Source + "/" + a.EventID,
		Detail: map[string]string{"status": a.Status, "reason": clip(a.Reason), "version": fmt.Sprint(a.Version), "action": fmt.Sprint(a.ID)},
	})
}

// AckSentryAction records when the last connected proxy of the action's
// sandbox applied the version it committed.
func (l *Lifecycle) AckSentryAction(ctx context.Context, id int64, at time.Time) error {
	return l.st.InTx(ctx, func(tx store.Tx) error {
		cur, err := tx.GetSentryAction(ctx, id)
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

// DecideSentryAction answers held action id: freeze its sandbox now
// (applied; the circuit breaker does not count an operator's freeze) or
// dismiss it. The reason is required. The answer is claimed first, in a
// transaction that holds the sandbox's row, so two operators cannot both
// decide (the second gets a ConflictError); the freeze then commits with
// the action's version in one transaction, and a freeze that fails puts
// the action back to held.
func (l *Lifecycle) DecideSentryAction(ctx context.Context, id int64, decision, reason, actor string) (store.SentryAction, error) {
	if reason == "" {
		return store.SentryAction{}, &FieldError{Path: "reason", Message: "is required: say why"}
	}
	if decision != DecideFreeze && decision != DecideDismiss {
		return store.SentryAction{}, &FieldError{Path: "decision", Message: fmt.Sprintf("must be %q or %q, not %q", DecideFreeze, DecideDismiss, decision)}
	}
	held, err := l.st.GetSentryAction(ctx, id)
	if err != nil {
		return store.SentryAction{}, Missing(err, "sentry action %d not found", id)
	}
	status := store.SentryDismissed
	if decision == DecideFreeze {
		status = store.SentryApplied
	}
	a, err := l.transitionSentryAction(ctx, held, store.SentryHeld, actor, func(a *store.SentryAction) {
		now := l.cfg.Now()
		a.Status, a.DecidedBy, a.DecidedAt = status, actor, &now
		a.Reason = fmt.Sprintf("%s — %s by %s: %s", a.Reason, status, actor, reason)
	})
	if err != nil || decision == DecideDismiss {
		return a, err
	}
	var applied store.SentryAction
	_, err = l.freeze(ctx, a.Sandbox, fmt.Sprintf("sentry %s/%s, held and then frozen by %s: %s", a.Source, a.EventID, actor, reason), actor,
		func(tx store.Tx, v store.PolicyVersion) error {
			var err error
			applied, err = updateSentryAction(ctx, tx, a, store.SentryApplied, actor, func(x *store.SentryAction) { x.Version = v.Version })
			return err
		})
	if err != nil {
		// Not frozen: the action is held again, for another try.
		if _, rerr := l.transitionSentryAction(ctx, a, store.SentryApplied, actor, func(x *store.SentryAction) {
			x.Status, x.Reason, x.DecidedBy, x.DecidedAt = store.SentryHeld, held.Reason, "", nil
		}); rerr != nil {
			l.log.ErrorContext(ctx, "put a sentry action back to held", "action", id, "err", rerr)
		}
		return held, err
	}
	return applied, nil
}

// transitionSentryAction changes action a, if it still has status from,
// in one transaction holding its sandbox's row (every decision on a
// sandbox's actions queues there), and audits the change as actor's.
func (l *Lifecycle) transitionSentryAction(ctx context.Context, a store.SentryAction, from, actor string, change func(*store.SentryAction)) (store.SentryAction, error) {
	var out store.SentryAction
	err := l.st.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.LockSandbox(ctx, a.Sandbox); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		var err error
		out, err = updateSentryAction(ctx, tx, a, from, actor, change)
		return err
	})
	var conflict *ConflictError
	if errors.As(err, &conflict) {
		return a, err
	}
	if err != nil {
		return a, fmt.Errorf("decide sentry action %d: %w", a.ID, err)
	}
	return out, nil
}

// updateSentryAction changes action a in tx, if it still has status from
// (else a ConflictError), and audits the change as actor's.
func updateSentryAction(ctx context.Context, tx store.Tx, a store.SentryAction, from, actor string, change func(*store.SentryAction)) (store.SentryAction, error) {
	cur, err := tx.GetSentryAction(ctx, a.ID)
	if err != nil {
		return a, err
	}
	if cur.Status != from {
		return a, &ConflictError{fmt.Sprintf("sentry action %d is %s, not %s", a.ID, cur.Status, from)}
	}
	change(&cur)
	if err := tx.UpdateSentryAction(ctx, cur); err != nil {
		return a, err
	}
	return cur, auditSentryAction(ctx, tx, actor, cur)
}

// AuditSentryRefusals writes one audit entry for the security refusals
// of one batch of source's events: how many, and the first few ("id:
// reason" each).
func (l *Lifecycle) AuditSentryRefusals(ctx context.Context, source string, refused []string) error {
	detail := map[string]string{"refused": strconv.Itoa(len(refused))}
	for i, r := range refused[:min(len(refused), 5)] {
		detail["event_"+strconv.Itoa(i)] = clip(r)
	}
	err := l.st.InTx(ctx, func(tx store.Tx) error {
		return store.Audit(ctx, tx, store.AuditEntry{Actor: SentryActor(source), Action: store.ActionSentryRefused, Target: source, Detail: detail})
	})
	if err != nil {
		return fmt.Errorf("audit refused sentry events: %w", err)
	}
	return nil
}

// clip bounds text a watchdog sized, for the audit log.
func clip(s string) string {
	if len(s) <= 200 {
		return s
	}
	return strings.ToValidUTF8(s[:200], "") + "…"
}
