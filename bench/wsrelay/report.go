package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/stats"
)

type report struct {
	Environment environment       `json:"environment"`
	Rounds      int               `json:"rounds"`
	Conns       int               `json:"connections_per_path"`
	SlotSeconds float64           `json:"seconds_per_scenario_path_and_round"`
	Scenarios   []*scenarioResult `json:"scenarios"`
}

type environment struct {
	benchenv.Machine
	LoadAverage string `json:"load_average,omitempty"`
	// ProxyMemory is the proxy's resident memory after the load, its
	// connections still open.
	ProxyMemory string `json:"proxy_memory_after_load"`
}

// scenarioResult is one scenario's figures on both paths and their
// ratios.
type scenarioResult struct {
	Scenario string         `json:"scenario"`
	Paths    []*pathFigures `json:"paths"`
	Ratios   []ratio        `json:"ratios"`
	s        *scenario
}

// pathFigures is one path's figures for one scenario, over every round.
type pathFigures struct {
	Path      string  `json:"path"`
	Messages  int64   `json:"messages"`
	Seconds   float64 `json:"seconds"`
	MsgPerSec float64 `json:"messages_per_sec"`
	// MiBPerSec is the payload echoed per second, each message counted
	// once (it crosses each hop twice).
	MiBPerSec float64 `json:"mib_per_sec"`
	P50Micros float64 `json:"p50_us,omitempty"`
	P99Micros float64 `json:"p99_us,omitempty"`
	// SelfCPUMicros is this process's CPU per message (the clients and
	// the upstream); ProxyCPUMicros the proxy process's (clock ticks).
	SelfCPUMicros  float64 `json:"self_cpu_per_msg_us"`
	ProxyCPUMicros float64 `json:"proxy_cpu_per_msg_us,omitempty"`

	lat                           []time.Duration
	roundRate, roundP50, roundP99 []float64
	selfCPU, proxyCPU             time.Duration
}

// ratio is portcullis/direct for one figure: over all rounds (Value), and
// per round with their median.
type ratio struct {
	Name   string    `json:"name"`
	Value  float64   `json:"value"`
	Median float64   `json:"median_of_rounds"`
	Rounds []float64 `json:"rounds"`
}

func (r *scenarioResult) path(name string) *pathFigures {
	for _, p := range r.Paths {
		if p.Path == name {
			return p
		}
	}
	p := &pathFigures{Path: name}
	r.Paths = append(r.Paths, p)
	return p
}

func (r *scenarioResult) add(name string, sl slot) {
	p := r.path(name)
	p.Messages += sl.msgs
	p.Seconds += sl.elapsed.Seconds()
	p.roundRate = append(p.roundRate, float64(sl.msgs)/sl.elapsed.Seconds())
	p.selfCPU += sl.selfCPU
	p.proxyCPU += sl.proxyCPU
	if r.s.latency {
		slices.Sort(sl.lat)
		p.roundP50 = append(p.roundP50, micros(stats.Percentile(sl.lat, 50)))
		p.roundP99 = append(p.roundP99, micros(stats.Percentile(sl.lat, 99)))
		p.lat = append(p.lat, sl.lat...)
	}
}

// finish derives each path's totals and the ratios.
func (r *scenarioResult) finish() {
	for _, p := range r.Paths {
		p.MsgPerSec = float64(p.Messages) / p.Seconds
		p.MiBPerSec = p.MsgPerSec * float64(r.s.size) / (1 << 20)
		if p.Messages > 0 {
			p.SelfCPUMicros = micros(p.selfCPU) / float64(p.Messages)
			p.ProxyCPUMicros = micros(p.proxyCPU) / float64(p.Messages)
		}
		if r.s.latency {
			slices.Sort(p.lat)
			p.P50Micros, p.P99Micros = micros(stats.Percentile(p.lat, 50)), micros(stats.Percentile(p.lat, 99))
		}
	}
	d, pc := r.path(pathDirect), r.path(pathPortcullis)
	add := func(name string, a, b float64, ra, rb []float64) {
		rt := ratio{Name: name, Value: a / b}
		for i := range min(len(ra), len(rb)) {
			rt.Rounds = append(rt.Rounds, ra[i]/rb[i])
		}
		rt.Median = median(rt.Rounds)
		r.Ratios = append(r.Ratios, rt)
	}
	if r.s.latency {
		add("p50 RTT", pc.P50Micros, d.P50Micros, pc.roundP50, d.roundP50)
		add("p99 RTT", pc.P99Micros, d.P99Micros, pc.roundP99, d.roundP99)
	}
	add(r.unit(), pc.MsgPerSec, d.MsgPerSec, pc.roundRate, d.roundRate)
}

// unit is the throughput figure the scenario reports: MiB/s for large
// messages, messages/s otherwise.
func (r *scenarioResult) unit() string {
	if r.s.size >= 64<<10 {
		return "MiB/s"
	}
	return "msg/s"
}

func (rep *report) writeTable(w io.Writer) error {
	e := rep.Environment
	fmt.Fprintf(w, "wsrelay: %s\n", e.Machine)
	fmt.Fprintf(w, "load average at start: %s\n", e.LoadAverage)
	fmt.Fprintf(w, "%d rounds, %.2f s per scenario, path and round; each connection echoes one message at a time\n", rep.Rounds, rep.SlotSeconds)
	fmt.Fprintln(w, "portcullis: the shipped binary, `portcullis proxy --policy FILE --dev-allow-loopback`, no gateway: every client message read and checked, none rewritten")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tfigure\tdirect\tportcullis\tportcullis/direct\tmedian of rounds\trounds\t")
	for _, s := range rep.Scenarios {
		d, pc := s.path(pathDirect), s.path(pathPortcullis)
		name := s.Scenario
		for _, rt := range s.Ratios {
			var dv, pv string
			switch rt.Name {
			case "p50 RTT":
				dv, pv = fmt.Sprintf("%.0f µs", d.P50Micros), fmt.Sprintf("%.0f µs", pc.P50Micros)
			case "p99 RTT":
				dv, pv = fmt.Sprintf("%.0f µs", d.P99Micros), fmt.Sprintf("%.0f µs", pc.P99Micros)
			case "MiB/s":
				dv, pv = fmt.Sprintf("%.0f", d.MiBPerSec), fmt.Sprintf("%.0f", pc.MiBPerSec)
			default:
				dv, pv = fmt.Sprintf("%.0f", d.MsgPerSec), fmt.Sprintf("%.0f", pc.MsgPerSec)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f×\t%.2f×\t%s\t\n", name, rt.Name, dv, pv, rt.Value, rt.Median, joinFloats(rt.Rounds))
			name = ""
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU per message (µs): this process (clients and upstream) on each path, and the proxy process (clock ticks)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tdirect\tportcullis\tproxy\tportcullis+proxy − direct\t")
	for _, s := range rep.Scenarios {
		d, pc := s.path(pathDirect), s.path(pathPortcullis)
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t\n", s.Scenario, d.SelfCPUMicros, pc.SelfCPUMicros, pc.ProxyCPUMicros,
			pc.SelfCPUMicros+pc.ProxyCPUMicros-d.SelfCPUMicros)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nproxy after the load (%d WebSockets open): %s\n", rep.Conns, e.ProxyMemory)
	return nil
}

func joinFloats(vs []float64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf("%.2f", v)
	}
	return strings.Join(s, " ")
}

// median is the middle of vs (the mean of the middle two for an even
// count), 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
