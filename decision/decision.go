// Package decision is a proxy's decision record, the one shape both roles
// share: what was asked, by which binary, and the verdict with the rule
// and policy version behind it; a denial's id; the fields cut to bound its
// size; and, for a flood of similar denials, the summary that stands for
// them.
//
// The proxy makes records and keeps them (dataplane/decision: the size
// bound, the summarizer, the ring and the JSON-lines log); the gateway
// stores the ones shipped to it (store.Decision is a Record with what the
// gateway adds); both map them to OCSF (internal/ocsf). A record changes
// shape only at the edges, each written once: the API's DecisionRecord
// (decision/decisionpb), the SQL columns (store/internal/decisionsql), the
// JSON lines of the proxy's log, OCSF. It imports only the standard
// library, so the proxy links none of the gateway to use it.
package decision

import "time"

// The verdicts of Record.Decision.
const (
	Allow = "allow"
	Deny  = "deny"
	// Audit: policy would deny, but the endpoint is in audit mode and
	// the request was forwarded.
	Audit = "audit"
	// RateLimited: policy allowed the tools/call, but its rule's
	// rate_limit had no token left; the request was answered 429 and not
	// forwarded. It carries a DenialID, yet is never a denial the advisor
	// turns into a proposal.
	RateLimited = "rate_limited"
)

// Record is one decision of a proxy: what was asked, by which binary,
// and the verdict with the rule and policy version behind it. A denial
// carries a DenialID that the agent can quote when it asks for access.
// The JSON names are those of the proxy's decision log (and of the API's
// DecisionRecord).
type Record struct {
	Time time.Time `json:"time"`
	// Sandbox is the proxy's sandbox ("" for a standalone proxy); the
	// gateway stores a shipped record under the shipper's sandbox,
	// whatever the record says.
	Sandbox    string `json:"sandbox,omitempty"`
	Binary     string `json:"binary,omitempty"`
	Host       string `json:"host"`
	Port       int    `json:"port"`
	Addr       string `json:"addr,omitempty"`
	HTTPMethod string `json:"http_method,omitempty"`
	Path       string `json:"path,omitempty"`
	MCPMethod  string `json:"mcp_method,omitempty"`
	// Tool is what the MCP message names: tools/call's tool, prompts/get's
	// prompt, a resources method's URI.
	Tool string `json:"tool,omitempty"`
	// Decision is the verdict: Allow, Deny, Audit or RateLimited.
	Decision      string `json:"decision"`
	Entry         string `json:"entry,omitempty"`
	Rule          string `json:"rule,omitempty"`
	Reason        string `json:"reason,omitempty"`
	PolicyVersion string `json:"policy_version,omitempty"`
	DenialID      string `json:"denial_id,omitempty"`
	// VersionProbe marks a denial caused only by an unlisted MCP protocol
	// version: clients probe versions, so it is not offered to the advisor.
	VersionProbe bool `json:"version_probe,omitempty"`
	// ArgumentsDigest is, for a denied tools/call, the digest of its
	// arguments (policy.ArgumentsDigest). The arguments never go into a
	// record: the proxy keeps them a while in its memory.
	ArgumentsDigest string `json:"arguments_digest,omitempty"`
	// ReasonCode names a denial's cause where a machine acts on it:
	// "tool_definition_changed" (a pinned tool whose definition differs
	// from its pin, or could not be verified).
	ReasonCode string `json:"reason_code,omitempty"`
	// ToolDefinition is, for tool_definition_changed, the fingerprint of
	// the tool's definition the proxy saw ("" when it could verify none).
	ToolDefinition string `json:"tool_definition,omitempty"`
	// TraceID is the W3C trace id of the request's span when the proxy
	// traces (32 hex digits): the client's trace when it sent a
	// traceparent, so a search joins the denial, the proposal made from
	// it and the approval. It stays with the proxy (its log and its OCSF
	// events): the API does not ship it, so stored records have none.
	TraceID string `json:"trace_id,omitempty"`
	// Cuts lists the fields cut to keep the record small, each with its
	// length and digest before the cut.
	Cuts []Cut `json:"cuts,omitempty"`
	// Summary, if set, makes the record a summary of a flood of similar
	// decisions that were not kept one by one: the record's fields are
	// their Kind's, Time is the first one's.
	Summary *Summary `json:"summary,omitempty"`
}

// Cut says a field of a record was cut: its JSON name, its length in
// bytes before the cut and the hex SHA-256 of its whole value, so the
// value can still be matched against one known elsewhere.
type Cut struct {
	Field  string `json:"field"`
	Length int    `json:"length"`
	SHA256 string `json:"sha256"`
}

// Summary is what a summary record adds: how many decisions of the
// record's kind it stands for, the last one's time (the record's Time is
// the first's), and the first and last of their denial ids.
type Summary struct {
	Count         int64     `json:"count"`
	Last          time.Time `json:"last"`
	FirstDenialID string    `json:"first_denial_id,omitempty"`
	LastDenialID  string    `json:"last_denial_id,omitempty"`
}

// Count is how many decisions r stands for: its summary's count, or 1.
func (r *Record) Count() int64 {
	if r.Summary != nil {
		return r.Summary.Count
	}
	return 1
}

// Folds reports whether a record of this verdict may be folded into a
// summary: a denial (deny, rate_limited), never an allowed or audited
// request.
func Folds(verdict string) bool { return verdict != Allow && verdict != Audit }

// Kind is what makes records similar, so that a flood of them is
// summarised as one: the same sandbox, verdict, binary, host and port,
// HTTP and MCP method, tool, entry, rule and reason code. The path, the
// reason text (which may quote the path), the time and the denial id may
// differ.
type Kind struct {
	Sandbox, Decision, Binary, Host string
	Port                            int
	HTTPMethod, MCPMethod, Tool     string
	Entry, Rule, ReasonCode         string
	VersionProbe                    bool
}

// KindOf returns r's kind.
func KindOf(r *Record) Kind {
	return Kind{
		Sandbox: r.Sandbox, Decision: r.Decision, Binary: r.Binary, Host: r.Host, Port: r.Port,
		HTTPMethod: r.HTTPMethod, MCPMethod: r.MCPMethod, Tool: r.Tool, Entry: r.Entry, Rule: r.Rule,
		ReasonCode: r.ReasonCode, VersionProbe: r.VersionProbe,
	}
}

// Of returns a record of kind k (its other fields empty).
func (k Kind) Of() Record {
	return Record{
		Sandbox: k.Sandbox, Decision: k.Decision, Binary: k.Binary, Host: k.Host, Port: k.Port,
		HTTPMethod: k.HTTPMethod, MCPMethod: k.MCPMethod, Tool: k.Tool, Entry: k.Entry, Rule: k.Rule,
		ReasonCode: k.ReasonCode, VersionProbe: k.VersionProbe,
	}
}
