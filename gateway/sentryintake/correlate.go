package sentryintake

import (
	"context"
	"slices"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Derived findings. A moment after an event is stored (Settle: a proxy
// ships its decision records every 500 ms and the gateway writes proxy
// statuses every second), the replica that stored it checks it against
// what the proxies reported, and marks the event with what it found
// (store.SentryEvent.Flags):
//
//   - FindingDrift: the event names the policy hash the watchdog saw in
//     force (data.policy.hash), and no proxy of its sandbox has applied
//     that hash — the watchdog and the data plane disagree about the
//     policy.
//   - FindingUnmediated: a tool_access event's tool call matches no
//     decision record of its sandbox (the same denial_id, or the same tool
//     within Window of the event's time) — traffic that did not pass a
//     proxy.
//
// Checks wait in a bounded queue; when it is full a check is dropped and
// counted (Dropped), never ingest slowed.

// The findings, as event flags.
const (
	FindingDrift      = "drift"
	FindingUnmediated = "unmediated"
)

const (
	// DefaultSettle is how long after ingest an event is checked.
	DefaultSettle = 2 * time.Second
	// DefaultWindow is how far apart a tool call the watchdog saw and a
	// proxy's decision record may be and still be the same call.
	DefaultWindow = 30 * time.Second
	checkQueue    = 10_000
	// unmediatedScan bounds the decision records one check reads.
	unmediatedScan = 200
)

// check is one stored event waiting to be checked.
type check struct {
	ev   store.SentryEvent
	tool string
}

// queueChecks offers the stored events that carry something to check.
func (in *Intake) queueChecks(rows []store.SentryEvent, tools []string) {
	for i, row := range rows {
		if row.Subject == "" || row.PolicyHash == "" && tools[i] == "" {
			continue
		}
		select {
		case in.checks <- check{ev: row, tool: tools[i]}:
		default:
			in.dropped.Add(1)
		}
	}
}

// Dropped is how many checks the full queue turned away.
func (in *Intake) Dropped() uint64 { return in.dropped.Load() }

// runChecks checks queued events until ctx ends.
func (in *Intake) runChecks(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-in.checks:
			if wait := c.ev.ReceivedAt.Add(in.cfg.Settle).Sub(in.cfg.Now()); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			if err := in.checkEvent(ctx, c); err != nil && ctx.Err() == nil {
				in.log.WarnContext(ctx, "sentry event check failed", "source", c.ev.Source, "event", c.ev.ID, "err", err)
			}
		}
	}
}

// checkEvent derives the findings of one event and records them.
func (in *Intake) checkEvent(ctx context.Context, c check) error {
	var found []string
	if c.ev.PolicyHash != "" {
		drift, err := in.drifted(ctx, c.ev)
		if err != nil {
			return err
		}
		if drift {
			found = append(found, FindingDrift)
		}
	}
	if c.tool != "" {
		unmediated, err := in.unmediated(ctx, c.ev, c.tool)
		if err != nil {
			return err
		}
		if unmediated {
			found = append(found, FindingUnmediated)
		}
	}
	if len(found) == 0 {
		return nil
	}
	flags := slices.Clone(c.ev.Flags)
	for _, f := range found {
		if !slices.Contains(flags, f) {
			flags = append(flags, f)
		}
	}
	if err := in.st.SetSentryEventFlags(ctx, c.ev.Source, c.ev.ID, c.ev.ReceivedAt, flags); err != nil {
		return err
	}
	in.log.WarnContext(ctx, "sentry finding", "findings", found, "sandbox", c.ev.Subject, "source", c.ev.Source, "event", c.ev.ID,
		"policy_hash", c.ev.PolicyHash, "tool", c.tool)
	if in.cfg.Found != nil {
		for _, f := range found {
			in.cfg.Found(f)
		}
	}
	return nil
}

// drifted reports whether no proxy of the event's sandbox has applied the
// policy hash it names.
func (in *Intake) drifted(ctx context.Context, ev store.SentryEvent) (bool, error) {
	statuses, err := in.st.ListProxyStatuses(ctx, ev.Subject)
	if err != nil {
		return false, err
	}
	for _, p := range statuses {
		if p.AppliedHash == ev.PolicyHash {
			return false, nil
		}
	}
	return true, nil
}

// unmediated reports whether no decision record of the event's sandbox is
// the tool call it saw. With more records of the tool than one check
// reads, none of them old enough to tell, it says no.
func (in *Intake) unmediated(ctx context.Context, ev store.SentryEvent, tool string) (bool, error) {
	if ev.DenialID != "" {
		ds, err := in.st.ListDecisions(ctx, store.DecisionFilter{Sandbox: ev.Subject, DenialID: ev.DenialID, Limit: 1})
		if err != nil || len(ds) > 0 {
			return false, err
		}
	}
	ds, err := in.st.ListDecisions(ctx, store.DecisionFilter{Sandbox: ev.Subject, Tool: tool, Limit: unmediatedScan})
	if err != nil {
		return false, err
	}
	from, to := ev.Time.Add(-in.cfg.Window), ev.Time.Add(in.cfg.Window)
	for _, d := range ds {
		if !d.Time.Before(from) && !d.Time.After(to) {
			return false, nil
		}
	}
	if len(ds) == unmediatedScan && ds[0].Time.After(from) {
		return false, nil // the records read do not reach back far enough
	}
	return true, nil
}
