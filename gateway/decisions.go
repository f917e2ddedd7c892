package gateway

import (
	"context"
	"errors"
	"io"
	"math/bits"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

const (
	// maxDecisionBatch bounds the records of one ShipDecisions message.
	maxDecisionBatch = 1000
	// maxDecisionField bounds each text field of a record.
	maxDecisionField   = 2 << 10
	defaultListLimit   = 100
	maxListLimit       = 1000
	defaultTailBacklog = 10
	tailPollInterval   = 500 * time.Millisecond
)

// ShipDecisions stores a proxy's decision records on Connect (see
// shipDecisions).
func (s distributionService) ShipDecisions(ctx context.Context, stream portcullisv1connect.DistributionServiceShipDecisionsServerStream) (*portcullisv1.ShipDecisionsResponse, error) {
	return s.shipDecisions(ctx, stream.Receive)
}

// shipDecisions stores a proxy's decision records, batch by batch, as
// receive returns them (io.EOF at the end). The records are the token's
// sandbox's, whatever they say. A batch with an invalid record is refused
// whole; valid records past the sandbox's ingest limit are dropped and
// counted (retention.go), and the stream goes on.
func (s distributionService) shipDecisions(ctx context.Context, receive func() (*portcullisv1.ShipDecisionsRequest, error)) (*portcullisv1.ShipDecisionsResponse, error) {
	p := mustPrincipal(ctx)
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
		records := make([]store.Decision, 0, len(req.GetRecords()))
		for i, r := range req.GetRecords() {
			d, err := decisionFromProto(r, p.Sandbox, req.GetProxyId())
			if err != nil {
				return nil, fieldAt("records", i, err)
			}
			records = append(records, d)
		}
		if n := req.GetDropped(); n > 0 {
			s.proxies.dropped(proxyKey{p.Sandbox, req.GetProxyId()}, n)
			s.log.WarnContext(ctx, "proxy dropped decision records", "sandbox", p.Sandbox, "proxy", req.GetProxyId(), "dropped", n)
		}
		records, limited, total := s.limiter.admit(p.Sandbox, records)
		if limited > 0 {
			s.decisionsLimited.Add(uint64(limited))
			s.proxies.dropped(proxyKey{p.Sandbox, req.GetProxyId()}, uint64(limited))
			if prev := total - uint64(limited); bits.Len64(prev) != bits.Len64(total) { // log at 1, 2, 4, 8, …
				s.log.WarnContext(ctx, "sandbox over its decision record rate limit; records dropped", "sandbox", p.Sandbox, "proxy", req.GetProxyId(), "dropped", total)
			}
		}
		if len(records) == 0 {
			continue
		}
		n, err := s.store.AppendDecisions(ctx, records)
		if err != nil {
			return nil, err
		}
		stored += uint64(n)
		s.decisionsStored.Add(uint64(n))
	}
}

func decisionFromProto(r *portcullisv1.DecisionRecord, sandbox, proxyID string) (store.Decision, error) {
	switch r.GetDecision() {
	case "allow", "deny", "audit":
	default:
		return store.Decision{}, invalidField("decision", "must be allow, deny or audit, not %q", r.GetDecision())
	}
	if r.GetPort() > 65535 {
		return store.Decision{}, invalidField("port", "is not a port: %d", r.GetPort())
	}
	if r.GetTime() == nil {
		return store.Decision{}, invalidField("time", "is missing")
	}
	fields := map[string]string{
		"binary": r.GetBinary(), "host": r.GetHost(), "addr": r.GetAddr(), "http_method": r.GetHttpMethod(),
		"path": r.GetPath(), "mcp_method": r.GetMcpMethod(), "tool": r.GetTool(), "entry": r.GetEntry(),
		"rule": r.GetRule(), "reason": r.GetReason(), "policy_version": r.GetPolicyVersion(), "denial_id": r.GetDenialId(),
	}
	for name, v := range fields {
		if len(v) > maxDecisionField {
			return store.Decision{}, invalidField(name, "is longer than %d bytes", maxDecisionField)
		}
	}
	return store.Decision{
		Time:          r.GetTime().AsTime(),
		Sandbox:       sandbox,
		ProxyID:       proxyID,
		Decision:      r.GetDecision(),
		Binary:        r.GetBinary(),
		Host:          r.GetHost(),
		Port:          int(r.GetPort()),
		Addr:          r.GetAddr(),
		HTTPMethod:    r.GetHttpMethod(),
		Path:          r.GetPath(),
		MCPMethod:     r.GetMcpMethod(),
		Tool:          r.GetTool(),
		Entry:         r.GetEntry(),
		Rule:          r.GetRule(),
		Reason:        r.GetReason(),
		PolicyVersion: r.GetPolicyVersion(),
		DenialID:      r.GetDenialId(),
		VersionProbe:  r.GetVersionProbe(),
	}, nil
}

func decisionToProto(d store.Decision) *portcullisv1.StoredDecision {
	return &portcullisv1.StoredDecision{
		Id:         d.ID,
		ReceivedAt: timestamppb.New(d.ReceivedAt),
		Record: &portcullisv1.DecisionRecord{
			Time:          timestamppb.New(d.Time),
			Sandbox:       d.Sandbox,
			ProxyId:       d.ProxyID,
			Decision:      d.Decision,
			Binary:        d.Binary,
			Host:          d.Host,
			Port:          uint32(d.Port),
			Addr:          d.Addr,
			HttpMethod:    d.HTTPMethod,
			Path:          d.Path,
			McpMethod:     d.MCPMethod,
			Tool:          d.Tool,
			Entry:         d.Entry,
			Rule:          d.Rule,
			Reason:        d.Reason,
			PolicyVersion: d.PolicyVersion,
			DenialId:      d.DenialID,
			VersionProbe:  d.VersionProbe,
		},
	}
}

func checkDecisionFilter(decision string) error {
	switch decision {
	case "", "allow", "deny", "audit":
		return nil
	}
	return invalidField("decision", "must be allow, deny or audit, not %q", decision)
}

type decisionService struct{ *Server }

func (s decisionService) ListDecisions(ctx context.Context, req *portcullisv1.ListDecisionsRequest) (*portcullisv1.ListDecisionsResponse, error) {
	if err := checkDecisionFilter(req.GetDecision()); err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = defaultListLimit
	case limit > maxListLimit:
		return nil, invalidField("limit", "must be at most %d", maxListLimit)
	}
	if _, err := s.store.GetSandbox(ctx, req.GetSandbox()); err != nil {
		return nil, missing(err, "sandbox %q not found", req.GetSandbox())
	}
	list, err := s.store.ListDecisions(ctx, store.DecisionFilter{Sandbox: req.GetSandbox(), Decision: req.GetDecision(), DenialID: req.GetDenialId(), Limit: limit})
	if err != nil {
		return nil, err
	}
	res := &portcullisv1.ListDecisionsResponse{Decisions: make([]*portcullisv1.StoredDecision, 0, len(list))}
	for _, d := range list {
		res.Decisions = append(res.Decisions, decisionToProto(d))
	}
	return res, nil
}

// TailDecisions sends the newest records, then polls the store for new
// ones (records shipped through any replica land there).
func (s decisionService) TailDecisions(ctx context.Context, req *portcullisv1.TailDecisionsRequest, stream portcullisv1connect.DecisionServiceTailDecisionsServerStream) error {
	if err := checkDecisionFilter(req.GetDecision()); err != nil {
		return err
	}
	if _, err := s.store.GetSandbox(ctx, req.GetSandbox()); err != nil {
		return missing(err, "sandbox %q not found", req.GetSandbox())
	}
	backlog := int(req.GetBacklog())
	switch {
	case backlog == 0:
		backlog = defaultTailBacklog
	case backlog > maxListLimit:
		return invalidField("backlog", "must be at most %d", maxListLimit)
	}
	f := store.DecisionFilter{Sandbox: req.GetSandbox(), Decision: req.GetDecision(), Limit: backlog}
	if req.GetAfterId() != 0 {
		if req.GetAfterId() < 0 {
			return invalidField("after_id", "must be positive")
		}
		f.AfterID, f.Limit = req.GetAfterId(), maxListLimit
	}
	tick := time.NewTicker(tailPollInterval)
	defer tick.Stop()
	for {
		list, err := s.store.ListDecisions(ctx, f)
		if err != nil {
			return err
		}
		for _, d := range list {
			if err := stream.Send(decisionToProto(d)); err != nil {
				return err
			}
			f.AfterID = d.ID
		}
		f.Limit = maxListLimit
		select {
		case <-ctx.Done():
			return nil
		case <-s.streams.Done():
			return nil
		case <-tick.C:
		}
	}
}
