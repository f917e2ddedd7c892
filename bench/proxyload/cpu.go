package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPU accounting: on a 2-core machine at saturation, throughput is about
// cores ÷ CPU per request, so the CPU each path burns per request says
// where a throughput gap comes from. This process holds the load clients,
// the upstream and the Portcullis proxy (benchenv.SelfCPU); nginx is
// separate processes (groupCPU).

// clockTick is the unit of /proc/PID/stat's utime and stime (USER_HZ,
// 100 on Linux for as long as it has had /proc).
const clockTick = 10 * time.Millisecond

// groupCPU is the user+system CPU used by the live processes of process
// group pgid (nginx runs in its own group), 0 when unknown. Its unit is
// the clock tick, so it is meaningful over seconds, not per request.
func groupCPU(pgid int) time.Duration {
	if pgid <= 0 {
		return 0
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, path := range dirs {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ... utime(14) stime(15); comm may hold
		// spaces, so split after its closing parenthesis.
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 13 {
			continue
		}
		// f[0] is state (field 3), so field n is f[n-3].
		if pg, _ := strconv.Atoi(f[2]); pg != pgid {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += ut + st
	}
	return time.Duration(ticks) * clockTick
}
