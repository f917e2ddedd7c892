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

// The targets for the inspecting proxy.
const (
	targetThroughputVsNginx = 0.8 // Portcullis req/s ÷ nginx req/s at saturation, at least
	targetAddedP50Micros    = 100 // Portcullis p50 − direct p50 at one client, at most
)

// results is one run's report.
type results struct {
	Env       environment   `json:"environment"`
	Upstream  string        `json:"upstream"`
	Rounds    int           `json:"rounds"`
	Duration  string        `json:"duration_per_path"`
	Warmup    string        `json:"warmup_per_path"`
	Levels    []*level      `json:"levels"`
	Proxies   []*portcullis `json:"portcullis"`
	NginxIdle *memory       `json:"nginx_idle_memory,omitempty"`
}

// environment describes where the figures come from: the machine, how
// busy it was, and the nginx measured against.
type environment struct {
	benchenv.Machine
	// Load is /proc/loadavg (1, 5 and 15 minutes) when the run started:
	// other work on the machine shares its cores with every path.
	Load  string `json:"load_average"`
	Nginx string `json:"nginx,omitempty"`
}

// portcullis is what the run saw of a portcullis proxy process.
type portcullis struct {
	Path        string `json:"path"`
	Binary      string `json:"binary,omitempty"`
	BinaryBytes int64  `json:"binary_bytes,omitempty"`
	// Idle is its memory once started with the policy and before any
	// request; AfterLoad after the last round.
	Idle      *memory `json:"idle_memory,omitempty"`
	AfterLoad *memory `json:"after_load_memory,omitempty"`
	// DecisionRecords is the lines of its decision log once stopped: at
	// least one per request it served.
	DecisionRecords int `json:"decision_records"`
}

// level is the measurement at one concurrency.
type level struct {
	Concurrency int           `json:"concurrency"`
	Paths       []*pathResult `json:"paths"`
	Ratios      []ratio       `json:"ratios"`
}

// pathResult is one path over all rounds of a level.
type pathResult struct {
	Path      string    `json:"path"`
	Requests  int       `json:"requests"`
	Failures  int       `json:"failures"`
	FirstErr  string    `json:"first_error,omitempty"`
	Seconds   float64   `json:"seconds"`
	ReqPerSec float64   `json:"req_per_sec"`
	P50Micros float64   `json:"p50_us"`
	P99Micros float64   `json:"p99_us"`
	RoundRPS  []float64 `json:"round_req_per_sec"`
	RoundP50  []float64 `json:"round_p50_us"`
	// NewConnections the load clients opened on this path so far (the
	// check and warm-ups included): keep-alive working means about the
	// largest concurrency.
	NewConnections int64 `json:"new_connections"`
	Capped         bool  `json:"capped,omitempty"`
	// CPU per request, by process: the load generator, the upstream (this
	// program), and the proxy serving the path (Portcullis, or nginx's
	// master and workers; clock-tick resolution).
	LoadCPUMicros     float64 `json:"load_cpu_us_per_req"`
	UpstreamCPUMicros float64 `json:"upstream_cpu_us_per_req"`
	ProxyCPUMicros    float64 `json:"proxy_cpu_us_per_req"`

	loadCPU, upCPU, procCPU time.Duration
	roundP99                []float64
}

func (p *pathResult) add(r roundResult, upCPU, procCPU time.Duration) {
	p.Requests += r.Requests
	p.Failures += r.Failures
	if p.FirstErr == "" {
		p.FirstErr = r.FirstErr
	}
	p.Seconds += r.Elapsed.Seconds()
	p.RoundRPS = append(p.RoundRPS, float64(r.Requests)/r.Elapsed.Seconds())
	sorted := slices.Sorted(slices.Values(r.Latencies))
	p.RoundP50 = append(p.RoundP50, micros(stats.Percentile(sorted, 50)))
	p.roundP99 = append(p.roundP99, micros(stats.Percentile(sorted, 99)))
	p.Capped = p.Capped || r.Capped
	p.loadCPU += r.LoadCPU
	p.upCPU += upCPU
	p.procCPU += procCPU
}

func (p *pathResult) finish(lat []time.Duration, dials int64) {
	slices.Sort(lat)
	p.ReqPerSec = float64(p.Requests) / p.Seconds
	p.P50Micros = micros(stats.Percentile(lat, 50))
	p.P99Micros = micros(stats.Percentile(lat, 99))
	p.NewConnections = dials
	if p.Requests > 0 {
		n := float64(p.Requests)
		p.LoadCPUMicros = micros(p.loadCPU) / n
		p.UpstreamCPUMicros = micros(p.upCPU) / n
		p.ProxyCPUMicros = micros(p.procCPU) / n
	}
}

// totalCPUMicros is every process's CPU per request on this path.
func (p *pathResult) totalCPUMicros() float64 {
	return p.LoadCPUMicros + p.UpstreamCPUMicros + p.ProxyCPUMicros
}

// cpuOverDirect is the CPU per request the path spends beyond the direct
// path's: what the proxy costs, including what it makes the load
// generator and the upstream spend (a second connection each way).
func (p *pathResult) cpuOverDirect(direct *pathResult) float64 {
	return p.totalCPUMicros() - direct.totalCPUMicros()
}

// ratio is one derived figure, with the target where it has one.
type ratio struct {
	Name   string    `json:"name"`
	Value  float64   `json:"value"`
	Unit   string    `json:"unit"` // "x" or "µs"
	Rounds []float64 `json:"rounds,omitempty"`
	Median float64   `json:"median_of_rounds,omitempty"`
	Target string    `json:"target,omitempty"`
	Met    *bool     `json:"met,omitempty"`
}

func (r *level) path(name string) *pathResult {
	for _, p := range r.Paths {
		if p.Path == name {
			return p
		}
	}
	return nil
}

// ratios derives the comparisons between the paths that were measured.
func (r *level) ratios() {
	direct, ng := r.path(pathDirect), r.path(pathNginx)
	var portcullises, proxies []*pathResult // the Portcullis paths; and nginx
	for _, name := range []string{pathPortcullis, pathBaseline} {
		if p := r.path(name); p != nil {
			portcullises = append(portcullises, p)
		}
	}
	proxies = portcullises
	if ng != nil {
		proxies = append(slices.Clone(proxies), ng)
	}
	relay := r.path(pathRelay)
	if relay != nil {
		proxies = append(slices.Clone(proxies), relay)
	}
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
	if ng != nil {
		for _, p := range portcullises {
			v := p.ReqPerSec / ng.ReqPerSec
			rt := ratio{Name: p.Path + "/nginx throughput", Value: v, Unit: "x", Rounds: perRound(p.RoundRPS, ng.RoundRPS, div)}
			if r.Concurrency > 1 {
				// The target is at saturation; one client measures latency.
				rt.Target, rt.Met = fmt.Sprintf("≥ %.1f", targetThroughputVsNginx), met(v >= targetThroughputVsNginx)
			}
			r.Ratios = append(r.Ratios, rt)
		}
	}
	if ng != nil && relay != nil {
		r.Ratios = append(r.Ratios, ratio{Name: "relay/nginx throughput", Value: relay.ReqPerSec / ng.ReqPerSec, Unit: "x",
			Rounds: perRound(relay.RoundRPS, ng.RoundRPS, div)})
	}
	if relay != nil {
		for _, p := range portcullises {
			r.Ratios = append(r.Ratios, ratio{Name: p.Path + "/relay throughput", Value: p.ReqPerSec / relay.ReqPerSec, Unit: "x",
				Rounds: perRound(p.RoundRPS, relay.RoundRPS, div)})
		}
	}
	if pc, bl := r.path(pathPortcullis), r.path(pathBaseline); pc != nil && bl != nil {
		r.Ratios = append(r.Ratios, ratio{Name: "portcullis/baseline throughput", Value: pc.ReqPerSec / bl.ReqPerSec, Unit: "x",
			Rounds: perRound(pc.RoundRPS, bl.RoundRPS, div)})
	}
	defer func() {
		for i := range r.Ratios {
			if len(r.Ratios[i].Rounds) > 0 {
				r.Ratios[i].Median = median(r.Ratios[i].Rounds)
			}
		}
	}()
	if direct == nil {
		return
	}
	for _, p := range proxies {
		r.Ratios = append(r.Ratios, ratio{Name: p.Path + "/direct throughput", Value: p.ReqPerSec / direct.ReqPerSec, Unit: "x",
			Rounds: perRound(p.RoundRPS, direct.RoundRPS, div)})
	}
	for _, p := range proxies {
		v := p.P50Micros - direct.P50Micros
		rt := ratio{Name: p.Path + " added p50 over direct", Value: v, Unit: "µs", Rounds: perRound(p.RoundP50, direct.RoundP50, sub)}
		if p != ng && p != relay && r.Concurrency == 1 {
			// Without queueing: at saturation the p50 is mostly waiting
			// for a core, and follows the throughput.
			rt.Target, rt.Met = fmt.Sprintf("≤ %d µs", targetAddedP50Micros), met(v <= targetAddedP50Micros)
		}
		r.Ratios = append(r.Ratios, rt)
	}
	for _, p := range proxies {
		r.Ratios = append(r.Ratios, ratio{Name: p.Path + " added p99 over direct", Value: p.P99Micros - direct.P99Micros, Unit: "µs"})
	}
	for _, p := range proxies {
		r.Ratios = append(r.Ratios, ratio{Name: p.Path + " CPU per request over direct", Value: p.cpuOverDirect(direct), Unit: "µs"})
	}
}

// proxy is the report of the portcullis process on path.
func (r *results) proxy(path string) *portcullis {
	for _, px := range r.Proxies {
		if px.Path == path {
			return px
		}
	}
	return nil
}

func (r *results) failed() int {
	n := 0
	for _, lv := range r.Levels {
		for _, p := range lv.Paths {
			n += p.Failures
		}
	}
	return n
}

// requests is how many requests the rounds sent on path, at every level.
func (r *results) requests(path string) int {
	n := 0
	for _, lv := range r.Levels {
		if p := lv.path(path); p != nil {
			n += p.Requests
		}
	}
	return n
}

func (r *results) writeTable(w io.Writer) error {
	e := r.Env
	fmt.Fprintf(w, "\n%s, load average %s", e.Machine, e.Load)
	if e.Nginx != "" {
		fmt.Fprintf(w, ", %s", e.Nginx)
	}
	fmt.Fprintf(w, "\nupstream %s, %s per path in %d interleaved rounds, warm-up %s\n", r.Upstream, r.Duration, r.Rounds, r.Warmup)
	for _, lv := range r.Levels {
		if err := lv.writeTable(w); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	for _, px := range r.Proxies {
		fmt.Fprintf(w, "%s: %s, %.1f MiB\n", px.Path, px.Binary, float64(px.BinaryBytes)/(1<<20))
		if px.Idle != nil {
			fmt.Fprintf(w, "  idle:          %s\n", px.Idle)
		}
		if px.AfterLoad != nil {
			fmt.Fprintf(w, "  after load:    %s\n", px.AfterLoad)
		}
		fmt.Fprintf(w, "  decision log:  %d records for %d measured requests (and the checks and warm-ups)\n", px.DecisionRecords, r.requests(px.Path))
	}
	if r.NginxIdle != nil {
		fmt.Fprintf(w, "nginx idle:      %s\n", r.NginxIdle)
	}
	return nil
}

func (lv *level) writeTable(w io.Writer) error {
	fmt.Fprintf(w, "\n%d client(s):\n", lv.Concurrency)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\treq/s\tp50 µs\tp99 µs\trequests\tfailures\tnew conns\tCPU µs/req: load\tupstream\tproxy\tper-round req/s\t")
	for _, p := range lv.Paths {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%s\t\n", p.Path, p.ReqPerSec, p.P50Micros, p.P99Micros,
			p.Requests, p.Failures, p.NewConnections, p.LoadCPUMicros, p.UpstreamCPUMicros, p.ProxyCPUMicros, joinFloats(p.RoundRPS, "%.0f"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, rt := range lv.Ratios {
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
			rounds = "median " + fmt.Sprintf(format, rt.Median) + ", rounds " + joinFloats(rt.Rounds, format)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rt.Name, val, rounds, verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range lv.Paths {
		if p.FirstErr != "" {
			fmt.Fprintf(w, "%s: first failure: %s\n", p.Path, p.FirstErr)
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

// median is the middle of vs (the mean of the middle two for an even
// count): with many short rounds on a busy machine, the figure least
// moved by a burst of other work.
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
