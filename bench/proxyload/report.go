package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/stats"
)

// The targets for the inspecting proxy.
const (
	targetThroughputVsNginx = 0.8 // Portcullis req/s ÷ nginx req/s, at least
	targetAddedP50Micros    = 100 // Portcullis p50 − direct p50, at most
)

// results is one run's report.
type results struct {
	Env          environment   `json:"environment"`
	Upstream     string        `json:"upstream"`
	CallerBinary string        `json:"caller_binary"`
	Concurrency  int           `json:"concurrency"`
	Rounds       int           `json:"rounds"`
	Duration     string        `json:"duration_per_path"`
	Warmup       string        `json:"warmup_per_path"`
	Paths        []*pathResult `json:"paths"`
	Ratios       []ratio       `json:"ratios"`
}

// pathResult is one path over all rounds.
type pathResult struct {
	Path       string    `json:"path"`
	Requests   int       `json:"requests"`
	Failures   int       `json:"failures"`
	FirstError string    `json:"first_error,omitempty"`
	Seconds    float64   `json:"seconds"`
	ReqPerSec  float64   `json:"req_per_sec"`
	P50Micros  float64   `json:"p50_us"`
	P99Micros  float64   `json:"p99_us"`
	RoundRPS   []float64 `json:"round_req_per_sec"`
	RoundP50   []float64 `json:"round_p50_us"`
	// NewConnections the load clients opened on this path (warm-up and
	// check included): keep-alive working means about --concurrency.
	NewConnections int64 `json:"new_connections"`
	Capped         bool  `json:"capped,omitempty"`
	// CPU per request: SelfCPUMicros of this process (load clients,
	// upstream, and the Portcullis proxy on its path), ExtCPUMicros of
	// nginx's processes (nginx path only; clock-tick resolution).
	SelfCPUMicros float64 `json:"self_cpu_us_per_req"`
	ExtCPUMicros  float64 `json:"nginx_cpu_us_per_req,omitempty"`

	selfCPU, extCPU time.Duration
	roundP99        []float64
}

func (p *pathResult) add(r roundResult, round int) {
	p.Requests += r.requests
	p.Failures += r.failures
	p.Seconds += r.elapsed.Seconds()
	p.RoundRPS = append(p.RoundRPS, float64(r.requests)/r.elapsed.Seconds())
	sorted := slices.Sorted(slices.Values(r.latencies))
	p.RoundP50 = append(p.RoundP50, micros(stats.Percentile(sorted, 50)))
	p.roundP99 = append(p.roundP99, micros(stats.Percentile(sorted, 99)))
	p.Capped = p.Capped || r.capped
	p.selfCPU += r.selfCPU
	p.extCPU += r.extCPU
}

func (p *pathResult) finish(lat []time.Duration, dials int64) {
	slices.Sort(lat)
	p.ReqPerSec = float64(p.Requests) / p.Seconds
	p.P50Micros = micros(stats.Percentile(lat, 50))
	p.P99Micros = micros(stats.Percentile(lat, 99))
	p.NewConnections = dials
	if p.Requests > 0 {
		p.SelfCPUMicros = micros(p.selfCPU) / float64(p.Requests)
		p.ExtCPUMicros = micros(p.extCPU) / float64(p.Requests)
	}
}

// proxyCPUMicros is the CPU per request the path spends beyond the direct
// path's (the load client and the upstream cost the same on every path).
func (p *pathResult) proxyCPUMicros(direct *pathResult) float64 {
	return p.SelfCPUMicros + p.ExtCPUMicros - direct.SelfCPUMicros
}

// ratio is one derived figure, with the target where it has one.
type ratio struct {
	Name   string    `json:"name"`
	Value  float64   `json:"value"`
	Unit   string    `json:"unit"` // "x" or "µs"
	Rounds []float64 `json:"rounds,omitempty"`
	Target string    `json:"target,omitempty"`
	Met    *bool     `json:"met,omitempty"`
}

func (r *results) path(name string) *pathResult {
	for _, p := range r.Paths {
		if p.Path == name {
			return p
		}
	}
	return nil
}

// ratios derives the comparisons between the paths that were measured.
func (r *results) ratios() {
	direct, pc, ng := r.path(pathDirect), r.path(pathPortcullis), r.path(pathNginx)
	perRound := func(a, b []float64, f func(x, y float64) float64) []float64 {
		out := make([]float64, len(a))
		for i := range a {
			out[i] = f(a[i], b[i])
		}
		return out
	}
	div := func(x, y float64) float64 { return x / y }
	sub := func(x, y float64) float64 { return x - y }
	met := func(ok bool) *bool { return &ok }
	if pc != nil && ng != nil {
		v := pc.ReqPerSec / ng.ReqPerSec
		r.Ratios = append(r.Ratios, ratio{Name: "portcullis/nginx throughput", Value: v, Unit: "x",
			Rounds: perRound(pc.RoundRPS, ng.RoundRPS, div),
			Target: fmt.Sprintf("≥ %.1f", targetThroughputVsNginx), Met: met(v >= targetThroughputVsNginx)})
	}
	if direct != nil {
		for _, p := range []*pathResult{pc, ng} {
			if p == nil {
				continue
			}
			r.Ratios = append(r.Ratios, ratio{Name: p.Path + "/direct throughput", Value: p.ReqPerSec / direct.ReqPerSec, Unit: "x",
				Rounds: perRound(p.RoundRPS, direct.RoundRPS, div)})
		}
		for _, p := range []*pathResult{pc, ng} {
			if p == nil {
				continue
			}
			v := p.P50Micros - direct.P50Micros
			rt := ratio{Name: p.Path + " added p50 over direct", Value: v, Unit: "µs", Rounds: perRound(p.RoundP50, direct.RoundP50, sub)}
			if p == pc {
				rt.Target, rt.Met = fmt.Sprintf("≤ %d µs", targetAddedP50Micros), met(v <= targetAddedP50Micros)
			}
			r.Ratios = append(r.Ratios, rt)
		}
		for _, p := range []*pathResult{pc, ng} {
			if p == nil {
				continue
			}
			r.Ratios = append(r.Ratios, ratio{Name: p.Path + " added p99 over direct", Value: p.P99Micros - direct.P99Micros, Unit: "µs"})
		}
		for _, p := range []*pathResult{pc, ng} {
			if p == nil {
				continue
			}
			r.Ratios = append(r.Ratios, ratio{Name: p.Path + " CPU per request over direct", Value: p.proxyCPUMicros(direct), Unit: "µs"})
		}
	}
}

func (r *results) failed() int {
	n := 0
	for _, p := range r.Paths {
		n += p.Failures
	}
	return n
}

func (r *results) writeTable(w io.Writer) error {
	e := r.Env
	fmt.Fprintf(w, "\n%s", e.Machine)
	if e.Nginx != "" {
		fmt.Fprintf(w, ", %s", e.Nginx)
	}
	fmt.Fprintf(w, "\nupstream %s, caller binary %s, concurrency %d, %s per path in %d interleaved rounds, warm-up %s\n\n",
		r.Upstream, r.CallerBinary, r.Concurrency, r.Duration, r.Rounds, r.Warmup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\treq/s\tp50 µs\tp99 µs\trequests\tfailures\tnew conns\tCPU µs/req here\tnginx CPU µs/req\tper-round req/s\t")
	for _, p := range r.Paths {
		ext := "-"
		if p.Path == pathNginx {
			ext = fmt.Sprintf("%.1f", p.ExtCPUMicros)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%d\t%d\t%d\t%.1f\t%s\t%s\t\n", p.Path, p.ReqPerSec, p.P50Micros, p.P99Micros,
			p.Requests, p.Failures, p.NewConnections, p.SelfCPUMicros, ext, joinFloats(p.RoundRPS, "%.0f"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, rt := range r.Ratios {
		format := "%.2f"
		if rt.Unit == "µs" {
			format = "%+.0f"
		}
		val := fmt.Sprintf(format, rt.Value) + unitSuffix(rt.Unit)
		verdict := ""
		if rt.Met != nil {
			verdict = "target " + rt.Target + ": missed"
			if *rt.Met {
				verdict = "target " + rt.Target + ": met"
			}
		}
		rounds := ""
		if len(rt.Rounds) > 0 {
			rounds = "rounds " + joinFloats(rt.Rounds, format)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rt.Name, val, rounds, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Paths {
		if p.FirstError != "" {
			fmt.Fprintf(w, "%s: first failure: %s\n", p.Path, p.FirstError)
		}
		if p.Capped {
			fmt.Fprintf(w, "%s: a worker reached %d requests in a round and stopped early\n", p.Path, maxSamplesPerWorker)
		}
	}
	return nil
}

func unitSuffix(u string) string {
	if u == "x" {
		return "×"
	}
	return " " + u
}

func joinFloats(vs []float64, format string) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprintf(format, v)
	}
	return strings.Join(s, " ")
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
