package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// writeTable prints the report: per minute, the kills, the totals.
func (r *results) writeTable(out io.Writer) {
	fmt.Fprintf(out, "\nfleetload: %s\n", r.Env)
	fmt.Fprintf(out, "%d replicas on one Postgres database; %d proxies on %d sandboxes (%d sandboxes in all); %.0f proposal+approval ops/s, a policy set every %s, a replica killed every %s; %s\n\n",
		r.Replicas, r.Proxies, r.FleetSandboxes, r.Sandboxes, r.OpsPerSec, r.SetEvery, r.KillEvery, r.Duration)

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "minute\tacked\tfailed\tset ok/fail\tpropose ok/fail\tapprove ok/fail\tfailed over\tsets pushed\tset ACK p50 ms\tp99 ms\tmax ms\tall-ACK p99 ms\tfrom answer p99 ms\tapplied ACK p99 ms\treconnects\tproxies\tkill\tall back ms\t")
	for _, m := range r.Minutes {
		kill := ""
		back := ""
		for _, k := range r.Kills {
			if k.Minute == m.Minute {
				kill += fmt.Sprintf("r%d@%.0fs ", k.Replica, k.AtS)
				if k.NotBack > 0 {
					back += fmt.Sprintf("%d not back ", k.NotBack)
				} else {
					back += fmt.Sprintf("%.0f ", k.AllBackMs)
				}
			}
		}
		oc := func(kind string) string {
			c := m.Ops[kind]
			return fmt.Sprintf("%d/%d", c.Acked, c.Failed)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%s\t%s\t\n",
			m.Minute, m.Acked, m.Failed, oc(opSet), oc(opPropose), oc(opApprove), m.FailedOver, m.SetVersions,
			m.AckP50Ms, m.AckP99Ms, m.AckMaxMs, m.AllAckP99Ms, m.AnswerAckP99Ms, m.ProposalAckP99Ms, m.Reconnects, m.ReconnectedProxies,
			strings.TrimSpace(kill), strings.TrimSpace(back))
	}
	tw.Flush()

	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "minute\treplicas cores\tpostgres cores (all clients)\tworkload cores\tproxies cores\tload average\t")
	for _, m := range r.Minutes {
		fmt.Fprintf(tw, "%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t\n", m.Minute, m.CPU.Replicas, m.CPU.Postgres, m.CPU.Workload, m.CPU.Proxies, m.CPU.Load1)
	}
	tw.Flush()

	if len(r.Kills) > 0 {
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "kill\tat s\treplica\trestart ms\tproxies on it\tall back on current ms\tnot back\t")
		for i, k := range r.Kills {
			fmt.Fprintf(tw, "%d\t%.1f\t%d\t%.0f\t%d\t%.0f\t%d\t%s\n", i+1, k.AtS, k.Replica, k.RestartMs, k.OnReplica, k.AllBackMs, k.NotBack, k.Err)
		}
		tw.Flush()
	}

	fmt.Fprintf(out, "\nacknowledged changes %d, found in the history %d: LOST=%d\n", r.Acked, r.Found, r.Lost)
	for _, d := range r.LostDetail {
		fmt.Fprintln(out, "  lost:", d)
	}
	fmt.Fprintf(out, "failed operations %d; proposals shed (256 in flight) %d\n", r.Failed, r.Shed)
	for _, f := range topFailures(r.FailedBy, 8) {
		fmt.Fprintln(out, "  ", f)
	}
	fmt.Fprintf(out, "regressions (a proxy holding an older version than before): %d; older versions offered to reconnecting proxies (refused): %d; forks (held version, other hash): %d\n",
		r.Regressions, r.OlderOffered, r.Forks)
	audit := "verifies"
	if !r.AuditOK {
		audit = "DOES NOT VERIFY: " + r.AuditProblem
	}
	fmt.Fprintf(out, "audit chain: %d entries, %s\n", r.AuditEntries, audit)
	if r.FinalConverged {
		fmt.Fprintf(out, "at the end every proxy was connected on its sandbox's last version (%.0f ms after the workload stopped); streams by replica %v\n", r.FinalConvergeMs, r.FinalByReplica)
	} else {
		fmt.Fprintf(out, "at the end NOT every proxy was on its sandbox's last version: %v\n", r.FinalMissing)
	}
	fmt.Fprintf(out, "replicas' warning and error log lines: %v\n", r.ReplicaWarnings)
	for _, m := range topFailures(r.ReplicaLog, 8) {
		fmt.Fprintln(out, "  ", m)
	}
}
