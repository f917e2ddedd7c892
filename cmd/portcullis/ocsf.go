package main

import (
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/telemetry/otlp"
)

// ocsfFlags are the OCSF sinks' flags, the same on gateway and proxy.
type ocsfFlags struct {
	file         string
	maxSize      int64
	keep         int
	hecURL       string
	hecTokenFile string
	otlpEndpoint string
	queue        int
	// service and build name the OTLP sink's resource (service.name,
	// service.version); the command sets them before open.
	service, build string
}

func (f *ocsfFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.file, "ocsf-file", "", "write OCSF "+ocsf.Version+" events as JSON lines to this `PATH` (docs/ocsf.md)")
	cmd.Flags().Int64Var(&f.maxSize, "ocsf-max-size", ocsf.DefaultFileMaxSize, "rotate --ocsf-file when it would pass this many bytes")
	cmd.Flags().IntVar(&f.keep, "ocsf-keep", ocsf.DefaultFileKeep, "rotated --ocsf-file files to keep (PATH.1 newest)")
	cmd.Flags().StringVar(&f.hecURL, "ocsf-hec-url", "", "send OCSF events to this Splunk HTTP Event Collector `URL` (…/services/collector/event)")
	cmd.Flags().StringVar(&f.hecTokenFile, "ocsf-hec-token-file", "", "`FILE` holding the HEC token (sent as Authorization: Splunk TOKEN)")
	cmd.Flags().StringVar(&f.otlpEndpoint, "ocsf-otlp-endpoint", "", "send OCSF events as OpenTelemetry log records over OTLP/HTTP to this collector `URL` (records go to URL/v1/logs)")
	cmd.Flags().IntVar(&f.queue, "ocsf-queue", 4096, "OCSF events each sink may hold while it is slow or down; more are dropped and counted")
}

// name sets the OTLP sink's service name, service unless
// OTEL_SERVICE_NAME names it (as tracing does), and the build.
func (f *ocsfFlags) name(env *environment, service string) {
	f.service, f.build = service, buildVersion()
	if n := env.getenv(envServiceName); n != "" {
		f.service = n
	}
}

// open returns an emitter for each sink the flags name (none: nil).
func (f *ocsfFlags) open(product ocsf.Product, log *slog.Logger) (ocsf.Emitters, error) {
	s, err := f.sinks(product, log)
	if err != nil {
		return nil, err
	}
	return ocsf.Open(s)
}

// sinks maps the flags to the sinks ocsf.Open opens, refusing values
// that cannot work before anything is opened or sent; it reads the HEC
// token from its file.
func (f *ocsfFlags) sinks(product ocsf.Product, log *slog.Logger) (ocsf.Sinks, error) {
	var none ocsf.Sinks
	if f.keep < 0 {
		return none, usagef("--ocsf-keep %d: want 0 or more", f.keep)
	}
	if f.queue <= 0 {
		return none, usagef("--ocsf-queue %d: want at least 1", f.queue)
	}
	if (f.hecURL == "") != (f.hecTokenFile == "") {
		return none, usagef("--ocsf-hec-url and --ocsf-hec-token-file go together")
	}
	s := ocsf.Sinks{
		OTLP:        ocsf.OTLPConfig{Endpoint: f.otlpEndpoint, ServiceName: f.service, ServiceVersion: f.build},
		HECURL:      f.hecURL,
		File:        f.file,
		FileMaxSize: f.maxSize,
		FileKeep:    f.keep,
		Emitter:     ocsf.Config{Queue: f.queue, Product: product, Logger: log.With("component", "ocsf")},
	}
	if f.otlpEndpoint != "" {
		if err := s.OTLP.Check(); err != nil {
			return none, usagef("--ocsf-otlp-endpoint: %v", err)
		}
	}
	if f.hecURL != "" {
		if !otlp.HTTPURL(f.hecURL) {
			return none, usagef("--ocsf-hec-url %q: want an http(s) URL", f.hecURL)
		}
		tok, err := os.ReadFile(f.hecTokenFile)
		if err != nil {
			return none, inputErr(err)
		}
		if strings.TrimSpace(string(tok)) == "" {
			return none, usagef("--ocsf-hec-token-file %s is empty", f.hecTokenFile)
		}
		s.HECToken = string(tok)
	}
	return s, nil
}

// describe names the sinks for the start-up banner.
func (f *ocsfFlags) describe() string {
	return ocsf.Sinks{File: f.file, HECURL: f.hecURL, OTLP: ocsf.OTLPConfig{Endpoint: f.otlpEndpoint}}.Describe()
}
