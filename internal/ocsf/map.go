package ocsf

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/store"
)

var httpActivities = map[string]int{
	"CONNECT": 1, "DELETE": 2, "GET": 3, "HEAD": 4, "OPTIONS": 5, "POST": 6, "PUT": 7, "TRACE": 8, "PATCH": 9,
}

// FromDecision maps a proxy decision: an MCP call is an API Activity
// (6003) with the MCP method as api.operation and what it names as a
// resource; anything else is an HTTP Activity (4002) whose activity is
// the HTTP method (Connect for a tunnel decided before any request).
// The verdict is action_id/disposition_id; a denial's id is
// metadata.uid and unmapped.denial_id.
func FromDecision(d decision.Record, p Product) Event {
	var e Event
	method := strings.ToUpper(d.HTTPMethod)
	if method == "" {
		method = "CONNECT"
	}
	target := d.Host
	if d.Port != 0 {
		target = d.Host + ":" + strconv.Itoa(d.Port)
	}
	dst := &Endpoint{Hostname: d.Host, Port: d.Port, IP: d.Addr}
	if dst.Hostname == "" && dst.IP == "" {
		dst.Name = "unknown"
	}
	req := &HTTPRequest{HTTPMethod: method, URL: &URL{URLString: target + d.Path, Hostname: d.Host, Port: d.Port, Path: d.Path}}
	if d.MCPMethod != "" {
		// Other (99), named by the MCP method itself (initialize…): OCSF
		// asks for the source's own word, not the caption "Other".
		activity, name := 99, d.MCPMethod
		switch {
		case strings.HasSuffix(d.MCPMethod, "/list"), strings.HasSuffix(d.MCPMethod, "/read"), strings.HasSuffix(d.MCPMethod, "/get"):
			activity, name = 2, "Read"
		case d.MCPMethod == "tools/call":
			name = "Invoke"
		}
		e.setClass(ClassAPIActivity, categoryApplication, "API Activity", "Application Activity", activity, name)
		e.API = &API{Operation: d.MCPMethod, Service: &Service{Name: target}}
		if d.Tool != "" {
			kind := "mcp_tool"
			switch {
			case strings.HasPrefix(d.MCPMethod, "prompts/"):
				kind = "mcp_prompt"
			case strings.HasPrefix(d.MCPMethod, "resources/"):
				kind = "mcp_resource"
			}
			e.Resources = []Resource{{Name: d.Tool, Type: kind}}
		}
	} else {
		activity, ok := httpActivities[method]
		name := strings.ToUpper(method[:1]) + strings.ToLower(method[1:])
		if !ok {
			activity = 99
		}
		e.setClass(ClassHTTPActivity, categoryNetwork, "HTTP Activity", "Network Activity", activity, name)
	}
	e.Time = d.Time.UnixMilli()
	e.Metadata = Metadata{Version: Version, Product: p, UID: d.DenialID, CorrelationUID: d.TraceID}
	sandbox := d.Sandbox
	if sandbox == "" {
		sandbox = "local"
	}
	actor := &Actor{AppName: d.Binary}
	if actor.AppName == "" {
		actor.AppName = "unknown"
	}
	e.Actor = actor
	e.SrcEndpoint = &Endpoint{Name: sandbox}
	e.DstEndpoint = dst
	e.HTTPRequest = req
	if d.Rule != "" || d.Entry != "" {
		e.FirewallRule = &FirewallRule{Name: d.Entry, UID: d.Rule}
	}
	if d.PolicyVersion != "" {
		e.Policy = &Policy{Name: sandbox, Version: d.PolicyVersion}
	}
	switch d.Decision {
	case "allow":
		e.ActionID, e.Action, e.DispositionID, e.Disposition = 1, "Allowed", 1, "Allowed"
		e.setSeverity(SeverityInformational)
		e.setStatus(true, d.Reason)
	case "audit":
		// Policy would deny; the endpoint is in audit mode and the
		// request went on.
		e.ActionID, e.Action, e.DispositionID, e.Disposition = 1, "Allowed", 17, "Logged"
		e.setSeverity(SeverityLow)
		e.setStatus(true, d.Reason)
	case "rate_limited":
		e.ActionID, e.Action, e.DispositionID, e.Disposition = 2, "Denied", 2, "Blocked"
		e.setSeverity(SeverityLow)
		e.setStatus(false, d.Reason)
	default: // deny, and anything unknown is treated as one
		e.ActionID, e.Action, e.DispositionID, e.Disposition = 2, "Denied", 2, "Blocked"
		e.setSeverity(SeverityMedium)
		e.setStatus(false, d.Reason)
	}
	what := method + " " + target + d.Path
	if d.MCPMethod != "" {
		what = d.MCPMethod + " "
		if d.Tool != "" {
			what += d.Tool + " "
		}
		what += "at " + target
	}
	e.Message = fmt.Sprintf("%s %s", d.Decision, what)
	if d.Reason != "" {
		e.Message += ": " + d.Reason
	}
	u := map[string]any{"decision": d.Decision}
	for k, v := range map[string]string{
		"sandbox": d.Sandbox, "denial_id": d.DenialID, "reason_code": d.ReasonCode,
		"arguments_digest": d.ArgumentsDigest, "tool_definition": d.ToolDefinition, "trace_id": d.TraceID,
		"mcp_method": d.MCPMethod, "tool": d.Tool,
	} {
		if v != "" {
			u[k] = v
		}
	}
	if d.VersionProbe {
		u["version_probe"] = true
	}
	if s := d.Summary; s != nil {
		e.Count, e.StartTime, e.EndTime = s.Count, d.Time.UnixMilli(), s.Last.UnixMilli()
		e.Message = fmt.Sprintf("%d× %s", s.Count, e.Message)
		u["summary_count"] = s.Count
		if s.FirstDenialID != "" {
			u["first_denial_id"], u["last_denial_id"] = s.FirstDenialID, s.LastDenialID
		}
	}
	if len(d.Cuts) > 0 {
		cuts := make([]map[string]any, len(d.Cuts))
		for i, c := range d.Cuts {
			cuts[i] = map[string]any{"field": c.Field, "length": c.Length, "sha256": c.SHA256}
		}
		u["cuts"] = cuts
	}
	e.Unmapped = u
	e.finish()
	return e
}

// auditKind says how an audit action maps onto Entity Management.
type auditKind struct {
	activity int
	name     string // activity_name
	entity   string // the managed entity's type
	typeID   int    // managed_entity.type_id: 5 Policy; 0 (omitted) for our own kinds, named by type
	severity int
}

var auditKinds = map[string]auditKind{
	store.ActionSandboxCreate: {1, "Create", "Sandbox", 0, SeverityInformational},
	store.ActionSandboxDelete: {4, "Delete", "Sandbox", 0, SeverityMedium},
	store.ActionSandboxToken:  {3, "Update", "Sandbox token", 0, SeverityLow},
	store.ActionPolicySet:     {3, "Update", "Policy", 5, SeverityLow},
	store.ActionTokenCreate:   {1, "Create", "Token", 0, SeverityLow},
	store.ActionTokenRevoke:   {4, "Delete", "Token", 0, SeverityLow},
	store.ActionSigningKeyAdd: {1, "Create", "Signing key", 0, SeverityLow},
	store.ActionBoundarySet:   {3, "Update", "Boundary", 5, SeverityMedium},
	store.ActionCredentials:   {3, "Update", "Credentialed hosts", 0, SeverityMedium},
	store.ActionProposalNew:   {1, "Create", "Proposal", 0, SeverityInformational},
	store.ActionProposalState: {3, "Update", "Proposal", 0, SeverityInformational},
	store.ActionProposalBase:  {3, "Update", "Proposal", 0, SeverityInformational},
	store.ActionProposalOK:    {99, "Approve", "Proposal", 0, SeverityLow},
	store.ActionProposalApply: {3, "Update", "Policy", 5, SeverityLow},
	store.ActionFreeze:        {12, "Suspend", "Sandbox", 0, SeverityHigh},
	store.ActionUnfreeze:      {13, "Resume", "Sandbox", 0, SeverityMedium},
	store.ActionApprovalRules: {3, "Update", "Approval rules", 5, SeverityMedium},
	store.ActionSentryKeySet:  {3, "Update", "Sentry key", 0, SeverityLow},
	store.ActionSentryKeyDel:  {4, "Delete", "Sentry key", 0, SeverityLow},
	store.ActionSentryRefused: {99, "Refuse", "Sentry event", 0, SeverityHigh},
	store.ActionSentryAction:  {99, "Remediate", "Sandbox", 0, SeverityHigh},
}

// FromAudit maps an audit-log entry: an Entity Management event (3004)
// whose actor is the token's name, whose entity and entity_result carry
// the hashes before and after (entity.data.hash), and whose
// metadata.uid is the entry's chain hash. A proposal's rejection is the
// activity "Reject", an approval "Approve" (both Other, 99); a policy
// set's Detail "source" (set, rollback, expiry…) names the activity.
func FromAudit(a store.AuditEntry, p Product) Event {
	k, ok := auditKinds[a.Action]
	if !ok {
		k = auditKind{99, a.Action, "Other", 0, SeverityInformational}
	}
	name := k.name
	if src := a.Detail["source"]; a.Action == store.ActionPolicySet && src != "" && src != "set" {
		// The first version comes with its sandbox; rollback, an applied
		// proposal, a grant's expiry are named as themselves.
		k.activity, name = 99, strings.ToUpper(src[:1])+src[1:]
		if src == "create" {
			k.activity, name = 1, "Create"
		}
	}
	if a.Action == store.ActionProposalState && a.Detail["to"] == store.ProposalRejected {
		k.activity, name = 99, "Reject"
	}
	var e Event
	e.setClass(ClassEntityManagement, categoryIAM, "Entity Management", "Identity & Access Management", k.activity, name)
	e.Time = a.Time.UnixMilli()
	e.setSeverity(k.severity)
	e.Metadata = Metadata{Version: Version, Product: p, UID: a.Hash}
	actor := a.Actor
	if actor == "" {
		actor = "unknown"
	}
	e.Actor = &Actor{User: &User{Name: actor}}
	uid := a.Target
	if uid == "" {
		uid = a.Sandbox
	}
	entity := func(hash string) *ManagedEntity {
		me := &ManagedEntity{Type: k.entity, TypeID: k.typeID, Name: a.Sandbox, UID: uid}
		if me.Name == "" {
			me.Name = uid
		}
		if me.Name == "" {
			me.Name = k.entity
		}
		if hash != "" {
			me.Data = map[string]any{"hash": hash}
		}
		return me
	}
	e.Entity = entity(a.BeforeHash)
	if a.AfterHash != "" || a.BeforeHash != "" {
		e.EntityResult = entity(a.AfterHash)
		if v := a.Detail["version"]; v != "" {
			e.EntityResult.Version = v
		}
	}
	outcome := a.Detail["status"]
	if to := a.Detail["to"]; to != "" {
		outcome = to
	}
	if a.Action == store.ActionSentryAction && a.Detail["status"] == "failed" {
		e.setStatus(false, outcome)
	} else {
		e.setStatus(a.Action != store.ActionSentryRefused, outcome)
	}
	e.Comment = a.Detail["reason"]
	e.Message = fmt.Sprintf("%s %s by %s", a.Action, strings.TrimSpace(a.Sandbox+" "+a.Target), actor)
	if a.BeforeHash != "" || a.AfterHash != "" {
		e.Message += fmt.Sprintf(" (%s → %s)", short(a.BeforeHash), short(a.AfterHash))
	}
	u := map[string]any{"action": a.Action, "seq": a.Seq, "prev_hash": a.PrevHash}
	if a.Sandbox != "" {
		u["sandbox"] = a.Sandbox
	}
	if a.Target != "" {
		u["target"] = a.Target
	}
	if a.BeforeHash != "" {
		u["before_hash"] = a.BeforeHash
	}
	if a.AfterHash != "" {
		u["after_hash"] = a.AfterHash
	}
	if len(a.Detail) > 0 {
		u["detail"] = maps.Clone(a.Detail)
	}
	e.Unmapped = u
	e.finish()
	return e
}

func short(h string) string {
	if h == "" {
		return "none"
	}
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// findingSeverity ranks a prover finding's kind: what widens access to
// credentialed hosts or past the boundary is high.
func findingSeverity(f store.Finding) int {
	switch {
	case f.Kind == "exceeds_boundary", f.Credentialed:
		return SeverityHigh
	case strings.Contains(f.Kind, "bypass"), strings.Contains(f.Kind, "wildcard"):
		return SeverityMedium
	default:
		return SeverityLow
	}
}

// FromProposal maps a proposal and its prover findings: one Detection
// Finding (2004) per proposal, activity Create when it is new and Update
// when its status changed; severity is the highest of its findings'
// (Informational with none); finding_info.types are the findings' kinds
// and unmapped.findings the findings themselves.
func FromProposal(pr store.Proposal, findings []store.Finding, p Product) Event {
	var e Event
	activity, name := 1, "Create"
	if pr.Status != store.ProposalPending {
		activity, name = 2, "Update"
	}
	e.setClass(ClassDetectionFinding, categoryFindings, "Detection Finding", "Findings", activity, name)
	t := pr.UpdatedAt
	if t.IsZero() {
		t = pr.CreatedAt
	}
	e.Time = t.UnixMilli()
	sev := SeverityInformational
	kinds := []string{}
	for _, f := range findings {
		sev = max(sev, findingSeverity(f))
		if !containsString(kinds, f.Kind) {
			kinds = append(kinds, f.Kind)
		}
	}
	e.setSeverity(sev)
	e.Metadata = Metadata{Version: Version, Product: p, UID: "proposal-" + strconv.FormatInt(pr.ID, 10)}
	title := fmt.Sprintf("Proposal %d for sandbox %s", pr.ID, pr.Sandbox)
	if len(findings) > 0 {
		title += fmt.Sprintf(": %d prover finding(s)", len(findings))
	}
	e.FindingInfo = &FindingInfo{
		UID: strconv.FormatInt(pr.ID, 10), Title: title, Desc: pr.Rationale, Types: kinds,
		CreatedTime: pr.CreatedAt.UnixMilli(),
	}
	alert := sev >= SeverityHigh
	e.IsAlert = &alert
	e.Message = title
	u := map[string]any{
		"sandbox": pr.Sandbox, "status": pr.Status, "proposer": pr.Proposer,
		"base_version": pr.BaseVersion, "base_hash": pr.BaseHash, "resulting_hash": pr.ResultingHash,
	}
	if pr.DenialID != "" {
		u["denial_id"] = pr.DenialID
	}
	if len(findings) > 0 {
		u["findings"] = findings
	}
	e.Unmapped = u
	e.finish()
	return e
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// SinkDrops is the event an emitter writes once its sink takes events
// again: an Application Error (6008) saying how many events were lost
// since when, and why (the queue was full, the sink refused them).
func SinkDrops(sink string, dropped uint64, since, now time.Time, p Product) Event {
	var e Event
	e.setClass(ClassApplicationError, categoryApplication, "Application Error", "Application Activity", 1, "General Error")
	e.Time = now.UnixMilli()
	e.setSeverity(SeverityMedium)
	e.setStatus(false, "events dropped")
	e.Metadata = Metadata{Version: Version, Product: p}
	e.Message = fmt.Sprintf("OCSF sink %s: %d event(s) dropped since %s", sink, dropped, since.UTC().Format(time.RFC3339))
	e.Unmapped = map[string]any{"sink": sink, "dropped": dropped, "since": since.UTC().Format(time.RFC3339Nano)}
	e.finish()
	return e
}
