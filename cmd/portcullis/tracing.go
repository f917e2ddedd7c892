package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/telemetry/otlp"
)

// The standard OpenTelemetry variables tracing reads when its flag is not
// given.
const (
	envOTLPEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envServiceName  = "OTEL_SERVICE_NAME"
)

// tracingFlags are the tracing flags of portcullis gateway and proxy.
type tracingFlags struct {
	endpoint string
}

func (f *tracingFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.endpoint, "otlp-endpoint", "",
		"export OpenTelemetry traces over OTLP/HTTP to this collector `URL` (spans go to URL/v1/traces; env "+envOTLPEndpoint+"; service name from env "+envServiceName+"); default off")
}

// start builds the tracer provider (nil: tracing is off) named service
// unless OTEL_SERVICE_NAME names it.
func (f *tracingFlags) start(env *environment, service, build string) (*otlp.Tracing, error) {
	endpoint := f.endpoint
	if endpoint == "" {
		endpoint = env.getenv(envOTLPEndpoint)
	}
	if name := env.getenv(envServiceName); name != "" {
		service = name
	}
	t, err := otlp.New(otlp.Config{Endpoint: endpoint, ServiceName: service, ServiceVersion: build})
	if err != nil {
		return nil, usagef("--otlp-endpoint: %v", err)
	}
	return t, nil
}

// stopTracing exports the spans still queued, within a fresh timeout (the
// command's context has ended by now).
func stopTracing(t *otlp.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("could not export the last traces", "err", err)
	}
}
