package main

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

// cpuSample is where the machine's CPU had gone at one moment: the
// replicas' processes, Postgres's (every backend: on a shared machine,
// other clients' too), this process (the workload) and the proxies'
// process; and the load average, since the machine is shared.
type cpuSample struct {
	at       time.Time
	replicas benchenv.CPUSnapshot
	postgres benchenv.CPUSnapshot
	self     time.Duration
	proxies  benchenv.CPUSnapshot
	load1    float64
}

// pidSet is the replicas' process ids, every run of each.
type pidSet struct {
	mu   sync.Mutex
	pids map[int]bool
}

func (s *pidSet) add(pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pids == nil {
		s.pids = map[int]bool{}
	}
	s.pids[pid] = true
}

func (s *pidSet) has(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pids[pid]
}

func sampleCPU(replicas *pidSet, proxiesPID int) cpuSample {
	return cpuSample{
		at:       time.Now(),
		replicas: benchenv.SnapshotCPU(func(p benchenv.Proc) bool { return replicas.has(p.PID) }),
		postgres: benchenv.SnapshotCPU(func(p benchenv.Proc) bool { return p.Comm == "postgres" }),
		self:     benchenv.SelfCPU(),
		proxies:  benchenv.SnapshotCPU(func(p benchenv.Proc) bool { return p.PID == proxiesPID }),
		load1:    loadAverage(),
	}
}

// cores is the CPU each part used between a and b, in cores. A replica
// killed in between takes its CPU since a with it.
type cores struct {
	Replicas float64 `json:"replicas"`
	Postgres float64 `json:"postgres"`
	Workload float64 `json:"workload"`
	Proxies  float64 `json:"proxies"`
	Load1    float64 `json:"load1"` // the load average at the end
}

func coresBetween(a, b cpuSample) cores {
	wall := b.at.Sub(a.at).Seconds()
	if wall <= 0 {
		return cores{}
	}
	c := func(d time.Duration) float64 { return float64(int(d.Seconds()/wall*100)) / 100 }
	return cores{
		Replicas: c(a.replicas.Since(b.replicas)),
		Postgres: c(a.postgres.Since(b.postgres)),
		Workload: c(b.self - a.self),
		Proxies:  c(a.proxies.Since(b.proxies)),
		Load1:    b.load1,
	}
}

// loadAverage is the one-minute load average, 0 if unknown.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(data), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}
