package gateway

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/decision/decisionpb"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

// DecisionService: the records proxies shipped (gateway/decisions stores
// them), read back.

const (
	defaultListLimit   = 100
	maxListLimit       = 1000
	defaultTailBacklog = 10
	tailPollInterval   = 500 * time.Millisecond
)

func decisionToProto(d store.Decision) *portcullisv1.StoredDecision {
	r := decisionpb.ToProto(&d.Record)
	r.ProxyId = d.ProxyID
	return &portcullisv1.StoredDecision{Id: d.ID, ReceivedAt: timestamppb.New(d.ReceivedAt), Record: r}
}

func checkDecisionFilter(decision string) error {
	switch decision {
	case "", "allow", "deny", "audit", "rate_limited":
		return nil
	}
	return invalidField("decision", "must be allow, deny, audit or rate_limited, not %q", decision)
}

type decisionService struct{ *Server }

func (s decisionService) ListDecisions(ctx context.Context, req *portcullisv1.ListDecisionsRequest) (*portcullisv1.ListDecisionsResponse, error) {
	if err := checkDecisionFilter(req.GetDecision()); err != nil {
		return nil, err
	}
	limit, err := listLimit("limit", req.GetLimit(), defaultListLimit, maxListLimit)
	if err != nil {
		return nil, err
	}
	if _, err := s.store.GetSandbox(ctx, req.GetSandbox()); err != nil {
		return nil, missing(err, "sandbox %q not found", req.GetSandbox())
	}
	list, err := s.store.ListDecisions(ctx, store.DecisionFilter{Sandbox: req.GetSandbox(), Decision: req.GetDecision(), DenialID: req.GetDenialId(), Limit: limit})
	if err != nil {
		return nil, err
	}
	return &portcullisv1.ListDecisionsResponse{Decisions: protoList(list, decisionToProto)}, nil
}

// protoList converts the records of a list response with conv: empty, not
// nil, when there are none.
func protoList[T, P any](list []T, conv func(T) P) []P {
	out := make([]P, 0, len(list))
	for _, v := range list {
		out = append(out, conv(v))
	}
	return out
}

// listLimit reads a request's count of entries to return (field): def
// when unset, refused beyond max.
func listLimit(field string, n uint32, def, max int) (int, error) {
	switch {
	case n == 0:
		return def, nil
	case int64(n) > int64(max):
		return 0, invalidField(field, "must be at most %d", max)
	}
	return int(n), nil
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
	backlog, err := listLimit("backlog", req.GetBacklog(), defaultTailBacklog, maxListLimit)
	if err != nil {
		return err
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
