package distribution

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway/transport"
	"github.com/portcullis-dev/portcullis/internal/events"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// Held calls at the proxy's end: HoldCall files a call a review rule
// holds and keeps the stream open until it is decided. The decision
// reaches the stream at once when it is made on this replica (calls, a
// waiter per call id woken by events.CallDecided after the commit) and,
// made on another replica, by one read every CallPollInterval of which
// of the calls waited on here are decided (pollCalls, on both engines). A stream that ends without a decision or a CallEnded
// leaves the call held: the proxy may open it again and re-attach by its
// key, and the deadline sweep ends it otherwise.

// Held-call stream timing.
const (
	// CallHeartbeatInterval is how often a waiting stream tells the proxy
	// it is alive.
	CallHeartbeatInterval = 10 * time.Second
	// CallPollInterval is how often the replica reads which of the calls
	// its streams wait on were decided, on another replica.
	CallPollInterval = 500 * time.Millisecond
)

// CallConn is one HoldCall stream, Connect's or grpc-go's.
type CallConn interface {
	Receive() (*portcullisv1.HoldCallRequest, error)
	Send(*portcullisv1.HoldCallResponse) error
}

// callWaiters wakes the streams waiting on a call when it is decided
// through this replica.
type callWaiters struct {
	mu      sync.Mutex
	waiting map[int64]map[chan struct{}]struct{}
}

func (w *callWaiters) add(id int64) chan struct{} {
	c := make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiting == nil {
		w.waiting = map[int64]map[chan struct{}]struct{}{}
	}
	if w.waiting[id] == nil {
		w.waiting[id] = map[chan struct{}]struct{}{}
	}
	w.waiting[id][c] = struct{}{}
	return c
}

func (w *callWaiters) remove(id int64, c chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiting[id], c)
	if len(w.waiting[id]) == 0 {
		delete(w.waiting, id)
	}
}

// ids are the calls waited on.
func (w *callWaiters) ids() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]int64, 0, len(w.waiting))
	for id := range w.waiting {
		out = append(out, id)
	}
	return out
}

// wake wakes the streams waiting on call id.
func (w *callWaiters) wake(id int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c := range w.waiting[id] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// pollCalls wakes, every CallPollInterval until ctx ends, the streams of
// the calls decided elsewhere (another replica) since they began to wait:
// one read for all of them.
func (d *Distribution) pollCalls(ctx context.Context) {
	tick := time.NewTicker(CallPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ids := d.calls.ids()
		if len(ids) == 0 {
			continue
		}
		decided, err := d.st.DecidedHeldCalls(ctx, ids)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("could not read which held calls were decided", "err", err)
			}
			continue
		}
		for _, c := range decided {
			d.calls.wake(c.ID)
		}
	}
}

// handle is the waiters' subscription to the event stream: it returns at
// once (a wake never blocks).
func (w *callWaiters) handle(e events.Event) {
	if d, ok := e.(events.CallDecided); ok {
		w.wake(d.Call.ID)
	}
}

// HoldCall serves one held call's stream: the proxy's first message is
// the call (of the caller's own sandbox), which is filed (or re-attached
// to); the stream answers filed, heartbeats while the call waits, then
// its decision. A CallEnded from the proxy ends the call as failed.
func (d *Distribution) HoldCall(ctx context.Context, p Caller, stream CallConn) error {
	first := make(chan received, 1)
	go func() { first <- receive(stream) }()
	var req received
	select {
	case req = <-first:
	case <-time.After(helloTimeout):
		return connect.NewError(connect.CodeDeadlineExceeded, "no call within the first message's timeout")
	case <-ctx.Done():
		return ctx.Err()
	}
	if req.err != nil {
		return req.err
	}
	msg := req.msg.GetCall()
	if msg == nil {
		return invalidField("call", "the first message of a HoldCall stream must be the call")
	}
	c, timeout, err := callFromProto(p.Sandbox, msg)
	if err != nil {
		return err
	}
	// The proxy refuses a call as unreachable when the gateway says
	// nothing for two seconds; filing may wait longer behind a burst of
	// writes, so the gateway says it has the call first.
	if err := stream.Send(d.callHeartbeat()); err != nil {
		return err
	}
	call, err := transport.OffStack(func() (heldCall, error) {
		c, filed, err := d.life.FileCall(ctx, c, timeout)
		return heldCall{c, filed}, err
	})
	if err != nil {
		return err
	}
	wake := d.calls.add(call.ID)
	defer d.calls.remove(call.ID, wake)
	if err := stream.Send(&portcullisv1.HoldCallResponse{Message: &portcullisv1.HoldCallResponse_Filed{Filed: &portcullisv1.CallFiled{
		Id: uint64(call.ID), Deadline: timestamppb.New(call.Deadline),
	}}}); err != nil {
		return err
	}
	return d.waitCall(ctx, p, stream, call.HeldCall, wake)
}

// heldCall is a call FileCall returned.
type heldCall struct {
	store.HeldCall
	filed bool
}

// received is one Receive's result.
type received struct {
	msg *portcullisv1.HoldCallRequest
	err error
}

func receive(stream CallConn) received {
	m, err := stream.Receive()
	return received{m, err}
}

// waitCall waits for call's decision and sends it: woken by a decision
// (this replica's at once, another's by pollCalls), by its deadline
// (which expires it), or by the proxy's CallEnded.
func (d *Distribution) waitCall(ctx context.Context, p Caller, stream CallConn, call store.HeldCall, wake <-chan struct{}) error {
	// The proxy's next message is read apart, so that a stream the
	// proxy closed ends the wait; it ends with the stream.
	next := make(chan received, 1)
	go func() { next <- receive(stream) }()
	heartbeat := time.NewTicker(CallHeartbeatInterval)
	defer heartbeat.Stop()
	deadline := time.NewTimer(time.Until(call.Deadline))
	defer deadline.Stop()
	lastAuth := d.cfg.Now()
	for {
		if call.Status != store.CallHeld {
			return stream.Send(decisionOf(call))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case r := <-next:
			ended := r.msg.GetEnded()
			switch {
			case errors.Is(r.err, io.EOF):
				return nil // the proxy went: the call stays held
			case r.err != nil:
				return r.err
			case ended == nil:
				return invalidField("ended", "after the call, the only message a HoldCall stream takes is ended")
			}
			out, err := transport.OffStack(func() (store.HeldCall, error) { return d.life.EndCall(ctx, p.Sandbox, call.ID, ended.GetReason()) })
			if err != nil {
				return err
			}
			call = out
			continue
		case <-heartbeat.C:
			// A token revoked while its call waits ends the stream, as a
			// policy stream's does; the call stays held.
			if now := d.cfg.Now(); now.Sub(lastAuth) >= reauthInterval {
				if _, err := transport.OffStack(func() (struct{}, error) { return struct{}{}, p.Auth.Reauthenticate(ctx, p.Token) }); err != nil {
					return err
				}
				lastAuth = now
			}
			if err := stream.Send(d.callHeartbeat()); err != nil {
				return err
			}
			continue
		case <-deadline.C:
			if err := d.life.SweepCalls(ctx); err != nil {
				d.log.WarnContext(ctx, "held call sweep at a deadline failed", "call", call.ID, "err", err)
			}
		case <-wake:
		}
		cur, err := d.st.GetHeldCall(ctx, call.ID)
		if err != nil {
			d.log.WarnContext(ctx, "could not read a held call", "call", call.ID, "err", err)
			continue
		}
		call = cur
	}
}

// decisionOf is the decision message that ends call's stream.
func decisionOf(c store.HeldCall) *portcullisv1.HoldCallResponse {
	return &portcullisv1.HoldCallResponse{Message: &portcullisv1.HoldCallResponse_Decision{Decision: &portcullisv1.CallDecision{
		Id: uint64(c.ID), Status: c.Status, Reason: c.Reason, DecidedBy: c.DecidedBy,
		ArgumentsDigest: c.ArgumentsDigest, PolicyVersion: uint32(c.PolicyVersion),
	}}}
}

// callFromProto checks what only the wire can get wrong (whose sandbox,
// the proxy id's spelling, a timeout given) and returns the call for
// lifecycle.FileCall, which checks the rest, and its timeout.
func callFromProto(sandbox string, m *portcullisv1.CallToHold) (store.HeldCall, time.Duration, error) {
	if m.GetSandbox() != sandbox {
		return store.HeldCall{}, 0, connect.NewError(connect.CodePermissionDenied, "call.sandbox: a sandbox token may only hold its own sandbox's calls")
	}
	if err := checkID("call.proxy_id", m.GetProxyId()); err != nil {
		return store.HeldCall{}, 0, err
	}
	t := m.GetTimeout()
	if t == nil {
		return store.HeldCall{}, 0, invalidField("call.timeout", "is missing: the rule's review timeout")
	}
	if err := t.CheckValid(); err != nil {
		return store.HeldCall{}, 0, invalidField("call.timeout", "%v", err)
	}
	return store.HeldCall{
		Sandbox: m.GetSandbox(), ProxyID: m.GetProxyId(), Instance: m.GetInstance(), Key: m.GetKey(), Binary: m.GetBinary(),
		Host: m.GetHost(), Port: int(m.GetPort()), Method: m.GetMethod(), Path: m.GetPath(), MCPMethod: m.GetMcpMethod(), Tool: m.GetTool(),
		ArgumentsJSON: m.GetArgumentsJson(), ArgumentsDigest: m.GetArgumentsDigest(), PolicyVersion: int64(m.GetPolicyVersion()),
		Entry: m.GetEntry(), Rule: m.GetRule(), TraceID: m.GetTraceId(),
	}, t.AsDuration(), nil
}

func (d *Distribution) callHeartbeat() *portcullisv1.HoldCallResponse {
	return &portcullisv1.HoldCallResponse{Message: &portcullisv1.HoldCallResponse_Heartbeat{Heartbeat: &portcullisv1.CallHeartbeat{
		SentAt: timestamppb.New(d.cfg.Now()),
	}}}
}
