package sentry

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
)

var (
	digestRe  = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	hashRe    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	traceIDRe = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

// required lists, per class, the payload object an event of that class
// must carry: what makes it worth correlating.
var required = map[Class]string{
	ClassIdentityCheck:  "agent",
	ClassToolAccess:     "tool_call",
	ClassPolicyDecision: "policy",
	ClassBoundaryBreach: "finding",
	ClassQuarantine:     "finding",
}

// payload reads data for a known class.
func (r *reader) payload(data []byte, class Class) Payload {
	m := r.object(data, "data", "severity", "processing", "agent", "process", "node", "policy", "correlation", "tool_call", "finding")
	if r.err != nil {
		return Payload{}
	}
	var p Payload
	p.Severity = Severity(r.enum(m, "severity", "data.severity", true,
		string(SeverityInfo), string(SeverityLow), string(SeverityMedium), string(SeverityHigh), string(SeverityCritical)))
	p.Processing = Processing(r.enum(m, "processing", "data.processing", false,
		string(ProcessingStoreOnly), string(ProcessingRemediate)))
	if p.Processing == "" {
		p.Processing = ProcessingStoreOnly
	}
	if p.Processing == ProcessingRemediate && !class.Remediable() {
		r.fail("data.processing", "remediate is only for quarantine and boundary_breach events")
	}
	if need, ok := required[class]; ok {
		if _, ok := m[need]; !ok {
			r.fail("data."+need, fmt.Sprintf("is required for %s events", class))
		}
	}
	if o := r.sub(m, "agent", "id", "name", "delegated_scope"); o != nil {
		p.Agent = &Agent{
			ID:             r.str(o, "id", "data.agent.id", maxID, true),
			Name:           r.str(o, "name", "data.agent.name", maxID, false),
			DelegatedScope: r.list(o, "delegated_scope", "data.agent.delegated_scope"),
		}
	}
	if o := r.sub(m, "process", "pid", "executable", "executable_digest"); o != nil {
		p.Process = &Process{
			PID:              r.integer(o, "pid", "data.process.pid", 1, math.MaxInt32),
			Executable:       r.str(o, "executable", "data.process.executable", 4096, false),
			ExecutableDigest: r.match(o, "executable_digest", "data.process.executable_digest", digestRe, `"sha256:" and 64 lower-case hex digits`, false),
		}
	}
	if o := r.sub(m, "node", "id", "dpu"); o != nil {
		p.Node = &Node{
			ID:  r.str(o, "id", "data.node.id", maxID, false),
			DPU: r.str(o, "dpu", "data.node.dpu", maxID, false),
		}
	}
	if o := r.sub(m, "policy", "version", "hash"); o != nil {
		p.Policy = &PolicySeen{
			Version: r.integer(o, "version", "data.policy.version", 1, 1<<53),
			Hash:    r.match(o, "hash", "data.policy.hash", hashRe, "64 lower-case hex digits (the policy's SHA-256)", true),
		}
	}
	if o := r.sub(m, "correlation", "denial_id", "session", "jsonrpc_id", "trace_id"); o != nil {
		c := &Correlation{
			DenialID:  r.str(o, "denial_id", "data.correlation.denial_id", maxID, false),
			Session:   r.str(o, "session", "data.correlation.session", maxID, false),
			JSONRPCID: r.jsonrpcID(o),
			TraceID:   r.match(o, "trace_id", "data.correlation.trace_id", traceIDRe, "a W3C trace id: 32 lower-case hex digits, not all zero", false),
		}
		if c.TraceID == "00000000000000000000000000000000" {
			r.fail("data.correlation.trace_id", "must not be all zero (W3C: an invalid trace id)")
		}
		p.Correlation = c
	}
	if o := r.sub(m, "tool_call", "server", "tool", "arguments_digest"); o != nil {
		if _, ok := o["arguments"]; ok {
			r.fail("data.tool_call.arguments", "raw tool arguments are refused; send arguments_digest")
		}
		p.ToolCall = &ToolCall{
			Server:          r.str(o, "server", "data.tool_call.server", maxID, true),
			Tool:            r.str(o, "tool", "data.tool_call.tool", maxID, true),
			ArgumentsDigest: r.match(o, "arguments_digest", "data.tool_call.arguments_digest", digestRe, `"sha256:" and 64 lower-case hex digits`, false),
		}
	}
	if o := r.sub(m, "finding", "title", "confidence"); o != nil {
		p.Finding = &Finding{
			Title:      r.str(o, "title", "data.finding.title", maxText, true),
			Confidence: r.confidence(o),
		}
	}
	return p
}

// sub reads the object data.key when present; nil when absent or invalid.
func (r *reader) sub(m map[string]json.RawMessage, key string, known ...string) map[string]json.RawMessage {
	raw, ok := m[key]
	if !ok || r.err != nil {
		return nil
	}
	return r.object(raw, "data."+key, known...)
}

func (r *reader) enum(m map[string]json.RawMessage, key, path string, required bool, values ...string) string {
	s := r.str(m, key, path, maxID, required)
	if s != "" && r.err == nil && !slices.Contains(values, s) {
		r.fail(path, fmt.Sprintf("must be one of %q", values))
	}
	return s
}

var integerRe = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

func (r *reader) integer(m map[string]json.RawMessage, key, path string, min, max int64) int64 {
	raw, ok := m[key]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if !integerRe.Match(raw) || err != nil || n < min || n > max {
		r.fail(path, fmt.Sprintf("must be an integer from %d to %d", min, max))
		return 0
	}
	return n
}

func (r *reader) list(m map[string]json.RawMessage, key, path string) []string {
	raw, ok := m[key]
	if !ok {
		return nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		r.fail(path, "must be an array of strings")
		return nil
	}
	if len(items) > maxList {
		r.fail(path, fmt.Sprintf("must have at most %d items", maxList))
		return nil
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		out = append(out, r.str(map[string]json.RawMessage{"": item}, "", fmt.Sprintf("%s[%d]", path, i), maxID, true))
	}
	return out
}

// jsonrpcID reads a JSON-RPC id: a string or an integer, kept as its JSON
// text.
func (r *reader) jsonrpcID(m map[string]json.RawMessage) string {
	raw, ok := m["jsonrpc_id"]
	if !ok {
		return ""
	}
	if raw[0] == '"' {
		r.str(m, "jsonrpc_id", "data.correlation.jsonrpc_id", maxID, true)
	} else if !integerRe.Match(raw) || len(raw) > 20 {
		r.fail("data.correlation.jsonrpc_id", "must be a string or an integer")
	}
	return string(raw)
}

func (r *reader) confidence(m map[string]json.RawMessage) *float64 {
	raw, ok := m["confidence"]
	if !ok {
		return nil
	}
	var f float64
	if c := raw[0]; (c != '-' && (c < '0' || c > '9')) || json.Unmarshal(raw, &f) != nil || f < 0 || f > 1 {
		r.fail("data.finding.confidence", "must be a number from 0 to 1")
		return nil
	}
	return &f
}
