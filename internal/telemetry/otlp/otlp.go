// Package otlp is tracing's provider for both roles: spans exported over
// OTLP/HTTP to a collector, off unless an endpoint is given, flushed at
// shutdown. cmd builds it from --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT
// and OTEL_SERVICE_NAME and hands its Provider to the gateway and the
// proxy; nothing here is global.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Config configures tracing. Zero values take the documented defaults.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's base URL
	// ("http://collector:4318"), as OTEL_EXPORTER_OTLP_ENDPOINT gives it:
	// spans are posted to its path + "/v1/traces". Empty: tracing is off.
	Endpoint string
	// ServiceName names this process in every span (service.name), as
	// OTEL_SERVICE_NAME does. Default "portcullis".
	ServiceName string
	// ServiceVersion is the build (service.version); empty leaves it out.
	ServiceVersion string
	// BatchTimeout is the longest a finished span waits before it is
	// exported. Default 5s (the SDK's).
	BatchTimeout time.Duration
}

// Tracing is a running tracer provider. A nil *Tracing is tracing off:
// its Provider is nil and its Shutdown does nothing.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// New returns the tracer provider cfg describes, or nil (and no error)
// when cfg.Endpoint is empty. Nothing is dialled until spans are
// exported; an endpoint that is not an http(s) URL is an error.
func New(cfg Config) (*Tracing, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("otlp endpoint %q: want an http:// or https:// URL", cfg.Endpoint)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	var batch []sdktrace.BatchSpanProcessorOption
	if cfg.BatchTimeout > 0 {
		batch = append(batch, sdktrace.WithBatchTimeout(cfg.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, batch...),
		sdktrace.WithResource(Resource(cfg.ServiceName, cfg.ServiceVersion)),
		// A caller's sampling decision (its traceparent's flag) stands;
		// our own roots are all kept.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	)
	return &Tracing{tp: tp}, nil
}

// Resource names this process in what it exports over OTLP, spans and
// OCSF log records (package ocsf) alike: service.name (default
// "portcullis") and service.version (left out when empty).
func Resource(serviceName, serviceVersion string) *resource.Resource {
	if serviceName == "" {
		serviceName = "portcullis"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", serviceName)}
	if serviceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", serviceVersion))
	}
	return resource.NewSchemaless(attrs...)
}

// Provider is the tracer provider, nil when tracing is off.
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// ForceFlush exports every finished span now.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown exports the spans still queued and stops the provider; ctx
// bounds the wait (give it a fresh timeout, never the cancelled run
// context).
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("flush traces: %w", err)
	}
	return nil
}
