package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"time"

	"connectrpc.com/connect/v2"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

// The grpc-go server of DistributionService, for the connections the
// router gives it (router.go). It runs the same handlers as Connect
// (streamPolicy, shipDecisions) behind the same authorization table,
// error mapping and metrics; only the transport differs.

// grpcRoute says which connections go to the grpc-go server: gRPC (not
// gRPC-Web, not Connect) calls to DistributionService as the first
// request. Later requests on such a connection may only be to
// DistributionService too; anything else is Unimplemented there.
func grpcRoute(path, contentType string) bool {
	return (path == portcullisv1connect.DistributionServiceStreamPolicyProcedure ||
		path == portcullisv1connect.DistributionServiceShipDecisionsProcedure) && isGRPC(contentType)
}

func (s *Server) newGRPCServer() *grpc.Server {
	srv := grpc.NewServer(
		grpc.StreamInterceptor(s.interceptGRPC),
		grpc.MaxRecvMsgSize(maxDocumentBytes+64<<10),
		// As net/http's HTTP/2 server does by default.
		grpc.MaxConcurrentStreams(250),
		// A silent connection is probed (as net/http's SendPingTimeout
		// and PingTimeout do); proxies ping every 30s
		// (dataplane/gatewayclient.Subscriber) and must not be told they ping too often.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 15 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(10*time.Second),
	)
	portcullisv1.RegisterDistributionServiceServer(srv, grpcDistribution{d: distributionService{s}})
	return srv
}

// grpcInterrupter ends a grpc-go policy stream's pending Recv (see
// interruptibleStreams). grpc-go's Recv returns early only when the
// stream's context ends, and then answers the client Canceled at once;
// so the stream's final status (from the handler's result) is written
// first, which ends the stream and its context, and with it the Recv.
// The handler's own return then writes nothing more. ws is grpc-go's
// server stream, which has WriteStatus.
type grpcInterrupter struct {
	ws interface{ WriteStatus(*status.Status) error }
}

func (g grpcInterrupter) interrupt(result error) {
	// Mapped as the interceptor maps it (which logs it, once).
	st, _ := status.FromError(grpcError(toConnectError(context.Background(), discardLog, portcullisv1connect.DistributionServiceStreamPolicyProcedure, result)))
	g.ws.WriteStatus(st)
}

var discardLog = slog.New(slog.DiscardHandler)

// interceptGRPC does for the grpc-go server what the Connect interceptors
// do (metrics, mapErrors, recoverPanics, authorize), in that order.
func (s *Server) interceptGRPC(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	start := time.Now()
	err := toConnectError(ctx, s.log, info.FullMethod, s.authorizeGRPC(srv, ss, info, handler))
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	procedure := info.FullMethod
	if _, known := authzTable[procedure]; !known {
		procedure = "unknown"
	}
	s.metrics.rpcs.WithLabelValues(procedure, code).Inc()
	s.metrics.latency.WithLabelValues(procedure).Observe(time.Since(start).Seconds())
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.DebugContext(ctx, "rpc", "procedure", info.FullMethod, "code", code, "duration", time.Since(start), "server", "grpc")
	}
	return grpcError(err)
}

// authorizeGRPC is authorize for grpc-go: the bearer token from the
// metadata, the same table, the same checks of every request message.
func (s *Server) authorizeGRPC(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in %s: %v\n%s", info.FullMethod, r, debug.Stack())
		}
	}()
	r, ok := authzTable[info.FullMethod]
	if !ok {
		return connect.NewError(connect.CodePermissionDenied, "procedure not in the authorization table")
	}
	ctx := ss.Context()
	checked := &grpcCheckedStream{ServerStream: ss, ctx: ctx}
	if !r.public {
		var authz string
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get("authorization"); len(v) > 0 {
				authz = v[0]
			}
		}
		// A stream's goroutine lives as long as the stream: keep the
		// store's deep calls off its stack (see offStack).
		p, err := offStack(func() (Principal, error) { return s.auth.authenticate(ctx, authz) })
		if err != nil {
			return err
		}
		if !r.allows(p.Role) {
			return connect.NewError(connect.CodePermissionDenied,
				fmt.Sprintf("role %s may not call %s", p.Role, info.FullMethod))
		}
		checked.ctx = context.WithValue(ctx, principalKey{}, p)
		if info.FullMethod == portcullisv1connect.DistributionServiceStreamPolicyProcedure {
			ws, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ WriteStatus(*status.Status) error })
			if !ok {
				// A grpc-go that no longer has it: a stream could not end
				// its own Recv (TestSilentProxyStreamEnds fails).
				return connect.NewError(connect.CodeUnimplemented, "policy streams are not served by this build")
			}
			checked.ctx = context.WithValue(checked.ctx, interruptKey{}, grpcInterrupter{ws: ws})
		}
		if r.scoped && p.Role == store.RoleSandbox {
			checked.ownSandbox = p.Sandbox
		}
	}
	return handler(srv, checked)
}

// grpcCheckedStream is checkedStream for grpc-go.
type grpcCheckedStream struct {
	grpc.ServerStream
	ctx        context.Context
	ownSandbox string
}

func (s *grpcCheckedStream) Context() context.Context { return s.ctx }

func (s *grpcCheckedStream) RecvMsg(msg any) error {
	if err := s.ServerStream.RecvMsg(msg); err != nil {
		return fromGRPC(err)
	}
	if s.ownSandbox != "" {
		m, ok := msg.(interface{ GetSandbox() string })
		if !ok || m.GetSandbox() != s.ownSandbox {
			return connect.NewError(connect.CodePermissionDenied, "a sandbox token may only read its own sandbox")
		}
	}
	return validateNames(msg)
}

func (s *grpcCheckedStream) SendMsg(msg any) error { return fromGRPC(s.ServerStream.SendMsg(msg)) }

// fromGRPC turns grpc-go's status errors into Connect errors, so the
// handlers and toConnectError see what they see on Connect; io.EOF (the
// end of the client's messages) stays as it is.
func fromGRPC(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	if st, ok := status.FromError(err); ok {
		return connect.NewError(connect.Code(st.Code()), st.Message())
	}
	return err
}

// grpcError is the status grpc-go sends for a Connect error (the codes
// share their numbering), details included.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return status.Error(codes.Internal, "internal error")
	}
	st := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type, Value: d.Value})
	}
	return status.ErrorProto(st)
}

// grpcDistribution serves DistributionService on grpc-go with the
// handlers Connect uses.
type grpcDistribution struct {
	portcullisv1.UnimplementedDistributionServiceServer
	d distributionService
}

func (g grpcDistribution) StreamPolicy(st grpc.BidiStreamingServer[portcullisv1.StreamPolicyRequest, portcullisv1.StreamPolicyResponse]) error {
	return g.d.streamPolicy(st.Context(), grpcPolicyConn{st})
}

func (g grpcDistribution) ShipDecisions(st grpc.ClientStreamingServer[portcullisv1.ShipDecisionsRequest, portcullisv1.ShipDecisionsResponse]) error {
	res, err := g.d.shipDecisions(st.Context(), st.Recv)
	if err != nil {
		return err
	}
	return st.SendAndClose(res)
}

// grpcPolicyConn is a grpc-go policy stream as a policyConn.
type grpcPolicyConn struct {
	st grpc.BidiStreamingServer[portcullisv1.StreamPolicyRequest, portcullisv1.StreamPolicyResponse]
}

func (c grpcPolicyConn) Receive() (*portcullisv1.StreamPolicyRequest, error) { return c.st.Recv() }

func (c grpcPolicyConn) Send(m *portcullisv1.StreamPolicyResponse) error { return c.st.Send(m) }
