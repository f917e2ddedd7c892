package main

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

// The goals of issue 13, printed beside the figures.
const (
	goalRatio        = 0.5   // intake ÷ raw COPY floor
	goalQuarantineMs = 100.0 // quarantine p99, ingest to the last ACK, under load
)

type results struct {
	Env      benchenv.Machine `json:"env"`
	Findings bool             `json:"findings"` // -findings: every bulk event a drift and an unmediated finding
	Senders  int              `json:"senders"`
	Batch    int              `json:"batch"`
	Duration string           `json:"round_duration"`
	Rounds   int              `json:"rounds"`
	Engines  []*engineResult  `json:"engines"`
}

type engineResult struct {
	Engine           string            `json:"engine"`
	Ingest           []ingestResult    `json:"ingest"`
	ResendDuplicates int               `json:"resend_duplicates"`
	Checked          *findingsResult   `json:"findings,omitempty"`
	Memory           []memResult       `json:"memory,omitempty"`
	Quarantine       *quarantineResult `json:"quarantine,omitempty"`
}

// ingestResult is one round of sustained ingest.
type ingestResult struct {
	Batches              int          `json:"batches"`
	Events               int          `json:"events"`
	Seconds              float64      `json:"seconds"`
	EventsPerSec         float64      `json:"events_per_s"`
	PostP50Ms            float64      `json:"post_p50_ms"`
	PostP99Ms            float64      `json:"post_p99_ms"`
	GatewayCores         float64      `json:"gateway_cores"`
	PostgresCores        float64      `json:"postgres_cores"`
	ClientCores          float64      `json:"client_cores"`
	EventsPerGatewayCore float64      `json:"events_per_gateway_core_s"`
	Floor                *floorResult `json:"floor,omitempty"`
	Ratio                float64      `json:"intake_over_floor,omitempty"`
}

// findingsResult is what the gateway derived from the events stored up
// to the end of the ingest rounds (Postgres), read 3 s after.
type findingsResult struct {
	Events        int `json:"events_stored"`
	Flagged       int `json:"findings_flagged"` // portcullis_sentry_findings_total, drift and unmediated
	ChecksDropped int `json:"checks_dropped"`   // portcullis_sentry_checks_dropped_total
}

func (c *findingsResult) String() string {
	return fmt.Sprintf("findings flagged: %d (drift and unmediated) in %d events checked; %d stored, %d checks dropped by the gateway's full queue",
		c.Flagged, c.Events-c.ChecksDropped, c.Events, c.ChecksDropped)
}

// modeLine says what the bulk events are, in either mode.
func modeLine(findings bool) string {
	if findings {
		return "-findings: bulk events with a made-up policy hash and no decision records, every one a drift and an unmediated finding"
	}
	return "bulk events agree with the data plane: each proxy's applied hash, its decision records shipped every " + shipEvery.String()
}

type memResult struct {
	InFlight      int     `json:"batches_in_flight"`
	Events        int     `json:"events_in_flight"`
	EventsPerSec  float64 `json:"events_per_s"`
	GCs           int     `json:"gcs"`
	LiveMedianMiB float64 `json:"live_heap_median_mib"`
	LiveMaxMiB    float64 `json:"live_heap_max_mib"`
	KiBPer1000    float64 `json:"kib_per_1000_events,omitempty"`
}

type quarantineResult struct {
	Proxies      int                `json:"proxies"`
	Count        int                `json:"per_round"`
	Interval     string             `json:"interval"`
	MaxRate      float64            `json:"max_events_per_s"`
	TargetRate   float64            `json:"target_events_per_s"`
	AchievedRate float64            `json:"achieved_events_per_s"`
	GatewayCores float64            `json:"gateway_cores_loaded"`
	Idle         summary            `json:"idle"`
	Loaded       summary            `json:"loaded"`
	Histogram    histDelta          `json:"loaded_histogram"`
	Samples      []quarantineSample `json:"loaded_samples"`
}

// maxRate is the mean ingest rate over the rounds.
func (r *engineResult) maxRate() float64 {
	var sum float64
	for _, in := range r.Ingest {
		sum += in.EventsPerSec
	}
	return sum / float64(len(r.Ingest))
}

func (res *results) writeTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s\n", res.Env)
	fmt.Fprintf(&b, "%d senders (one source each, one batch in flight each), batches of %d events, %d rounds of %s\n", res.Senders, res.Batch, res.Rounds, res.Duration)
	fmt.Fprintf(&b, "%s\n", modeLine(res.Findings))
	for _, e := range res.Engines {
		fmt.Fprintf(&b, "\n[%s] sustained ingest through POST /v1/sentry/events (the gateway binary)\n", e.Engine)
		fmt.Fprintf(&b, "  round  events/s  POST p50 ms  POST p99 ms  gw cores  pg cores  events/s per gw core  raw COPY events/s  pg cores (COPY)  intake ÷ raw\n")
		for i, in := range e.Ingest {
			floor, pgc, ratio := "-", "-", "-"
			if in.Floor != nil {
				floor, pgc, ratio = fmt.Sprintf("%.0f", in.Floor.EventsPerSec), fmt.Sprintf("%.2f", in.Floor.PostgresCores), fmt.Sprintf("%.2f", in.Ratio)
			}
			fmt.Fprintf(&b, "  %5d  %8.0f  %11.0f  %11.0f  %8.2f  %8.2f  %20.0f  %17s  %15s  %12s\n", i+1, in.EventsPerSec, in.PostP50Ms, in.PostP99Ms,
				in.GatewayCores, in.PostgresCores, in.EventsPerGatewayCore, floor, pgc, ratio)
		}
		if c := e.Checked; c != nil {
			fmt.Fprintf(&b, "  %s\n", c)
		}
		fmt.Fprintf(&b, "  the first batch sent again: %d duplicates, nothing stored\n", e.ResendDuplicates)
		if len(e.Memory) > 0 {
			fmt.Fprintf(&b, "\n[%s] gateway live heap with N batches in flight (gctrace: heap marked live by each collection)\n", e.Engine)
			fmt.Fprintf(&b, "  in flight  events  events/s  GCs  live median MiB  live max MiB  KiB per 1,000 in-flight events (vs first row)\n")
			for _, m := range e.Memory {
				per := "-"
				if m.KiBPer1000 != 0 {
					per = fmt.Sprintf("%.0f", m.KiBPer1000)
				}
				fmt.Fprintf(&b, "  %9d  %6d  %8.0f  %3d  %15.0f  %12.0f  %s\n", m.InFlight, m.Events, m.EventsPerSec, m.GCs, m.LiveMedianMiB, m.LiveMaxMiB, per)
			}
		}
		if q := e.Quarantine; q != nil {
			fmt.Fprintf(&b, "\n[%s] quarantine lane: %d proxies connected (one per sandbox), %d quarantines per round, one every %s\n", e.Engine, q.Proxies, q.Count, q.Interval)
			fmt.Fprintf(&b, "  loaded round: bulk ingest target %.0f events/s (%.0f%% of %.0f), achieved %.0f; gateway %.2f cores\n",
				q.TargetRate, 100*q.TargetRate/q.MaxRate, q.MaxRate, q.AchievedRate, q.GatewayCores)
			fmt.Fprintf(&b, "  round   figure (ms)                                   p50     p99     max\n")
			for _, r := range []struct {
				name string
				s    summary
			}{{"idle", q.Idle}, {"loaded", q.Loaded}} {
				for _, f := range []struct {
					name string
					d    dist
				}{{"client: POST sent → proxy ACK", r.s.Ack}, {"client: POST answered", r.s.Post}, {"gateway log: ingest_to_last_ack_ms", r.s.GwLog}, {"gateway log: ingest_to_commit_ms", r.s.GwCommit}, {"gateway action: acked_at − received_at", r.s.GwRow}} {
					fmt.Fprintf(&b, "  %-6s  %-40s  %6.1f  %6.1f  %6.1f\n", r.name, f.name, f.d.P50, f.d.P99, f.d.Max)
				}
			}
			le := "+Inf"
			if !math.IsInf(q.Histogram.P99LeMs, 1) {
				le = fmt.Sprintf("%.0f", q.Histogram.P99LeMs)
			}
			fmt.Fprintf(&b, "  loaded, portcullis_sentry_quarantine_applied_seconds: %d observed, mean %.1f ms, p99 ≤ %s ms (bucket)\n", q.Histogram.Count, q.Histogram.MeanMs, le)
			fmt.Fprintf(&b, "  loaded p99 ÷ idle p99 (client): %.2f\n", q.Loaded.Ack.P99/q.Idle.Ack.P99)
		}
	}
	b.WriteString("\nGoals (issue 13)\n")
	for _, e := range res.Engines {
		for i, in := range e.Ingest {
			if in.Floor != nil {
				fmt.Fprintf(&b, "  [%s] round %d: intake ÷ raw COPY %.2f  goal ≥ %.1f: %s\n", e.Engine, i+1, in.Ratio, goalRatio, met(in.Ratio >= goalRatio))
			}
		}
		if q := e.Quarantine; q != nil {
			fmt.Fprintf(&b, "  [%s] quarantine p99 under %.0f%% load, client POST → last ACK %.1f ms, gateway log %.1f ms  goal ≤ %.0f ms: %s\n", e.Engine,
				100*q.TargetRate/q.MaxRate, q.Loaded.Ack.P99, q.Loaded.GwLog.P99, goalQuarantineMs, met(max(q.Loaded.Ack.P99, q.Loaded.GwLog.P99) <= goalQuarantineMs))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
