// Package decisionpb converts a decision record to the API's
// DecisionRecord and back, each way written once: the proxy ships its
// records with ToProto, the gateway reads them with FromProto (after
// checking them) and hands stored ones back with ToProto.
package decisionpb

import (
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/decision"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// ToProto returns r as the API carries it. The message's proxy_id is
// left for the gateway to set; r.TraceID has no field there.
func ToProto(r *decision.Record) *portcullisv1.DecisionRecord {
	p := &portcullisv1.DecisionRecord{
		Time:            timestamppb.New(r.Time),
		Sandbox:         r.Sandbox,
		Decision:        r.Decision,
		Binary:          r.Binary,
		Host:            r.Host,
		Port:            uint32(r.Port),
		Addr:            r.Addr,
		HttpMethod:      r.HTTPMethod,
		Path:            r.Path,
		McpMethod:       r.MCPMethod,
		Tool:            r.Tool,
		Entry:           r.Entry,
		Rule:            r.Rule,
		Reason:          r.Reason,
		PolicyVersion:   r.PolicyVersion,
		DenialId:        r.DenialID,
		VersionProbe:    r.VersionProbe,
		ArgumentsDigest: r.ArgumentsDigest,
		ReasonCode:      r.ReasonCode,
		ToolDefinition:  r.ToolDefinition,
	}
	for _, c := range r.Cuts {
		p.Cuts = append(p.Cuts, &portcullisv1.FieldCut{Field: c.Field, Length: uint64(c.Length), Sha256: c.SHA256})
	}
	if s := r.Summary; s != nil {
		p.SummaryCount, p.SummaryLast = uint64(s.Count), timestamppb.New(s.Last)
		p.SummaryFirstDenialId, p.SummaryLastDenialId = s.FirstDenialID, s.LastDenialID
	}
	return p
}

// FromProto returns the record p carries. It checks nothing (the gateway
// does, before): a missing time is the zero time, numbers are converted
// as they are, and the summary fields are read only when summary_count
// is above 0. proxy_id is not the record's (store.Decision holds it).
func FromProto(p *portcullisv1.DecisionRecord) decision.Record {
	r := decision.Record{
		Sandbox:         p.GetSandbox(),
		Decision:        p.GetDecision(),
		Binary:          p.GetBinary(),
		Host:            p.GetHost(),
		Port:            int(p.GetPort()),
		Addr:            p.GetAddr(),
		HTTPMethod:      p.GetHttpMethod(),
		Path:            p.GetPath(),
		MCPMethod:       p.GetMcpMethod(),
		Tool:            p.GetTool(),
		Entry:           p.GetEntry(),
		Rule:            p.GetRule(),
		Reason:          p.GetReason(),
		PolicyVersion:   p.GetPolicyVersion(),
		DenialID:        p.GetDenialId(),
		VersionProbe:    p.GetVersionProbe(),
		ArgumentsDigest: p.GetArgumentsDigest(),
		ReasonCode:      p.GetReasonCode(),
		ToolDefinition:  p.GetToolDefinition(),
	}
	if p.GetTime() != nil {
		r.Time = p.GetTime().AsTime()
	}
	for _, c := range p.GetCuts() {
		r.Cuts = append(r.Cuts, decision.Cut{Field: c.GetField(), Length: int(c.GetLength()), SHA256: c.GetSha256()})
	}
	if n := p.GetSummaryCount(); n > 0 {
		r.Summary = &decision.Summary{Count: int64(n), FirstDenialID: p.GetSummaryFirstDenialId(), LastDenialID: p.GetSummaryLastDenialId()}
		if p.GetSummaryLast() != nil {
			r.Summary.Last = p.GetSummaryLast().AsTime()
		}
	}
	return r
}
