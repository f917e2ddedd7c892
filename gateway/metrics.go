package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/portcullis-dev/portcullis/gateway/transport"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/store"
)

// metrics are the gateway's Prometheus metrics, in a registry of its own:
// the RPC metrics both servers' interceptors feed, what the event stream
// tells (observe) and what decisions and the Sentry intake count.
type metrics struct {
	registry *prometheus.Registry
	// all are the collectors registered (tests list their names).
	all     []prometheus.Collector
	rpc     *transport.RPCMetrics
	pushAck prometheus.Histogram
	// pushAckSandbox is pushAck by sandbox (a deleted sandbox's series
	// go with it).
	pushAckSandbox *prometheus.HistogramVec
	pushNacks      prometheus.Counter
	keepFailures   prometheus.Counter
	pushForks      prometheus.Counter
	proxyDropped   prometheus.Counter
	proxyOCSF      prometheus.Counter
	decided        *prometheus.CounterVec
	conns          *prometheus.CounterVec
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
	m.pushAckSandbox = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "portcullis_sandbox_push_ack_seconds",
		Help:    "Time from a policy version's commit to a proxy's ACK of it, by sandbox.",
		Buckets: latencyBuckets,
	}, []string{"sandbox"})
	m.pushNacks = counter("portcullis_push_nacks_total", "Policy versions proxies refused.")
	m.keepFailures = counter("portcullis_proxy_keep_failures_total",
		"Policy versions proxies ACKed (and enforce) but could not keep in their data dir, a full or read-only disk: restarted then, they would enforce an older version.")
	m.pushForks = counter("portcullis_push_forks_total",
		"Policy versions proxies refused because they do not descend from the version the proxy holds: this replica's history forked from the proxy's (a restored or forked store). Needs an operator.")
	m.proxyDropped = counter("portcullis_proxy_decisions_dropped_total",
		"Decision records proxies streaming from this replica reported they dropped before shipping them (their queue was full).")
	m.proxyOCSF = counter("portcullis_proxy_ocsf_dropped_total",
		"OCSF events proxies shipping to this replica reported their sinks dropped (a sink's queue was full or the sink refused them).")
	m.decided = counterVec("portcullis_decisions_received_total",
		"Decision records proxies shipped to this replica, by decision: allow, deny, audit or rate_limited (before the ingest limit).", "decision")
	m.conns = counterVec("portcullis_connections_total",
		"Connections accepted on the API port, by the server that took them: grpc (policy streams) or http (everything else).", "server")
	m.sentryEvents = counterVec("portcullis_sentry_events_total",
		"Sentry events received through this replica, by result: stored, duplicate or refused.", "result")
	m.sentryActions = counterVec("portcullis_sentry_actions_total",
		"What this replica did about remediating Sentry events, by status: frozen, held, dry_run, stale, already_frozen, failed.", "status")
	m.sentryGaps = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "portcullis_sentry_missing_sequences",
		Help: "Sequences missing between a Sentry source's acknowledged and highest sequence, as of its last batch here.",
	}, []string{"source"})
	m.sentryApplied = latency("portcullis_sentry_quarantine_applied_seconds",
		"Time from receiving a Sentry quarantine to the last connected proxy's ACK of the deny-all version.")
	m.sentryFound = counterVec("portcullis_sentry_findings_total",
		"Findings derived from Sentry events by this replica, by kind: drift (a policy hash no proxy applied) or unmediated (a tool call no proxy decided).", "kind")
	// The distribution, the Sentry places and the intake are looked up
	// when scraped: newMetrics runs before the server makes them.
	connected := gauge("portcullis_proxies_connected", "Proxies streaming policy from this replica.", func() int { return s.dist.Connected() })
	behind := gauge("portcullis_proxies_behind",
		"Proxies streaming policy from this replica that have not applied their sandbox's newest version.", func() int { return s.dist.Behind() })
	// The decision counters gateway/decisions keeps.
	stored := count("portcullis_decisions_stored_total", "Decision records stored through this replica.", s.decisions.Stored)
	limited := count("portcullis_decisions_rate_limited_total",
		"Decision records this replica counted into summaries instead of storing them one by one because their sandbox was over its ingest rate limit.", s.decisions.Limited)
	pruned := count("portcullis_decisions_pruned_total", "Decision records this replica's retention sweep deleted.", s.decisions.Pruned)
	m.register(m.rpc.Collectors()...)
	bodies := gauge("portcullis_sentry_batch_bodies",
		"Sentry batches this replica parses or stores now (HTTP bodies once read, RPC messages); when all its places are taken, further batches wait.", func() int { return s.batchBodies.held() })
	receiving := gauge("portcullis_sentry_batches_receiving",
		"Sentry HTTP batches whose body this replica awaits (arriving, or waiting for their source's turn); they hold no shared place.", s.receiving.Load)
	checksDropped := count("portcullis_sentry_checks_dropped_total",
		"Sentry events this replica stored but did not check for findings because its check queue was full.", func() uint64 { return s.sentry.Dropped() })
	if s.cfg.OCSFDropped != nil {
		m.register(count("portcullis_ocsf_dropped_total",
			"OCSF events this replica dropped: a sink's queue was full or the sink refused them.", s.cfg.OCSFDropped))
	}
	m.register(m.pushAck, m.pushAckSandbox, m.pushNacks, m.keepFailures, m.pushForks, m.proxyDropped, m.proxyOCSF, m.decided, m.conns, connected, behind, stored, limited, pruned,
		m.sentryEvents, m.sentryActions, m.sentryGaps, m.sentryApplied, m.sentryFound, checksDropped, bodies, receiving,
		newPendingCollector(s.store, s.cfg.Now, s.cfg.PendingMetricsTTL, s.log),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) register(cs ...prometheus.Collector) {
	m.registry.MustRegister(cs...)
	m.all = append(m.all, cs...)
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// observe is the stream's metrics subscriber: it only counts, so it
// returns at once.
func (m *metrics) observe(e events.Event) {
	switch e := e.(type) {
	case events.ProxyAcked:
		m.acked(e.Sandbox, e.Lag)
		if e.KeepFailed {
			m.keepFailures.Inc()
		}
	case events.ProxyNacked:
		m.pushNacks.Inc()
		if e.Fork {
			m.pushForks.Inc()
		}
	case events.DecisionsShipped:
		for decision, n := range e.Decisions {
			m.decided.WithLabelValues(decision).Add(float64(n))
		}
		if e.Dropped > 0 {
			m.proxyDropped.Add(float64(e.Dropped))
		}
		if e.OCSFDropped > 0 {
			m.proxyOCSF.Add(float64(e.OCSFDropped))
		}
	case events.SentryBatch:
		m.observeSentry(e)
	case events.SentryActed:
		m.sentryActions.WithLabelValues(e.Action.Status).Inc()
	case events.QuarantineApplied:
		m.sentryApplied.Observe(e.Took.Seconds())
	case events.SentryFinding:
		m.sentryFound.WithLabelValues(e.Kind).Inc()
	}
}

// acked observes a proxy's ACK of a version of sandbox, lag after its
// commit.
func (m *metrics) acked(sandbox string, lag time.Duration) {
	m.pushAck.Observe(lag.Seconds())
	m.pushAckSandbox.WithLabelValues(sandbox).Observe(lag.Seconds())
}

// forgetSandbox drops a deleted sandbox's series.
func (m *metrics) forgetSandbox(sandbox string) {
	m.pushAckSandbox.DeleteLabelValues(sandbox)
}

// latencyBuckets are seconds from 1 ms to about a minute.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)

// latency is a histogram of latencyBuckets.
func latency(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets})
}

// pendingAges are the ages portcullis_proposals_pending counts the pending
// proposals older than (its older_than label): cumulative, so an alert
// picks one (older_than="1d" > 0) and "0s" is all of them.
var pendingAges = []struct {
	label string
	age   time.Duration
}{{"0s", 0}, {"1h", time.Hour}, {"1d", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}}

// pendingCollector exports the pending proposals by age. It asks the store
// (one statement) at most once per ttl, whatever the number of scrapers,
// and serves the last answer in between; when the store fails and there is
// no answer yet, the metrics are left out of that scrape.
type pendingCollector struct {
	st     store.Reader
	now    func() time.Time
	ttl    time.Duration
	log    *slog.Logger
	count  *prometheus.Desc
	oldest *prometheus.Desc

	mu   sync.Mutex // held through a read: concurrent scrapes wait for it
	read time.Time  // when last was read; zero: never
	last store.PendingCount
}

func newPendingCollector(st store.Reader, now func() time.Time, ttl time.Duration, log *slog.Logger) *pendingCollector {
	return &pendingCollector{st: st, now: now, ttl: ttl, log: log,
		count: prometheus.NewDesc("portcullis_proposals_pending",
			"Proposals waiting for a decision, by age: those created longer ago than older_than (0s: all).", []string{"older_than"}, nil),
		oldest: prometheus.NewDesc("portcullis_proposals_pending_oldest_seconds",
			"Age of the oldest proposal waiting for a decision (0: none).", nil, nil),
	}
}

func (c *pendingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.oldest
}

func (c *pendingCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.read.IsZero() || now.Sub(c.read) >= c.ttl {
		before := make([]time.Time, len(pendingAges))
		for i, a := range pendingAges {
			before[i] = now.Add(-a.age)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := c.st.CountPendingProposals(ctx, before)
		cancel()
		if err != nil {
			c.log.Warn("metrics: count pending proposals", "error", err)
		} else {
			// The age 0 bucket is all of them (created before now).
			got.Before[0] = got.Total
			c.read, c.last = now, got
		}
	}
	if c.read.IsZero() {
		return
	}
	for i, a := range pendingAges {
		ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(c.last.Before[i]), a.label)
	}
	age := 0.0
	if !c.last.Oldest.IsZero() {
		age = max(c.read.Sub(c.last.Oldest).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age)
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help, label string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
}

// count is a counter whose value n reads when scraped (a count kept
// elsewhere).
func count[N int | int64 | uint64](name, help string, n func() N) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(n()) })
}

// gauge is a gauge whose value n reads when scraped.
func gauge[N int | int64 | uint64](name, help string, n func() N) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(n()) })
}
