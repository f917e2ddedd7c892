// Package telemetry is what both roles share of tracing: the W3C trace
// context as Portcullis carries it (traceparent headers, the pushed
// version's traceparent field, a committed version's provenance) and the
// instrumentation scope of its spans. The provider lives in
// internal/telemetry/otlp, the RPC spans in gateway/transport.
//
// Nothing here is global: a tracer provider is passed to whoever makes
// spans, and a nil provider means no tracing at all (callers skip their
// spans, so an untraced proxy pays nothing per request).
package telemetry

// Scope is the instrumentation scope of Portcullis's own spans.
const Scope = "github.com/portcullis-dev/portcullis"
