package sentryintake

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/store"
)

// Derived findings. A moment after an event is stored (Settle: a proxy
// ships its decision records every 500 ms and the gateway writes proxy
// statuses every second), the replica that stored it checks it against
// what the proxies reported, and marks the event with what it found
// (store.SentryEvent.Flags):
//
//   - store.SentryDrift: the event names the policy hash the watchdog saw in
//     force (data.policy.hash), and no proxy of its sandbox has applied
//     that hash — the watchdog and the data plane disagree about the
//     policy. A hash the proxies have since moved past is no drift if its
//     version was the sandbox's current one within Window before the
//     event was received: the watchdog saw the policy of a moment ago.
//   - store.SentryUnmediated: a tool_access event's tool call matches no
//     decision record of its sandbox (the same denial_id, or the same tool
//     within Window of the event's time) — traffic that did not pass a
//     proxy.
//
// Checks wait in a bounded queue; when it is full a check is dropped and
// counted (Dropped), never ingest slowed. They are done in receive order
// as soon as each has settled, many at once: the checker waits for the
// oldest only.

const (
	// DefaultSettle is how long after ingest an event is checked.
	DefaultSettle = 2 * time.Second
	// DefaultWindow is how far apart a tool call the watchdog saw and a
	// proxy's decision record may be and still be the same call.
	DefaultWindow = 30 * time.Second
	// checkQueue bounds the checks waiting to settle, twice: in the queue
	// and held by the checker (about 300 bytes each). Events arriving
	// faster than 2 × checkQueue ÷ (Settle + checkEvery), about 13,000 a
	// second with the defaults, are stored but not all checked: the rest
	// are dropped and counted.
	checkQueue = 20_000
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
		c := check{ev: row, tool: tools[i]}
		c.ev.Document = nil // a slice of its batch's body, which it would keep
		select {
		case in.checks <- c:
		default:
			in.dropped.Add(1)
		}
	}
}

// Dropped is how many checks the full queue turned away.
func (in *Intake) Dropped() uint64 { return in.dropped.Load() }

// checkEvery is the least time between two rounds of checks. The checks
// of a round share their reads of proxy statuses (one per sandbox) and
// decision records (one per sandbox and tool), so a round costs about the
// same for one event as for thousands: under steady ingest the checker
// gathers a second of events rather than read for each handful.
const checkEvery = time.Second

// runChecks checks queued events until ctx ends. It holds the checks it
// has taken from the queue (at most checkQueue more) and, once the oldest
// has settled, does every one that has, in receive order. (It used to
// wait for the newest of up to a thousand, so that it did at most 500
// checks a second and dropped the rest at full ingest.)
func (in *Intake) runChecks(ctx context.Context) {
	var pending []check
	var last time.Time
	for {
		if len(pending) == 0 {
			select {
			case <-ctx.Done():
				return
			case c := <-in.checks:
				pending = append(pending, c)
			}
		}
		wait := in.settled(pending[0]).Sub(in.cfg.Now())
		if since := time.Since(last); since < checkEvery {
			wait = max(wait, checkEvery-since)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	take:
		for len(pending) < checkQueue {
			select {
			case c := <-in.checks:
				pending = append(pending, c)
			default:
				break take
			}
		}
		now, n := in.cfg.Now(), 1
		for n < len(pending) && !in.settled(pending[n]).After(now) {
			n++
		}
		if err := in.urgent.wait(ctx); err != nil { // a freeze first
			return
		}
		last = time.Now()
		in.checkAll(ctx, pending[:n])
		pending = pending[n:]
	}
}

// settled is when c's event can be checked.
func (in *Intake) settled(c check) time.Time { return c.ev.ReceivedAt.Add(in.cfg.Settle) }

// checkAll checks a batch and writes the findings in one transaction.
func (in *Intake) checkAll(ctx context.Context, batch []check) {
	r := &reads{in: in, statuses: map[string][]store.ProxyStatus{}, versions: map[string][]store.PolicyVersion{}, decisions: map[[2]string][]store.Decision{}}
	var marks []lifecycle.SentryFlags
	counts := map[string]int{}
	for _, c := range batch {
		found, err := in.checkEvent(ctx, r, c)
		if err != nil {
			if ctx.Err() == nil {
				in.log.WarnContext(ctx, "sentry event check failed", "source", c.ev.Source, "event", c.ev.ID, "err", err)
			}
			continue
		}
		if len(found) == 0 {
			continue
		}
		flags := slices.Clone(c.ev.Flags)
		for _, f := range found {
			if !slices.Contains(flags, f) {
				flags = append(flags, f)
			}
		}
		marks = append(marks, lifecycle.SentryFlags{Event: c.ev, Flags: flags})
		for _, f := range found {
			counts[f]++
			in.cfg.Stream.Publish(events.SentryFinding{Kind: f, Event: c.ev, Tool: c.tool})
		}
	}
	if len(marks) == 0 {
		return
	}
	// One line a batch, naming its first finding: a flood of unmediated
	// calls is counted, not logged line by line.
	first := marks[0].Event
	in.log.WarnContext(ctx, "sentry findings", "drift", counts[store.SentryDrift], "unmediated", counts[store.SentryUnmediated],
		"first_sandbox", first.Subject, "first_source", first.Source, "first_event", first.ID, "first_flags", marks[0].Flags)
	if err := in.life.FlagSentryEvents(ctx, marks); err != nil && ctx.Err() == nil {
		in.log.WarnContext(ctx, "record sentry findings", "events", len(marks), "err", err)
	}
}

// reads are the store reads a batch of checks shares.
type reads struct {
	in        *Intake
	statuses  map[string][]store.ProxyStatus   // by sandbox
	versions  map[string][]store.PolicyVersion // by sandbox, read only for a hash no proxy holds now
	decisions map[[2]string][]store.Decision   // by sandbox and tool: the newest unmediatedScan
}

func (r *reads) proxyStatuses(ctx context.Context, sandbox string) ([]store.ProxyStatus, error) {
	if s, ok := r.statuses[sandbox]; ok {
		return s, nil
	}
	s, err := r.in.st.ListProxyStatuses(ctx, sandbox)
	if err == nil {
		r.statuses[sandbox] = s
	}
	return s, err
}

func (r *reads) policyVersions(ctx context.Context, sandbox string) ([]store.PolicyVersion, error) {
	if vs, ok := r.versions[sandbox]; ok {
		return vs, nil
	}
	vs, err := r.in.st.ListPolicyVersions(ctx, sandbox)
	if errors.Is(err, store.ErrNotFound) {
		vs, err = nil, nil // deleted since: no version to have been in force
	}
	if err == nil {
		r.versions[sandbox] = vs
	}
	return vs, err
}

func (r *reads) toolDecisions(ctx context.Context, sandbox, tool string) ([]store.Decision, error) {
	k := [2]string{sandbox, tool}
	if ds, ok := r.decisions[k]; ok {
		return ds, nil
	}
	ds, err := r.in.st.ListDecisions(ctx, store.DecisionFilter{Sandbox: sandbox, Tool: tool, Limit: unmediatedScan})
	if err == nil {
		r.decisions[k] = ds
	}
	return ds, err
}

// checkEvent derives the findings of one event.
func (in *Intake) checkEvent(ctx context.Context, r *reads, c check) ([]string, error) {
	var found []string
	if c.ev.PolicyHash != "" {
		drift, err := in.drifted(ctx, r, c.ev)
		if err != nil {
			return nil, err
		}
		if drift {
			found = append(found, store.SentryDrift)
		}
	}
	if c.tool != "" {
		unmediated, err := in.unmediated(ctx, r, c.ev, c.tool)
		if err != nil {
			return nil, err
		}
		if unmediated {
			found = append(found, store.SentryUnmediated)
		}
	}
	return found, nil
}

// drifted reports whether the policy hash the event names is neither
// applied by a proxy of its sandbox now nor that of a version a proxy
// has applied or passed and which was current within Window before the
// event was received (a change the watchdog had not seen yet).
func (in *Intake) drifted(ctx context.Context, r *reads, ev store.SentryEvent) (bool, error) {
	statuses, err := r.proxyStatuses(ctx, ev.Subject)
	if err != nil {
		return false, err
	}
	var reached int64 // the newest version a proxy applied
	for _, p := range statuses {
		if p.AppliedHash == ev.PolicyHash {
			return false, nil
		}
		reached = max(reached, p.AppliedVersion)
	}
	versions, err := r.policyVersions(ctx, ev.Subject)
	if err != nil {
		return false, err
	}
	since := ev.ReceivedAt.Add(-in.cfg.Window)
	for i, v := range versions {
		if v.Hash != ev.PolicyHash || v.Version > reached || v.CreatedAt.After(ev.ReceivedAt) {
			continue
		}
		if i+1 == len(versions) || !versions[i+1].CreatedAt.Before(since) {
			return false, nil // current until at least Window before the event
		}
	}
	return true, nil
}

// unmediated reports whether no decision record of the event's sandbox is
// the tool call it saw. With more records of the tool than one check
// reads, none of them old enough to tell, it says no.
func (in *Intake) unmediated(ctx context.Context, r *reads, ev store.SentryEvent, tool string) (bool, error) {
	if ev.DenialID != "" {
		ds, err := in.st.ListDecisions(ctx, store.DecisionFilter{Sandbox: ev.Subject, DenialID: ev.DenialID, Limit: 1})
		if err != nil || len(ds) > 0 {
			return false, err
		}
	}
	ds, err := r.toolDecisions(ctx, ev.Subject, tool)
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
