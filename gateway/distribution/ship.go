package distribution

import (
	"context"
	"errors"
	"io"
	"math"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/decision/decisionpb"
	"github.com/portcullis-dev/portcullis/internal/events"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

const (
	// maxDecisionBatch bounds the records of one ShipDecisions message.
	maxDecisionBatch = 1000
	// maxDecisionField bounds each text field of a record.
	maxDecisionField = 2 << 10
)

// ShipDecisions stores a proxy's decision records and the tool
// definitions it saw change, batch by batch, as receive returns them
// (io.EOF at the end). Both are the caller's sandbox's, whatever they say.
// A batch with an invalid record or definition is refused whole, before
// anything of it is stored; valid records past the sandbox's ingest limit
// are summarised and counted (by the Sink), and the stream goes on.
func (d *Distribution) ShipDecisions(ctx context.Context, p Caller, receive func() (*portcullisv1.ShipDecisionsRequest, error)) (*portcullisv1.ShipDecisionsResponse, error) {
	var stored uint64
	for {
		req, err := receive()
		if errors.Is(err, io.EOF) {
			return &portcullisv1.ShipDecisionsResponse{Stored: stored}, nil
		}
		if err != nil {
			return nil, err
		}
		if err := checkProxyID(req.GetProxyId()); err != nil {
			return nil, err
		}
		if len(req.GetRecords()) > maxDecisionBatch {
			return nil, invalidField("records", "holds %d records; at most %d per message", len(req.GetRecords()), maxDecisionBatch)
		}
		if len(req.GetToolDefinitions()) > maxDefinitionBatch {
			return nil, invalidField("tool_definitions", "holds %d definitions; at most %d per message", len(req.GetToolDefinitions()), maxDefinitionBatch)
		}
		records, err := fromProtos("records", req.GetRecords(), p.Sandbox, req.GetProxyId(), decisionFromProto)
		if err != nil {
			return nil, err
		}
		defs, err := fromProtos("tool_definitions", req.GetToolDefinitions(), p.Sandbox, req.GetProxyId(), toolDefinitionFromProto)
		if err != nil {
			return nil, err
		}
		d.shipped(p.Sandbox, req.GetProxyId(), records, req.GetDropped(), req.GetOcsfDropped())
		if n := req.GetDropped(); n > 0 {
			d.proxies.dropped(proxyKey{p.Sandbox, req.GetProxyId()}, n)
			d.log.WarnContext(ctx, "proxy dropped decision records", "sandbox", p.Sandbox, "proxy", req.GetProxyId(), "dropped", n)
		}
		// Records past the ingest limit are summarised, not lost: they are
		// not the proxy's drops (the Sink counts them).
		n, _, err := d.cfg.Sink.Ingest(ctx, p.Sandbox, req.GetProxyId(), records)
		if err != nil {
			return nil, err
		}
		stored += uint64(n)
		if len(defs) > 0 {
			if _, err := d.life.RecordToolDefinitions(ctx, defs); err != nil {
				return nil, err
			}
		}
	}
}

// shipped tells the stream of a valid message: its records by decision
// (a summary record counts the decisions it stands for) and what its
// proxy says it dropped.
func (d *Distribution) shipped(sandbox, proxyID string, records []store.Decision, dropped, ocsfDropped uint64) {
	if len(records) == 0 && dropped == 0 && ocsfDropped == 0 {
		return
	}
	n := make(map[string]int, 4)
	for _, r := range records {
		n[r.Decision] += int(r.Count()) // a summary: the decisions it counts
	}
	d.cfg.Stream.Publish(events.DecisionsShipped{Sandbox: sandbox, ProxyID: proxyID, Decisions: n, Dropped: dropped, OCSFDropped: ocsfDropped})
}

// fromProtos converts the items of a message's list (named list) shipped
// by proxyID of sandbox; the first item conv refuses refuses the list,
// the error naming the item.
func fromProtos[P, T any](list string, in []P, sandbox, proxyID string, conv func(P, string, string) (T, error)) ([]T, error) {
	out := make([]T, 0, len(in))
	for i, item := range in {
		t, err := conv(item, sandbox, proxyID)
		if err != nil {
			return nil, fieldAt(list, i, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// decisionFromProto checks a shipped record and returns it as stored:
// the caller's sandbox's, whatever it says, from proxyID.
func decisionFromProto(r *portcullisv1.DecisionRecord, sandbox, proxyID string) (store.Decision, error) {
	if err := checkDecision(r); err != nil {
		return store.Decision{}, err
	}
	rec := decisionpb.FromProto(r)
	rec.Sandbox = sandbox
	return store.Decision{ProxyID: proxyID, Record: rec}, nil
}

// checkDecision refuses a record the store should not hold: an unknown
// verdict, a port out of range, no time, a text field over
// maxDecisionField, a summary without its last time, too many cuts or a
// malformed one.
func checkDecision(r *portcullisv1.DecisionRecord) error {
	switch r.GetDecision() {
	case decision.Allow, decision.Deny, decision.Audit, decision.RateLimited:
	default:
		return invalidField("decision", "must be allow, deny, audit or rate_limited, not %q", r.GetDecision())
	}
	if r.GetPort() > 65535 {
		return invalidField("port", "is not a port: %d", r.GetPort())
	}
	if r.GetTime() == nil {
		return invalidField("time", "is missing")
	}
	fields := map[string]string{
		"binary": r.GetBinary(), "host": r.GetHost(), "addr": r.GetAddr(), "http_method": r.GetHttpMethod(),
		"path": r.GetPath(), "mcp_method": r.GetMcpMethod(), "tool": r.GetTool(), "entry": r.GetEntry(),
		"rule": r.GetRule(), "reason": r.GetReason(), "policy_version": r.GetPolicyVersion(), "denial_id": r.GetDenialId(),
		"arguments_digest": r.GetArgumentsDigest(), "reason_code": r.GetReasonCode(), "tool_definition": r.GetToolDefinition(),
	}
	fields["summary_first_denial_id"], fields["summary_last_denial_id"] = r.GetSummaryFirstDenialId(), r.GetSummaryLastDenialId()
	for name, v := range fields {
		if len(v) > maxDecisionField {
			return invalidField(name, "is longer than %d bytes", maxDecisionField)
		}
	}
	if r.GetSummaryCount() > math.MaxInt64 {
		return invalidField("summary_count", "is too large: %d", r.GetSummaryCount())
	}
	if r.GetSummaryCount() > 0 && r.GetSummaryLast() == nil {
		return invalidField("summary_last", "is missing from a summary")
	}
	if len(r.GetCuts()) > maxCuts {
		return invalidField("cuts", "lists %d cuts; at most %d", len(r.GetCuts()), maxCuts)
	}
	for _, c := range r.GetCuts() {
		if c.GetField() == "" || len(c.GetField()) > 64 || c.GetLength() > math.MaxInt32 || !isHexSHA256(c.GetSha256()) {
			return invalidField("cuts", "a cut needs a field name of at most 64 bytes, a length and a hex SHA-256")
		}
	}
	return nil
}

// maxCuts bounds the cuts a record lists: one a field at most.
const maxCuts = 32

// isHexSHA256 reports whether s is 64 lower-case hex digits.
func isHexSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
