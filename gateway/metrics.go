package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/portcullis-dev/portcullis/gateway/transport"
)

// metrics are the gateway's Prometheus metrics, in a registry of its own:
// the RPC metrics both servers' interceptors feed, and what distribution
// and decisions report.
type metrics struct {
	registry  *prometheus.Registry
	rpc       *transport.RPCMetrics
	pushAck   prometheus.Histogram
	pushNacks prometheus.Counter
	conns     *prometheus.CounterVec
	// Sentry intake.
	sentryEvents  *prometheus.CounterVec
	sentryActions *prometheus.CounterVec
	sentryGaps    *prometheus.GaugeVec
	sentryApplied prometheus.Histogram
	sentryFound   *prometheus.CounterVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		rpc: transport.NewRPCMetrics(func(procedure string) bool {
			_, known := authzTable[procedure]
			return known
		}),
	}
	m.pushAck = latency("portcullis_push_ack_seconds", "Time from a policy version's commit to a proxy's ACK of it.")
	m.pushNacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "portcullis_push_nacks_total",
		Help: "Policy versions proxies refused.",
	})
	m.conns = counterVec("portcullis_connections_total",
		"Connections accepted on the API port, by the server that took them: grpc (policy streams) or http (everything else).", "server")
	m.sentryEvents = counterVec("portcullis_sentry_events_total",
		"Sentry events received through this replica, by result: stored, duplicate or refused.", "result")
	m.sentryActions = counterVec("portcullis_sentry_actions_total",
		"What this replica did about remediating Sentry events, by status: frozen, held, dry_run, already_frozen, failed.", "status")
	m.sentryGaps = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "portcullis_sentry_missing_sequences",
		Help: "Sequences missing between a Sentry source's acknowledged and highest sequence, as of its last batch here.",
	}, []string{"source"})
	m.sentryApplied = latency("portcullis_sentry_quarantine_applied_seconds",
		"Time from receiving a Sentry quarantine to the last connected proxy's ACK of the deny-all version.")
	m.sentryFound = counterVec("portcullis_sentry_findings_total",
		"Findings derived from Sentry events by this replica, by kind: drift (a policy hash no proxy applied) or unmediated (a tool call no proxy decided).", "kind")
	connected := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "portcullis_proxies_connected",
		Help: "Proxies streaming policy from this replica.",
	}, func() float64 { return float64(s.dist.Connected()) })
	// The decision counters gateway/decisions keeps.
	count := func(name, help string, n func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(n()) })
	}
	stored := count("portcullis_decisions_stored_total", "Decision records stored through this replica.", s.decisions.Stored)
	limited := count("portcullis_decisions_rate_limited_total",
		"Decision records this replica dropped because their sandbox was over its ingest rate limit.", s.decisions.Limited)
	pruned := count("portcullis_decisions_pruned_total", "Decision records this replica's retention sweep deleted.", s.decisions.Pruned)
	m.registry.MustRegister(m.rpc.Collectors()...)
	checksDropped := count("portcullis_sentry_checks_dropped_total",
		"Sentry events this replica stored but did not check for findings because its check queue was full.", func() uint64 { return s.sentry.Dropped() })
	m.registry.MustRegister(s.cfg.Collectors...)
	m.registry.MustRegister(m.pushAck, m.pushNacks, m.conns, connected, stored, limited, pruned,
		m.sentryEvents, m.sentryActions, m.sentryGaps, m.sentryApplied, m.sentryFound, checksDropped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// latency is a histogram of seconds from 1 ms to about a minute.
func latency(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
}

func counterVec(name, help, label string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
}
