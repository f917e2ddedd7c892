package apitext

import (
	"fmt"
	"strconv"
	"strings"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// DecisionLine is one record as a line:
//
//	2026-01-02T03:04:05Z deny  /usr/bin/curl POST api.example.com:443/v1/refunds mcp=tools/call tool=refund_order reason="…" policy=3 denial_id=…
//
// A denial a machine acts on also carries its reason_code, and one by a
// pinned tool definition the fingerprint seen (tool_definition=sha256:…,
// or - when the proxy could verify none). A summary of a flood of similar
// decisions ends in summary=N until=TIME first_denial_id=… last_denial_id=…
// (its time is the first one's); a record whose long fields were cut
// lists each as cut=FIELD:LENGTH:sha256:HEX.
//
// Everything a proxy shipped is shown quoted when it holds white space or
// anything unprintable: the agent chooses hosts, paths and tool names, and
// must not be able to forge lines or send escape sequences to a terminal.
func DecisionLine(d *portcullisv1.StoredDecision) string {
	r := d.GetRecord()
	parts := []string{When(r.GetTime()), fmt.Sprintf("%-5s", Field(r.GetDecision())), Field(Dash(r.GetBinary()))}
	if m := r.GetHttpMethod(); m != "" {
		parts = append(parts, Field(m))
	}
	parts = append(parts, Field(requestTarget(r)))
	if m := r.GetMcpMethod(); m != "" {
		parts = append(parts, "mcp="+Field(m))
	}
	if t := r.GetTool(); t != "" {
		parts = append(parts, "tool="+Field(t))
	}
	// An allow names the rule that allowed it; a denial (or an audited
	// would-be denial) says why.
	if showRule := r.GetReason() == "" || (r.GetDecision() == "allow" && r.GetRule() != ""); showRule {
		if e := r.GetEntry(); e != "" {
			parts = append(parts, "entry="+Field(e))
		}
		if rule := r.GetRule(); rule != "" {
			parts = append(parts, "rule="+Field(rule))
		}
	} else {
		parts = append(parts, "reason="+Field(r.GetReason()))
	}
	if v := r.GetPolicyVersion(); v != "" {
		parts = append(parts, "policy="+Field(v))
	} else {
		parts = append(parts, "policy=none")
	}
	if r.GetVersionProbe() {
		parts = append(parts, "version_probe")
	}
	if c := r.GetReasonCode(); c != "" {
		parts = append(parts, "reason_code="+Field(c))
	}
	if c := r.GetReasonCode(); c != "" || r.GetToolDefinition() != "" {
		parts = append(parts, "tool_definition="+Field(Dash(r.GetToolDefinition())))
	}
	if id := r.GetDenialId(); id != "" {
		parts = append(parts, "denial_id="+Field(id))
	}
	if n := r.GetSummaryCount(); n > 0 {
		parts = append(parts, fmt.Sprintf("summary=%d until=%s", n, When(r.GetSummaryLast())))
		if id := r.GetSummaryFirstDenialId(); id != "" {
			parts = append(parts, "first_denial_id="+Field(id))
		}
		if id := r.GetSummaryLastDenialId(); id != "" {
			parts = append(parts, "last_denial_id="+Field(id))
		}
	}
	for _, c := range r.GetCuts() {
		parts = append(parts, fmt.Sprintf("cut=%s:%d:sha256:%s", Field(c.GetField()), c.GetLength(), Field(c.GetSha256())))
	}
	return strings.Join(parts, " ")
}

// requestTarget is host:port/path ("-" when the record names no
// destination).
func requestTarget(r *portcullisv1.DecisionRecord) string {
	host := r.GetHost()
	if host == "" {
		host = r.GetAddr()
	}
	if host == "" {
		host = "-"
	}
	if p := r.GetPort(); p != 0 && r.GetHost() != "" {
		host += ":" + strconv.FormatUint(uint64(p), 10)
	}
	return host + r.GetPath()
}
