package gatewayocsf

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
)

// Sentry events, the findings derived from them and what the gateway did
// about a quarantine. A watchdog's event is joined to the action it
// caused by its key, source/id: the Detection Finding's metadata.uid and
// finding_info.uid, the Remediation Activity's metadata.correlation_uid.

// SentryUID is a Sentry event's key as the events name it: source/id.
func SentryUID(source, id string) string { return source + "/" + id }

var sentrySeverities = map[sentry.Severity]int{
	sentry.SeverityInfo: ocsf.SeverityInformational, sentry.SeverityLow: ocsf.SeverityLow, sentry.SeverityMedium: ocsf.SeverityMedium,
	sentry.SeverityHigh: ocsf.SeverityHigh, sentry.SeverityCritical: ocsf.SeverityCritical,
}

// FromSentryEvent maps a watchdog's event the gateway stored: a Detection
// Finding (2004, activity Create) whose finding_info is the watchdog's
// finding (its title, the event's class as the type), whose severity is
// the event's, and whose resources are the sandbox and the tool call it
// saw. Everything else the event carries, digests and ids only (a Sentry
// event never holds raw tool arguments), is under unmapped. received is
// when the gateway took it.
func FromSentryEvent(ev sentry.Event, received time.Time, p ocsf.Product) ocsf.Event {
	var e ocsf.Event
	e.SetClass(ocsf.ClassDetectionFinding, 1, "Create")
	when := ev.Time
	if when.IsZero() {
		when = received
	}
	e.Time = when.UnixMilli()
	sev, ok := sentrySeverities[ev.Payload.Severity]
	if !ok {
		sev = ocsf.SeverityUnknown
	}
	e.SetSeverity(sev)
	uid := SentryUID(ev.Source, ev.ID)
	e.Metadata = ocsf.Metadata{Version: ocsf.Version, Product: p, UID: uid, LoggedTime: received.UnixMilli(), Sequence: ev.Sequence, EventCode: ev.Type}
	class := string(ev.Class)
	if class == "" {
		class = ev.Type
	}
	pl := ev.Payload
	title := fmt.Sprintf("Sentry %s from %s", class, ev.Source)
	if ev.Subject != "" {
		title += " about sandbox " + ev.Subject
	}
	if f := pl.Finding; f != nil && f.Title != "" {
		title = f.Title
	}
	e.FindingInfo = &ocsf.FindingInfo{UID: uid, Title: title, Types: []string{class}, CreatedTime: when.UnixMilli()}
	if f := pl.Finding; f != nil && f.Confidence != nil {
		e.ConfidenceID, e.ConfidenceScore = confidence(*f.Confidence)
	}
	alert := sev >= ocsf.SeverityHigh || pl.Processing == sentry.ProcessingRemediate
	e.IsAlert = &alert
	e.Resources = sandboxResource(ev.Subject)
	if tc := pl.ToolCall; tc != nil {
		r := ocsf.Resource{Name: tc.Tool, Type: "mcp_tool", Data: map[string]any{"server": tc.Server}}
		if tc.ArgumentsDigest != "" {
			r.Data["arguments_digest"] = tc.ArgumentsDigest
		}
		e.Resources = append(e.Resources, r)
	}
	if ps := pl.Policy; ps != nil {
		e.Policy = &ocsf.Policy{Name: ev.Subject, UID: ps.Hash}
		if ps.Version > 0 {
			e.Policy.Version = strconv.FormatInt(ps.Version, 10)
		}
		if e.Policy.Name == "" {
			e.Policy.Name = "unknown"
		}
	}
	if c := pl.Correlation; c != nil {
		e.Metadata.CorrelationUID = c.TraceID
	}
	e.Message = fmt.Sprintf("Sentry %s %s from %s", pl.Severity, class, ev.Source)
	if ev.Subject != "" {
		e.Message += " about sandbox " + ev.Subject
	}
	if f := pl.Finding; f != nil && f.Title != "" {
		e.Message += ": " + f.Title
	}
	if pl.Processing == sentry.ProcessingRemediate {
		e.Message += " (remediate)"
	}
	u := map[string]any{"source": ev.Source, "id": ev.ID, "type": ev.Type}
	put := func(k, v string) {
		if v != "" {
			u[k] = v
		}
	}
	put("sandbox", ev.Subject)
	put("severity", string(pl.Severity))
	put("processing", string(pl.Processing))
	if ev.Sequence > 0 {
		u["sequence"] = ev.Sequence
	}
	if a := pl.Agent; a != nil {
		m := map[string]any{"id": a.ID}
		if a.Name != "" {
			m["name"] = a.Name
		}
		if len(a.DelegatedScope) > 0 {
			m["delegated_scope"] = a.DelegatedScope
		}
		u["agent"] = m
	}
	if pr := pl.Process; pr != nil {
		m := map[string]any{}
		if pr.PID > 0 {
			m["pid"] = pr.PID
		}
		if pr.Executable != "" {
			m["executable"] = pr.Executable
		}
		if pr.ExecutableDigest != "" {
			m["executable_digest"] = pr.ExecutableDigest
		}
		u["process"] = m
	}
	if n := pl.Node; n != nil {
		u["node"] = map[string]any{"id": n.ID, "dpu": n.DPU}
	}
	if ps := pl.Policy; ps != nil {
		u["policy"] = map[string]any{"version": ps.Version, "hash": ps.Hash}
	}
	if c := pl.Correlation; c != nil {
		m := map[string]any{}
		for k, v := range map[string]string{"denial_id": c.DenialID, "session": c.Session, "jsonrpc_id": c.JSONRPCID, "trace_id": c.TraceID} {
			if v != "" {
				m[k] = v
			}
		}
		u["correlation"] = m
	}
	if tc := pl.ToolCall; tc != nil {
		m := map[string]any{"server": tc.Server, "tool": tc.Tool}
		if tc.ArgumentsDigest != "" {
			m["arguments_digest"] = tc.ArgumentsDigest
		}
		u["tool_call"] = m
	}
	if f := pl.Finding; f != nil && f.Confidence != nil {
		u["confidence"] = *f.Confidence
	}
	if len(ev.Unknown) > 0 {
		u["unknown_fields"] = ev.Unknown
	}
	e.Unmapped = u
	e.Finish()
	return e
}

// confidence maps a watchdog's confidence in [0, 1] to confidence_id and
// confidence_score.
func confidence(c float64) (int, *int) {
	score := int(math.Round(c * 100))
	score = min(max(score, 0), 100)
	switch {
	case c >= 0.75:
		return 3, &score
	case c >= 0.4:
		return 2, &score
	default:
		return 1, &score
	}
}

func sandboxResource(sandbox string) []ocsf.Resource {
	if sandbox == "" {
		return nil
	}
	return []ocsf.Resource{{Name: sandbox, Type: "sandbox"}}
}

// FromSentryFinding maps a finding the gateway derived from a stored
// Sentry event (kind drift or unmediated) at found: a Detection Finding
// (2004, activity Create), Medium for drift (the watchdog saw a policy
// hash no proxy of the sandbox applied), High and an alert for an
// unmediated call (a tool call the watchdog saw that no proxy decided:
// traffic that went round the boundary). tool is the unmediated call's
// tool.
func FromSentryFinding(kind string, ev store.SentryEvent, tool string, found time.Time, p ocsf.Product) ocsf.Event {
	var e ocsf.Event
	e.SetClass(ocsf.ClassDetectionFinding, 1, "Create")
	e.Time = found.UnixMilli()
	of := SentryUID(ev.Source, ev.ID)
	uid := kind + ":" + of
	e.Metadata = ocsf.Metadata{Version: ocsf.Version, Product: p, UID: uid, CorrelationUID: ev.TraceID}
	var title string
	sev := ocsf.SeverityMedium
	switch kind {
	case store.SentryDrift:
		title = fmt.Sprintf("Policy drift in sandbox %s: Sentry %s saw policy %s, which no proxy of the sandbox applied", ev.Subject, ev.Source, short(ev.PolicyHash))
		e.Policy = &ocsf.Policy{Name: ev.Subject, UID: ev.PolicyHash}
		if e.Policy.Name == "" {
			e.Policy.Name = "unknown"
		}
	case store.SentryUnmediated:
		sev = ocsf.SeverityHigh
		title = fmt.Sprintf("Unmediated tool call in sandbox %s: Sentry %s saw %s called, and no proxy decided it", ev.Subject, ev.Source, tool)
	default:
		title = fmt.Sprintf("Sentry finding %s in sandbox %s", kind, ev.Subject)
	}
	e.SetSeverity(sev)
	alert := sev >= ocsf.SeverityHigh
	e.IsAlert = &alert
	e.FindingInfo = &ocsf.FindingInfo{UID: uid, Title: title, Types: []string{kind}, CreatedTime: found.UnixMilli()}
	e.Resources = sandboxResource(ev.Subject)
	if tool != "" {
		e.Resources = append(e.Resources, ocsf.Resource{Name: tool, Type: "mcp_tool"})
	}
	e.Message = title
	u := map[string]any{"kind": kind, "sentry_event": of, "source": ev.Source, "id": ev.ID, "type": ev.Type}
	for k, v := range map[string]string{"sandbox": ev.Subject, "policy_hash": ev.PolicyHash, "tool": tool, "denial_id": ev.DenialID, "trace_id": ev.TraceID} {
		if v != "" {
			u[k] = v
		}
	}
	if !ev.Time.IsZero() {
		u["event_time"] = ev.Time.UTC().Format(time.RFC3339Nano)
	}
	e.Unmapped = u
	e.Finish()
	return e
}

// remediation is how a Sentry action's status reads as a Remediation
// Activity: status (99 Other with its own caption), action and
// disposition, severity.
type remediation struct {
	status          int
	statusName      string
	action          int
	actionName      string
	disposition     int
	dispositionName string
	severity        int
	alert           bool
}

var remediations = map[string]remediation{
	store.SentryFrozen:    {1, "Success", 2, "Denied", 4, "Isolated", ocsf.SeverityHigh, true},
	store.SentryApplied:   {1, "Success", 2, "Denied", 4, "Isolated", ocsf.SeverityHigh, true},
	store.SentryNoop:      {1, "Success", 2, "Denied", 16, "No Action", ocsf.SeverityLow, false},
	store.SentryHeld:      {99, "Held", 99, "Held", 14, "Delayed", ocsf.SeverityHigh, true},
	store.SentryDryRun:    {99, "Dry run", 3, "Observed", 17, "Logged", ocsf.SeverityMedium, false},
	store.SentryStale:     {99, "Stale", 3, "Observed", 17, "Logged", ocsf.SeverityMedium, false},
	store.SentryDismissed: {99, "Dismissed", 1, "Allowed", 16, "No Action", ocsf.SeverityLow, false},
	store.SentryFailed:    {6, "Error", 99, "Failed", 27, "Error", ocsf.SeverityHigh, true},
}

// isolate is the countermeasure a freeze is: D3FEND's Isolate tactic by
// Outbound Traffic Filtering (every proxy of the sandbox denies all).
var isolate = []ocsf.D3FEND{{
	Tactic:    &ocsf.D3FENDEntity{Name: "Isolate", UID: "d3f:Isolate"},
	Technique: &ocsf.D3FENDEntity{Name: "Outbound Traffic Filtering", UID: "D3-OTF"},
}}

// FromSentryAction maps what the gateway did about a remediating Sentry
// event (a quarantine or boundary breach asking for remediation): a
// Remediation Activity (7001, activity 1 Isolate) whose command_uid is
// the action's id, whose status and disposition say what happened
// (frozen: Success, Isolated; held: Other "Held", Delayed; dry_run:
// Other "Dry run", Logged; stale: Other "Stale", Logged; already_frozen: Success, No Action; failed:
// Error, or Does Not Exist for a sandbox that is not there; an
// operator's answer to a held action: applied, as frozen, or dismissed,
// Other "Dismissed", No Action), and whose policy is the sandbox at the
// deny-all version the freeze committed. actor is who acted: the Sentry
// source's actor for the gateway's own action, the operator for an
// answer.
func FromSentryAction(a store.SentryAction, actor string, p ocsf.Product) ocsf.Event {
	var e ocsf.Event
	e.SetClass(ocsf.ClassRemediation, 1, "Isolate")
	t := a.CreatedAt
	if a.DecidedAt != nil {
		t = *a.DecidedAt
	}
	if t.IsZero() {
		t = a.ReceivedAt
	}
	e.Time = t.UnixMilli()
	r, ok := remediations[a.Status]
	if !ok {
		r = remediation{99, a.Status, 99, a.Status, 99, a.Status, ocsf.SeverityMedium, false}
	}
	if a.Status == store.SentryFailed && strings.Contains(a.Reason, "not found") {
		r.status, r.statusName = 3, "Does Not Exist"
	}
	e.SetSeverity(r.severity)
	e.StatusID, e.Status, e.StatusDetail = r.status, r.statusName, a.Status
	e.ActionID, e.Action, e.DispositionID, e.Disposition = r.action, r.actionName, r.disposition, r.dispositionName
	e.IsAlert = &r.alert
	of := SentryUID(a.Source, a.EventID)
	e.Metadata = ocsf.Metadata{Version: ocsf.Version, Product: p, UID: "sentry-action-" + strconv.FormatInt(a.ID, 10) + "-" + a.Status,
		CorrelationUID: of, LoggedTime: a.ReceivedAt.UnixMilli()}
	if actor != "" {
		// Who acted: the Sentry source's actor, or the operator who
		// answered a held action.
		e.Actor = &ocsf.Actor{User: &ocsf.User{Name: actor}}
	}
	e.CommandUID = strconv.FormatInt(a.ID, 10)
	e.Countermeasures = isolate
	desc := a.Reason
	if desc == "" {
		desc = a.Status
	}
	e.Remediation = &ocsf.Remediation{Desc: desc}
	sandbox := a.Sandbox
	if sandbox == "" {
		sandbox = "unknown"
	}
	if a.Version > 0 {
		e.Policy = &ocsf.Policy{Name: sandbox, Version: strconv.FormatInt(a.Version, 10)}
	}
	e.Message = fmt.Sprintf("Sentry %s %s: sandbox %s %s", strings.TrimPrefix(a.Type, sentry.TypePrefix), of, a.Sandbox, a.Status)
	if a.Version > 0 {
		e.Message += fmt.Sprintf(" (version %d)", a.Version)
	}
	u := map[string]any{"action": a.ID, "status": a.Status, "sentry_event": of, "source": a.Source, "event_id": a.EventID,
		"type": a.Type, "sandbox": a.Sandbox, "received_at": a.ReceivedAt.UTC().Format(time.RFC3339Nano)}
	if actor != "" {
		u["actor"] = actor
	}
	if a.Version > 0 {
		u["version"] = a.Version
	}
	if a.DecidedBy != "" {
		u["decided_by"] = a.DecidedBy
	}
	e.Unmapped = u
	e.Finish()
	return e
}
