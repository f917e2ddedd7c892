package dataplane

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/internal/telemetry"
)

// Tracing of requests through the proxy (Config.Tracer). Each HTTP
// request judged (plain, or inside an intercepted CONNECT) is a server
// span (proxy.request), and so is each CONNECT (proxy.connect: its
// decision and, for an L4 tunnel, the tunnel's life), the child of the client's W3C traceparent when it sends one; the
// upstream call is a client span whose traceparent replaces the client's
// on the forwarded request, so the upstream sees the same trace. The
// decision record and the denial body carry the trace id.
//
// Without a tracer each hook returns at its first line: no allocation,
// no context wrapping, nothing read from the request.

// traceRequest starts r's span; the returned request carries it, and the
// function ends it.
func (p *Proxy) traceRequest(r *http.Request, scheme string, t dest) (*http.Request, func()) {
	return p.traceSpan(r, "proxy.request", scheme, t)
}

// traceConnect starts the span of a CONNECT request: its decision and,
// for an L4 tunnel, the tunnel's life. An intercepted CONNECT ends it
// before its inner requests, which have spans of their own.
func (p *Proxy) traceConnect(r *http.Request, t dest) (*http.Request, func()) {
	return p.traceSpan(r, "proxy.connect", "tcp", t)
}

func (p *Proxy) traceSpan(r *http.Request, name, scheme string, t dest) (*http.Request, func()) {
	if p.tracer == nil {
		return r, endNothing
	}
	ctx := r.Context()
	if sc, ok := telemetry.ParseTraceparent(r.Header.Get(telemetry.TraceparentHeader)); ok {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, span := p.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("http.request.method", r.Method),
		attribute.String("url.scheme", scheme),
		attribute.String("server.address", t.host),
		attribute.Int("server.port", t.port),
		attribute.String("portcullis.sandbox", p.cfg.Sandbox),
	))
	return r.WithContext(ctx), func() { span.End() }
}

func endNothing() {}

// traceDecision writes the trace id of r's span into rec and the decision
// onto the span.
func (p *Proxy) traceDecision(r *http.Request, rec *decision.Record) {
	if p.tracer == nil {
		return
	}
	span := trace.SpanFromContext(r.Context())
	sc := span.SpanContext()
	if !sc.IsValid() {
		return
	}
	rec.TraceID = sc.TraceID().String()
	attrs := []attribute.KeyValue{
		attribute.String("portcullis.decision", rec.Decision),
		attribute.String("portcullis.policy.version", rec.PolicyVersion),
		attribute.String("portcullis.rule", rec.Rule),
	}
	if rec.Tool != "" {
		attrs = append(attrs, attribute.String("portcullis.mcp.method", rec.MCPMethod), attribute.String("portcullis.mcp.tool", rec.Tool))
	}
	if rec.DenialID != "" {
		attrs = append(attrs, attribute.String("portcullis.denial_id", rec.DenialID))
		span.SetStatus(codes.Error, "denied: "+rec.Reason)
	}
	span.SetAttributes(attrs...)
}

// recordFor records an allowed request's decision, with its trace id.
func (p *Proxy) recordFor(r *http.Request, rec decision.Record) {
	p.traceDecision(r, &rec)
	p.emit(rec)
}

// traceUpstream starts the span of the upstream call of the request in
// ctx and names it in out's traceparent; the function ends it with the
// upstream's status (or the error).
func (p *Proxy) traceUpstream(ctx context.Context, out *http.Request, host string) (context.Context, func(*http.Response, error)) {
	if p.tracer == nil {
		return ctx, endUpstreamNothing
	}
	ctx, span := p.tracer.Start(ctx, "proxy.upstream", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("http.request.method", out.Method),
		attribute.String("server.address", host),
	))
	out.Header.Set(telemetry.TraceparentHeader, telemetry.Traceparent(span.SpanContext()))
	return ctx, func(res *http.Response, err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		} else {
			span.SetAttributes(attribute.Int("http.response.status_code", res.StatusCode))
		}
		span.End()
	}
}

func endUpstreamNothing(*http.Response, error) {}
