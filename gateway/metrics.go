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
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		rpc: transport.NewRPCMetrics(func(procedure string) bool {
			_, known := authzTable[procedure]
			return known
		}),
	}
	m.pushAck = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "portcullis_push_ack_seconds",
		Help:    "Time from a policy version's commit to a proxy's ACK of it.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	m.pushNacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "portcullis_push_nacks_total",
		Help: "Policy versions proxies refused.",
	})
	m.conns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portcullis_connections_total",
		Help: "Connections accepted on the API port, by the server that took them: grpc (policy streams) or http (everything else).",
	}, []string{"server"})
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
	m.registry.MustRegister(m.pushAck, m.pushNacks, m.conns, connected, stored, limited, pruned,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}
