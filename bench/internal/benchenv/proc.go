package benchenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/PID/stat's utime and stime (USER_HZ,
// 100 on Linux for as long as it has had /proc).
const clockTick = 10 * time.Millisecond

// Proc names a live process as /proc/PID/stat does.
type Proc struct {
	PID, PGID int
	Comm      string // the executable's name, at most 15 bytes
}

// ProcsCPU is the user+system CPU used so far by the live processes keep
// selects (another program's, such as nginx or Postgres), 0 when unknown.
// Its unit is the clock tick, so it is meaningful over seconds, not per
// request; a process that exits between two readings takes its CPU with
// it.
func ProcsCPU(keep func(Proc) bool) time.Duration {
	var total time.Duration
	for _, cpu := range SnapshotCPU(keep) {
		total += cpu
	}
	return total
}

// CPUSnapshot is the user+system CPU each selected live process had used
// at one moment, by PID.
type CPUSnapshot map[int]time.Duration

// SnapshotCPU reads the CPU of the live processes keep selects.
func SnapshotCPU(keep func(Proc) bool) CPUSnapshot {
	out := CPUSnapshot{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range dirs {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ... utime(14) stime(15); comm may hold
		// spaces, so split after its closing parenthesis.
		s := string(data)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		p := Proc{Comm: s[open+1 : end]}
		p.PID, _ = strconv.Atoi(strings.TrimSpace(s[:open]))
		// f[0] is state (field 3), so field n is f[n-3].
		p.PGID, _ = strconv.Atoi(f[2])
		if !keep(p) {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[p.PID] = time.Duration(ut+st) * clockTick
	}
	return out
}

// Since is the CPU the processes of now used after s was taken: a process
// in both counts the difference, one started since counts whole, and one
// that exited in between counts nothing — where a difference of two sums
// would take its whole past CPU away (a database connection closed during
// a measurement made Postgres's CPU read near zero).
func (s CPUSnapshot) Since(now CPUSnapshot) time.Duration {
	var d time.Duration
	for pid, cpu := range now {
		d += max(0, cpu-s[pid])
	}
	return d
}
