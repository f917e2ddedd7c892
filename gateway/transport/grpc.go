package transport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"connectrpc.com/connect/v2"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// The grpc-go server, for the connections the router gives it (router.go).
// It runs the same handlers as Connect behind the same authorization,
// error mapping and metrics; only the transport differs.

// NewGRPCServer returns the grpc-go server: every call goes through
// c.GRPC(authorize), and messages up to maxRecvBytes are read; extra
// options (tracing's stats handler) are added. The caller registers its
// services on it.
func NewGRPCServer(c Calls, authorize grpc.StreamServerInterceptor, maxRecvBytes int, extra ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append([]grpc.ServerOption{
		grpc.StreamInterceptor(c.GRPC(authorize)),
		grpc.MaxRecvMsgSize(maxRecvBytes),
		// As net/http's HTTP/2 server does by default.
		grpc.MaxConcurrentStreams(250),
		// A silent connection is probed (as net/http's SendPingTimeout
		// and PingTimeout do); proxies ping every 30s
		// (dataplane/gatewayclient.Subscriber) and must not be
		// told they ping too often.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 15 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(10 * time.Second),
	}, extra...)...)
}

// GRPC returns the grpc-go interceptor that does what the Connect
// interceptors do (metrics, error mapping, then authorize, which runs the
// handler), in that order. authorize recovers panics itself (defer
// Recover), so that no frame is added below the handler.
func (c Calls) GRPC(authorize grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx := ss.Context()
		start := time.Now()
		err := c.MapError(ctx, info.FullMethod, authorize(srv, ss, info, handler))
		code := codeName(err)
		c.Metrics.observe(info.FullMethod, code, time.Since(start))
		if c.Log.Enabled(ctx, slog.LevelDebug) {
			c.Log.DebugContext(ctx, "rpc", "procedure", info.FullMethod, "code", code, "duration", time.Since(start), "server", "grpc")
		}
		return GRPCError(err)
	}
}

// GRPCInterrupter returns the interrupter of the grpc-go stream of ctx
// (see InterruptibleMux), or false when this grpc-go cannot end a
// stream's pending Recv. grpc-go's Recv returns early only when the
// stream's context ends, and then answers the client Canceled at once; so
// the stream's final status (from the handler's result, mapped by
// mapError as the interceptor maps it) is written first, which ends the
// stream and its context, and with it the Recv. The handler's own return
// then writes nothing more.
func GRPCInterrupter(ctx context.Context, mapError func(error) error) (Interrupter, bool) {
	ws, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ WriteStatus(*status.Status) error })
	if !ok {
		return nil, false
	}
	return grpcInterrupter{ws: ws, mapError: mapError}, true
}

// grpcInterrupter: ws is grpc-go's server stream, which has WriteStatus.
type grpcInterrupter struct {
	ws       interface{ WriteStatus(*status.Status) error }
	mapError func(error) error
}

func (g grpcInterrupter) Interrupt(result error) {
	st, _ := status.FromError(GRPCError(g.mapError(result)))
	g.ws.WriteStatus(st)
}

// FromGRPC turns grpc-go's status errors into Connect errors, so the
// handlers and the error mapping see what they see on Connect; io.EOF (the
// end of the client's messages) stays as it is.
func FromGRPC(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	if st, ok := status.FromError(err); ok {
		return connect.NewError(connect.Code(st.Code()), st.Message())
	}
	return err
}

// GRPCError is the status grpc-go sends for a Connect error (the codes
// share their numbering), details included.
func GRPCError(err error) error {
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
