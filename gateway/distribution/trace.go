package distribution

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis-dev/portcullis/internal/telemetry"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Push spans: each delivery of a version to a proxy is a span, a child of
// the span that committed the version (its provenance's traceparent,
// wherever and on whichever replica it was committed), from the send to
// the proxy's ACK or NACK. The pushed message carries the span's
// traceparent, so the proxy's span for applying and answering the version
// is its child: one trace from an approval to every proxy's ACK.

// delivery is one version sent on a stream and not yet answered.
type delivery struct {
	sv   *signedVersion
	span trace.Span // nil when the gateway does not trace
}

// startPush starts the span of delivering sv to this stream's proxy as
// msg, and names it in msg.
func (ps *policyStream) startPush(sv *signedVersion, msg *portcullisv1.SignedPolicy) delivery {
	if ps.tracer == nil {
		return delivery{sv: sv}
	}
	ctx := context.Background()
	if sv.committed.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sv.committed)
	}
	_, span := ps.tracer.Start(ctx, "policy.push", trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("portcullis.sandbox", msg.GetSandbox()),
		attribute.Int64("portcullis.policy.version", int64(msg.GetVersion())),
		attribute.String("portcullis.policy.hash", msg.GetHash()),
		attribute.String("portcullis.proxy.id", ps.proxyID),
	))
	msg.Traceparent = telemetry.Traceparent(span.SpanContext())
	return delivery{sv: sv, span: span}
}

// answered ends the delivery's span: with the proxy's answer ("ack",
// "nack" with its error), or with why there was none (answer "").
func (dv delivery) answered(answer, detail string) {
	if dv.span == nil {
		return
	}
	if answer != "" {
		dv.span.SetAttributes(attribute.String("portcullis.push.answer", answer))
	}
	if answer != "ack" {
		dv.span.SetStatus(codes.Error, detail)
	}
	dv.span.End()
}
