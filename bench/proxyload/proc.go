package main

import (
	"os"
	"strconv"
	"strings"
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

// memory is a process's resident memory as /proc/PID/status reports it,
// in KiB: VmRSS is RssAnon (heap, stacks) plus RssFile (the executable's
// and libraries' pages mapped in) plus RssShmem; VmHWM is the peak RSS.
type memory struct {
	RSS   int `json:"rss_kib"`
	Anon  int `json:"rss_anon_kib"`
	File  int `json:"rss_file_kib"`
	Peak  int `json:"peak_rss_kib"`
	Procs int `json:"processes"`
}

// pidMemory reads /proc/PID/status (zero when the process is gone).
func pidMemory(pid int) memory {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return memory{}
	}
	m := memory{Procs: 1}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.Atoi(f[0])
		switch k {
		case "VmRSS":
			m.RSS = n
		case "RssAnon":
			m.Anon = n
		case "RssFile":
			m.File = n
		case "VmHWM":
			m.Peak = n
		}
	}
	return m
}

// groupMemory adds up the memory of process group pgid's live processes
// (nginx's master and workers).
func groupMemory(pgid int) memory {
	var total memory
	for pid := range benchenv.SnapshotCPU(func(p benchenv.Proc) bool { return p.PGID == pgid }) {
		m := pidMemory(pid)
		total.RSS += m.RSS
		total.Anon += m.Anon
		total.File += m.File
		total.Peak += m.Peak
		total.Procs += m.Procs
	}
	return total
}
