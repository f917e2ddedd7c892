package sentryintake

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
)

// The timeline of a sandbox: what the watchdogs saw (Sentry events and
// the actions they caused), what the proxies decided and acknowledged, and
// what people and the gateway did (proposals, approvals, policy versions,
// audit entries), in time order, each with the policy version in force at
// that moment. Entries are joined exactly where an id exists — a
// denial_id shared by an event and a decision record or a proposal, the
// policy hash an event names and the version that has it, the version an
// action committed — and by a time window otherwise (a tool call a
// watchdog saw and a proxy's record of the same tool within Window).

// Entry kinds.
const (
	KindEvent    = "sentry_event"
	KindAction   = "sentry_action"
	KindDecision = "decision"
	KindProposal = "proposal"
	KindApproval = "approval"
	KindVersion  = "version"
	KindAck      = "ack"
	KindAudit    = "audit"
)

// Entry is one line of a timeline.
type Entry struct {
	Time    time.Time
	Kind    string
	Summary string
	// Version is the policy version in force at Time (0: none yet).
	Version int64
	Refs    map[string]string
	Links   []string
	Flags   []string
}

// The timeline's bounds.
const (
	DefaultTimelineSpan  = 24 * time.Hour
	DefaultTimelineLimit = 500
	MaxTimelineLimit     = 5000
	// timelineRead bounds what one timeline reads of each record kind.
	timelineRead = 2000
)

// Timeline returns the newest limit entries of sandbox at or after since,
// oldest first.
func (in *Intake) Timeline(ctx context.Context, sandbox string, since time.Time, limit int) ([]Entry, error) {
	versions, err := in.st.ListPolicyVersions(ctx, sandbox)
	if err != nil {
		return nil, err
	}
	t := &timeline{since: since, versions: versions, window: in.cfg.Window}
	events, err := in.events.ListSentryEvents(ctx, store.SentryEventFilter{Sandbox: sandbox, Since: since, Limit: timelineRead})
	if err != nil {
		return nil, err
	}
	decisions, err := in.st.ListDecisions(ctx, store.DecisionFilter{Sandbox: sandbox, Limit: timelineRead})
	if err != nil {
		return nil, err
	}
	proposals, err := in.st.ListProposals(ctx, store.ProposalFilter{Sandbox: sandbox, Limit: timelineRead})
	if err != nil {
		return nil, err
	}
	actions, err := in.st.ListSentryActions(ctx, store.SentryActionFilter{Sandbox: sandbox, Since: since, Limit: timelineRead})
	if err != nil {
		return nil, err
	}
	statuses, err := in.st.ListProxyStatuses(ctx, sandbox)
	if err != nil {
		return nil, err
	}
	audit, err := in.st.ListAudit(ctx, store.AuditFilter{Sandbox: sandbox, Limit: timelineRead})
	if err != nil {
		return nil, err
	}
	// Each list goes in oldest first (proposals, actions and audit come
	// newest first), so entries of one kind at the same instant keep
	// their own order through the stable sort.
	slices.Reverse(proposals)
	slices.Reverse(actions)
	slices.Reverse(audit)
	t.addVersions()
	t.addDecisions(decisions)
	t.addEvents(events, decisions, proposals)
	t.addProposals(proposals)
	t.addActions(actions)
	t.addAcks(statuses)
	t.addAudit(audit)
	slices.SortStableFunc(t.out, func(a, b Entry) int { return a.Time.Compare(b.Time) })
	if len(t.out) > limit {
		t.out = t.out[len(t.out)-limit:]
	}
	return t.out, nil
}

type timeline struct {
	since    time.Time
	versions []store.PolicyVersion // oldest first
	window   time.Duration
	out      []Entry
}

// add keeps e if it is in range, with the version in force at its time.
func (t *timeline) add(e Entry) {
	if e.Time.Before(t.since) {
		return
	}
	e.Time = e.Time.UTC()
	e.Version = t.inForce(e.Time)
	t.out = append(t.out, e)
}

// inForce is the newest version committed at or before at.
func (t *timeline) inForce(at time.Time) int64 {
	i, _ := slices.BinarySearchFunc(t.versions, at, func(v store.PolicyVersion, at time.Time) int {
		if v.CreatedAt.After(at) {
			return 1
		}
		return -1
	})
	if i == 0 {
		return 0
	}
	return t.versions[i-1].Version
}

func (t *timeline) versionWithHash(hash string) (store.PolicyVersion, bool) {
	for i := len(t.versions) - 1; i >= 0; i-- {
		if t.versions[i].Hash == hash {
			return t.versions[i], true
		}
	}
	return store.PolicyVersion{}, false
}

func (t *timeline) addVersions() {
	for _, v := range t.versions {
		e := Entry{Time: v.CreatedAt, Kind: KindVersion,
			Summary: fmt.Sprintf("version %d committed (%s) by %s", v.Version, v.Source, v.Author),
			Refs:    map[string]string{"version": strconv.FormatInt(v.Version, 10), "hash": v.Hash}}
		for _, k := range slices.Sorted(maps.Keys(v.Provenance)) {
			e.Links = append(e.Links, k+": "+v.Provenance[k])
		}
		t.add(e)
	}
}

func (t *timeline) addDecisions(ds []store.Decision) {
	for _, d := range ds {
		what := strings.TrimSpace(d.HTTPMethod + " " + d.Host + ":" + strconv.Itoa(d.Port) + d.Path)
		if d.MCPMethod != "" {
			what += " " + strings.TrimSpace(d.MCPMethod+" "+d.Tool)
		}
		e := Entry{Time: d.Time, Kind: KindDecision, Summary: fmt.Sprintf("proxy %s: %s %s (%s)", d.ProxyID, d.Decision, what, d.Reason),
			Refs: map[string]string{"decision": strconv.FormatInt(d.ID, 10), "proxy": d.ProxyID, "policy_version": d.PolicyVersion}}
		if d.DenialID != "" {
			e.Refs["denial_id"] = d.DenialID
		}
		t.add(e)
	}
}

func (t *timeline) addEvents(events []store.SentryEvent, ds []store.Decision, ps []store.Proposal) {
	for _, ev := range events {
		class := strings.TrimPrefix(ev.Type, "portcullis.sentry.v1.")
		e := Entry{Time: ev.Time, Kind: KindEvent, Flags: ev.Flags,
			Summary: fmt.Sprintf("%s from %s (%s, %s)", class, ev.Source, cmp.Or(ev.Severity, "no severity"), cmp.Or(ev.Processing, "store_only")),
			Refs:    map[string]string{"source": ev.Source, "event_id": ev.ID, "sequence": strconv.FormatUint(ev.Sequence, 10)}}
		if ev.PolicyHash != "" {
			e.Refs["policy_hash"] = ev.PolicyHash
			if v, ok := t.versionWithHash(ev.PolicyHash); ok {
				e.Links = append(e.Links, fmt.Sprintf("policy hash: version %d", v.Version))
			} else {
				e.Links = append(e.Links, "policy hash: no version of this sandbox has it")
			}
		}
		if ev.DenialID != "" {
			e.Refs["denial_id"] = ev.DenialID
			for _, d := range ds {
				if d.DenialID == ev.DenialID {
					e.Links = append(e.Links, fmt.Sprintf("denial_id %s: decision %d", ev.DenialID, d.ID))
				}
			}
			for _, p := range ps {
				if p.DenialID == ev.DenialID {
					e.Links = append(e.Links, fmt.Sprintf("denial_id %s: proposal %d", ev.DenialID, p.ID))
				}
			}
		}
		if ev.TraceID != "" {
			e.Refs["trace_id"] = ev.TraceID
		}
		if tool := toolFromDocument(ev); tool != "" {
			e.Refs["tool"] = tool
			for _, d := range ds {
				if d.MCPMethod == "tools/call" && d.Tool == tool && absDuration(d.Time.Sub(ev.Time)) <= t.window {
					e.Links = append(e.Links, fmt.Sprintf("tool %s: decision %d, %s apart", tool, d.ID, absDuration(d.Time.Sub(ev.Time)).Round(time.Millisecond)))
				}
			}
		}
		t.add(e)
	}
}

func (t *timeline) addProposals(ps []store.Proposal) {
	for _, p := range ps {
		id := strconv.FormatInt(p.ID, 10)
		e := Entry{Time: p.CreatedAt, Kind: KindProposal, Summary: fmt.Sprintf("proposal %d submitted by %s: %s", p.ID, p.Proposer, clip(p.Rationale)),
			Refs: map[string]string{"proposal": id}}
		if p.DenialID != "" {
			e.Refs["denial_id"] = p.DenialID
		}
		t.add(e)
		for _, a := range p.Approvals {
			t.add(Entry{Time: a.CreatedAt, Kind: KindApproval, Summary: fmt.Sprintf("proposal %d approved by %s: %s", p.ID, a.Approver, clip(a.Reason)),
				Refs: map[string]string{"proposal": id, "approver": a.Approver}})
		}
		if p.DecidedAt != nil {
			t.add(Entry{Time: *p.DecidedAt, Kind: KindProposal, Summary: fmt.Sprintf("proposal %d %s", p.ID, p.Status),
				Refs: map[string]string{"proposal": id, "status": p.Status}})
		}
	}
}

func (t *timeline) addActions(as []store.SentryAction) {
	for _, a := range as {
		e := Entry{Time: a.CreatedAt, Kind: KindAction, Summary: fmt.Sprintf("sentry %s/%s: %s — %s", a.Source, a.EventID, a.Status, a.Reason),
			Refs:  map[string]string{"action": strconv.FormatInt(a.ID, 10), "source": a.Source, "event_id": a.EventID, "status": a.Status},
			Links: []string{fmt.Sprintf("event %s/%s", a.Source, a.EventID)}}
		if a.Version > 0 {
			e.Refs["version"] = strconv.FormatInt(a.Version, 10)
			e.Links = append(e.Links, fmt.Sprintf("committed version %d", a.Version))
		}
		t.add(e)
		if a.AckedAt != nil {
			t.add(Entry{Time: *a.AckedAt, Kind: KindAck,
				Summary: fmt.Sprintf("every connected proxy applied version %d, %s after the event was received", a.Version, a.AckedAt.Sub(a.ReceivedAt).Round(time.Millisecond)),
				Refs:    map[string]string{"action": strconv.FormatInt(a.ID, 10), "version": strconv.FormatInt(a.Version, 10)}})
		}
	}
}

func (t *timeline) addAcks(statuses []store.ProxyStatus) {
	for _, p := range statuses {
		if p.LastAckAt == nil {
			continue
		}
		t.add(Entry{Time: *p.LastAckAt, Kind: KindAck, Summary: fmt.Sprintf("proxy %s applied version %d", p.ProxyID, p.AppliedVersion),
			Refs: map[string]string{"proxy": p.ProxyID, "version": strconv.FormatInt(p.AppliedVersion, 10)}})
	}
}

func (t *timeline) addAudit(entries []store.AuditEntry) {
	for _, a := range entries {
		t.add(Entry{Time: a.Time, Kind: KindAudit, Summary: fmt.Sprintf("%s %s %s", a.Actor, a.Action, a.Target),
			Refs: map[string]string{"seq": strconv.FormatInt(a.Seq, 10), "action": a.Action}})
	}
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// toolFromDocument reads the tool a stored tool_access event saw called.
func toolFromDocument(ev store.SentryEvent) string {
	if ev.Type != sentry.ClassToolAccess.Type() {
		return ""
	}
	parsed, err := sentry.ParseCloudEvent(ev.Document)
	if err != nil {
		return ""
	}
	return toolOf(parsed)
}
