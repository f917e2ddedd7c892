package ocsf

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
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
		e.SetClass(ClassAPIActivity, activity, name)
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
		e.SetClass(ClassHTTPActivity, activity, name)
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
		e.SetSeverity(SeverityInformational)
		e.SetStatus(true, d.Reason)
	case "audit":
		// Policy would deny; the endpoint is in audit mode and the
		// request went on.
		e.ActionID, e.Action, e.DispositionID, e.Disposition = 1, "Allowed", 17, "Logged"
		e.SetSeverity(SeverityLow)
		e.SetStatus(true, d.Reason)
	case "rate_limited":
		e.ActionID, e.Action, e.DispositionID, e.Disposition = 2, "Denied", 2, "Blocked"
		e.SetSeverity(SeverityLow)
		e.SetStatus(false, d.Reason)
	default: // deny, and anything unknown is treated as one
		e.ActionID, e.Action, e.DispositionID, e.Disposition = 2, "Denied", 2, "Blocked"
		e.SetSeverity(SeverityMedium)
		e.SetStatus(false, d.Reason)
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
	e.Finish()
	return e
}

// SinkDrops is the event an emitter writes once its sink takes events
// again: an Application Error (6008) saying how many events were lost
// since when, and why (the queue was full, the sink refused them).
func SinkDrops(sink string, dropped uint64, since, now time.Time, p Product) Event {
	var e Event
	e.SetClass(ClassApplicationError, 1, "General Error")
	e.Time = now.UnixMilli()
	e.SetSeverity(SeverityMedium)
	e.SetStatus(false, "events dropped")
	e.Metadata = Metadata{Version: Version, Product: p}
	e.Message = fmt.Sprintf("OCSF sink %s: %d event(s) dropped since %s", sink, dropped, since.UTC().Format(time.RFC3339))
	e.Unmapped = map[string]any{"sink": sink, "dropped": dropped, "since": since.UTC().Format(time.RFC3339Nano)}
	e.Finish()
	return e
}
