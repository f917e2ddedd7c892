package transport

import (
	"context"
	"strings"

	"connectrpc.com/connect/v2"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/portcullis-dev/portcullis/internal/telemetry"
)

// TraceRPCs returns the outermost Connect server interceptor: a
// server span per RPC, named by its procedure ("portcullis.v1.PolicyService/SetPolicy"),
// continuing the caller's traceparent header when it sends one, ended
// with the RPC's code. The handler's context carries the span, so what
// the handler does (a commit, an approval) is its child.
func TraceRPCs(tp trace.TracerProvider) connect.ServerInterceptor {
	tracer := tp.Tracer(telemetry.Scope)
	return func(next connect.ServerFunc) connect.ServerFunc {
		return func(ctx context.Context, spec connect.Spec, stream connect.ServerStream) error {
			protocol := ""
			if info, ok := connect.CallInfoForServerContext(ctx); ok {
				protocol = info.Protocol
				if sc, ok := telemetry.ParseTraceparent(info.RequestHeader().Get(telemetry.TraceparentHeader)); ok {
					ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
				}
			}
			name := strings.TrimPrefix(spec.Procedure, "/")
			service, method, _ := strings.Cut(name, "/")
			ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
				attribute.String("rpc.system", "connect_rpc"),
				attribute.String("rpc.service", service),
				attribute.String("rpc.method", method),
				attribute.String("rpc.connect_rpc.protocol", protocol),
			))
			defer span.End()
			err := next(ctx, spec, stream)
			code := "ok"
			if err != nil {
				code = connect.CodeOf(err).String()
				span.SetStatus(codes.Error, code)
			}
			span.SetAttributes(attribute.String("rpc.connect_rpc.error_code", code))
			return err
		}
	}
}

// TraceGRPC is the grpc-go server's span per RPC (otelgrpc's
// stats handler), continuing the caller's W3C trace context. Message
// events stay off (otelgrpc's default): a policy stream lives for hours
// and its heartbeats would fill its span.
func TraceGRPC(tp trace.TracerProvider) grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(propagation.TraceContext{}),
	))
}
