package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

// The targets for the push.
var targetP99Ms = map[int]float64{1000: 50, 10000: 500} // streams → p99 of commit-to-ACK, at most

const targetBytesPerIdleStream = 16 << 10 // gateway heap+stack per idle stream, at most

// results is one run's report.
type results struct {
	Env          environment    `json:"environment"`
	Store        string         `json:"store"`
	Commits      int            `json:"commits"`
	Settle       string         `json:"settle"`
	MessageBytes int            `json:"message_bytes"`
	Push         []*pushResult  `json:"push"`
	Floor        []*floorResult `json:"floor,omitempty"`
	Targets      []target       `json:"targets"`
}

// environment describes where the figures come from.
type environment struct {
	benchenv.Machine
	FileLimit uint64 `json:"rlimit_nofile"`
}

// pushResult is one stream count and mode.
type pushResult struct {
	Streams        int     `json:"streams"`
	PerConn        int     `json:"streams_per_connection"`
	Conns          int     `json:"connections"`
	ConnectSeconds float64 `json:"connect_seconds"`
	// ConnectCPUMicrosPerStream is the gateway process's CPU while the
	// streams connected (hello, token and CA lookups, first version).
	ConnectCPUMicrosPerStream float64 `json:"connect_gateway_cpu_us_per_stream"`
	// Memory is the gateway process's growth per stream from before the
	// streams connected to when they were all connected and idle;
	// ChildMemory the clients process's (grpc-go clients).
	Memory        perStream `json:"gateway_per_idle_stream"`
	ChildMemory   perStream `json:"clients_per_idle_stream"`
	GatewayBefore memSample `json:"gateway_before"`
	GatewayIdle   memSample `json:"gateway_idle"`

	Samples []pushSample `json:"commits"`

	// Medians over the commits of each commit's figure.
	Arrival                  dist    `json:"median_arrival"`
	Ack                      dist    `json:"median_ack"`
	CommitMs                 float64 `json:"median_commit_rpc_ms"`
	GatewayMeanMs            float64 `json:"median_gateway_ack_mean_ms"`
	GatewayMaxLeMs           float64 `json:"median_gateway_ack_max_le_ms"`
	CPUMicrosPerStream       float64 `json:"median_gateway_cpu_us_per_stream"`
	ClientCPUMicrosPerStream float64 `json:"median_clients_cpu_us_per_stream"`
	// VsFloor divides the push's figures by the TCP floor's at the same
	// count (commit-to-ACK over write-to-reply).
	VsFloor *dist `json:"vs_floor,omitempty"`
}

// pushSample is one commit.
type pushSample struct {
	Version uint32 `json:"version"`
	// CommitMs is the SetPolicy call (parse, validate, store, sign, wake
	// the streams); the times below count from its start.
	CommitMs float64 `json:"commit_rpc_ms"`
	// Arrival: a client has read the version; Ack: its ACK went to grpc-go.
	Arrival dist     `json:"arrival"`
	Ack     dist     `json:"ack"`
	Gateway ackDelta `json:"gateway_acks"`
	// CPUMicrosPerStream is the gateway process's CPU from the commit call
	// to the last ACK sent, per stream; ClientCPUMicrosPerStream the
	// clients process's, from arming to the last ACK.
	CPUMicrosPerStream       float64 `json:"gateway_cpu_us_per_stream"`
	ClientCPUMicrosPerStream float64 `json:"clients_cpu_us_per_stream"`
}

// floorResult is the plain-TCP floor at one count.
type floorResult struct {
	Conns              int           `json:"connections"`
	MessageBytes       int           `json:"message_bytes"`
	Samples            []floorSample `json:"rounds"`
	Arrival            dist          `json:"median_arrival"`
	Reply              dist          `json:"median_reply"`
	CPUMicrosPerStream float64       `json:"median_cpu_us_per_connection"`
	// ClientCPUMicrosPerStream is the clients process's (the readers).
	ClientCPUMicrosPerStream float64 `json:"median_clients_cpu_us_per_connection"`
}

type floorSample struct {
	// Arrival: a reader has read the whole message; Reply: its one-byte
	// answer reached this process.
	Arrival                  dist    `json:"arrival"`
	Reply                    dist    `json:"reply"`
	CPUMicrosPerStream       float64 `json:"cpu_us_per_connection"`
	ClientCPUMicrosPerStream float64 `json:"clients_cpu_us_per_connection"`
}

// target is one of the targets and whether this run met it.
type target struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target"`
	Met    bool    `json:"met"`
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianOf[T any](xs []T, f func(T) float64) float64 {
	vs := make([]float64, len(xs))
	for i, x := range xs {
		vs[i] = f(x)
	}
	return median(vs)
}

func medianDist[T any](xs []T, f func(T) dist) dist {
	return dist{
		Min: medianOf(xs, func(x T) float64 { return f(x).Min }),
		P50: medianOf(xs, func(x T) float64 { return f(x).P50 }),
		P99: medianOf(xs, func(x T) float64 { return f(x).P99 }),
		Max: medianOf(xs, func(x T) float64 { return f(x).Max }),
	}
}

// derive computes the medians, the ratios to the floor and the targets.
func (r *results) derive() {
	for _, f := range r.Floor {
		f.Arrival = medianDist(f.Samples, func(s floorSample) dist { return s.Arrival })
		f.Reply = medianDist(f.Samples, func(s floorSample) dist { return s.Reply })
		f.CPUMicrosPerStream = medianOf(f.Samples, func(s floorSample) float64 { return s.CPUMicrosPerStream })
		f.ClientCPUMicrosPerStream = medianOf(f.Samples, func(s floorSample) float64 { return s.ClientCPUMicrosPerStream })
	}
	for _, p := range r.Push {
		p.Arrival = medianDist(p.Samples, func(s pushSample) dist { return s.Arrival })
		p.Ack = medianDist(p.Samples, func(s pushSample) dist { return s.Ack })
		p.CommitMs = medianOf(p.Samples, func(s pushSample) float64 { return s.CommitMs })
		p.GatewayMeanMs = medianOf(p.Samples, func(s pushSample) float64 { return s.Gateway.MeanMs })
		p.GatewayMaxLeMs = medianOf(p.Samples, func(s pushSample) float64 { return s.Gateway.MaxLeMs })
		p.CPUMicrosPerStream = medianOf(p.Samples, func(s pushSample) float64 { return s.CPUMicrosPerStream })
		p.ClientCPUMicrosPerStream = medianOf(p.Samples, func(s pushSample) float64 { return s.ClientCPUMicrosPerStream })
		if f := r.floorFor(p.Streams); f != nil {
			p.VsFloor = &dist{Min: p.Ack.Min / f.Reply.Min, P50: p.Ack.P50 / f.Reply.P50, P99: p.Ack.P99 / f.Reply.P99, Max: p.Ack.Max / f.Reply.Max}
		}
	}
	for _, p := range r.Push {
		if want, ok := targetP99Ms[p.Streams]; ok {
			r.Targets = append(r.Targets, target{
				Name:  fmt.Sprintf("p99 commit→ACK, %s streams, %s", thousands(p.Streams), p.mode()),
				Value: p.Ack.P99, Unit: "ms", Target: fmt.Sprintf("≤ %g ms", want), Met: p.Ack.P99 <= want,
			})
		}
	}
	for _, p := range r.Push {
		r.Targets = append(r.Targets, target{
			Name:  fmt.Sprintf("gateway heap+stack per idle stream, %s streams, %s", thousands(p.Streams), p.mode()),
			Value: p.Memory.HeapStackBytes / 1024, Unit: "KiB", Target: fmt.Sprintf("≤ %d KiB", targetBytesPerIdleStream>>10),
			Met: p.Memory.HeapStackBytes <= targetBytesPerIdleStream,
		})
	}
}

func (r *results) floorFor(n int) *floorResult {
	for _, f := range r.Floor {
		if f.Conns == n {
			return f
		}
	}
	return nil
}

func (p *pushResult) mode() string {
	if p.PerConn == 1 {
		return "one connection per stream"
	}
	return fmt.Sprintf("%d streams per connection", p.PerConn)
}

func (r *results) writeTable(w io.Writer) error {
	e := r.Env
	fmt.Fprintf(w, "\n%s, RLIMIT_NOFILE %d\n", e.Machine, e.FileLimit)
	fmt.Fprintf(w, "store %s; pushed message %d bytes (StreamPolicyResponse); %d commits per row, %s apart; figures are medians over the commits\n\n",
		r.Store, r.MessageBytes, r.Commits, r.Settle)

	fmt.Fprintln(w, "Push: from the SetPolicy call to each stream's ACK (ms)")
	err := table(w, "streams\tconns\tcommit RPC\tfirst ACK\tp50\tp99\tmax\tarrival p99\tgw ACK lag mean\tgw last ACK ≤\tgw CPU µs/stream\tclients CPU µs/stream\tp99 per commit\t", func(tw io.Writer) {
		for _, p := range r.Push {
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%g\t%.0f\t%.0f\t%s\t\n",
				thousands(p.Streams), thousands(p.Conns), p.CommitMs, p.Ack.Min, p.Ack.P50, p.Ack.P99, p.Ack.Max, p.Arrival.P99,
				p.GatewayMeanMs, p.GatewayMaxLeMs, p.CPUMicrosPerStream, p.ClientCPUMicrosPerStream,
				joinFloats(p.Samples, func(s pushSample) float64 { return s.Ack.P99 }, "%.1f"))
		}
	})
	if err != nil {
		return err
	}

	if len(r.Floor) > 0 {
		fmt.Fprintf(w, "\nFloor: the same %d bytes written to N plain TCP connections, each answering 1 byte (ms)\n", r.MessageBytes)
		err := table(w, "conns\tfirst reply\tp50\tp99\tmax\tarrival p99\tCPU µs/conn\tclients CPU µs/conn\tp99 per round\t", func(tw io.Writer) {
			for _, f := range r.Floor {
				fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%s\t\n",
					thousands(f.Conns), f.Reply.Min, f.Reply.P50, f.Reply.P99, f.Reply.Max, f.Arrival.P99, f.CPUMicrosPerStream, f.ClientCPUMicrosPerStream,
					joinFloats(f.Samples, func(s floorSample) float64 { return s.Reply.P99 }, "%.2f"))
			}
		})
		if err != nil {
			return err
		}
		fmt.Fprintln(w, "\nPush ÷ floor (commit→ACK over write→reply, same N)")
		err = table(w, "streams\tconns\tp50\tp99\tmax\t", func(tw io.Writer) {
			for _, p := range r.Push {
				if p.VsFloor == nil {
					continue
				}
				fmt.Fprintf(tw, "%s\t%s\t%.1f×\t%.1f×\t%.1f×\t\n", thousands(p.Streams), thousands(p.Conns), p.VsFloor.P50, p.VsFloor.P99, p.VsFloor.Max)
			}
		})
		if err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "\nMemory per idle stream (growth from before connecting to all connected and idle, after GC)")
	err = table(w, "streams\tconns\tgw heap+stack B\tgw heap B\tgw stack B\tgw goroutines\tgw stack start B\tgw RSS B\tclients heap+stack B\tconnect s\tgw connect CPU µs/stream\t", func(tw io.Writer) {
		for _, p := range r.Push {
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.0f\t%.2f\t%d\t%.0f\t%.0f\t%.1f\t%.0f\t\n", thousands(p.Streams), thousands(p.Conns),
				p.Memory.HeapStackBytes, p.Memory.HeapBytes, p.Memory.StackBytes, p.Memory.Goroutines, p.GatewayIdle.StackStart, p.Memory.RSSBytes,
				p.ChildMemory.HeapStackBytes, p.ConnectSeconds, p.ConnectCPUMicrosPerStream)
		}
	})
	if err != nil {
		return err
	}

	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, t := range r.Targets {
		verdict := "missed"
		if t.Met {
			verdict = "met"
		}
		fmt.Fprintf(tw, "%s\t%.1f %s\ttarget %s: %s\n", t.Name, t.Value, t.Unit, t.Target, verdict)
	}
	return tw.Flush()
}

// table writes a right-aligned table: the header row, then the rows
// that fill writes.
func table(w io.Writer, header string, fill func(tw io.Writer)) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, header)
	fill(tw)
	return tw.Flush()
}

func joinFloats[T any](xs []T, f func(T) float64, format string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf(format, f(x))
	}
	return strings.Join(s, " ")
}

// thousands formats n with commas: 10,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
