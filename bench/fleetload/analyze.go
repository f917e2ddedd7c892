package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/stats"
)

// results is what the run reports (-json prints it as is).
type results struct {
	Env            benchenv.Machine `json:"env"`
	Replicas       int              `json:"replicas"`
	Proxies        int              `json:"proxies"`
	FleetSandboxes int              `json:"fleet_sandboxes"`
	Sandboxes      int              `json:"sandboxes"`
	OpsPerSec      float64          `json:"ops_per_sec"`
	SetEvery       string           `json:"set_every"`
	Duration       string           `json:"duration"`
	KillEvery      string           `json:"kill_every"`

	Minutes []minuteRow `json:"minutes"`
	Kills   []killRow   `json:"kills"`

	// Acknowledged operations against what the history holds.
	Acked      int            `json:"acked"`
	Found      int            `json:"found"`
	Lost       int            `json:"lost"`
	LostDetail []string       `json:"lost_detail,omitempty"`
	Failed     int            `json:"failed"`
	FailedBy   map[string]int `json:"failed_by,omitempty"` // by gRPC code and message
	Shed       int            `json:"shed"`                // proposals not started: 256 in flight
	// Regressions: a proxy's timeline holding a version older than one it
	// held before (the simulated proxy refuses them, as the real one does:
	// this checks its timeline). OlderOffered: versions older than the one
	// held that a replica offered a reconnecting proxy, each refused
	// (NACKed); forks: the held version's number with another hash.
	Regressions  int `json:"regressions"`
	OlderOffered int `json:"older_offered"`
	Forks        int `json:"forks"`

	AuditOK      bool   `json:"audit_ok"`
	AuditEntries int64  `json:"audit_entries"`
	AuditProblem string `json:"audit_problem,omitempty"`

	FinalConverged  bool     `json:"final_converged"`
	FinalConvergeMs float64  `json:"final_converge_ms"`
	FinalMissing    []string `json:"final_missing,omitempty"`
	// Where the proxies' streams were at the end, by replica.
	FinalByReplica  []int          `json:"final_by_replica"`
	ReplicaWarnings []int          `json:"replica_warnings"` // warning and error log lines of each replica, over all its runs
	ReplicaLog      map[string]int `json:"replica_log"`      // those lines by level and message, all replicas
}

type opCount struct {
	Acked  int `json:"acked"`
	Failed int `json:"failed"`
}

// minuteRow is one minute of the run.
type minuteRow struct {
	Minute int                `json:"minute"`
	Ops    map[string]opCount `json:"ops"`
	Acked  int                `json:"acked"`
	Failed int                `json:"failed"`
	// Operations acknowledged by another replica than the first tried.
	FailedOver int `json:"failed_over"`
	// Push of the policy sets committed this minute: commit → each ACK of
	// a proxy connected before the commit (p50, p99, max), and commit →
	// the last such ACK of the version (p99 over versions).
	SetVersions int     `json:"set_versions"`
	SetAcks     int     `json:"set_acks"`
	AckP50Ms    float64 `json:"ack_p50_ms"`
	AckP99Ms    float64 `json:"ack_p99_ms"`
	AckMaxMs    float64 `json:"ack_max_ms"`
	AllAckP99Ms float64 `json:"all_ack_p99_ms"`
	// The store stamps a version with its transaction's start (Postgres's
	// now()), so the figures above include the committing transaction;
	// from the set's answer to each such ACK (p99) leaves it out (an ACK
	// can come before the answer: negative).
	AnswerAckP99Ms float64 `json:"answer_ack_p99_ms"`
	// The same per-ACK p99 for the versions the approvals applied.
	ProposalAcks     int     `json:"proposal_acks"`
	ProposalAckP99Ms float64 `json:"proposal_ack_p99_ms"`
	// Streams connected again after one ended, and the proxies they were.
	Reconnects         int `json:"reconnects"`
	ReconnectedProxies int `json:"reconnected_proxies"`
	// Where the CPU went.
	CPU cores `json:"cpu_cores"`
}

// killRow is one kill and what it cost the proxies.
type killRow struct {
	Minute    int     `json:"minute"`
	AtS       float64 `json:"at_s"` // since the workload started
	Replica   int     `json:"replica"`
	RestartMs float64 `json:"restart_ms"` // SIGKILL → the restarted replica serving
	// Proxies connected to the killed replica at the kill.
	OnReplica int `json:"on_replica"`
	// Kill → every proxy connected (the killed replica's on a new stream)
	// and holding its sandbox's version current at the kill; NotBack is
	// how many never were by the end.
	AllBackMs float64 `json:"all_back_ms"`
	NotBack   int     `json:"not_back"`
	Err       string  `json:"err,omitempty"`
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }

// analyze turns what the run recorded into the report.
func analyze(cfg config, t0 time.Time, kills []kill, ops []opResult, proxies []proxyLog, h *history) *results {
	res := &results{
		Env: benchenv.Describe(), Replicas: cfg.replicas, Proxies: cfg.proxies, FleetSandboxes: cfg.fleetSandboxes,
		Sandboxes: cfg.sandboxes, OpsPerSec: cfg.opsRate, SetEvery: cfg.setEvery.String(), Duration: cfg.duration.String(),
		KillEvery: cfg.killEvery.String(), FailedBy: map[string]int{},
	}
	minutes := max(1, int(math.Ceil(cfg.duration.Minutes())))
	minuteOf := func(t time.Time) int { return min(max(0, int(t.Sub(t0)/time.Minute)), minutes-1) }
	res.Minutes = make([]minuteRow, minutes)
	for i := range res.Minutes {
		res.Minutes[i] = minuteRow{Minute: i + 1, Ops: map[string]opCount{}}
	}

	// Operations, and the acknowledged ones against the history.
	for _, op := range ops {
		m := &res.Minutes[minuteOf(op.End)]
		c := m.Ops[op.Kind]
		if op.Err != "" {
			c.Failed++
			m.Failed++
			res.Failed++
			res.FailedBy[op.Kind+": "+shorten(op.Err)]++
		} else {
			c.Acked++
			m.Acked++
			res.Acked++
			if op.FailedOver {
				m.FailedOver++
			}
			if ok, why := h.found(op); ok {
				res.Found++
			} else if len(res.LostDetail) < 10 {
				res.LostDetail = append(res.LostDetail, why)
			}
		}
		m.Ops[op.Kind] = c
	}
	res.Lost = res.Acked - res.Found
	if h.audit != nil {
		res.AuditOK, res.AuditEntries, res.AuditProblem = h.audit.GetOk(), h.audit.GetEntries(), h.audit.GetProblem()
	}

	// Pushes: each ACK on a stream connected before the version's commit.
	type key struct {
		sandbox string
		version uint32
	}
	answered := map[key]time.Time{} // acknowledged sets: when the answer came
	for _, op := range ops {
		if op.Kind == opSet && op.Err == "" {
			answered[key{op.Sandbox, op.Version}] = op.End
		}
	}
	answerAcks := make([][]time.Duration, minutes)
	setAcks := make([][]time.Duration, minutes)
	propAcks := make([][]time.Duration, minutes)
	lastAck := map[key]time.Duration{}
	reconnected := make([]map[string]bool, minutes)
	for i := range reconnected {
		reconnected[i] = map[string]bool{}
	}
	res.FinalByReplica = make([]int, cfg.replicas)
	for _, p := range proxies {
		ups := 0
		up, at := false, 0
		var held uint32
		for _, e := range p.Events {
			if e.K == evUp || e.K == evApply {
				if e.V < held {
					res.Regressions++
				}
				held = max(held, e.V)
			}
			switch e.K {
			case evUp:
				if ups > 0 {
					m := minuteOf(time.Unix(0, e.T))
					res.Minutes[m].Reconnects++
					reconnected[m][p.ID] = true
				}
				ups++
				up, at = true, e.R
			case evDown:
				up = false
			case evOlder:
				res.OlderOffered++
			case evForked:
				res.Forks++
			case evApply:
				if !e.Live {
					continue
				}
				lag := time.Duration(e.T - e.C)
				committed := time.Unix(0, e.C)
				switch h.versions[p.Sandbox][e.V].Source {
				case "set":
					m := minuteOf(committed)
					setAcks[m] = append(setAcks[m], lag)
					k := key{p.Sandbox, e.V}
					lastAck[k] = max(lastAck[k], lag)
					if at, ok := answered[k]; ok {
						answerAcks[m] = append(answerAcks[m], time.Unix(0, e.T).Sub(at))
					}
				case "proposal":
					m := minuteOf(committed)
					propAcks[m] = append(propAcks[m], lag)
				}
			}
		}
		if up {
			res.FinalByReplica[at]++
		}
	}
	allAcks := make([][]time.Duration, minutes)
	for k, lag := range lastAck {
		m := minuteOf(h.versions[k.sandbox][k.version].Created)
		allAcks[m] = append(allAcks[m], lag)
	}
	for i := range res.Minutes {
		m := &res.Minutes[i]
		slices.Sort(setAcks[i])
		slices.Sort(propAcks[i])
		slices.Sort(allAcks[i])
		slices.Sort(answerAcks[i])
		m.AnswerAckP99Ms = ms(stats.Percentile(answerAcks[i], 99))
		m.SetAcks, m.SetVersions = len(setAcks[i]), len(allAcks[i])
		m.AckP50Ms = ms(stats.Percentile(setAcks[i], 50))
		m.AckP99Ms = ms(stats.Percentile(setAcks[i], 99))
		m.AckMaxMs = ms(stats.Percentile(setAcks[i], 100))
		m.AllAckP99Ms = ms(stats.Percentile(allAcks[i], 99))
		m.ProposalAcks = len(propAcks[i])
		m.ProposalAckP99Ms = ms(stats.Percentile(propAcks[i], 99))
		m.ReconnectedProxies = len(reconnected[i])
	}

	for _, k := range kills {
		res.Kills = append(res.Kills, backAfter(k, t0, proxies, h, minuteOf(k.At)))
	}
	return res
}

// backAfter measures kill k: for each proxy, from the kill until it was
// connected — on a new stream if it was on the killed replica — and held
// at least the version of its sandbox current at the kill; the slowest
// proxy's time is the fleet's.
func backAfter(k kill, t0 time.Time, proxies []proxyLog, h *history, minute int) killRow {
	row := killRow{Minute: minute + 1, AtS: math.Round(k.At.Sub(t0).Seconds()*10) / 10, Replica: k.Replica,
		RestartMs: ms(k.Ready.Sub(k.At)), Err: k.Err}
	kt := k.At.UnixNano()
	var slowest time.Duration
	for _, p := range proxies {
		target := h.currentAt(p.Sandbox, k.At)
		up, rep, held := false, -1, uint32(0)
		i := 0
		for ; i < len(p.Events) && p.Events[i].T <= kt; i++ {
			up, rep, held = apply(p.Events[i], up, rep, held)
		}
		affected := up && rep == k.Replica
		if affected {
			row.OnReplica++
		}
		fresh := false
		back := time.Duration(-1)
		if up && !affected && held >= target {
			back = 0
		}
		for ; back < 0 && i < len(p.Events); i++ {
			e := p.Events[i]
			up, rep, held = apply(e, up, rep, held)
			if e.K == evUp {
				fresh = true
			}
			if up && (fresh || !affected) && held >= target {
				back = time.Duration(e.T - kt)
			}
		}
		if back < 0 {
			row.NotBack++
			continue
		}
		slowest = max(slowest, back)
	}
	row.AllBackMs = ms(slowest)
	if row.NotBack > 0 {
		row.AllBackMs = -1
	}
	return row
}

// apply moves a proxy's state (connected, replica, version held) past e.
func apply(e event, up bool, rep int, held uint32) (bool, int, uint32) {
	switch e.K {
	case evUp:
		return true, e.R, max(held, e.V)
	case evDown:
		return false, rep, held
	case evApply:
		return up, rep, max(held, e.V)
	}
	return up, rep, held
}

// shorten keeps an error's first line, without the numbers that make
// each one unique, so that failures group by kind.
func shorten(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// topFailures returns the n most frequent failure kinds.
func topFailures(by map[string]int, n int) []string {
	keys := slices.Collect(maps.Keys(by))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(by[b], by[a]), cmp.Compare(a, b)) })
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%5d × %s", by[k], k))
	}
	return out
}
