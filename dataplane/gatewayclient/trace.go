package gatewayclient

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis-dev/portcullis/internal/telemetry"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// traceApply starts the span of receiving sp — verify, apply, keep and
// send the answer — as the child of the gateway's push span when sp
// names it, and returns what ends it with the answer sent.
func (s *Subscriber) traceApply(sp *portcullisv1.SignedPolicy) func(*portcullisv1.StreamPolicyRequest, error) {
	if s.cfg.Tracer == nil {
		return func(*portcullisv1.StreamPolicyRequest, error) {}
	}
	ctx := context.Background()
	if sc, ok := telemetry.ParseTraceparent(sp.GetTraceparent()); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	_, span := s.cfg.Tracer.Tracer(telemetry.Scope).Start(ctx, "policy.apply", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("portcullis.sandbox", sp.GetSandbox()),
		attribute.Int64("portcullis.policy.version", int64(sp.GetVersion())),
		attribute.String("portcullis.policy.hash", sp.GetHash()),
		attribute.String("portcullis.proxy.id", s.cfg.ProxyID),
	))
	return func(answer *portcullisv1.StreamPolicyRequest, err error) {
		switch {
		case answer.GetNack() != nil:
			span.SetAttributes(attribute.String("portcullis.push.answer", "nack"))
			span.SetStatus(codes.Error, answer.GetNack().GetError())
		default:
			span.SetAttributes(attribute.String("portcullis.push.answer", "ack"))
		}
		if err != nil {
			span.SetStatus(codes.Error, "send the answer: "+err.Error())
		}
		span.End()
	}
}
