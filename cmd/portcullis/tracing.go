package main

import (
	"log/slog"

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

// config is the tracing the flag and the standard variables ask for (no
// endpoint: off), named service unless OTEL_SERVICE_NAME names it. An
// endpoint that is not an http(s) URL is a usage error, before anything
// starts.
func (f *tracingFlags) config(env *environment, service, build string) (otlp.Config, error) {
	endpoint := f.endpoint
	if endpoint == "" {
		endpoint = env.getenv(envOTLPEndpoint)
	}
	if name := env.getenv(envServiceName); name != "" {
		service = name
	}
	cfg := otlp.Config{Endpoint: endpoint, ServiceName: service, ServiceVersion: build}
	if err := cfg.Check(); err != nil {
		return cfg, usagef("--otlp-endpoint: %v", err)
	}
	return cfg, nil
}

// start builds the tracer provider config describes (nil: tracing is off).
func (f *tracingFlags) start(env *environment, service, build string) (*otlp.Tracing, error) {
	cfg, err := f.config(env, service, build)
	if err != nil {
		return nil, err
	}
	t, err := otlp.New(cfg)
	if err != nil {
		return nil, usagef("--otlp-endpoint: %v", err)
	}
	return t, nil
}

// stopTracing exports the spans still queued (otlp.Tracing.Stop).
func stopTracing(t *otlp.Tracing, log *slog.Logger) { t.Stop(log) }
