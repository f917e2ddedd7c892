// Package otlp is tracing's provider for both roles: spans exported over
// OTLP/HTTP to a collector, off unless an endpoint is given, flushed at
// shutdown. cmd fills its Config from --otlp-endpoint or
// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME; the gateway's process
// (gateway.Run) builds its own provider from it, the CLI the proxy's; nothing
// here is global.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.Endpoint)
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

// Check refuses, as New would, an endpoint that is not an http(s) URL
// (an empty one is tracing off), before anything is built.
func (cfg Config) Check() error {
	if cfg.Endpoint == "" {
		return nil
	}
	if !HTTPURL(cfg.Endpoint) {
		return fmt.Errorf("otlp endpoint %q: want an http:// or https:// URL", cfg.Endpoint)
	}
	return nil
}

// HTTPURL reports whether raw is an http:// or https:// URL with a host,
// the only kind of collector address OTLP/HTTP (and package ocsf's
// sinks) can post to.
func HTTPURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
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

// Stop is Shutdown as a process ends: within a fresh five seconds (the
// run's context has ended by then), a failure logged, not returned.
func (t *Tracing) Stop(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("could not export the last traces", "err", err)
	}
}
