package gateway

import (
	"context"
	"log/slog"

	"connectrpc.com/connect/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/portcullis-dev/portcullis/gateway/transport"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

// Authorization on the grpc-go server that serves DistributionService
// for the connections the router gives it (transport): the same table,
// the same checks, behind the same error mapping and metrics.

func (s *Server) newGRPCServer() *grpc.Server {
	var opts []grpc.ServerOption
	if s.cfg.TracerProvider != nil {
		opts = append(opts, transport.TraceGRPC(s.cfg.TracerProvider))
	}
	srv := transport.NewGRPCServer(s.calls, s.authorizeGRPC, maxDocumentBytes+64<<10, opts...)
	portcullisv1.RegisterDistributionServiceServer(srv, grpcDistribution{s: s})
	return srv
}

var discardLog = slog.New(slog.DiscardHandler)

// authorizeGRPC is authorize for grpc-go: the bearer token from the
// metadata, the same table, the same checks of every request message. A
// panic becomes an error, as transport.RecoverPanics makes it on Connect.
func (s *Server) authorizeGRPC(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer transport.Recover(info.FullMethod, &err)
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
		// store's deep calls off its stack (see transport.OffStack).
		p, err := transport.OffStack(func() (Principal, error) { return s.auth.authenticate(ctx, authz) })
		if err != nil {
			return err
		}
		if !r.allows(p.Role) {
			return r.denied(p.Role)
		}
		checked.ctx = context.WithValue(ctx, principalKey{}, p)
		if info.FullMethod == portcullisv1connect.DistributionServiceStreamPolicyProcedure {
			// Mapped as the interceptor maps it (which logs it, once).
			i, ok := transport.GRPCInterrupter(ctx, func(err error) error {
				return toConnectError(context.Background(), discardLog, portcullisv1connect.DistributionServiceStreamPolicyProcedure, err)
			})
			if !ok {
				// A grpc-go that no longer has it: a stream could not end
				// its own Recv (TestSilentProxyStreamEnds fails).
				return connect.NewError(connect.CodeUnimplemented, "policy streams are not served by this build")
			}
			checked.ctx = transport.WithInterrupter(checked.ctx, i)
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
		return transport.FromGRPC(err)
	}
	return checkRequest(msg, s.ownSandbox)
}

func (s *grpcCheckedStream) SendMsg(msg any) error {
	return transport.FromGRPC(s.ServerStream.SendMsg(msg))
}
