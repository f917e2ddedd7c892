package transport

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"connectrpc.com/connect/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// RecoverPanics turns a handler panic into an error (logged with its stack
// by the error mapping, answered as Internal) instead of a reset
// connection.
func RecoverPanics(next connect.ServerFunc) connect.ServerFunc {
	return func(ctx context.Context, spec connect.Spec, stream connect.ServerStream) (err error) {
		defer Recover(spec.Procedure, &err)
		return next(ctx, spec, stream)
	}
}

// Recover, deferred by a handler's caller, turns a panic into *err naming
// procedure. Deferred in place rather than wrapping the call in a
// function of its own: a policy stream's goroutine idles for hours at the
// depth of its stack, and every frame below the handler is kept.
func Recover(procedure string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("panic in %s: %v\n%s", procedure, r, debug.Stack())
	}
}

// Calls is what both servers' interceptors share: the RPC metrics and the
// one mapping of handler errors to what the client sees (the gateway
// root's).
type Calls struct {
	Log      *slog.Logger
	Metrics  *RPCMetrics
	MapError func(ctx context.Context, procedure string, err error) error
}

// MapErrors is the Connect interceptor that maps handler errors once (see
// Calls.MapError), logging each call at debug level.
func (c Calls) MapErrors(next connect.ServerFunc) connect.ServerFunc {
	return func(ctx context.Context, spec connect.Spec, stream connect.ServerStream) error {
		start := time.Now()
		err := c.MapError(ctx, spec.Procedure, next(ctx, spec, stream))
		if c.Log.Enabled(ctx, slog.LevelDebug) {
			c.Log.DebugContext(ctx, "rpc", "procedure", spec.Procedure, "code", codeName(err), "duration", time.Since(start))
		}
		return err
	}
}

func codeName(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

// RPCMetrics counts RPCs and their latency by procedure and code.
type RPCMetrics struct {
	rpcs    *prometheus.CounterVec
	latency *prometheus.HistogramVec
	known   func(procedure string) bool
}

// NewRPCMetrics returns the RPC metrics. Only procedures known reports
// become label values (others count as "unknown"): callers choose the
// procedure string, and labels must stay bounded.
func NewRPCMetrics(known func(procedure string) bool) *RPCMetrics {
	return &RPCMetrics{
		known: known,
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portcullis_rpc_requests_total",
			Help: "RPCs handled, by procedure and result code.",
		}, []string{"procedure", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "portcullis_rpc_duration_seconds",
			Help:    "RPC handling time, by procedure.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"procedure"}),
	}
}

// Collectors are the metrics to register.
func (m *RPCMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.rpcs, m.latency}
}

// Intercept is the outermost Connect interceptor: it sees the final code.
func (m *RPCMetrics) Intercept(next connect.ServerFunc) connect.ServerFunc {
	return func(ctx context.Context, spec connect.Spec, stream connect.ServerStream) error {
		start := time.Now()
		err := next(ctx, spec, stream)
		m.observe(spec.Procedure, codeName(err), time.Since(start))
		return err
	}
}

func (m *RPCMetrics) observe(procedure, code string, d time.Duration) {
	if !m.known(procedure) {
		procedure = "unknown"
	}
	m.rpcs.WithLabelValues(procedure, code).Inc()
	m.latency.WithLabelValues(procedure).Observe(d.Seconds())
}
