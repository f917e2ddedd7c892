package gatewayocsf

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/store"
)

// callOutcome is how a held call's status reads in OCSF: the security
// control's action and disposition.
type callOutcome struct {
	action          int
	actionName      string
	disposition     int
	dispositionName string
}

// callOutcomes are the statuses' outcomes; a held call is Delayed.
var callOutcomes = map[string]callOutcome{
	store.CallHeld:     {99, "Held", 14, "Delayed"},
	store.CallApproved: {1, "Allowed", 8, "Approved"},
	store.CallDenied:   {2, "Denied", 25, "Rejected"},
	store.CallExpired:  {2, "Denied", 2, "Blocked"},
	store.CallFailed:   {2, "Denied", 27, "Error"},
}

// FromHeldCall maps a held call: one Detection Finding (2004) per call,
// activity Create (finding status New) while it is held and Close
// (Resolved) once it left held, with the security control's action and
// disposition (held: Delayed; approved: Allowed, Approved; denied:
// Rejected; expired: Blocked; failed: Error), the person who decided as
// the actor and the agent's trace as correlation_uid. The arguments never
// appear, only their digest: an OCSF pipeline is not where they go.
func FromHeldCall(c store.HeldCall, p ocsf.Product) ocsf.Event {
	var e ocsf.Event
	held := c.Status == store.CallHeld
	id := strconv.FormatInt(c.ID, 10)
	if held {
		e.SetClass(ocsf.ClassDetectionFinding, 1, "Create")
		e.StatusID, e.Status = 1, "New"
		e.Time = c.RequestedAt.UnixMilli()
	} else {
		e.SetClass(ocsf.ClassDetectionFinding, 3, "Close")
		e.StatusID, e.Status = 4, "Resolved"
		e.Time = c.DecidedAt.UnixMilli()
	}
	e.StatusDetail = c.Status
	o, ok := callOutcomes[c.Status]
	if !ok {
		o = callOutcome{99, c.Status, 99, c.Status}
	}
	e.ActionID, e.Action, e.DispositionID, e.Disposition = o.action, o.actionName, o.disposition, o.dispositionName
	e.SetSeverity(ocsf.SeverityMedium)
	if !held {
		e.SetSeverity(ocsf.SeverityInformational)
	}
	e.IsAlert = &held
	e.Metadata = ocsf.Metadata{Version: ocsf.Version, Product: p, UID: "call-" + id + "-" + c.Status, CorrelationUID: c.TraceID}
	what := c.Method + " " + c.Path
	if c.MCPMethod != "" {
		what = strings.TrimSpace(c.MCPMethod + " " + c.Tool)
	}
	title := fmt.Sprintf("Call %d of sandbox %s held for review: %s at %s:%d", c.ID, c.Sandbox, what, c.Host, c.Port)
	e.Message = title
	if !held {
		e.Message = fmt.Sprintf("Call %d of sandbox %s %s: %s at %s:%d", c.ID, c.Sandbox, c.Status, what, c.Host, c.Port)
	}
	e.FindingInfo = &ocsf.FindingInfo{UID: "call-" + id, Title: title, Types: []string{"held_call"}, CreatedTime: c.RequestedAt.UnixMilli()}
	if c.DecidedBy != "" {
		e.Actor = &ocsf.Actor{User: &ocsf.User{Name: c.DecidedBy}}
	}
	if c.PolicyVersion > 0 {
		e.Policy = &ocsf.Policy{Name: c.Sandbox, Version: strconv.FormatInt(c.PolicyVersion, 10)}
	}
	e.FirewallRule = &ocsf.FirewallRule{Name: c.Entry + "/" + c.Rule}
	e.Resources = []ocsf.Resource{{Name: c.Sandbox, Type: "sandbox"}}
	if c.Tool != "" {
		e.Resources = append(e.Resources, ocsf.Resource{Name: c.Tool, Type: "mcp_tool", Data: map[string]any{"arguments_digest": c.ArgumentsDigest}})
	}
	u := map[string]any{
		"call": c.ID, "sandbox": c.Sandbox, "proxy": c.ProxyID, "binary": c.Binary, "host": c.Host, "port": c.Port,
		"method": c.Method, "path": c.Path, "arguments_digest": c.ArgumentsDigest, "status": c.Status,
		"policy_version": c.PolicyVersion, "deadline": c.Deadline.UTC().Format(time.RFC3339Nano),
	}
	for k, v := range map[string]string{"mcp_method": c.MCPMethod, "tool": c.Tool, "decided_by": c.DecidedBy, "reason": c.Reason} {
		if v != "" {
			u[k] = v
		}
	}
	if c.ProposalID != 0 {
		u["proposal"] = c.ProposalID
	}
	e.Unmapped = u
	e.Finish()
	return e
}
