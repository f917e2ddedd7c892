package main

import (
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

// What the program reads of the processes it measures (the proxy, nginx,
// the load generator's process reports its own): CPU time and memory.
//
// CPU: on a 2-core machine at saturation, throughput is about cores ÷ CPU
// per request, so the CPU each path burns per request says where a
// throughput gap comes from.

// pidCPU is the user+system CPU process pid has used, 0 when unknown
// (clock-tick resolution).
func pidCPU(pid int) time.Duration {
	return benchenv.ProcsCPU(func(p benchenv.Proc) bool { return p.PID == pid })
}

// groupCPU is the user+system CPU used by the live processes of process
// group pgid (nginx runs in its own group), 0 when unknown.
func groupCPU(pgid int) time.Duration {
	if pgid <= 0 {
		return 0
	}
	return benchenv.ProcsCPU(func(p benchenv.Proc) bool { return p.PGID == pgid })
}

// memory is a process's resident memory (benchenv.Memory: RSS, anon,
// file, PSS, peak).
type memory = benchenv.Memory

// pidMemory reads process pid's memory (zero when the process is gone).
func pidMemory(pid int) memory { return benchenv.ReadMemory(pid) }

// groupMemory adds up the memory of process group pgid's live processes
// (nginx's master and workers).
func groupMemory(pgid int) memory {
	var total memory
	for pid := range benchenv.SnapshotCPU(func(p benchenv.Proc) bool { return p.PGID == pgid }) {
		total.Add(pidMemory(pid))
	}
	return total
}
