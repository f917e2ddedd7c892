package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/stats"
)

// report is one run's figures (-json prints it).
type report struct {
	Machine string `json:"machine"`
	Proxies int    `json:"proxies"`
	Calls   int    `json:"calls_held_at_once"`
	Rounds  int    `json:"rounds"`
	// ApprovalToAnswer: just before ApproveCall is sent → the agent's
	// request answered with the server's result.
	ApprovalToAnswer latency `json:"approval_to_answer"`
	// CommittedToAnswer: ApproveCall answered (the decision stored) → the
	// agent's request answered.
	CommittedToAnswer latency `json:"committed_to_answer"`
	ApproveRPC        latency `json:"approve_rpc"`
	// PerCallKiB is, per round, the proxies' RSS growth per held call.
	PerCallKiB []float64 `json:"proxy_rss_kib_per_held_call"`
	// Slope is one proxy's RSS with none, half and all of -memory-calls
	// held.
	Slope *memSlope `json:"memory_slope,omitempty"`
	// Without and With are the side-by-side rounds of lookup_order calls:
	// no call held, and every call held.
	Without []sideRound `json:"side_without_held"`
	With    []sideRound `json:"side_with_held"`
}

type memSlope struct {
	Calls   int `json:"calls"`
	NoneKiB int `json:"rss_kib_none_held"`
	HalfKiB int `json:"rss_kib_half_held"`
	AllKiB  int `json:"rss_kib_all_held"`
	// Live*: the Go heap and goroutine stacks in use after a collection.
	LiveNoneKiB int `json:"live_kib_none_held"`
	LiveHalfKiB int `json:"live_kib_half_held"`
	LiveAllKiB  int `json:"live_kib_all_held"`
}

type latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

type sideRound struct {
	PerSecond float64 `json:"calls_per_second"`
	Latency   latency `json:"latency"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func summarize(ds []time.Duration) latency {
	slices.Sort(ds)
	if len(ds) == 0 {
		return latency{}
	}
	return latency{N: len(ds), P50: ms(stats.Percentile(ds, 50)), P90: ms(stats.Percentile(ds, 90)),
		P99: ms(stats.Percentile(ds, 99)), Max: ms(ds[len(ds)-1])}
}

// median of the rounds' values got by f.
func median(rs []sideRound, f func(sideRound) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "heldcalls: %d proxies (one sandbox each), %d calls held at once, %d rounds\n%s\n\n", r.Proxies, r.Calls, r.Rounds, r.Machine)
	l := func(name string, x latency, target string) {
		fmt.Fprintf(w, "%-28s n=%-5d p50 %7.2f ms  p90 %7.2f ms  p99 %7.2f ms  max %7.2f ms  %s\n", name, x.N, x.P50, x.P90, x.P99, x.Max, target)
	}
	l("approval → agent's answer", r.ApprovalToAnswer, "(target: p99 ≤ 50 ms)")
	l("decision stored → answer", r.CommittedToAnswer, "(target: p99 ≤ 50 ms)")
	l("ApproveCall RPC", r.ApproveRPC, "")
	fmt.Fprintf(w, "\nproxy RSS per held call (KiB), per round: ")
	for _, k := range r.PerCallKiB {
		fmt.Fprintf(w, "%.1f ", k)
	}
	if m := r.Slope; m != nil {
		half := m.Calls / 2
		fmt.Fprintf(w, "\none proxy, RSS with 0 / %d / %d calls held: %d / %d / %d KiB: %.1f KiB a call overall, %.1f KiB a call from %d to %d\n",
			half, m.Calls, m.NoneKiB, m.HalfKiB, m.AllKiB, float64(m.AllKiB-m.NoneKiB)/float64(m.Calls),
			float64(m.AllKiB-m.HalfKiB)/float64(m.Calls-half), half, m.Calls)
		fmt.Fprintf(w, "one proxy, live heap and stacks with 0 / %d / %d calls held: %d / %d / %d KiB: %.1f KiB a call\n",
			half, m.Calls, m.LiveNoneKiB, m.LiveHalfKiB, m.LiveAllKiB, float64(m.LiveAllKiB-m.LiveNoneKiB)/float64(m.Calls))
	}
	fmt.Fprintf(w, "\n\nside by side: lookup_order (no review) through the same proxies\n")
	fmt.Fprintf(w, "%-22s %12s %10s %10s\n", "", "calls/s", "p50 ms", "p99 ms")
	for i := range r.Without {
		fmt.Fprintf(w, "round %d without held    %12.0f %10.2f %10.2f\n", i+1, r.Without[i].PerSecond, r.Without[i].Latency.P50, r.Without[i].Latency.P99)
		fmt.Fprintf(w, "round %d with %4d held  %12.0f %10.2f %10.2f\n", i+1, r.Calls, r.With[i].PerSecond, r.With[i].Latency.P50, r.With[i].Latency.P99)
	}
	rate := func(s sideRound) float64 { return s.PerSecond }
	p50 := func(s sideRound) float64 { return s.Latency.P50 }
	p99 := func(s sideRound) float64 { return s.Latency.P99 }
	fmt.Fprintf(w, "with ÷ without (medians): calls/s %.2f×, p50 %.2f×, p99 %.2f×\n",
		median(r.With, rate)/median(r.Without, rate), median(r.With, p50)/median(r.Without, p50), median(r.With, p99)/median(r.Without, p99))
}
