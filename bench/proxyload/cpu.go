package main

import (
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

// CPU accounting: on a 2-core machine at saturation, throughput is about
// cores ÷ CPU per request, so the CPU each path burns per request says
// where a throughput gap comes from. This process holds the load clients,
// the upstream and the Portcullis proxy (benchenv.SelfCPU); nginx is
// separate processes (groupCPU).

// groupCPU is the user+system CPU used by the live processes of process
// group pgid (nginx runs in its own group), 0 when unknown.
func groupCPU(pgid int) time.Duration {
	if pgid <= 0 {
		return 0
	}
	return benchenv.ProcsCPU(func(p benchenv.Proc) bool { return p.PGID == pgid })
}
