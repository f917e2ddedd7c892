package dataplane

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/policy"
)

// deny answers a denied request (403), records it, and never forwards.
func (p *Proxy) deny(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request, d policy.Decision, mreq *mcp.Request) {
	id := decision.NewDenialID()
	// The binary is looked up only when the policy names binaries: a
	// lookup scans /proc, and denials must stay cheap (an agent can cause
	// as many as it likes).
	rec := p.newRecord(cur, req, d, mreq, id)
	if mreq != nil && len(mreq.Messages) == 1 && rec.MCPMethod == "tools/call" {
		// A denial by policy (not a rate limit): the arguments stay here.
		rec.ArgumentsDigest = p.keepArguments(id, mreq.Messages[0].Message.Arguments)
	}
	p.traceDecision(r, &rec)
	p.emit(rec)
	version := ""
	if cur != nil {
		version = cur.version
	}
	if mreq != nil {
		data := map[string]any{"denial_id": id, "policy_version": version, "rule": d.Rule, "entry": d.Entry, "reason": d.Reason}
		if rec.ReasonCode != "" {
			data["reason_code"] = rec.ReasonCode
		}
		if d.DefinitionRefused && len(mreq.Messages) > 0 {
			data["tool_definition"] = mreq.Messages[0].Message.ToolDefinition
		}
		if rec.TraceID != "" {
			data["trace_id"] = rec.TraceID
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		w.Write(mreq.DenyBody(mcpDeniedCode, "denied by policy: "+d.Reason, data))
		return
	}
	body := map[string]any{
		"error":          "policy_denied",
		"reason":         d.Reason,
		"entry":          d.Entry,
		"rule":           d.Rule,
		"policy_version": version,
		"denial_id":      id,
		"host":           req.Host,
		"port":           req.Port,
		"method":         req.HTTPMethod,
		"path":           req.Path,
		"binary":         req.Binary,
	}
	if rec.ReasonCode != "" {
		body["reason_code"] = rec.ReasonCode
	}
	if rec.TraceID != "" {
		body["trace_id"] = rec.TraceID
	}
	writeJSON(w, http.StatusForbidden, body)
}

// mcpDeniedCode is the JSON-RPC error code of a policy denial (the
// implementation-defined server error range is -32000 to -32099).
const mcpDeniedCode = -32001

// refuse denies a request that is malformed before any policy applies.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, t dest, reason string) {
	cur := p.current.Load()
	req := p.baseRequest(r.Context(), cur, t)
	req.HTTPMethod = r.Method
	if r.URL != nil {
		req.Path = r.URL.EscapedPath()
	}
	p.deny(w, r, cur, req, policy.Decision{Reason: reason}, nil)
}

func (p *Proxy) record(cur *loaded, req policy.Request, d policy.Decision, mreq *mcp.Request, denialID string) {
	p.emit(p.newRecord(cur, req, d, mreq, denialID))
}

// newRecord is the record of decision d on req: a denial when denialID is
// set, else an allow (audit when d.Audit).
func (p *Proxy) newRecord(cur *loaded, req policy.Request, d policy.Decision, mreq *mcp.Request, denialID string) decision.Record {
	rec := decision.Record{
		Time:       req.Time,
		Sandbox:    p.cfg.Sandbox,
		Binary:     req.Binary,
		Host:       req.Host,
		Port:       req.Port,
		HTTPMethod: req.HTTPMethod,
		Path:       req.Path,
		Decision:   decision.Allow,
		Entry:      d.Entry,
		Rule:       d.Rule,
		Reason:     d.Reason,
		ReasonCode: d.ReasonCode,
		DenialID:   denialID,
	}
	if req.Addr.IsValid() {
		rec.Addr = decision.AddrText(req.Host, req.Addr)
	}
	if cur != nil {
		rec.PolicyVersion = cur.version
	}
	switch {
	case denialID != "":
		rec.Decision = decision.Deny
		rec.VersionProbe = d.VersionRefused
	case d.Audit:
		rec.Decision = decision.Audit
	}
	if mreq != nil && len(mreq.Messages) > 0 {
		rec.MCPMethod = mreq.Messages[0].Message.Method
		rec.Tool = mreq.Messages[0].Message.Name()
		if denialID != "" && d.DefinitionRefused {
			rec.ReasonCode, rec.ToolDefinition = policy.ToolDefinitionChanged, mreq.Messages[0].Message.ToolDefinition
		}
	}
	return rec
}

// emit keeps rec in the decision log and hands it to the shipper, its
// long fields cut (Record.Bound); a denial past its kind's budget is
// counted into a summary instead (decision.Summarizer), which goes the
// same way when its window ends. Allowed and audited records always go.
func (p *Proxy) emit(rec decision.Record) {
	decision.Bound(&rec)
	if decision.Folds(rec.Decision) {
		keep, due := p.summaries.Admit(rec)
		for _, s := range due {
			p.keepRecord(s)
		}
		if !keep {
			return
		}
	}
	p.keepRecord(rec)
}

// emitSummaries emits the summaries whose window has ended.
func (p *Proxy) emitSummaries() {
	for _, s := range p.summaries.Due(p.now()) {
		p.keepRecord(s)
	}
}

func (p *Proxy) keepRecord(rec decision.Record) {
	p.decisions.Add(rec)
	if p.cfg.OnRecord != nil {
		p.cfg.OnRecord(rec)
	}
}

// keepArguments keeps a denied tools/call's arguments in the proxy's
// memory for policy.local (in RFC 8785 form, or as written when a number
// does not survive that form) and returns their digest for the record (""
// for arguments that are not one strict JSON object, which no proposal can
// admit exactly). Absent arguments are {}, as policy judges them.
func (p *Proxy) keepArguments(denialID string, args json.RawMessage) string {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	c, err := policy.CanonicalArguments(args)
	if err != nil {
		return ""
	}
	digest, err := policy.ArgumentsDigest(c)
	if err != nil {
		return ""
	}
	if _, _, inexact, err := policy.InexactArgumentNumber(args); err == nil && inexact {
		// A number a float64 does not hold exactly: the canonical form
		// holds another number, from which the advisor would propose a
		// call never made. Kept as written (compacted), so the advisor
		// sees the number and refuses; the digest is the same.
		var b bytes.Buffer
		if json.Compact(&b, args) == nil {
			p.arguments.Put(denialID, b.Bytes())
		}
		return digest
	}
	p.arguments.Put(denialID, c)
	return digest
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
