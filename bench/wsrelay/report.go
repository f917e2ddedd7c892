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
	// the upstream); HopCPUMicros that of the process between, the proxy
	// or the relay (clock ticks).
	SelfCPUMicros float64 `json:"self_cpu_per_msg_us"`
	HopCPUMicros  float64 `json:"hop_cpu_per_msg_us,omitempty"`

	lat                           []time.Duration
	roundRate, roundP50, roundP99 []float64
	selfCPU, hopCPU               time.Duration
}

// ratio is one path's figure over another's (portcullis/direct): over
// all rounds (Value), and per round with their median.
type ratio struct {
	Paths  string    `json:"paths"`
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
	p.hopCPU += sl.hopCPU
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
			p.HopCPUMicros = micros(p.hopCPU) / float64(p.Messages)
		}
		if r.s.latency {
			slices.Sort(p.lat)
			p.P50Micros, p.P99Micros = micros(stats.Percentile(p.lat, 50)), micros(stats.Percentile(p.lat, 99))
		}
	}
	for _, pair := range r.pairs() {
		r.ratios(pair[0], pair[1])
	}
}

// pairs are the paths compared: each over direct, then portcullis over
// relay (what the proxy costs above a hop through any process).
func (r *scenarioResult) pairs() [][2]*pathFigures {
	var out [][2]*pathFigures
	d := r.Paths[0]
	for _, p := range r.Paths[1:] {
		out = append(out, [2]*pathFigures{p, d})
	}
	if pc, rl := r.find(pathPortcullis), r.find(pathRelay); pc != nil && rl != nil {
		out = append(out, [2]*pathFigures{pc, rl})
	}
	return out
}

func (r *scenarioResult) find(name string) *pathFigures {
	for _, p := range r.Paths {
		if p.Path == name {
			return p
		}
	}
	return nil
}

// ratios adds a/b for the scenario's figures.
func (r *scenarioResult) ratios(a, b *pathFigures) {
	add := func(name string, x, y float64, rx, ry []float64) {
		rt := ratio{Paths: a.Path + "/" + b.Path, Name: name, Value: x / y}
		for i := range min(len(rx), len(ry)) {
			rt.Rounds = append(rt.Rounds, rx[i]/ry[i])
		}
		rt.Median = median(rt.Rounds)
		r.Ratios = append(r.Ratios, rt)
	}
	if r.s.latency {
		add("p50 RTT", a.P50Micros, b.P50Micros, a.roundP50, b.roundP50)
		add("p99 RTT", a.P99Micros, b.P99Micros, a.roundP99, b.roundP99)
	}
	add(r.unit(), a.MsgPerSec, b.MsgPerSec, a.roundRate, b.roundRate)
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
	paths := rep.Scenarios[0].Paths
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "scenario\tfigure\t"
	for _, p := range paths {
		head += p.Path + "\t"
	}
	fmt.Fprintln(tw, head)
	for _, s := range rep.Scenarios {
		name := s.Scenario
		for _, fig := range s.figures() {
			row := name + "\t" + fig + "\t"
			for _, p := range s.Paths {
				row += p.value(fig) + "\t"
			}
			fmt.Fprintln(tw, row)
			name = ""
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tfigure\tratio\tall rounds\tmedian of rounds\trounds\t")
	for _, s := range rep.Scenarios {
		name := s.Scenario
		for _, rt := range s.Ratios {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f×\t%.2f×\t%s\t\n", name, rt.Name, rt.Paths, rt.Value, rt.Median, joinFloats(rt.Rounds))
			name = ""
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CPU per message (µs): this process (clients and upstream) + the process between (proxy or relay; clock ticks) = total; over direct")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\t"+strings.SplitN(head, "\t", 3)[2])
	for _, s := range rep.Scenarios {
		row := s.Scenario + "\t"
		d := s.Paths[0]
		for _, p := range s.Paths {
			row += fmt.Sprintf("%.1f + %.1f = %.1f; +%.1f\t", p.SelfCPUMicros, p.HopCPUMicros, p.SelfCPUMicros+p.HopCPUMicros,
				p.SelfCPUMicros+p.HopCPUMicros-d.SelfCPUMicros-d.HopCPUMicros)
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nproxy after the load (%d WebSockets open): %s\n", rep.Conns, e.ProxyMemory)
	return nil
}

// figures are the rows a scenario prints.
func (r *scenarioResult) figures() []string {
	if r.s.latency {
		return []string{"p50 RTT", "p99 RTT", r.unit()}
	}
	return []string{r.unit()}
}

// value is the path's figure as the table prints it.
func (p *pathFigures) value(fig string) string {
	switch fig {
	case "p50 RTT":
		return fmt.Sprintf("%.0f µs", p.P50Micros)
	case "p99 RTT":
		return fmt.Sprintf("%.0f µs", p.P99Micros)
	case "MiB/s":
		return fmt.Sprintf("%.0f", p.MiBPerSec)
	}
	return fmt.Sprintf("%.0f", p.MsgPerSec)
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
