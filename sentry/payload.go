package sentry

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/internal/strictjson"
)

// isHash: a SHA-256 as 64 lower-case hex digits.
func isHash(s string) bool { return isLowerHex(s, 64) }

// isDigest: "sha256:" and a hash.
func isDigest(s string) bool {
	return strings.HasPrefix(s, "sha256:") && isHash(s[len("sha256:"):])
}

// isTraceID: a W3C trace id's form, 32 lower-case hex digits.
func isTraceID(s string) bool { return isLowerHex(s, 32) }

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

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
func (r *reader) payload(data field, class Class) Payload {
	m, _ := r.object(data, "data", "severity", "processing", "agent", "process", "node", "policy", "correlation", "tool_call", "finding")
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
		if _, ok := m.get(need); !ok {
			r.fail("data."+need, fmt.Sprintf("is required for %s events", class))
		}
	}
	if o, ok := r.sub(m, "agent", "id", "name", "delegated_scope"); ok {
		p.Agent = &Agent{
			ID:             r.str(o, "id", "data.agent.id", maxID, true),
			Name:           r.name(o, "name", "data.agent.name", maxID, false),
			DelegatedScope: r.list(o, "delegated_scope", "data.agent.delegated_scope"),
		}
	}
	if o, ok := r.sub(m, "process", "pid", "executable", "executable_digest"); ok {
		p.Process = &Process{
			PID:              r.integer(o, "pid", "data.process.pid", 1, math.MaxInt32),
			Executable:       r.name(o, "executable", "data.process.executable", 4096, false),
			ExecutableDigest: r.match(o, "executable_digest", "data.process.executable_digest", isDigest, `"sha256:" and 64 lower-case hex digits`, false),
		}
	}
	if o, ok := r.sub(m, "node", "id", "dpu"); ok {
		p.Node = &Node{
			ID:  r.name(o, "id", "data.node.id", maxID, false),
			DPU: r.name(o, "dpu", "data.node.dpu", maxID, false),
		}
	}
	if o, ok := r.sub(m, "policy", "version", "hash"); ok {
		p.Policy = &PolicySeen{
			Version: r.integer(o, "version", "data.policy.version", 1, 1<<53),
			Hash:    r.match(o, "hash", "data.policy.hash", isHash, "64 lower-case hex digits (the policy's SHA-256)", true),
		}
	}
	if o, ok := r.sub(m, "correlation", "denial_id", "session", "jsonrpc_id", "trace_id"); ok {
		c := &Correlation{
			DenialID:  r.str(o, "denial_id", "data.correlation.denial_id", maxID, false),
			Session:   r.str(o, "session", "data.correlation.session", maxID, false),
			JSONRPCID: r.jsonrpcID(o),
			TraceID:   r.match(o, "trace_id", "data.correlation.trace_id", isTraceID, "a W3C trace id: 32 lower-case hex digits, not all zero", false),
		}
		if c.TraceID == "00000000000000000000000000000000" {
			r.fail("data.correlation.trace_id", "must not be all zero (W3C: an invalid trace id)")
		}
		p.Correlation = c
	}
	if o, ok := r.sub(m, "tool_call", "server", "tool", "arguments_digest"); ok {
		if _, ok := o.get("arguments"); ok {
			r.fail("data.tool_call.arguments", "raw tool arguments are refused; send arguments_digest")
		}
		p.ToolCall = &ToolCall{
			Server:          r.name(o, "server", "data.tool_call.server", maxID, true),
			Tool:            r.name(o, "tool", "data.tool_call.tool", maxID, true),
			ArgumentsDigest: r.match(o, "arguments_digest", "data.tool_call.arguments_digest", isDigest, `"sha256:" and 64 lower-case hex digits`, false),
		}
	}
	if o, ok := r.sub(m, "finding", "title", "confidence"); ok {
		p.Finding = &Finding{
			Title:      r.str(o, "title", "data.finding.title", maxText, true),
			Confidence: r.confidence(o),
		}
	}
	return p
}

// sub reads the object data.key when present; false when absent or
// invalid.
func (r *reader) sub(m fields, key string, known ...string) (fields, bool) {
	f, ok := m.field(key)
	if !ok || r.err != nil {
		return nil, false
	}
	return r.object(f, "data."+key, known...)
}

func (r *reader) enum(m fields, key, path string, required bool, values ...string) string {
	s := r.name(m, key, path, maxID, required)
	if s != "" && r.err == nil && !slices.Contains(values, s) {
		r.fail(path, fmt.Sprintf("must be one of %q", values))
	}
	return s
}

// isInteger: a JSON number that is an integer as written (no fraction,
// no exponent).
func isInteger(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || (b[0] == '0' && len(b) > 1) {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func (r *reader) integer(m fields, key, path string, min, max int64) int64 {
	raw, ok := m.get(key)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if !isInteger(raw) || err != nil || n < min || n > max {
		r.fail(path, fmt.Sprintf("must be an integer from %d to %d", min, max))
		return 0
	}
	return n
}

func (r *reader) list(m fields, key, path string) []string {
	raw, ok := m.get(key)
	if !ok {
		return nil
	}
	items, ok := r.elements(raw)
	if !ok {
		r.fail(path, "must be an array of strings")
		return nil
	}
	if len(items) > maxList {
		r.fail(path, fmt.Sprintf("must have at most %d items", maxList))
		return nil
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		out = append(out, r.text(item, fmt.Sprintf("%s[%d]", path, i), maxID))
	}
	return out
}

// jsonrpcID reads a JSON-RPC id: a string or an integer, kept as its JSON
// text.
func (r *reader) jsonrpcID(m fields) string {
	raw, ok := m.get("jsonrpc_id")
	if !ok {
		return ""
	}
	if raw[0] == '"' {
		r.str(m, "jsonrpc_id", "data.correlation.jsonrpc_id", maxID, true)
	} else if !isInteger(raw) || len(raw) > 20 {
		r.fail("data.correlation.jsonrpc_id", "must be a string or an integer")
	}
	return string(raw)
}

func (r *reader) confidence(m fields) *float64 {
	raw, ok := m.get("confidence")
	if !ok {
		return nil
	}
	c := raw[0]
	if c != '-' && (c < '0' || c > '9') {
		r.fail("data.finding.confidence", "must be a number from 0 to 1")
		return nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || f < 0 || f > 1 {
		r.fail("data.finding.confidence", "must be a number from 0 to 1")
		return nil
	}
	return &f
}

// elements splits raw, a JSON value the strict reader has checked, into
// its elements' bytes; false when it is not an array.
func (r *reader) elements(raw []byte) ([][]byte, bool) {
	j := &r.items
	j.Reset(raw, limits)
	if j.Kind() != strictjson.Array || !j.Open() {
		return nil, false
	}
	var items [][]byte
	for j.Element() {
		items = append(items, j.Skip())
	}
	return items, j.Err() == nil
}
