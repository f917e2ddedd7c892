package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway/transport"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/lifecycle"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

// CallService: held calls as people see and decide them. Reads from the
// store, decisions through lifecycle.DecideCall (the approval rules with
// input.kind "call" say who may decide); the proxies' side, HoldCall, is
// gateway/distribution's.

// Bounds of ListCalls.
const (
	defaultCallLimit = 100
	maxCallLimit     = 1000
)

type callService struct{ *Server }

// callFilter checks a ListCallsRequest.
func callFilter(req *portcullisv1.ListCallsRequest) (store.HeldCallFilter, error) {
	f := store.HeldCallFilter{Sandbox: req.GetSandbox(), Status: req.GetStatus(), Limit: int(req.GetLimit())}
	switch f.Status {
	case "", store.CallHeld, store.CallApproved, store.CallDenied, store.CallExpired, store.CallFailed:
	default:
		return f, invalidField("status", "%q is not held, approved, denied, expired or failed", f.Status)
	}
	if f.Limit == 0 {
		f.Limit = defaultCallLimit
	}
	if f.Limit > maxCallLimit {
		return f, invalidField("limit", "%d is over %d", f.Limit, maxCallLimit)
	}
	return f, nil
}

func (s callService) ListCalls(ctx context.Context, req *portcullisv1.ListCallsRequest) (*portcullisv1.ListCallsResponse, error) {
	f, err := callFilter(req)
	if err != nil {
		return nil, err
	}
	list, err := s.store.ListHeldCalls(ctx, f)
	if err != nil {
		return nil, err
	}
	held, err := s.store.CountHeldCalls(ctx, f.Sandbox)
	if err != nil {
		return nil, err
	}
	res := &portcullisv1.ListCallsResponse{Calls: make([]*portcullisv1.HeldCall, 0, len(list)), Held: uint32(held)}
	for _, c := range list {
		res.Calls = append(res.Calls, heldCallToProto(c))
	}
	return res, nil
}

func (s callService) GetCall(ctx context.Context, req *portcullisv1.GetCallRequest) (*portcullisv1.HeldCall, error) {
	c, err := s.store.GetHeldCall(ctx, clampID(req.GetId()))
	if err != nil {
		return nil, missing(err, "held call %d not found", req.GetId())
	}
	return heldCallToProto(c), nil
}

func (s callService) ApproveCall(ctx context.Context, req *portcullisv1.ApproveCallRequest) (*portcullisv1.HeldCall, error) {
	return s.decide(ctx, lifecycle.CallDecision{
		ID: clampID(req.GetId()), Approve: true, Reason: req.GetReason(), ArgumentsDigest: req.GetArgumentsDigest(), Remember: req.GetRemember(),
	})
}

func (s callService) DenyCall(ctx context.Context, req *portcullisv1.DenyCallRequest) (*portcullisv1.HeldCall, error) {
	return s.decide(ctx, lifecycle.CallDecision{ID: clampID(req.GetId()), Reason: req.GetReason()})
}

// decide is d by the caller.
func (s callService) decide(ctx context.Context, d lifecycle.CallDecision) (*portcullisv1.HeldCall, error) {
	p := mustPrincipal(ctx)
	d.Decider, d.Role, d.Sandbox, d.Actor = p.Name, p.Role, p.Sandbox, p.Actor()
	c, err := s.life.DecideCall(ctx, d)
	if err != nil {
		return nil, err
	}
	return heldCallToProto(c), nil
}

// WatchCalls sends the calls ListCalls would, then each call again when
// it changes (filed, decided, its proposal or arguments' retention):
// woken at once by a change through this replica, and every
// watchPollInterval for the others'.
func (s callService) WatchCalls(ctx context.Context, req *portcullisv1.ListCallsRequest, stream portcullisv1connect.CallServiceWatchCallsServerStream) error {
	f, err := callFilter(req)
	if err != nil {
		return err
	}
	tick := time.NewTicker(watchPollInterval)
	defer tick.Stop()
	sent := map[int64]store.HeldCall{}
	for {
		wake := s.callFeed.changed() // before the read: no change is missed
		list, err := transport.OffStack(func() ([]store.HeldCall, error) { return s.store.ListHeldCalls(ctx, f) })
		if err != nil {
			return err
		}
		// What was sent is kept for the calls listed now only: a long
		// watch holds no more than one list.
		shown := make(map[int64]store.HeldCall, len(list))
		for _, c := range list { // as ListCalls orders them: newest first
			shown[c.ID] = c
			if last, ok := sent[c.ID]; ok && last == c {
				continue
			}
			if err := stream.Send(heldCallToProto(c)); err != nil {
				return err
			}
		}
		sent = shown
		select {
		case <-ctx.Done():
			return nil
		case <-s.streams.Done():
			return nil
		case <-wake:
		case <-tick.C:
		}
	}
}

// callFeed wakes the WatchCalls streams when a call is filed or decided
// through this replica (a subscriber to the event stream: it returns at
// once).
type callFeed struct {
	mu   sync.Mutex
	wake chan struct{}
}

func (f *callFeed) changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wake == nil {
		f.wake = make(chan struct{})
	}
	return f.wake
}

func (f *callFeed) handle(e events.Event) {
	switch e.(type) {
	case events.CallHeld, events.CallDecided:
	default:
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wake != nil {
		close(f.wake)
		f.wake = nil
	}
}

// heldCallToProto is a stored call as the API shows it: arguments as an
// object when they are one (arguments_json always, as sent).
func heldCallToProto(c store.HeldCall) *portcullisv1.HeldCall {
	out := &portcullisv1.HeldCall{
		Id: uint64(c.ID), Sandbox: c.Sandbox, Proxy: c.ProxyID, Binary: c.Binary,
		Endpoint: c.Host + ":" + strconv.Itoa(c.Port) + c.Path, Method: c.Method, Path: c.Path, McpMethod: c.MCPMethod, Tool: c.Tool,
		ArgumentsJson: c.ArgumentsJSON, ArgumentsDigest: c.ArgumentsDigest, PolicyVersion: uint32(c.PolicyVersion),
		Entry: c.Entry, Rule: c.Rule, Status: c.Status, RequestedAt: timestamppb.New(c.RequestedAt), Deadline: timestamppb.New(c.Deadline),
		DecidedBy: c.DecidedBy, Reason: c.Reason, TraceId: c.TraceID, ProposalId: uint64(c.ProposalID),
	}
	if !c.DecidedAt.IsZero() {
		out.DecidedAt = timestamppb.New(c.DecidedAt)
	}
	var obj map[string]any
	if c.ArgumentsJSON != "" && json.Unmarshal([]byte(c.ArgumentsJSON), &obj) == nil && obj != nil {
		if st, err := structpb.NewStruct(obj); err == nil {
			out.Arguments = st
		}
	}
	return out
}
