package gatewayclient

import (
	"context"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/portcullis-dev/portcullis/dataplane/hold"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Held calls: each call a review rule holds at the proxy is filed on a
// HoldCall stream of its own (DistributionService, on the connections of
// the policy stream's replica first, then the others), with the proxy's
// id and this run's instance (Subscriber.Instance), and re-attached by its
// key when the stream is opened again after a break.

// HoldFiler returns the filer of the proxy's held calls
// (hold.Registry.SetFiler).
func (s *Subscriber) HoldFiler() hold.Filer { return holdFiler{s} }

// Instance names this run of the proxy: random, sent in the policy
// stream's hello and with every held call.
func (s *Subscriber) Instance() string { return s.instance }

type holdFiler struct{ s *Subscriber }

func (f holdFiler) Open(ctx context.Context, c *hold.Call) (hold.Stream, error) {
	st, err := f.s.distribution().HoldCall(ctx)
	if err != nil {
		return nil, holdError(err)
	}
	msg := &portcullisv1.CallToHold{
		Sandbox: f.s.cfg.Sandbox, ProxyId: f.s.cfg.ProxyID, Instance: f.s.instance, Key: c.Key,
		Binary: c.Binary, Host: c.Host, Port: uint32(c.Port), Method: c.Method, Path: c.Path,
		McpMethod: c.MCPMethod, Tool: c.Tool, ArgumentsJson: c.ArgumentsJSON, ArgumentsDigest: c.ArgumentsDigest,
		PolicyVersion: c.PolicyVersion, Entry: c.Entry, Rule: c.Rule, TraceId: c.TraceID, Timeout: durationpb.New(c.Timeout),
	}
	if err := st.Send(&portcullisv1.HoldCallRequest{Message: &portcullisv1.HoldCallRequest_Call{Call: msg}}); err != nil {
		_, rerr := st.Recv() // the stream's own error says why
		return nil, holdError(rerr)
	}
	return holdStream{st}, nil
}

type holdStream struct {
	st portcullisv1.DistributionService_HoldCallClient
}

func (h holdStream) Recv() (hold.Message, error) {
	m, err := h.st.Recv()
	if err != nil {
		return hold.Message{}, holdError(err)
	}
	switch m := m.GetMessage().(type) {
	case *portcullisv1.HoldCallResponse_Filed:
		return hold.Message{Filed: &hold.Filed{ID: m.Filed.GetId(), Deadline: m.Filed.GetDeadline().AsTime()}}, nil
	case *portcullisv1.HoldCallResponse_Decision:
		d := m.Decision
		return hold.Message{Decision: &hold.Decision{
			ID: d.GetId(), Status: d.GetStatus(), Reason: d.GetReason(), DecidedBy: d.GetDecidedBy(),
			ArgumentsDigest: d.GetArgumentsDigest(), PolicyVersion: d.GetPolicyVersion(),
		}}, nil
	}
	return hold.Message{}, nil // a heartbeat
}

func (h holdStream) End(reason string) error {
	if err := h.st.Send(&portcullisv1.HoldCallRequest{Message: &portcullisv1.HoldCallRequest_Ended{Ended: &portcullisv1.CallEnded{Reason: reason}}}); err != nil {
		return err
	}
	return h.st.CloseSend()
}

// holdError is a held call stream's error: ResourceExhausted wraps
// hold.ErrBusy; what trying again would not change (the call's fields,
// the token's rights, a gateway that does not serve HoldCall) wraps
// hold.ErrRefused; anything else is a broken stream, opened again.
func holdError(err error) error {
	if err == nil || err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	switch status.Code(err) {
	case codes.ResourceExhausted:
		return fmt.Errorf("%w: %s", hold.ErrBusy, status.Convert(err).Message())
	case codes.InvalidArgument, codes.FailedPrecondition, codes.PermissionDenied, codes.NotFound, codes.Unimplemented:
		return fmt.Errorf("%w (%s): %s", hold.ErrRefused, status.Code(err), status.Convert(err).Message())
	}
	return err
}
