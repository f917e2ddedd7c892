package ocsf

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	otellog "go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis-dev/portcullis/internal/telemetry/otlp"
)

// ScopeName is the instrumentation scope of the OTLP sink's log records.
const ScopeName = "github.com/portcullis-dev/portcullis/internal/ocsf"

// OTLPConfig configures an OTLP sink.
type OTLPConfig struct {
	// Endpoint is the collector's base URL (http or https); records are
	// posted to its path + "/v1/logs" (a URL already ending in /v1/logs
	// is used as it is).
	Endpoint string
	// ServiceName is the resource's service.name. Default "portcullis".
	ServiceName    string
	ServiceVersion string
	// Client posts the requests. Nil: one with a 10s timeout.
	Client *http.Client
}

// OTLP is a sink to an OpenTelemetry collector over OTLP/HTTP
// (protobuf): each event is one log record whose body is the event's
// JSON, as the file sink writes it, with its timestamp from time, its
// severity from severity_id and the attributes ocsf.class_uid,
// ocsf.category_uid, ocsf.type_uid and ocsf.version; a trace id in
// metadata.correlation_uid becomes the record's trace id. Each batch is
// one export, never retried; anything but a 2xx answer fails the batch.
// The exporter reads the standard OTEL_EXPORTER_OTLP_HEADERS (and
// _LOGS_HEADERS) variables for headers such as an API key.
type OTLP struct {
	url      string
	client   *http.Client
	exp      *otlploghttp.Exporter
	provider *sdklog.LoggerProvider
	logger   otellog.Logger

	mu  sync.Mutex // one Write at a time; guards cap
	cap *capture
}

// capture is a log processor that keeps the records the logger builds
// (with their resource and scope) so Write can export them itself and
// learn whether the collector took them.
type capture struct{ records []sdklog.Record }

func (c *capture) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (c *capture) OnEmit(_ context.Context, r *sdklog.Record) error {
	c.records = append(c.records, r.Clone())
	return nil
}
func (c *capture) Shutdown(context.Context) error   { return nil }
func (c *capture) ForceFlush(context.Context) error { return nil }

// NewOTLP returns a sink exporting to cfg.Endpoint. Nothing is dialled
// until the first Write; an endpoint that is not an http(s) URL is an
// error.
func NewOTLP(cfg OTLPConfig) (*OTLP, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.Endpoint)
	if !strings.HasSuffix(u.Path, "/v1/logs") {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/logs"
	}
	client := cfg.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}}
	}
	exp, err := otlploghttp.New(context.Background(),
		otlploghttp.WithEndpointURL(u.String()),
		otlploghttp.WithHTTPClient(client),
		// The emitter never retries: a failed batch is dropped and counted.
		otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: false}),
	)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	c := &capture{}
	provider := sdklog.NewLoggerProvider(
		sdklog.WithResource(otlp.Resource(cfg.ServiceName, cfg.ServiceVersion)),
		sdklog.WithProcessor(c),
	)
	return &OTLP{
		url:      u.String(),
		client:   client,
		exp:      exp,
		provider: provider,
		logger:   provider.Logger(ScopeName, otellog.WithInstrumentationVersion(Version)),
		cap:      c,
	}, nil
}

// Check refuses an endpoint that is not an http(s) URL, as NewOTLP
// would, before anything is opened.
func (cfg OTLPConfig) Check() error {
	if !otlp.HTTPURL(cfg.Endpoint) {
		return fmt.Errorf("OTLP endpoint %q: want an http:// or https:// URL", cfg.Endpoint)
	}
	return nil
}

// Name returns the collector's logs URL.
func (o *OTLP) Name() string { return "otlp:" + o.url }

// otlpSeverity maps an OCSF severity_id to an OpenTelemetry severity
// number (docs/ocsf.md).
func otlpSeverity(id int) otellog.Severity {
	switch id {
	case SeverityInformational:
		return otellog.SeverityInfo
	case SeverityLow:
		return otellog.SeverityWarn
	case SeverityMedium:
		return otellog.SeverityWarn2
	case SeverityHigh:
		return otellog.SeverityError
	case 5: // Critical
		return otellog.SeverityFatal
	case 6: // Fatal
		return otellog.SeverityFatal4
	default: // 0 Unknown, 99 Other
		return otellog.SeverityUndefined
	}
}

// Write exports events as one request.
func (o *OTLP) Write(ctx context.Context, events [][]byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cap.records = o.cap.records[:0]
	now := time.Now()
	traces := make([]trace.TraceID, 0, len(events))
	for _, ev := range events {
		var h struct {
			ClassUID    int    `json:"class_uid"`
			CategoryUID int    `json:"category_uid"`
			TypeUID     int    `json:"type_uid"`
			Time        int64  `json:"time"`
			SeverityID  int    `json:"severity_id"`
			Severity    string `json:"severity"`
			Metadata    struct {
				Version        string `json:"version"`
				CorrelationUID string `json:"correlation_uid"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(ev, &h); err != nil {
			return fmt.Errorf("OCSF event: %w", err)
		}
		var r otellog.Record
		r.SetTimestamp(time.UnixMilli(h.Time))
		r.SetObservedTimestamp(now)
		r.SetSeverity(otlpSeverity(h.SeverityID))
		r.SetSeverityText(h.Severity)
		r.SetBody(attribute.StringValue(string(ev)))
		r.AddAttributes(
			attribute.Int("ocsf.class_uid", h.ClassUID),
			attribute.Int("ocsf.category_uid", h.CategoryUID),
			attribute.Int("ocsf.type_uid", h.TypeUID),
			attribute.String("ocsf.version", h.Metadata.Version),
		)
		o.logger.Emit(ctx, r)
		var tid trace.TraceID
		if b, err := hex.DecodeString(h.Metadata.CorrelationUID); err == nil && len(b) == len(tid) {
			copy(tid[:], b)
		}
		traces = append(traces, tid)
	}
	if len(o.cap.records) != len(events) {
		return fmt.Errorf("OTLP logger took %d of %d records", len(o.cap.records), len(events))
	}
	for i := range o.cap.records {
		if traces[i].IsValid() {
			o.cap.records[i].SetTraceID(traces[i])
		}
	}
	return o.exp.Export(ctx, o.cap.records)
}

// Close shuts the exporter down and releases idle connections.
func (o *OTLP) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := o.provider.Shutdown(ctx)
	if e := o.exp.Shutdown(ctx); err == nil {
		err = e
	}
	o.client.CloseIdleConnections()
	return err
}
