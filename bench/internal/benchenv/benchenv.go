// Package benchenv owns what the benchmark programs know about the machine
// and the processes they measure: the description each prints beside its
// figures (the figures mean little without it), the CPU time this process
// (SelfCPU) and others (ProcsCPU: nginx, Postgres, a gateway binary) have
// used, its memory once garbage is collected, and its open-file limit.
// The programs compare their figures with each other's (streamfloor is the
// floor under pushload's memory per stream), so they read them one way.
package benchenv

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Machine is where the figures come from. Programs embed it in their own
// report's environment, so its fields lead that JSON object.
type Machine struct {
	GoVersion  string `json:"go_version"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	CPU        string `json:"cpu,omitempty"`
}

// Describe returns this process's Machine.
func Describe() Machine {
	return Machine{
		GoVersion:  runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		NumCPU:     runtime.NumCPU(),
		CPU:        cpuModel(),
	}
}

// String is the line a table report opens with, such as
// "go1.26.1, GOMAXPROCS=2, 2 CPUs (AMD EPYC 7B13)".
func (m Machine) String() string {
	return fmt.Sprintf("%s, GOMAXPROCS=%d, %d CPUs (%s)", m.GoVersion, m.GOMAXPROCS, m.NumCPU, m.CPU)
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// SelfCPU is the user+system CPU this process has used, 0 if unknown.
// On a saturated machine throughput is about cores ÷ CPU per operation,
// so the difference over a measurement says where a gap comes from.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// SettledMemStats collects garbage twice (the finalizers the first run
// queues free more on the second) and returns the runtime's view, so that
// heap and stack in use count what is live, not what awaits collection.
func SettledMemStats() runtime.MemStats {
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}

// RaiseFileLimit raises RLIMIT_NOFILE to its hard limit: 10,000 streams
// on their own connections need 10,000 descriptors in each process. It
// leaves the limit as it was when it cannot.
func RaiseFileLimit() {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}

// FileLimit is the current RLIMIT_NOFILE, 0 if unknown.
func FileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return lim.Cur
}
